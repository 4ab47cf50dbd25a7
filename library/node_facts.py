#!/usr/bin/python
# Copyright: ncclprep contributors
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_facts
short_description: Read everything validate.yml checks on a node, in one run (read-only)
description:
  - "Returns C(ansible_facts.ncclprep): with O(node), the node's versions, network interfaces, the
    data-plane interface, tracked sysctl values, host name resolution of every cluster name, limits,
    port counters, GIDs, the dataset and the tools' output; with O(concerns), each concern's live
    state (C(ansible_facts.ncclprep.<concern>), each concern's reader in module_utils/ncclprep/concerns); with
    O(roce_qos), the RoCE ports and what differs from the settings (C(ansible_facts.ncclprep.roce_qos))."
  - "One process reads it all (module_utils/ncclprep/node/read.py read_node), as C(ncclprep node check)
    reads a node without Ansible: validate.yml and site.yml's checking play read each node in one
    module run (roles/preflight/tasks/read.yml)."
  - Never changes anything; runs in check mode too and always returns C(changed=false).
  - Every step that may block (name look-ups, TCP connects, commands, the torch import) has a deadline.
  - torch is imported only where the NVIDIA driver is loaded; elsewhere its version and CUDA build
    are read from torch/version.py (no GPU, NCCL or cuDNN to ask torch about).
options:
  node:
    type: dict
    description:
      - "The node reading's options (module_utils/ncclprep/node/read.py OPTIONS, each converted to its
        type as an argument spec would): C(cidr) of the data plane (required), C(interface) (null
        finds it from the cidr), C(sysctl_keys) to read, C(names) (the
        host_names intent C([{host, address, names}]): each name must resolve to C(address), and
        C(address):C(connect_port) must accept TCP), C(connect_port) (22), C(torch_python) (the torch
        venv's python), C(timeout) (seconds per look-up or connect, 5), C(dataset_path) (the training
        data, read under max(timeout, 10) s; null reads none)."
      - null reads none of it (site.yml's checking play reads the concerns only).
  concerns:
    type: dict
    default: {}
    description:
      - "C({<concern>: options}): each concern's reader options (OPTIONS of module_utils/ncclprep/concerns/<concern>.py
        READER_SPEC; each role's C(<role>_reader)); the firewall's TCP listeners are read here with
        C(ss -Htlnp)."
  roce_qos:
    type: dict
    description: "roce_qos's reading options (module_utils/ncclprep/concerns/roce_qos.py SURVEY_SPEC, the role's
      C(roce_qos_survey)); null reads none."
  into:
    type: dict
    default: {}
    description:
      - The current C(ansible_facts.ncclprep), returned with these keys added.
author: ncclprep contributors
"""

EXAMPLES = r"""
- name: Read the node and two concerns in one run
  node_facts:
    node:
      cidr: 10.0.0.0/24
      sysctl_keys: [net.core.somaxconn]
      names: "{{ host_names_intent }}"
      torch_python: /opt/ncclprep/venv/bin/python
    concerns:
      rps_rfs: {interface: eth0}
      nccl_env: {env_files: [/etc/ncclprep/nccl.env, /etc/nccl.conf]}
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
        dataset{path, exists, kind, readable, entries, sample, error, hung} or null
        (module_utils/ncclprep/node/dataset.py),
        hostinfo (below)"
      type: dict
      contains:
        hostinfo:
          description:
            - "What the node's own tools show, read through module_utils/ncclprep/node/hostinfo.py and the parsers:
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
from ansible.module_utils.ncclprep.node.hostinfo import subprocess_runner
from ansible.module_utils.ncclprep.node.read import ReadError, read_node


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type="dict"),
            concerns=dict(type="dict", default={}),
            roce_qos=dict(type="dict"),
            into=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        facts = read_node({"node": p["node"], "readers": p["concerns"], "roce_qos": p["roce_qos"]},
                          run=subprocess_runner, which=module.get_bin_path, warn=module.warn)
    except ReadError as exc:
        module.fail_json(msg=f"{socket.gethostname()}: {exc}")
    # Ansible replaces a top-level fact wholesale: keep what was read before.
    module.exit_json(changed=False, ansible_facts={"ncclprep": dict(p["into"] or {}, **facts)})


if __name__ == "__main__":
    main()
