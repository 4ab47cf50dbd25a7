"""The numa_pinning concern: NUMA topology from sysfs, the per-node binding map, the IRQ plan.

Reading (``read``): the topology and the IRQ affinity of the data-plane NIC. Intent:
``intent`` (``numa_intent``). Checks: ``numa.binding`` and
``numa.irq_affinity``.

Sources (Linux sysfs ABI, Documentation/ABI/stable/sysfs-devices-node and
Documentation/ABI/testing/sysfs-bus-pci):

- ``<sysfs>/devices/system/node/node<N>/cpulist``: CPUs of NUMA node N (a CPU list).
- ``<sysfs>/devices/system/cpu/online``: the online CPUs.
- ``<sysfs>/class/net/<if>/device``: link to the NIC's bus device; virtual interfaces
  (lo, veth, bridges, bonds) have none. Under it: ``numa_node`` (``-1`` = unknown),
  ``local_cpulist``, ``driver`` (link to the bound driver) and ``msi_irqs/<irq>``.
- ``<sysfs>/bus/pci/devices/<addr>/{vendor,class}``: NVIDIA (``0x10de``) display
  controllers, class ``0x0300xx`` (VGA) or ``0x0302xx`` (3D, the data-centre GPUs).

Reading never raises on odd files: a file that exists but cannot be read or parsed
is recorded in ``unparsed`` as ``{"path", "reason"}`` and its value is None. A file
that does not exist is simply None (e.g. ``numa_node`` of a virtio NIC), except
``cpu/online``, which every Linux kernel has and so is recorded when missing.
"""

from __future__ import annotations

import os
import re

from ansible.module_utils.ncclprep.cpumask import format_cpulist, parse_cpulist
from ansible.module_utils.ncclprep.model import (
    Check,
    Context,
    HostRecord,
    facts_of,
    intent_of,
    majority,
    make_check,
    verdict,
)
from ansible.module_utils.ncclprep.node.hostinfo import Runner
from ansible.module_utils.ncclprep.sysfs import read_text


def read_numa(interface: str | None, map_file: str, sysfs: str = "/sys", procfs: str = "/proc") -> dict:
    """``{topology (numa.read_topology), irq_affinity: {irq: smp_affinity_list or None} of the
    interface's IRQs, installed_text (the installed binding map without comment lines, or None
    when absent)}``.
    """
    topo = read_topology(sysfs)
    nic = (topo.get("nics") or {}).get(interface or "") or {}
    text = read_text(map_file)
    installed = None
    if text is not None:
        installed = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    return {"topology": topo, "irq_affinity": read_affinity(procfs, nic.get("irqs") or []),
            "installed_text": installed}


NVIDIA_VENDOR = "0x10de"
#: PCI class prefixes of GPUs: 0x0300 VGA compatible, 0x0302 3D controller (PCI code and ID assignment spec).
GPU_CLASSES = ("0x0300", "0x0302")
_NODE_RE = re.compile(r"^node(\d+)$")


def _read(path: str, unparsed: list, required: bool = False) -> str | None:
    """Stripped text of ``path``; None (recorded in ``unparsed`` unless simply absent) when unreadable."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except FileNotFoundError:
        if required:
            unparsed.append({"path": path, "reason": "missing"})
        return None
    except (OSError, UnicodeDecodeError) as exc:
        unparsed.append({"path": path, "reason": f"unreadable: {exc}"})
        return None


def _read_cpulist(path: str, unparsed: list, required: bool = False) -> str | None:
    """CPU list file -> canonical CPU list string (``""`` for a CPU-less node); None when bad."""
    text = _read(path, unparsed, required)
    if text is None:
        return None
    try:
        return format_cpulist(parse_cpulist(text))
    except ValueError as exc:
        unparsed.append({"path": path, "reason": str(exc)})
        return None


def _read_numa_node(path: str, unparsed: list) -> int | None:
    """``numa_node`` file -> int; ``-1`` (kernel: no NUMA information) -> None."""
    text = _read(path, unparsed)
    if text is None:
        return None
    try:
        node = int(text)
    except ValueError:
        unparsed.append({"path": path, "reason": f"not an integer: {text[:40]!r}"})
        return None
    return node if node >= 0 else None


def _listdir(path: str) -> list[str]:
    """Sorted entries of ``path``; [] when it is absent or unreadable."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _nic(sysfs: str, name: str, unparsed: list) -> dict:
    """One ``class/net`` entry: ``{numa_node, local_cpulist, pci, driver, irqs}``."""
    dev = os.path.join(sysfs, "class", "net", name, "device")
    if not os.path.exists(dev):
        return {"numa_node": None, "local_cpulist": None, "pci": None, "driver": None, "irqs": []}
    drv = os.path.join(dev, "driver")
    irqs = []
    for entry in _listdir(os.path.join(dev, "msi_irqs")):
        if entry.isdigit():
            irqs.append(int(entry))
        else:
            unparsed.append({"path": os.path.join(dev, "msi_irqs", entry), "reason": "not an IRQ number"})
    return {
        "numa_node": _read_numa_node(os.path.join(dev, "numa_node"), unparsed),
        "local_cpulist": _read_cpulist(os.path.join(dev, "local_cpulist"), unparsed),
        "pci": os.path.basename(os.path.realpath(dev)),
        "driver": os.path.basename(os.path.realpath(drv)) if os.path.exists(drv) else None,
        "irqs": sorted(irqs),
    }


