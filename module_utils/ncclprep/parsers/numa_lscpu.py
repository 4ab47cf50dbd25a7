"""``numactl -H`` / ``numactl --hardware`` and plain ``lscpu``: NUMA nodes, their CPUs, memory and distances.

numactl lines: ``available: N nodes (0-M)``, per node ``node I cpus: 0 1 2 ...``, ``node I size: S MB``,
``node I free: F MB``, then ``node distances:``, a header row ``node 0 1`` and one
``I: d d`` row per node. numactl's "MB" is 2^20 bytes (it prints ``bytes >> 20``),
so sizes are read as MiB. Distances are the ACPI SLIT values (10 = local).

lscpu (util-linux) prints ``Key: value`` lines, the values aligned with spaces: older versions
in one flat list (``NUMA node(s):          2``), newer ones (2.37 on) under section headers
with an empty value (``NUMA:``, ``Caches (sum of all):``, ``Vulnerabilities:``) and the keys
indented below them. Per NUMA node ``NUMA node0 CPU(s):     0-31,64-95`` (a kernel CPU list,
empty for a node without CPUs). lscpu shows neither node memory nor distances.
"""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.cpumask import parse_cpulist
from ansible.module_utils.ncclprep.parsers import finding

_AVAILABLE_RE = re.compile(r"^available:\s*(\d+) nodes?\b")
_CPUS_RE = re.compile(r"^node (\d+) cpus:\s*([\d\s]*)$")
_MEM_RE = re.compile(r"^node (\d+) (size|free):\s*(\d+) MB$")
_DIST_HEAD_RE = re.compile(r"^node(\s+\d+)+\s*$")
_DIST_ROW_RE = re.compile(r"^(\d+):((?:\s+\d+)+)\s*$")

#: Memory sizes of nodes with CPUs may differ by this share before it is flagged.
MEMORY_IMBALANCE = 0.10
#: lscpu: a ``Key: value`` line (keys hold no ``@``/``$``/``#``, so a shell prompt is not one).
_LSCPU_KEY_RE = re.compile(r"^([A-Za-z][\w .,()/+-]*?):\s*(.*)$")
_LSCPU_NODE_RE = re.compile(r"^NUMA node(\d+) CPU\(s\)$")
#: lscpu keys read as ints, and the result key each goes to.
_LSCPU_INTS = {"CPU(s)": "cpu_count", "Thread(s) per core": "threads_per_core", "Core(s) per socket":
               "cores_per_socket", "Socket(s)": "sockets", "NUMA node(s)": "available"}
#: lscpu keys read as CPU lists.
_LSCPU_LISTS = {"On-line CPU(s) list": "online", "Off-line CPU(s) list": "offline"}


def parse_numactl_hardware(text: str) -> dict:
    """Parse ``numactl -H`` into ``{"available": int | None, "nodes": [...], "distances": [[int]] | None, "unparsed"}``.

    A node is ``{"node": int, "cpus": [int], "size_mib": int | None, "free_mib": int | None}``, in
    the order printed. ``distances[i][j]`` follows the order of the distance header row. A prompt
    line or anything else not understood is returned unparsed. Never raises.
    """
    out: dict = {"available": None, "nodes": [], "distances": None, "unparsed": []}
    nodes: dict[int, dict] = {}

    def node(i: int) -> dict:
        if i not in nodes:
            nodes[i] = {"node": i, "cpus": [], "size_mib": None, "free_mib": None}
            out["nodes"].append(nodes[i])
        return nodes[i]

    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped == "node distances:":
            continue
        m = _AVAILABLE_RE.match(stripped)
        if m:
            out["available"] = int(m.group(1))
            continue
        m = _CPUS_RE.match(stripped)
        if m:
            node(int(m.group(1)))["cpus"] = [int(c) for c in m.group(2).split()]
            continue
        m = _MEM_RE.match(stripped)
        if m:
            node(int(m.group(1)))[m.group(2) + "_mib"] = int(m.group(3))
            continue
        if _DIST_HEAD_RE.match(stripped):
            out["distances"] = []
            continue
        m = _DIST_ROW_RE.match(stripped)
        if m and out["distances"] is not None:
            out["distances"].append([int(d) for d in m.group(2).split()])
            continue
        out["unparsed"].append(line)
    return out


