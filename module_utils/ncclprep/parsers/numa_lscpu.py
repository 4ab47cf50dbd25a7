"""``numactl -H`` / ``numactl --hardware``: NUMA nodes, their CPUs, memory and distances.

Lines: ``available: N nodes (0-M)``, per node ``node I cpus: 0 1 2 ...``, ``node I size: S MB``,
``node I free: F MB``, then ``node distances:``, a header row ``node 0 1`` and one
``I: d d`` row per node. numactl's "MB" is 2^20 bytes (it prints ``bytes >> 20``),
so sizes are read as MiB. Distances are the ACPI SLIT values (10 = local).
"""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.parsers import finding

_AVAILABLE_RE = re.compile(r"^available:\s*(\d+) nodes?\b")
_CPUS_RE = re.compile(r"^node (\d+) cpus:\s*([\d\s]*)$")
_MEM_RE = re.compile(r"^node (\d+) (size|free):\s*(\d+) MB$")
_DIST_HEAD_RE = re.compile(r"^node(\s+\d+)+\s*$")
_DIST_ROW_RE = re.compile(r"^(\d+):((?:\s+\d+)+)\s*$")

#: Memory sizes of nodes with CPUs may differ by this share before it is flagged.
MEMORY_IMBALANCE = 0.10


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


def diagnose_numa(parsed: dict, host: str | None = None) -> list[dict]:
    """Findings for ``parse_numactl_hardware`` output of one host.

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