def read_topology(sysfs: str = "/sys") -> dict:
    """Read NUMA nodes, online CPUs, NICs and NVIDIA GPUs from a sysfs tree.

    Returns ``{"numa_nodes": {"0": "0-31", "1": "32-63"}, "online_cpus": "0-63",
    "nics": {name: {"numa_node": int|None, "local_cpulist": str|None, "pci": str|None,
    "driver": str|None, "irqs": [int, ...]}}, "gpus": [{"pci": "0000:17:00.0",
    "numa_node": int|None, "local_cpulist": str|None}], "unparsed": [{"path", "reason"}]}``.

    numa_nodes keys are strings (survive JSON), in node order; {} when the node directory
    is absent (kernel without NUMA, some containers). A memory-only node has cpulist ``""``.
    A NIC's ``pci`` is the basename of its ``device`` link target (a PCI address for PCI
    NICs, e.g. ``virtio0`` for virtio); virtual NICs have pci/numa_node None and irqs [].
    gpus are sorted by PCI address, which is CUDA_DEVICE_ORDER=PCI_BUS_ID order.
    Never raises on odd files (see the module docstring).
    """
    unparsed: list = []
    node_dir = os.path.join(sysfs, "devices", "system", "node")
    node_ids = sorted(int(m.group(1)) for m in map(_NODE_RE.match, _listdir(node_dir)) if m)
    numa_nodes = {str(n): _read_cpulist(os.path.join(node_dir, f"node{n}", "cpulist"), unparsed, required=True)
                  for n in node_ids}
    online = _read_cpulist(os.path.join(sysfs, "devices", "system", "cpu", "online"), unparsed, required=True)

    net_dir = os.path.join(sysfs, "class", "net")
    nics = {name: _nic(sysfs, name, unparsed) for name in _listdir(net_dir)}

    gpus = []
    pci_dir = os.path.join(sysfs, "bus", "pci", "devices")
    for addr in _listdir(pci_dir):
        dev = os.path.join(pci_dir, addr)
        vendor = _read(os.path.join(dev, "vendor"), unparsed)
        if vendor is None or vendor.lower() != NVIDIA_VENDOR:
            continue
        pclass = _read(os.path.join(dev, "class"), unparsed, required=True)
        if pclass is None or not pclass.lower().startswith(GPU_CLASSES):
            continue
        gpus.append({"pci": addr,
                     "numa_node": _read_numa_node(os.path.join(dev, "numa_node"), unparsed),
                     "local_cpulist": _read_cpulist(os.path.join(dev, "local_cpulist"), unparsed)})
    gpus.sort(key=lambda g: g["pci"].lower())
    return {"numa_nodes": numa_nodes, "online_cpus": online, "nics": nics, "gpus": gpus, "unparsed": unparsed}


def _cpu_nodes(topology: dict) -> list[tuple[int, str]]:
    """``[(node, cpulist)]`` of the nodes that have CPUs, by node number."""
    nodes = topology.get("numa_nodes") or {}
    return sorted((int(k), v) for k, v in nodes.items() if v)


