#!/usr/bin/python
# Copyright: ncclprep contributors
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: torchrun_smoke
short_description: Run the template training job on every node at once through the rendered launcher
description:
  - "Every host of the play runs this module at the same moment (launch it with C(async)).
    It starts O(launcher) (nccl_env's ncclprep-torchrun: c10d rendezvous, the launch env
    file) with O(script), the template DDP job nccl_env installs, and reads each worker's
    result line: parameters identical on every rank, global batch, step time, communication
    share, all-reduce bytes per optimizer step."
  - The job runs in its own process group and is killed at O(timeout); a job that does not
    finish is reported as C(HANG) with the last lines it printed (e.g. the rendezvous
    warnings of an unresolvable MASTER_ADDR).
  - Changes nothing on the node except a temporary folder removed afterwards.
  - "An ad hoc run of the job (C(ansible all -m torchrun_smoke), bench/train_savings.py): the preflight
    engine (C(ncclprep node preflight)) runs the same job itself (module_utils/ncclprep/probes/smoke.py)."
options:
  launcher: {type: path, default: /usr/local/bin/ncclprep-torchrun, description: The torchrun launcher.}
  script: {type: path, default: /usr/local/share/ncclprep/ncclprep_train.py, description: The template training job.}
  rdzv_id: {type: str, required: true, description: Rendezvous id, the same on every node and new per run.}
  steps: {type: int, default: 5, description: Optimizer steps.}
  accumulation: {type: int, default: 2, description: Micro-batches per step (all but the last under no_sync).}
  bucket_mb: {type: float, default: 25, description: DDP bucket size in MB (bucket_cap_mb).}
  timeout: {type: int, default: 120, description: Hard deadline in seconds for the whole job.}
  check:
    type: bool
    default: true
    description: "Launch with the launcher's C(--check): the node's quick checks first (interfaces up, names
      resolving, the rendezvous answering, its port free), a refusal naming the reason instead of a job."
  nonce:
    type: str
    no_log: true
    description: "The job's secret, the same on every node and new per run (NCCLPREP_RDZV_NONCE): the rendezvous
      host's launcher proves its agent's store with it and the other nodes join only a store with that proof.
      Required with O(check) (the launcher's C(--check) refuses without one)."
  job_args:
    type: list
    elements: str
    default: []
    description: "More arguments for O(script), e.g. [--sync-every-micro-batch, --powersgd-rank, '4']
      (bench/train_savings.py uses them)."
author: ncclprep contributors
"""

EXAMPLES = r"""
- name: Run the smoke job on every node at once
  torchrun_smoke:
    rdzv_id: "preflight-{{ ansible_date_time.epoch }}"
    nonce: "{{ smoke_nonce }}"  # one for all nodes: drawn by a set_fact with run_once and no_log
  async: 180
  poll: 0
"""

RETURN = r"""
smoke:
  description: What the job on this node did.
  returned: always
  type: dict
  contains:
    status: {type: str, description: PASS, FAIL or HANG.}
    rc: {type: int, description: Launcher exit code (null on HANG).}
    workers:
      type: list
      description: "One result per local worker (the job's NCCLPREP_RESULT line): rank, world_size, master_addr,
        global_batch, step_s, comm_share, allreduce_bytes_per_step, final_loss, params_identical, seconds."
    error: {type: str, description: Why it failed or hung.}
    log_tail: {type: list, description: Last lines the job printed.}
    elapsed_s: {type: float, description: Seconds the job took.}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ncclprep.probes import smoke as ddp_smoke


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            launcher=dict(type="path", default="/usr/local/bin/ncclprep-torchrun"),
            script=dict(type="path", default="/usr/local/share/ncclprep/ncclprep_train.py"),
            rdzv_id=dict(type="str", required=True),
            steps=dict(type="int", default=5),
            accumulation=dict(type="int", default=2),
            bucket_mb=dict(type="float", default=25),
            timeout=dict(type="int", default=120),
            check=dict(type="bool", default=True),
            nonce=dict(type="str", no_log=True),
            job_args=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    host = os.uname().nodename

    def done(smoke: dict) -> None:
        module.exit_json(changed=False, smoke=smoke)

    missing = [f"{key}={p[key]} is not {what}" for key, mode, what in
               (("launcher", os.X_OK, "an executable file"), ("script", os.R_OK, "a readable file"))
               if not os.access(p[key], mode)]
    if missing:
        done({
            "status": "FAIL", "rc": None, "workers": [], "elapsed_s": 0, "log_tail": [], "host": host,
            "error": f"{' and '.join(missing)}; run site.yml (role nccl_env)"})
    if p["steps"] < 1 or p["accumulation"] < 1:
        module.fail_json(msg=f"{host}: steps={p['steps']} and accumulation={p['accumulation']} must be >= 1")
    if module.check_mode:
        done({"status": "SKIP", "workers": []})

    smoke = ddp_smoke.run_job(p["launcher"], p["script"], p["rdzv_id"], p["steps"], p["accumulation"],
                              p["bucket_mb"], p["timeout"], p["check"], p["nonce"], p["job_args"], host)
    done(smoke)


if __name__ == "__main__":
    main()
