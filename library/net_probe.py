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
  - Rules in module_utils/ncclprep/probes/net.py (tests), schedule.py (pairs), blame.py (slow).
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


from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.ncclprep.probes import net as netprobe

try:
    import torch.distributed  # noqa: F401  (the store)

    HAS_TORCH = True
except ImportError:
    HAS_TORCH = False


def main() -> None:
    module = AnsibleModule(argument_spec=dict(**netprobe.ARGUMENT_SPEC), supports_check_mode=True)
    problem = netprobe.bad_input(module.params)
    if problem:
        module.fail_json(msg=problem)
    # Without torch: a measurement result, not a task error (the other hosts report this one missing).
    torch_error = None if HAS_TORCH else netprobe.torch_missing(missing_required_lib("torch"))
    module.exit_json(changed=False, net=netprobe.probe(module.params, torch_error))


if __name__ == "__main__":
    main()