def binding_map(topology: dict, nproc: int) -> list[dict]:
    """Local rank -> NUMA node, CPUs and GPU, for ``nproc`` local ranks.

    ``topology`` is read_topology's result. Returns one entry per local rank:
    ``[{"local_rank": 0, "numa_node": 3 | None, "cpus": "48-63,176-191" | None, "gpu": pci | None}]``
    (cpus None only when the host reports no online CPUs either).

    Rules:
    - With GPUs (sorted by PCI address = CUDA_DEVICE_ORDER=PCI_BUS_ID, the order
      torchrun's LOCAL_RANK indexes), rank r uses GPU r, the GPU's own NUMA node and that
      node's CPUs; then the GPU's local_cpulist; then all online CPUs. The node comes from
      each GPU's sysfs numa_node, never from the GPU index: ``nvidia-smi topo -m`` on an
      8-GPU NVSwitch host puts GPU0-1 on NUMA 3 and GPU2-3 on NUMA 1.
    - Without GPUs and with two or more NUMA nodes that have CPUs: ranks are spread in
      contiguous blocks, rank r -> nodes[r * n_nodes // nproc] (4 ranks on 2 nodes: 0,0,1,1).
    - Without GPUs and with zero or one such node: every rank gets that node (or None)
      and all online CPUs (the one-node map of a container or a single-socket host).

    Raises ValueError when nproc < 1 or nproc exceeds the number of GPUs.
    """
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise ValueError(f"the number of local ranks must be an integer >= 1, got {nproc!r}")
    gpus = topology.get("gpus") or []
    nodes = dict(_cpu_nodes(topology))
    online = topology.get("online_cpus")
    out = []
    if gpus:
        if nproc > len(gpus):
            raise ValueError(f"{nproc} local ranks but only {len(gpus)} GPU(s) on this host; "
                             f"valid: 1..{len(gpus)}")
        for r in range(nproc):
            gpu = gpus[r]
            node = gpu.get("numa_node")
            cpus = nodes.get(node) if node is not None else None
            out.append({"local_rank": r, "numa_node": node, "cpus": cpus or gpu.get("local_cpulist") or online,
                        "gpu": gpu.get("pci")})
        return out
    ordered = sorted(nodes.items())
    if len(ordered) >= 2:
        for r in range(nproc):
            node, cpus = ordered[r * len(ordered) // nproc]
            out.append({"local_rank": r, "numa_node": node, "cpus": cpus, "gpu": None})
        return out
    node = ordered[0][0] if ordered else None
    return [{"local_rank": r, "numa_node": node, "cpus": online, "gpu": None} for r in range(nproc)]


def render_binding(binding: list[dict]) -> str:
    """Binding map -> text for a shell launcher, one ``<local_rank> <numa_node> <cpus> <gpu>`` line per rank.

    Missing values are ``-``. The first line is a ``#`` comment naming the columns; the
    text ends with a newline. Example: ``"# local_rank numa_node cpus gpu\\n0 3 48-63 0000:17:00.0\\n"``.
    """
    def col(value) -> str:
        return "-" if value is None or value == "" else str(value)

    lines = ["# local_rank numa_node cpus gpu"]
    lines += [" ".join(col(e.get(k)) for k in ("local_rank", "numa_node", "cpus", "gpu")) for e in binding]
    return "\n".join(lines) + "\n"


def irq_affinity_plan(topology: dict, interface: str, cpus: str) -> dict:
    """The IRQ plan: ``interface``'s IRQs, whose ``/proc/irq/<n>/smp_affinity_list`` are to be ``cpus``.

    Returns ``{"interface", "cpus" (canonical CPU list), "irqs": [int], "reason": str | None}``;
    reason is set and irqs is empty when the interface does not exist or has no MSI IRQs (a
    virtual NIC such as a container's veth). Which IRQs are off their CPUs now is ``irqs_off``
    of this plan and the live affinity.

    Raises ValueError when ``cpus`` is not a CPU list, is empty, or names CPUs that are not
    online (the kernel refuses such an affinity with EINVAL).
    """
    online = topology.get("online_cpus")
    valid = f"valid: a CPU list such as 0-3,8 of online CPUs ({online if online is not None else 'unknown'})"
    try:
        want = set(parse_cpulist(cpus))
    except ValueError as exc:
        raise ValueError(f"{exc}; {valid}") from None
    if not want:
        raise ValueError(f"empty CPU list {cpus!r}: an IRQ needs at least one CPU; {valid}")
    if online is not None:
        offline = want - set(parse_cpulist(online))
        if offline:
            raise ValueError(f"CPU(s) {format_cpulist(offline)} in {cpus!r} are not online; {valid}")
    plan = {"interface": interface, "cpus": format_cpulist(want), "irqs": [], "reason": None}
    nics = topology.get("nics") or {}
    nic = nics.get(interface)
    if nic is None:
        plan["reason"] = f"no interface {interface!r} on this host (known: {', '.join(sorted(nics)) or 'none'})"
        return plan
    if nic.get("pci") is None:
        plan["reason"] = f"no IRQs: {interface} is a virtual interface (no device in sysfs)"
        return plan
    plan["irqs"] = list(nic.get("irqs") or [])
    if not plan["irqs"]:
        plan["reason"] = f"no IRQs: {interface} ({nic['pci']}) has no MSI IRQs in sysfs"
    return plan


def read_affinity(procfs: str, irqs: list) -> dict:
    """``{irq: smp_affinity_list text or None}`` from ``<procfs>/irq/<n>/smp_affinity_list``
    (None where the file is missing or unreadable)."""
    out = {}
    for irq in irqs:
        try:
            with open(os.path.join(procfs, "irq", str(irq), "smp_affinity_list"), encoding="utf-8") as fh:
                out[irq] = fh.read().strip()
        except (OSError, UnicodeDecodeError):
            out[irq] = None
    return out


def numa_intent(topology: dict, nproc: int | None, interface: str | None, cpus: str | None) -> dict:
    """The numa_pinning intent from the topology (``read_numa``) and the role's variables.

    ``nproc``: local ranks per node (None: one per GPU, at least 1); ``interface``: the NIC
    whose IRQs are pinned (None: no IRQ plan); ``cpus``: the CPUs for its IRQs (None: the NIC's
    local CPUs, else every online CPU). Returns ``{binding (binding_map), binding_text
    (render_binding), nproc, numa_nodes, gpus (PCI addresses), irq: {interface, cpus, irqs,
    reason} (irq_affinity_plan) or None}``. Raises ValueError (from binding_map / irq_affinity_plan) for a bad
    nproc or CPU list.
    """
    n = nproc if nproc is not None else max(1, len(topology.get("gpus") or []))
    binding = binding_map(topology, n)
    irq = None
    if interface:
        nic = (topology.get("nics") or {}).get(interface) or {}
        want = cpus if cpus is not None else (nic.get("local_cpulist") or topology.get("online_cpus") or "")
        irq = irq_affinity_plan(topology, interface, want)
    return {"binding": binding, "binding_text": render_binding(binding), "nproc": n,
            "numa_nodes": topology.get("numa_nodes"), "gpus": [g.get("pci") for g in topology.get("gpus") or []],
            "irq": irq}


def irqs_off(irq: dict | None, current: dict) -> list[int]:
    """IRQs of the intent's ``irq`` plan whose affinity ``current`` ({irq: smp_affinity_list})
    is not the intended CPU set (missing or unreadable counts as off). Compared as CPU sets."""
    if not irq or not irq.get("irqs"):
        return []
    want = set(parse_cpulist(irq["cpus"]))
    off = []
    for n in irq["irqs"]:
        now = current.get(n, current.get(str(n)))
        try:
            same = now is not None and set(parse_cpulist(now)) == want
        except ValueError:
            same = False
        if not same:
            off.append(n)
    return off


def map_lines(text: str | None) -> list[str] | None:
    """Non-comment, non-blank lines of a binding map text, stripped; None stays None (not installed)."""
    if text is None:
        return None
    return [line.strip() for line in str(text).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def check(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """numa.binding and numa.irq_affinity: intent ``numa_pinning`` (None: role off) against
    facts ``numa_pinning``.

    intent ``numa_pinning``: {binding_text (the map computed from the topology, lines
    ``local_rank numa_node cpus gpu``), irq: {interface, cpus, irqs, reason} or None, ...}
    (``numa_intent``). facts ``numa_pinning``: {installed_text (the installed map, None when
    absent), irq_affinity: {irq: smp_affinity_list now}, topology} (``read_numa``).
    numa.binding FAILs hosts whose installed map differs from today's topology (a GPU moved, a
    map never installed); PASS measures host -> ranks in the map. numa.irq_affinity FAILs hosts
    with data-plane IRQs off the intended CPUs (``irqs_off``; measured: host -> {irq: CPUs
    now}), and is SKIP with the most common reason when no host has IRQs to pin (virtual NICs).
    """
    rows = {h: (intent_of(r, "numa_pinning"), facts_of(r).get("numa_pinning") or {})
            for h, r in sorted(records.items()) if intent_of(r, "numa_pinning")}
    if not rows:
        return []
    stale = {h: (map_lines(f.get("installed_text")) if f.get("installed_text") is not None else "not installed")
             for h, (n, f) in rows.items() if map_lines(f.get("installed_text")) != map_lines(n.get("binding_text"))}
    out = [verdict("numa.binding", stale, expected={h: map_lines(rows[h][0].get("binding_text")) for h in stale},
                   message=f"NUMA binding map differs from the topology on {', '.join(sorted(stale))}",
                   remediation=f"re-run site.yml (role numa_pinning) on {', '.join(sorted(stale))}",
                   passed=f"binding map matches the topology on {len(rows)} hosts",
                   passed_measured={h: len(map_lines(n.get("binding_text")) or []) for h, (n, _) in rows.items()},
                   passed_expected=None)]
    irq = {h: n.get("irq") or {} for h, (n, _) in rows.items()}
    current = {h: f.get("irq_affinity") or {} for h, (_, f) in rows.items()}
    off = {}
    for h, plan in irq.items():
        now = current[h]
        wrong = irqs_off(plan, now)
        if wrong:
            off[h] = {str(i): now.get(i, now.get(str(i))) for i in wrong}
    pinned = [h for h, p in irq.items() if p.get("irqs") and h not in off]
    if off or pinned:
        out.append(verdict(
            "numa.irq_affinity", off, expected={h: irq[h].get("cpus") for h in off},
            message="data-plane IRQs off the NIC's local CPUs on "
                    + ", ".join(f"{h} (IRQ {', '.join(v)})" for h, v in sorted(off.items())),
            remediation=f"re-run site.yml (role numa_pinning) on {', '.join(sorted(off))}; "
                        "check irqbalance is banned from them or stopped",
            passed=f"data-plane IRQs on the NIC's local CPUs on {len(pinned)} hosts",
            passed_measured={h: irq[h].get("cpus") for h in pinned}, passed_expected=None))
    else:
        reasons = {h: p.get("reason") or "no IRQ plan (no interface)" for h, p in irq.items()}
        out.append(make_check("numa.irq_affinity", "SKIP", measured=reasons,
                              message=f"no IRQs to pin: {majority(reasons)}"))
    return out


# This concern's entry in the registry (concerns/__init__.py).
SWITCH = "numa_pinning_enabled"
DATA_PLANE = True
FACTS = True
IDS = ("numa.binding", "numa.irq_affinity")
OPTIONS = dict(interface=dict(type="str"), map_file=dict(type="path"))


def read(run: Runner, p: dict) -> dict:
    """``read_numa`` with the options of OPTIONS (checked, defaults filled). Raises ValueError
    without ``map_file``."""
    if not p["map_file"]:
        raise ValueError("needs map_file")
    return read_numa(p["interface"], p["map_file"])


#: The variables the intent is computed from (concerns.intent hands over these only): nccl_env's
#: ranks per node stand in for numa_pinning's own when that is not set.
INTENT_VARS = ("numa_pinning_nproc_per_node", "nccl_env_nproc_per_node", "numa_pinning_irq_cpus", "data_plane")
#: The facts it takes from the node: the topology (not the IRQ affinity, which is what it sets).
INTENT_FACTS = ("topology",)


def intent(v: dict, node: dict) -> dict:
    """``numa_intent`` of the topology with the ranks per node (numa_pinning_nproc_per_node, else
    nccl_env_nproc_per_node), the data-plane interface and numa_pinning_irq_cpus. Raises ValueError
    naming the variables its values came from."""
    nproc = v["numa_pinning_nproc_per_node"]
    if nproc is None:
        nproc = v["nccl_env_nproc_per_node"]
    interface = (v["data_plane"] or {}).get("interface")
    try:
        return numa_intent(node["topology"] or {}, None if nproc is None else int(nproc), interface or None,
                           v["numa_pinning_irq_cpus"])
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{exc} (from numa_pinning_nproc_per_node={nproc!r}, numa_pinning_irq_cpus="
                         f"{v['numa_pinning_irq_cpus']!r}, the data-plane interface {interface!r})") from None
