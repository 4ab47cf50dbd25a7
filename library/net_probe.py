#!/usr/bin/python
# Copyright: ncclprep contributors
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: net_probe
short_description: Measure the network between nodes - latency, bandwidth, path MTU, ports
description:
  - Every host of the play runs this module at the same moment (launch it with C(async)),
    each as one node of the probe. The first host hosts torch's TCPStore at
    O(addresses[0]):O(store_port), bound to that address only, which synchronizes the rounds.
  - In rounds of disjoint pairs (ring neighbours plus O(matchings) random matchings, or
    every pair with O(every_pair)), each pair is measured in both directions over the
    data-plane addresses, one direction at a time - TCP round-trip latency (p50, p99 in
    microseconds), one TCP stream's bandwidth (GB/s, GB = 1e9 bytes), the path MTU with
    don't-fragment at O(mtu) and the largest size that passes, and a TCP connect to every port
    of the sample (O(ports) plus O(ephemeral_sample) ports of O(ephemeral_range)) with a
    verdict - open, filtered (dropped), refused (reset), no route, or hang.
  - Then the first host re-pairs every node of a problem link with up to O(repair) nodes that
    had none (the blame's second pass), so that a bad node can be told from a bad link.
  - Listeners bind only to this host's data-plane address, answer only the other hosts'
    addresses presenting this run's O(token), and stop with the module; the work runs in a
    child process killed at O(timeout). A peer that stops answering is reported (HANG),
    never waited for.
  - Must run with an interpreter that can import torch (torch_runtime's venv).
  - Rules in module_utils/ncclprep/netprobe.py (tests), schedule.py (pairs), blame.py (slow).
options:
  rank: {type: int, required: true, description: This host's index in O(hosts).}
  hosts:
    type: list
    elements: str
    required: true
    description: Inventory names of every node, in one order all nodes share.
  addresses:
    type: list
    elements: str
    required: true
    description: Data-plane address of every node of O(hosts), same order.
  store_port: {type: int, default: 29520, description: TCP port of the store on the first host.}
  listen_port: {type: int, default: 29521, description: TCP and UDP port of every host's listener.}
  token: {type: str, required: true, no_log: true, description: Secret of this run; peers without it are not answered.}
  ports:
    type: list
    elements: int
    default: []
    description: TCP ports every peer must reach (the rendezvous ports).
  ephemeral_range:
    type: list
    elements: int
    description: "[low, high] of the ports NCCL and Gloo sockets use; null: this host's net.ipv4.ip_local_port_range."
  ephemeral_sample: {type: int, default: 4, description: Ports of O(ephemeral_range) probed (the same on every host).}
  mtu: {type: int, description: "MTU in bytes the path must carry (the data-plane MTU); null: no path-MTU test."}
  latency_samples: {type: int, default: 100, description: Round trips timed per direction.}
  bandwidth_seconds: {type: float, default: 0.25, description: Seconds of the bandwidth stream per direction.}
  matchings: {type: int, default: 2, description: Random matchings after the ring neighbours.}
  every_pair: {type: bool, default: false, description: Measure every pair (n-1 rounds) instead.}
  repair: {type: int, default: 2, description: "Good partners per suspect in the second pass; 0: no second pass."}
  seed: {type: str, default: "", description: Seeds the matchings and the port sample (the run id).}
  max_latency_us: {type: float, description: "p50 latency above this (microseconds) makes a suspect; null: no limit."}
  slow_z: {type: float, default: -3.5, description: Modified z-score below which a bandwidth is slow.}
  slow_ratio: {type: float, default: 0.5, description: A slow bandwidth is also below this fraction of the median.}
  min_gbps: {type: float, description: "Bandwidth floor in GB/s (from the link speed); null: none."}
  join_timeout: {type: int, default: 30, description: Seconds to wait for every host to arrive.}
  step_timeout: {type: float, default: 2, description: Seconds each connect, echo or reply may take.}
  connect_timeout: {type: float, default: 1, description: Seconds a port connect may take before it counts as filtered.}
  timeout:
    type: int
    default: 120
    description: >-
      Hard deadline in seconds for the whole probe; refused below join_timeout plus one round's deadline
      plus 10 s (a node lost mid-run would get every node's probe killed instead of named).
author: ncclprep contributors
"""

EXAMPLES = r"""
- name: Measure the network between the nodes, all at once
  net_probe:
    rank: "{{ ansible_play_hosts.index(inventory_hostname) }}"
    hosts: "{{ ansible_play_hosts }}"
    addresses: "{{ ansible_play_hosts | map('extract', data_plane_members) | map(attribute='address') | list }}"
    token: "{{ run_token }}"
    ports: [29400, 29500]
    ephemeral_range: [32768, 60999]
    mtu: 4096
  vars:
    ansible_python_interpreter: /opt/ncclprep/venv/bin/python
  async: 180
  poll: 0
"""

RETURN = r"""
net:
  description: What this host measured, as the sender of each direction.
  returned: always
  type: dict
  contains:
    status: {type: str, description: "PASS, HANG (a peer missing, gone or hung) or FAIL (an error, torch missing)."}
    host: {type: str, description: This host.}
    hosts: {type: list, description: Every node, in rank order.}
    present: {type: list, description: The hosts that arrived at the store within join_timeout.}
    missing_hosts: {type: list, description: Hosts that never arrived.}
    gone_hosts: {type: list, description: Hosts that stopped answering during the rounds.}
    store_error: {type: str, description: The store on the first host stopped answering (null otherwise).}
    ports: {type: list, description: This host's port sample.}
    ports_in_use: {type: list, description: Ports of the sample another process holds here (not probed).}
    links:
      type: list
      description: >-
        One row per direction measured by this host - src, dst, phase (1 or 2), round, latency_us
        {p50, p99, samples}, bandwidth_gbps, bytes, path_mtu {mtu, ok, largest}, ports {port: verdict},
        hang, error, retried (what failed on the first try and passed on the second, as evidence).
    error: {type: str, description: Error text when the worker raised.}
    elapsed_s: {type: float, description: Seconds the probe took.}
"""

import math
import sys

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.ncclprep.deadline import outcome_fields, run_with_deadline
from ansible.module_utils.ncclprep.netprobe import ROUND_CLOSE_SLACK_S, min_deadline, run_node

try:
    import torch.distributed  # noqa: F401  (the store)

    HAS_TORCH = True
except ImportError:
    HAS_TORCH = False



def bad_input(p: dict, host: str) -> str | None:
    """The first invalid parameter, as a message naming host, option and value, or None."""
    n = len(p["hosts"])
    if len(p["addresses"]) != n:
        return f"{host}: addresses has {len(p['addresses'])} entries for {n} hosts ({p['addresses']})"
    for name in ("store_port", "listen_port"):
        if not 1 <= p[name] <= 65535:
            return f"{host}: {name}={p[name]} is not a TCP port (1..65535)"
    if p["store_port"] == p["listen_port"]:
        return f"{host}: store_port and listen_port are both {p['store_port']}"
    bad_ports = [x for x in p["ports"] if not 1 <= x <= 65535]
    if bad_ports:
        return f"{host}: ports {bad_ports} are not TCP ports (1..65535)"
    rng = p["ephemeral_range"]
    if rng is not None and (len(rng) != 2 or not 1 <= rng[0] <= rng[1] <= 65535):
        return f"{host}: ephemeral_range={rng}: want [low, high] within 1..65535"
    if p["mtu"] is not None and not 576 <= p["mtu"] <= 65535:
        return f"{host}: mtu={p['mtu']} is outside 576..65535"
    for name, low in (("latency_samples", 1), ("ephemeral_sample", 0), ("matchings", 0), ("repair", 0)):
        if p[name] < low:
            return f"{host}: {name}={p[name]} must be >= {low}"
    if p["slow_z"] >= 0 or not 0 < p["slow_ratio"] <= 1:
        return f"{host}: slow_z={p['slow_z']} must be < 0 and slow_ratio={p['slow_ratio']} in (0, 1]"
    if p["join_timeout"] >= p["timeout"]:
        return f"{host}: join_timeout={p['join_timeout']} must be below timeout={p['timeout']}"
    least = min_deadline(p["join_timeout"], p["connect_timeout"], p["step_timeout"], p["bandwidth_seconds"], p["mtu"])
    if p["timeout"] < least:
        return (f"{host}: timeout={p['timeout']} is below {math.ceil(least)} s, the join ({p['join_timeout']} s) "
                f"plus one round's deadline and {ROUND_CLOSE_SLACK_S} s: a node lost mid-run would get every "
                "node's probe killed instead of being named")
    return None


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
        rank=dict(type="int", required=True),
        hosts=dict(type="list", elements="str", required=True),
        addresses=dict(type="list", elements="str", required=True),
        store_port=dict(type="int", default=29520),
        listen_port=dict(type="int", default=29521),
        token=dict(type="str", required=True, no_log=True),
        ports=dict(type="list", elements="int", default=[]),
        ephemeral_range=dict(type="list", elements="int"),
        ephemeral_sample=dict(type="int", default=4),
        mtu=dict(type="int"),
        latency_samples=dict(type="int", default=100),
        bandwidth_seconds=dict(type="float", default=0.25),
        matchings=dict(type="int", default=2),
        every_pair=dict(type="bool", default=False),
        repair=dict(type="int", default=2),
        seed=dict(type="str", default=""),
        max_latency_us=dict(type="float"),
        slow_z=dict(type="float", default=-3.5),
        slow_ratio=dict(type="float", default=0.5),
        min_gbps=dict(type="float"),
        join_timeout=dict(type="int", default=30),
        step_timeout=dict(type="float", default=2),
        connect_timeout=dict(type="float", default=1),
        timeout=dict(type="int", default=120),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not 0 <= p["rank"] < len(p["hosts"]):
        module.fail_json(msg=f"rank={p['rank']} is outside 0..{len(p['hosts']) - 1} (hosts={p['hosts']})")
    host = p["hosts"][p["rank"]]
    problem = bad_input(p, host)
    if problem:
        module.fail_json(msg=problem)
    base = {"host": host, "hosts": p["hosts"], "links": [], "missing_hosts": [], "gone_hosts": []}
    if not HAS_TORCH:
        # A measurement result, not a task error: the other hosts report this one missing.
        module.exit_json(changed=False, net=dict(base, status="FAIL", stage="start", error=(
            missing_required_lib("torch")
            + f" (interpreter {sys.executable}; run site.yml so torch_runtime installs it)")))
    if p["ephemeral_range"] is None and p["ephemeral_sample"]:
        try:
            with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as fh:
                p["ephemeral_range"] = [int(x) for x in fh.read().split()[:2]]
        except (OSError, ValueError):
            p["ephemeral_range"] = None
    kwargs = {k: p[k] for k in ("rank", "hosts", "addresses", "store_port", "listen_port", "token", "ports",
                                "ephemeral_range", "ephemeral_sample", "mtu", "latency_samples", "bandwidth_seconds",
                                "matchings", "every_pair", "repair", "seed", "join_timeout", "step_timeout",
                                "connect_timeout")}
    kwargs["limits"] = {k: p[k] for k in ("max_latency_us", "slow_z", "slow_ratio", "min_gbps")}
    run = run_with_deadline(run_node, kwargs, timeout_s=p["timeout"])
    net = dict(base, elapsed_s=run["elapsed_s"], error=None)
    net.update(outcome_fields(run, p["timeout"]))
    module.exit_json(changed=False, net=net)


if __name__ == "__main__":
    main()
