#!/usr/bin/python
# Copyright: ncclprep contributors
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_report
short_description: Turn every host's facts and probe results into checks and report files
description:
  - "Runs on the controller (C(delegate_to: localhost), C(run_once))."
  - Evaluates the cluster checks (the registry of module_utils/ncclprep/checks/), writes
    C(<dest>/<UTC timestamp>/cluster.json), C(hosts/<host>.json) and C(summary.md), and
    points C(<dest>/latest) at the run.
  - Returns the overall status; the playbook fails the run when it is FAIL.
options:
  dest: {type: path, required: true, description: Reports folder.}
  hosts: {type: list, elements: str, required: true, description: Every host the run was meant to cover.}
  records:
    type: dict
    required: true
    description:
      - "host -> HostRecord (module_utils/ncclprep/checks/model.py): {alive, facts, intent, ssh, probe, smoke},
        with intent keyed by concern name (playbooks/vars/concerns.yml); built by the filter
        ncclprep_host_records."
      - A host of O(hosts) with no record or no facts is reported unreachable (C(host.reachable) FAIL).
  min_busbw_gbps: {type: float, description: "busbw floor in GB/s at the largest size; null: no floor."}
  expect_net:
    type: str
    choices: [ib, socket]
    description: "The network NCCL must use (collective.transport: FAIL where NCCL fell back to another); null: any."
  net_limits:
    type: dict
    default: {}
    description:
      - "Limits of the net.* checks: max_latency_us (TCP round-trip p50, microseconds), slow_z and slow_ratio
        (a bandwidth is slow below this modified z-score and this fraction of the median), min_gbps (a
        bandwidth floor in GB/s), link_floor_ratio (a floor of this fraction of the slower end's link
        speed, where ethtool shows it). Absent keys keep their defaults (50, -3.5, 0.5, none, 0.1); null: no limit."
author: ncclprep contributors
"""

EXAMPLES = r"""
- name: Write the reports
  cluster_report:
    dest: "{{ playbook_dir }}/../reports"
    hosts: "{{ ansible_play_hosts_all }}"
    records: "{{ hostvars | ncclprep_host_records(ansible_play_hosts_all, ansible_play_hosts,
                                                    ncclprep_concerns | map(attribute='name') | list) }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
status: {description: PASS or FAIL, returned: always, type: str}
report_dir: {description: The run folder, returned: always, type: str}
checks: {description: Every check, returned: always, type: list}
problems: {description: One line per FAIL or HANG check, returned: always, type: list}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ncclprep.checks import BAD, evaluate, overall, summarize_collectives, summarize_network
from ansible.module_utils.ncclprep.report import SCHEMA_VERSION, utc_stamp, write_reports


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            hosts=dict(type="list", elements="str", required=True),
            records=dict(type="dict", required=True),
            min_busbw_gbps=dict(type="float"),
            net_limits=dict(type="dict", default={}),
            expect_net=dict(type="str", choices=["ib", "socket"]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    records = {h: (p["records"].get(h) or {}) for h in p["hosts"]}
    try:
        checks = evaluate(records, p["hosts"], p["min_busbw_gbps"], p["net_limits"], p["expect_net"])
    except TypeError as exc:
        module.fail_json(msg=f"net_limits={p['net_limits']}, expect_net={p['expect_net']}: {exc}")
    stamp = utc_stamp()
    cluster = {
        "schema_version": SCHEMA_VERSION,
        "status": overall(checks),
        "generated_at": stamp,
        "hosts": list(p["hosts"]),
        "checks": checks,
        "network": summarize_network(records),
        "collectives": summarize_collectives(records),
    }
    problems = [f"{c['status']} {c['id']} [{', '.join(c['hosts'])}]: {c['message']}"
                for c in checks if c["status"] in BAD]
    try:
        run = write_reports(p["dest"], cluster, records, stamp)
    except OSError as exc:
        module.fail_json(msg=f"cannot write reports under dest={p['dest']}: {exc}", checks=checks)
    module.exit_json(changed=True, status=cluster["status"], report_dir=run, checks=checks,
                     problems=problems)


if __name__ == "__main__":
    main()
