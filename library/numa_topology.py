#!/usr/bin/python
# Copyright: ncclprep contributors
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: numa_topology
short_description: Read NUMA nodes, NICs and GPUs and compute the local-rank binding map (read-only)
description:
  - Reads NUMA nodes, online CPUs, network interfaces (NUMA node, local CPUs, PCI address,
    driver, MSI IRQs) and NVIDIA GPUs from sysfs.
  - Computes the binding map used by the launcher, local rank -> NUMA node, CPUs and GPU, with
    the rules of C(module_utils/ncclprep/numa.py) C(binding_map). A host without GPUs or without
    NUMA gets a one-node map, not an error.
  - With O(interface), also reports which of its IRQs need their smp_affinity_list changed to
    O(cpus). An unknown or virtual interface is not an error; C(irq.reason) says why there is
    nothing to change.
  - Never changes anything; runs in check mode too and always returns C(changed=false).
options:
  sysfs_root: {type: path, default: /sys, description: Root of the sysfs tree to read.}
  procfs_root: {type: path, default: /proc, description: Root of procfs (for C(irq/<n>/smp_affinity_list)).}
  interface: {type: str, description: NIC whose IRQ affinity to plan; null skips the IRQ plan.}
  nproc_per_node:
    type: int
    description: Local ranks on this node; null means the number of GPUs, at least 1.
  cpus:
    type: str
    description:
      - CPU list (C(0-31,64-95)) for the IRQs of O(interface); null means the interface's
        local_cpulist, or all online CPUs when it has none.
author: ncclprep contributors
"""

EXAMPLES = r"""
- name: Read the NUMA topology and the binding map
  numa_topology:
    interface: ens1f0
  register: __numa_pinning_topology
"""

RETURN = r"""
topology:
  description: "numa_nodes{node: cpulist}, online_cpus, nics{name: {numa_node, local_cpulist, pci,
    driver, irqs}}, gpus[{pci, numa_node, local_cpulist}] (PCI bus order), unparsed[{path, reason}]"
  returned: always
  type: dict
binding:
  description: One entry per local rank, C({local_rank, numa_node, cpus, gpu}).
  returned: always
  type: list
  elements: dict
binding_text:
  description: The binding map as launcher text, a C(#) header line then C(<local_rank> <numa_node> <cpus> <gpu>).
  returned: always
  type: str
nproc_per_node:
  description: The number of local ranks the map was computed for.
  returned: always
  type: int
irq:
  description: "IRQ plan: interface, cpus, irqs, change (IRQs whose affinity differs), reason (why
    nothing applies, or null), current{irq: smp_affinity_list or null}."
  returned: when interface is given
  type: dict
"""

import os
import socket

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ncclprep.numa import binding_map, irq_affinity_plan, read_topology, render_binding


def read_affinity(procfs: str, irqs: list) -> dict:
    """``{irq: smp_affinity_list text or None}`` from ``<procfs>/irq/<n>/smp_affinity_list``."""
    out = {}
    for irq in irqs:
        try:
            with open(os.path.join(procfs, "irq", str(irq), "smp_affinity_list"), encoding="utf-8") as fh:
                out[irq] = fh.read().strip()
        except (OSError, UnicodeDecodeError):
            out[irq] = None
    return out


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type="path", default="/sys"),
            procfs_root=dict(type="path", default="/proc"),
            interface=dict(type="str"),
            nproc_per_node=dict(type="int"),
            cpus=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    me = socket.gethostname()
    topo = read_topology(p["sysfs_root"])
    for item in topo["unparsed"]:
        module.warn(f"{me}: cannot parse {item['path']}: {item['reason']}")

    nproc = p["nproc_per_node"] if p["nproc_per_node"] is not None else max(1, len(topo["gpus"]))
    try:
        binding = binding_map(topo, nproc)
    except ValueError as exc:
        module.fail_json(msg=f"{me}: nproc_per_node={nproc}: {exc}", topology=topo)

    result = dict(changed=False, topology=topo, binding=binding, binding_text=render_binding(binding),
                  nproc_per_node=nproc)
    if p["interface"]:
        nic = topo["nics"].get(p["interface"]) or {}
        cpus = p["cpus"] if p["cpus"] is not None else (nic.get("local_cpulist") or topo["online_cpus"] or "")
        current = read_affinity(p["procfs_root"], nic.get("irqs") or [])
        try:
            plan = irq_affinity_plan(topo, p["interface"], cpus, current)
        except ValueError as exc:
            module.fail_json(msg=f"{me}: cpus={cpus!r} (for interface {p['interface']}): {exc}", topology=topo)
        result["irq"] = dict(plan, current=current)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