def parse_lscpu(text: str) -> dict:
    """Parse plain ``lscpu`` (old flat or new sectioned layout) into ``parse_numactl_hardware``'s shape.

    Returns ``{"available": int | None (NUMA node(s)), "nodes": [{"node": int, "cpus": [int],
    "size_mib": None, "free_mib": None}], "distances": None, "cpu_count": int | None (CPU(s)),
    "online": [int] | None, "offline": [int] | None (the On-/Off-line CPU(s) lists), "sockets",
    "cores_per_socket", "threads_per_core": int | None, "fields": {key: value}, "unparsed": [lines]}``;
    lscpu prints ``Off-line CPU(s) list`` only when a CPU is offline (None otherwise). A key printed
    more than once (one block per CPU type on hybrid Arm parts) is read from its first line.

    Nodes come from the ``NUMA nodeI CPU(s)`` lines in the order printed; lscpu gives no memory or
    distances, so those are None and ``diagnose_numa`` judges the CPU counts only. ``fields``
    keeps every ``Key: value`` read, as printed (section headers with an empty value are understood
    and not kept). A line that is not ``Key: value`` (a prompt), or whose value cannot be read (a
    CPU list or a count cut short, ``32-63,96-1``), is unparsed and makes no node or count.
    Never raises.
    """
    out: dict = {"available": None, "nodes": [], "distances": None, "cpu_count": None, "online": None,
                 "offline": None, "sockets": None, "cores_per_socket": None, "threads_per_core": None,
                 "fields": {}, "unparsed": []}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        m = _LSCPU_KEY_RE.match(stripped)
        if not m:
            out["unparsed"].append(line)
            continue
        key, value = m.group(1), m.group(2).strip()
        node = _LSCPU_NODE_RE.match(key)
        if not value and not node:
            continue  # a section header ("NUMA:", "Caches (sum of all):")
        try:
            if node:
                out["nodes"].append({"node": int(node.group(1)), "cpus": parse_cpulist(value), "size_mib": None,
                                     "free_mib": None})
            elif key in _LSCPU_LISTS and out[_LSCPU_LISTS[key]] is None:
                out[_LSCPU_LISTS[key]] = parse_cpulist(value)
            elif key in _LSCPU_INTS and out[_LSCPU_INTS[key]] is None:
                if not value.isdigit():
                    raise ValueError(value)
                out[_LSCPU_INTS[key]] = int(value)
        except ValueError:
            out["unparsed"].append(line)
            continue
        out["fields"].setdefault(key, value)
    return out


def diagnose_numa(parsed: dict, host: str | None = None) -> list[dict]:
    """Findings for ``parse_numactl_hardware`` (or ``parse_lscpu``) output of one host.

    - WARN ``numa.cpu_imbalance`` when nodes that have CPUs have different CPU counts.
    - WARN ``numa.memory_imbalance`` when their memory sizes differ by more than MEMORY_IMBALANCE
      (often a missing or failed DIMM).
    - INFO ``numa.memory_only_node`` per node without CPUs (CXL or HBM memory node).
    - WARN ``numa.distances_asymmetric`` when the distance matrix is not symmetric.
    A balanced multi-socket host gives no finding.
    """
    out: list[dict] = []
    subject = host or "host"
    with_cpus = [n for n in parsed.get("nodes", []) if n["cpus"]]
    counts = {n["node"]: len(n["cpus"]) for n in with_cpus}
    if len(set(counts.values())) > 1:
        out.append(finding("numa.cpu_imbalance", "WARN", subject, f"NUMA nodes have different CPU counts: {counts}",
                           "check for offline CPUs (lscpu) or a BIOS setting", host=host, cpus=counts))
    sizes = {n["node"]: n["size_mib"] for n in with_cpus if n["size_mib"]}
    if sizes and (max(sizes.values()) - min(sizes.values())) > MEMORY_IMBALANCE * max(sizes.values()):
        out.append(finding("numa.memory_imbalance", "WARN", subject, f"NUMA node memory differs (MiB): {sizes}",
                           "check that every memory channel is populated (dmidecode -t memory)", host=host,
                           size_mib=sizes))
    for n in parsed.get("nodes", []):
        if not n["cpus"]:
            out.append(finding("numa.memory_only_node", "INFO", f"node{n['node']}",
                               f"NUMA node {n['node']} has memory but no CPUs", "", host=host))
    dist = parsed.get("distances") or []
    square = all(len(row) == len(dist) for row in dist)
    if not square or any(dist[i][j] != dist[j][i] for i in range(len(dist)) for j in range(i)):
        out.append(finding("numa.distances_asymmetric", "WARN", subject,
                           f"NUMA distance matrix is not square and symmetric: {dist}",
                           "check the firmware's SLIT table", host=host))
    return out
