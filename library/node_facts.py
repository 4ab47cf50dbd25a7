#!/usr/bin/python
# Copyright: ncclprep contributors
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_facts
short_description: Read what validate.yml checks on a node (read-only)
description:
  - Returns C(ansible_facts.ncclprep) with versions, network interfaces, the data-plane
    interface, tracked sysctl values and host name resolution of every cluster name.
  - Never changes anything; runs in check mode too and always returns C(changed=false).
  - Every step that may block (name look-ups, TCP connects, the torch import) has a deadline.
  - torch is imported only where the NVIDIA driver is loaded; elsewhere its version and CUDA build
    are read from torch/version.py (no GPU, NCCL or cuDNN to ask torch about).
options:
  cidr: {type: str, required: true, description: CIDR of the data-plane network.}
  interface: {type: str, description: Data-plane interface name; null finds it from O(cidr).}
  sysctl_keys: {type: list, elements: str, default: [], description: Sysctl keys to read.}
  names:
    type: list
    elements: dict
    default: []
    description:
      - "Host name entries to resolve: C({host, address, names}) (the host_names intent). Each
        name must resolve to C(address), and C(address):O(connect_port) must accept TCP."
  connect_port: {type: int, default: 22, description: TCP port used to prove a resolved address is reachable.}
  torch_python: {type: path, description: Python of the torch venv whose torch and NCCL versions to read.}
  timeout: {type: float, default: 5.0, description: Deadline in seconds for each look-up or connect.}
  dataset_path:
    type: path
    description:
      - The training data (a folder or a file) every node must read; null reads none. Stat, listing and
        a one-byte read of one file run under max(O(timeout), 10) s (a hung network mount is reported, not waited on).
  into:
    type: dict
    default: {}
    description:
      - The current C(ansible_facts.ncclprep) (the concerns' facts from concern_facts), returned with
        these keys added.
author: ncclprep contributors
"""

EXAMPLES = r"""
- name: Read the node's facts
  node_facts:
    cidr: 10.0.0.0/24
    sysctl_keys: [net.core.somaxconn]
    names: "{{ host_names_intent }}"
    torch_python: /opt/ncclprep/venv/bin/python
"""

RETURN = r"""
ansible_facts:
  description: Facts under the key C(ncclprep).
  returned: always
  type: dict
  contains:
    ncclprep:
      description: "hostname, versions{kernel, python, driver, cuda, libnccl, torch, torch_cuda, torch_nccl,
        cudnn}, interfaces{name: {mtu, operstate, addresses}}, data_plane{interface, address, mtu, operstate} or null,
        limits{memlock (bytes, null unlimited), shm_bytes, rdma_devices}, sysctl_tuning{key: {value, writable}},
        host_names[{host, name, expected, addresses, reachable, error, retried}] (retried: the first
        connect's error when only the second, after a pause, reached the address),
        counters (the RDMA ports' and the data-plane netdev's error counters when the run starts, as
        port_counters returns them), rdma_gids{'<dev>/<port>': [{index, type, gid, netdev}]} (populated GIDs),
        dataset{path, exists, kind, readable, entries, sample, error, hung} or null (module_utils/ncclprep/dataset.py),
        hostinfo (below)"
      type: dict
      contains:
        hostinfo:
          description:
            - "What the node's own tools show, read through module_utils/ncclprep/hostinfo.py and the parsers:
              C(ib_ports) (ibstat, else ibstatus, else /sys/class/infiniband), C(ibv_devinfo), C(numactl)
              (numactl -H, else lscpu: same shape, node CPUs only), C(gpu_topology) (nvidia-smi topo -m; its
              C(data.p2p) is C({source, error, data}) of nvidia-smi topo -p2p r, the P2P read matrix),
              C(ip_links) (ip addr show, text form, else ifconfig -a: same link shape), C(netplan)
              (/etc/netplan/*.yaml, judged against the RoCE netdevs), C(link) (ethtool and ethtool -i of the
              data-plane interface; present only when a data-plane interface was found)."
            - "Each is null when the tool (or the files) is not on the node, else C({source, error, data,
              findings}): C(error) when the tool exited non-zero or ran past its deadline
              (max(O(timeout), 10) s per command, at most 8 commands in a row), C(data) the parser's dict,
              C(findings) its diagnosis."
          type: dict
"""

import socket

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ncclprep.hostinfo import subprocess_runner
from ansible.module_utils.ncclprep.node import OPTIONS, read_facts


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            cidr=dict(type="str", required=True),
            interface=dict(type="str"),
            sysctl_keys=dict(type="list", elements="str", default=[]),
            names=dict(type="list", elements="dict", default=[]),
            connect_port=dict(type="int", default=22),
            torch_python=dict(type="path"),
            timeout=dict(type="float", default=5.0),
            into=dict(type="dict", default={}),
            dataset_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        facts = read_facts({k: p[k] for k in OPTIONS}, subprocess_runner, module.get_bin_path)
    except ValueError as exc:
        module.fail_json(msg=f"{socket.gethostname()}: {exc}")
    # Ansible replaces a top-level fact wholesale: keep what concern_facts read before.
    module.exit_json(changed=False, ansible_facts={"ncclprep": dict(p["into"] or {}, **facts)})


if __name__ == "__main__":
    main()
