#!/usr/bin/python
# Copyright: ncclprep contributors
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nccl_probe
short_description: Run torch.distributed collectives across all nodes and measure them
description:
  - Every host of the play runs this module at the same moment (launch it with C(async)),
    each with its O(local_ranks) ranks (one child process each). Rank 0 hosts the TCP store
    at O(master_addr):O(master_port).
  - Runs each collective in O(ops) over the size sweep O(sizes), checks every element of the
    result, and reports time per operation, algbw and busbw (nccl-tests definitions,
    GB = 1e9 bytes).
  - Backend C(nccl) when CUDA GPUs are visible, C(gloo) otherwise (O(backend=auto)).
  - The work runs in a child process under a hard deadline O(timeout); a rank that never
    arrives or a collective that never completes gives status C(HANG) naming the stage and
    the missing ranks, never a hung task.
  - Under NCCL the ranks run with C(NCCL_DEBUG=INFO) into a log file of their own; the log is
    parsed (module_utils/ncclprep/parsers/nccl_log.py) into RV(probe.nccl_log).
  - With O(blame), the nodes stay together after the collectives for the collective blame
    (module_utils/ncclprep/probes/collective_blame.py) - when the collectives failed, hung with every
    rank present or fell below O(blame_floor), they run the rounds of C(blame.collective_plan)
    (ring-neighbour pairs, then halves) through a store of their own on the first node, port
    O(master_port) + 1 (a round's groups at + 2, + 3, ...), and the first node returns the
    verdict in RV(probe.blame). One job per node, no round started by Ansible.
  - "With O(net), the network probe (library/net_probe.py, the same options) runs first in the same
    job, then the collectives (O(collectives)): one process and one torch import per node for both, and
    RV(net) beside RV(probe)."
  - Must run with an interpreter that can import torch (torch_runtime's venv).
options:
  rank: {type: int, required: true, description: "This host's index in O(hosts), 0 .. len(hosts)-1 (its node rank)."}
  hosts:
    type: list
    elements: str
    required: true
    description: Inventory names of all ranks in rank order; world size is its length.
  master_addr: {type: str, required: true, description: Data-plane address of rank 0.}
  master_port: {type: int, default: 29510, description: TCP port of the store on rank 0.}
  backend: {type: str, default: auto, choices: [auto, nccl, gloo], description: Process group backend.}
  ops:
    type: list
    elements: str
    default: [all_reduce, all_gather, reduce_scatter, all_to_all, broadcast]
    description: Collectives to run; ones the backend lacks are reported as skipped.
  sizes:
    type: list
    elements: int
    default: [4096, 65536, 1048576, 16777216]
    description: Buffer sizes in bytes.
  warmup: {type: int, default: 2, description: Untimed runs before timing.}
  iters: {type: int, default: 5, description: Timed runs per size.}
  env_file:
    type: path
    description: KEY=VALUE file (the nccl_env launch env) loaded into the environment first.
  timeout: {type: int, default: 120, description: Hard deadline in seconds for the whole probe.}
  join_timeout: {type: int, default: 30, description: Seconds to wait for all ranks to arrive.}
  token:
    type: str
    description:
      - The run's secret, the same on every rank (validate.yml draws one per run). Every value in
        the store on rank 0, torch's own too, is sealed with an HMAC-SHA256 keyed by it, so a host
        that reaches the store but is not in the run cannot steer the ranks; a rank that reads a
        value not sealed with it fails with C(was tampered with) naming the key.
      - Unset, values are not sealed (only the firewall and the store's data-plane binding guard it).
  local_ranks:
    type: list
    elements: int
    default: []
    description:
      - Ranks on each host, in O(hosts) order (one per GPU on GPU hosts, one on CPU hosts); [] runs one per host.
      - Ranks are numbered host by host as torchrun numbers them; local rank I(l) uses CUDA device I(l) under NCCL.
  cpu_binding:
    type: list
    elements: str
    default: []
    description:
      - CPU list per local rank of this host (C(0-15,32-47)), each rank bound to it (the numa_pinning map the
        launcher binds by); [] binds none.
  blame: {type: bool, default: false, description: Run the collective blame after collectives that went wrong.}
  addresses:
    type: list
    elements: str
    default: []
    description: Data-plane address of every host, in O(hosts) order; required with O(blame).
  blame_timeout:
    type: int
    default: 60
    description: Deadline in seconds of one blame round (half of it, at most O(join_timeout), for its ranks to arrive).
  blame_floor:
    type: float
    description: busbw floor in GB/s at the largest size below which the blame runs and a group is slow; unset, none.
  slow_z:
    type: float
    default: -3.5
    description: Modified z-score under which a group's busbw is slow (blame.slow_outliers).
  slow_ratio:
    type: float
    default: 0.5
    description: Fraction of the other groups' median busbw under which a group is slow.
  net:
    type: dict
    description:
      - The network probe's options (library/net_probe.py, module_utils/ncclprep/probes/net.py ARGUMENT_SPEC; its
        own O(net.rank) and O(net.hosts), the hosts with a data-plane address), run before the collectives.
        Unset, no network probe.
  collectives:
    type: bool
    default: true
    description: Run the collectives (false with O(net) runs the network probe alone).
  wait_for_net:
    type: int
    default: 0
    description:
      - Seconds the other hosts' network probe may take before they reach the collectives, added to this
        host's O(join_timeout) and O(timeout) when it runs none itself (no data-plane address); 0 otherwise.
author: ncclprep contributors
"""

EXAMPLES = r"""
- name: Run the collectives on every node at once
  nccl_probe:
    rank: "{{ ansible_play_hosts_all.index(inventory_hostname) }}"
    hosts: "{{ ansible_play_hosts_all }}"
    master_addr: "{{ hostvars[ansible_play_hosts_all[0]].ansible_facts.ncclprep.data_plane.address }}"
    env_file: /etc/ncclprep/nccl.env
  vars:
    ansible_python_interpreter: /opt/ncclprep/venv/bin/python
  async: 180
  poll: 0
"""

RETURN = r"""
net:
  description: With O(net), what this host's network probe measured (library/net_probe.py RETURN).
  returned: when O(net) is set
  type: dict
probe:
  description: What this rank saw.
  returned: when O(collectives) is true
  type: dict
  contains:
    status: {type: str, description: PASS, FAIL (wrong results or an error) or HANG.}
    rank: {type: int, description: This host's index in O(hosts) (its node rank).}
    first_rank: {type: int, description: The global rank of this host's local rank 0.}
    world_size: {type: int, description: Number of ranks (all hosts' local ranks).}
    ranks:
      type: list
      description: "Per local rank - rank, local_rank, status, stage, error, cpus (the CPUs it ran on)."
    backend: {type: str, description: gloo or nccl.}
    stage: {type: str, description: Last stage reached (rendezvous, init_process_group, "<op> <bytes> B", done).}
    missing_ranks: {type: list, description: Ranks that never arrived at the store.}
    results:
      type: list
      description:
        - "Rows: op, size_bytes, count, time_us, algbw_gbps, busbw_gbps, wrong, measured_as, rank_time_us."
        - Times and bandwidths are this host's slowest local rank's; rank_time_us holds every local rank's time.
    error: {type: str, description: Error text when the worker raised.}
    elapsed_s: {type: float, description: Seconds the probe took.}
    nccl_log:
      type: dict
      description: >-
        Under NCCL (run with NCCL_DEBUG=INFO), what NCCL's log says it used - version, versions, network,
        net (ib or socket), transports {intra_host, inter_host}, socket_interfaces, ib_devices, gdr, warnings.
    gloo_ifname: {type: str, description: "Under Gloo, GLOO_SOCKET_IFNAME: the interface it binds (null: host name)."}
    gloo_bind:
      type: dict
      description: "Under Gloo, the address it binds - ifname, address, how (GLOO_SOCKET_IFNAME or hostname), error."
    blame:
      type: dict
      description:
        - On the first node with O(blame), when the blame ran - trigger (collectives.collective_trigger),
          verdict (the last plan of blame.collective_plan; stage done - nodes, links, groups, message), rounds
          (each round's groups with status and busbw in GB/s), error (what stopped it, or null). Null otherwise.
    blame_error:
      type: str
      description: On another node, why it could not take part in the blame (the first node's store unreachable).
"""

import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.ncclprep.envfile import read_env_file
from ansible.module_utils.ncclprep.probes.collectives import SUPPORTED, rank_layout
from ansible.module_utils.ncclprep.probes.job import host_collectives
from ansible.module_utils.ncclprep.probes.net import ARGUMENT_SPEC as NET_SPEC
from ansible.module_utils.ncclprep.probes.net import bad_input as net_bad_input
from ansible.module_utils.ncclprep.probes.net import probe as net_probe
from ansible.module_utils.ncclprep.probes.net import torch_missing as net_torch_missing

try:
    import torch  # noqa: F401  (the collectives import it: tell its absence early)

    HAS_TORCH = True
except ImportError:
    HAS_TORCH = False


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            rank=dict(type="int", required=True),
            hosts=dict(type="list", elements="str", required=True),
            master_addr=dict(type="str", required=True),
            master_port=dict(type="int", default=29510),
            backend=dict(type="str", default="auto", choices=["auto", "nccl", "gloo"]),
            ops=dict(
                type="list",
                elements="str",
                default=["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"],
            ),
            sizes=dict(type="list", elements="int", default=[4096, 65536, 1048576, 16777216]),
            warmup=dict(type="int", default=2),
            iters=dict(type="int", default=5),
            env_file=dict(type="path"),
            timeout=dict(type="int", default=120),
            join_timeout=dict(type="int", default=30),
            token=dict(type="str", no_log=True),
            local_ranks=dict(type="list", elements="int", default=[]),
            cpu_binding=dict(type="list", elements="str", default=[]),
            blame=dict(type="bool", default=False),
            addresses=dict(type="list", elements="str", default=[]),
            blame_timeout=dict(type="int", default=60),
            blame_floor=dict(type="float"),
            slow_z=dict(type="float", default=-3.5),
            slow_ratio=dict(type="float", default=0.5),
            net=dict(type="dict", options=NET_SPEC),
            collectives=dict(type="bool", default=True),
            wait_for_net=dict(type="int", default=0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    host = p["hosts"][p["rank"]] if 0 <= p["rank"] < len(p["hosts"]) else None
    if host is None:
        module.fail_json(msg=f"rank={p['rank']} is outside 0..{len(p['hosts']) - 1} (hosts={p['hosts']})")
    known = set(SUPPORTED["nccl"])
    bad = [op for op in p["ops"] if op not in known]
    if bad:
        module.fail_json(msg=f"{host}: unknown collective(s) in ops: {bad}; valid: {sorted(known)}")
    if any(s <= 0 for s in p["sizes"]):
        module.fail_json(msg=f"{host}: sizes must be positive byte counts, got {p['sizes']}")
    if p["join_timeout"] >= p["timeout"]:
        module.fail_json(
            msg=f"{host}: join_timeout={p['join_timeout']} must be below timeout={p['timeout']}"
        )
    try:
        offsets = rank_layout(p["local_ranks"], len(p["hosts"]))
    except ValueError as exc:
        module.fail_json(msg=f"{host}: {exc}")
    mine = offsets[p["rank"] + 1] - offsets[p["rank"]]
    if p["blame"] and len(p["addresses"]) != len(p["hosts"]):
        module.fail_json(msg=f"{host}: blame needs one address per host: addresses={p['addresses']} for "
                             f"hosts={p['hosts']}")
    if p["blame"] and p["blame_timeout"] < 10:
        module.fail_json(msg=f"{host}: blame_timeout={p['blame_timeout']}: valid: an integer >= 10")
    if len(p["cpu_binding"]) not in (0, mine):
        module.fail_json(msg=f"{host}: cpu_binding has {len(p['cpu_binding'])} entries for {mine} local ranks")
    if p["wait_for_net"] < 0:
        module.fail_json(msg=f"{host}: wait_for_net={p['wait_for_net']}: valid: an integer >= 0 (seconds)")
    problem = net_bad_input(p["net"]) if p["net"] else None
    if problem:
        module.fail_json(msg=f"net: {problem}")
    if module.check_mode:
        module.exit_json(changed=False, probe={"status": "SKIP", "rank": p["rank"], "host": host})
    if p["env_file"]:
        try:
            os.environ.update(read_env_file(p["env_file"]))
        except (OSError, ValueError) as exc:
            module.fail_json(msg=f"{host}: env_file {p['env_file']}: {exc}")
    out = {}
    torch_error = None if HAS_TORCH else net_torch_missing(missing_required_lib("torch"))
    if p["net"]:
        out["net"] = net_probe(p["net"], torch_error)
    elif p["wait_for_net"]:
        # the others reach the collectives only after their network probe: wait for them that much longer
        p = dict(p, join_timeout=p["join_timeout"] + p["wait_for_net"], timeout=p["timeout"] + p["wait_for_net"])
    if p["collectives"]:
        out["probe"] = host_collectives(p, host, offsets, torch_error)
    module.exit_json(changed=False, **out)


if __name__ == "__main__":
    main()
