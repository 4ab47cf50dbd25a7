"""``nvidia-smi topo -m``: the GPU/NIC connection matrix, CPU and NUMA affinity, legends.

The header row names the device columns (``GPU0 .. GPUn``, ``NIC0 .. NICm``; older
drivers print ``mlx5_0`` style names) followed by ``CPU Affinity``, ``NUMA Affinity``
and ``GPU NUMA ID``. Each GPU row gives one link code per device column and then
its affinities; NIC rows stop after the link codes. A ``Legend:`` block explains the
codes and a ``NIC Legend:`` block maps ``NIC0`` to the RDMA device (``mlx5_0``).

Link codes, nearest first: ``X`` self, ``NV#`` NVLink, ``PIX`` one PCIe bridge, ``PXB``
several PCIe bridges, ``PHB`` a PCIe host bridge, ``NODE`` between host bridges in one
NUMA node, ``SYS`` across the SMP interconnect between NUMA nodes (nvidia-smi's legend).

``nvidia-smi topo -p2p <c>`` prints, for one peer-to-peer capability ``c`` (P2P_CAPABILITIES),
a GPU-by-GPU matrix: a header row ``GPU0 GPU1 ...`` and rows ``GPU0 X OK ...`` (tab-separated,
each line led by a space and ending in a tab), then a ``Legend:`` of the status codes
(P2P_STATUS: the driver's NVML P2P status values).
"""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.cpumask import parse_cpulist
from ansible.module_utils.ncclprep.parsers import finding, strip_ansi

_AFFINITY_HEADERS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_DEVICE_RE = re.compile(r"^(GPU\d+|NIC\d+|[a-z][\w.-]*\d)$")  # older drivers name NIC columns mlx5_0
_LEGEND_RE = re.compile(r"^(\S+)\s+=\s+(.*)$")
_NIC_LEGEND_RE = re.compile(r"^(NIC\d+):\s*(\S+)$")
#: PCIe distance ranks of GPU-to-NIC codes, nearest first.
PCIE_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS")
#: Codes at which a GPU's network traffic leaves its PCIe host bridge.
FAR = ("NODE", "SYS")


def _int_or_none(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def _cpus(text: str) -> list[int] | None:
    try:
        return parse_cpulist(text)
    except ValueError:
        return None


def parse_topo(text: str) -> dict:
    """Parse ``nvidia-smi topo -m`` into a dict.

    Returns ``{"columns": [device names], "gpus": {name: {"links": {col: code}, "cpu_affinity": str | None,
    "cpus": [int] | None, "numa_affinity": int | None, "gpu_numa_id": int | None}}, "nics": {name:
    {"links": {...}}}, "nic_names": {"NIC0": "mlx5_0"}, "legend": {code: meaning}, "announced_gpus": int,
    "announced_nics": int, "truncated": bool, "unparsed": [lines]}``. ``N/A`` affinities are None.
    ``truncated`` is True when fewer device rows than header columns were read. ANSI control
    sequences (nvidia-smi 580 underlines the header) are dropped first. Never raises.
    """
    out: dict = {"columns": [], "affinity_columns": [], "gpus": {}, "nics": {}, "nic_names": {}, "legend": {},
                 "announced_gpus": 0, "announced_nics": 0, "truncated": False, "unparsed": []}
    section = "matrix"
    for line in strip_ansi(text).splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped in ("Legend:", "NIC Legend:"):
            section = stripped
            continue
        tokens = stripped.split()
        if section == "matrix" and not out["columns"] and len(tokens) > 1 and _DEVICE_RE.match(tokens[0]) \
                and (_DEVICE_RE.match(tokens[1]) or tokens[1] == "CPU"):
            cells = re.split(r"\t+|\s{2,}", stripped)
            devices = [c for c in cells if _DEVICE_RE.match(c)]
            out["columns"] = devices
            out["affinity_columns"] = [c for c in cells if c in _AFFINITY_HEADERS]
            out["announced_gpus"] = sum(c.startswith("GPU") for c in devices)
            out["announced_nics"] = len(devices) - out["announced_gpus"]
            continue
        if section == "matrix" and out["columns"] and tokens[0] in out["columns"]:
            ncol, naff = len(out["columns"]), len(out["affinity_columns"])
            links, rest = tokens[1:1 + ncol], tokens[1 + ncol:]
            if len(links) == ncol and len(rest) in (0, naff):
                row: dict = {"links": {col: links[i] for i, col in enumerate(out["columns"])}}
                if tokens[0].startswith("GPU"):
                    aff = {col: rest[i] for i, col in enumerate(out["affinity_columns"]) if i < len(rest)}
                    cpu = aff.get("CPU Affinity")
                    row.update(cpu_affinity=cpu if cpu not in (None, "N/A") else None,
                               cpus=_cpus(cpu) if cpu not in (None, "N/A") else None,
                               numa_affinity=_int_or_none(aff.get("NUMA Affinity", "")),
                               gpu_numa_id=_int_or_none(aff.get("GPU NUMA ID", "")))
                    out["gpus"][tokens[0]] = row
                else:
                    out["nics"][tokens[0]] = row
                continue
        legend = _LEGEND_RE.match(stripped) if section == "Legend:" else None
        nic = _NIC_LEGEND_RE.match(stripped) if section == "NIC Legend:" else None
        if legend:
            out["legend"][legend.group(1)] = legend.group(2)
        elif nic:
            out["nic_names"][nic.group(1)] = nic.group(2)
        else:
            out["unparsed"].append(line)
    out["truncated"] = len(out["gpus"]) + len(out["nics"]) < len(out["columns"])
    return out


def nearest_nics(parsed: dict, gpu: str) -> tuple[str | None, list[str]]:
    """``(code, [NIC columns])`` of the NICs nearest to ``gpu`` by PCIE_ORDER; ``(None, [])`` without NICs.

    NIC columns are the non-GPU device columns.
    """
    links = parsed["gpus"][gpu]["links"]
    nics = [(PCIE_ORDER.index(code), col) for col, code in links.items()
            if not col.startswith("GPU") and code in PCIE_ORDER]
    if not nics:
        return None, []
    best = min(rank for rank, _ in nics)
    return PCIE_ORDER[best], [col for rank, col in nics if rank == best]


def diagnose_topo(parsed: dict, host: str | None = None) -> list[dict]:
    """Findings for ``parse_topo`` output of one host.

    - WARN ``topo.truncated`` when fewer rows than announced were read: "G of N GPU rows parsed";
      nothing is said about the missing rows.
    - Per parsed GPU with NIC columns: WARN ``topo.nic_far`` when its nearest NIC is only NODE or
      SYS away (its network traffic crosses host bridges or sockets), else INFO ``topo.nic_near``;
      both carry ``distance`` and ``nearest`` (NIC names from the NIC legend where given).
    NUMA affinity is read per GPU row, never derived from the GPU index.
    """
    out: list[dict] = []
    subject = host or "host"
    if parsed["truncated"]:
        nic_rows = f", {len(parsed['nics'])} of {parsed['announced_nics']} NIC rows" if parsed["announced_nics"] else ""
        out.append(finding("topo.truncated", "WARN", subject,
                           f"truncated input: {len(parsed['gpus'])} of {parsed['announced_gpus']} GPU rows parsed"
                           f"{nic_rows}", "capture the whole nvidia-smi topo -m output", host=host,
                           gpu_rows=len(parsed["gpus"]), announced_gpus=parsed["announced_gpus"]))
    for gpu in parsed["gpus"]:
        code, cols = nearest_nics(parsed, gpu)
        if code is None:
            continue
        names = [f"{c} ({parsed['nic_names'][c]})" if c in parsed["nic_names"] else c for c in cols]
        if code in FAR:
            out.append(finding("topo.nic_far", "WARN", gpu, f"{gpu}: the nearest NIC ({', '.join(names)}) is only "
                               f"{code} distance", "expect lower network bandwidth for this GPU; prefer a NIC "
                               "under the same PCIe switch where the hardware has one", host=host, distance=code,
                               nearest=names))
        else:
            out.append(finding("topo.nic_near", "INFO", gpu, f"{gpu}: nearest NIC {', '.join(names)} at {code}", "",
                               host=host, distance=code, nearest=names))
    return out


#: ``nvidia-smi topo -p2p`` capability letters (NVML's P2P capability indexes).
P2P_CAPABILITIES = {"r": "read", "w": "write", "n": "NVLink", "a": "atomics", "p": "PCIe (prop)"}
#: P2P status codes as nvidia-smi's legend explains them (``DR`` is printed by newer drivers only).
P2P_STATUS = {"X": "Self", "OK": "Status Ok", "CNS": "Chipset not supported", "GNS": "GPU not supported",
              "TNS": "Topology not supported", "NS": "Not supported", "DR": "Disabled by regkey", "U": "Unknown"}
#: What to look at for each status that is not OK (the one-line remediation of topo.p2p_unsupported).
P2P_REMEDIATION = {
    "CNS": "the PCIe root complex or chipset does not route peer traffic between these GPUs (common in VMs and on "
           "desktop boards): check the BIOS ACS/IOMMU settings or pass the GPUs through under one PCIe switch",
    "GNS": "this GPU model does not offer P2P (e.g. GeForce parts): NCCL copies through host memory instead",
    "TNS": "the GPUs sit where the driver allows no P2P (e.g. under different CPU sockets): expect NCCL to use "
           "host memory between them",
    "DR": "P2P is disabled by a driver registry key (an NVreg_ option in /etc/modprobe.d): remove it if unintended",
    "NS": "P2P is not supported between these GPUs: NCCL copies through host memory instead",
    "U": "the driver could not tell: check nvidia-smi topo -m and the driver's kernel log",
}
_P2P_HEAD_RE = re.compile(r"^GPU\d+$")
_P2P_CAP_RE = re.compile(r"(?:-p2p|--p2pstatus)\s+([rwnap])(?![\w])")


def parse_topo_p2p(text: str, capability: str | None = None) -> dict:
    """Parse ``nvidia-smi topo -p2p <capability>`` into a dict.

    Returns ``{"capability": "r" | "w" | "n" | "a" | "p" | None, "gpus": [GPU names from the header],
    "matrix": {gpu: {peer: code}}, "legend": {code: meaning}, "truncated": bool, "unparsed": [lines]}``.

    The output does not name its capability: ``capability`` is the letter the caller asked for, or
    else one found in an echoed command line (``nvidia-smi topo -p2p r``, which stays unparsed), or
    None. ``matrix[gpu][peer]`` is the code printed in ``gpu``'s row under ``peer``'s column (``X``
    on the diagonal); a cell is read when it is a P2P_STATUS code or one the text's own legend
    explains. A row cut short or holding a cell that is no code keeps the cells read before that
    point and is also returned unparsed (so is a row with more cells than columns, its columns
    read); ``truncated`` is True when a row was cut short or fewer rows than header columns were
    read. Tab- or space-separated alike, ANSI control sequences dropped. Never raises on text;
    ValueError for a ``capability`` not in P2P_CAPABILITIES.
    """
    if capability is not None and capability not in P2P_CAPABILITIES:
        raise ValueError(f"capability {capability!r} not one of {sorted(P2P_CAPABILITIES)}")
    out: dict = {"capability": capability, "gpus": [], "matrix": {}, "legend": {}, "truncated": False,
                 "unparsed": []}
    lines = [line for line in strip_ansi(text).splitlines() if line.strip()]
    in_legend = False
    for line in lines:  # first the legend: the codes a row may hold
        stripped = line.strip()
        if stripped == "Legend:":
            in_legend = True
            continue
        legend = _LEGEND_RE.match(stripped) if in_legend else None
        if legend:
            out["legend"][legend.group(1)] = legend.group(2)
    codes = set(P2P_STATUS) | set(out["legend"])
    in_legend = False
    for line in lines:
        stripped = line.strip()
        tokens = stripped.split()
        if stripped == "Legend:":
            in_legend = True
            continue
        if in_legend:
            if not _LEGEND_RE.match(stripped):
                out["unparsed"].append(line)
            continue
        if not out["gpus"] and all(_P2P_HEAD_RE.match(t) for t in tokens):
            out["gpus"] = tokens
            continue
        if out["gpus"] and tokens[0] in out["gpus"] and tokens[0] not in out["matrix"]:
            cells = tokens[1:]
            read = 0
            while read < min(len(cells), len(out["gpus"])) and cells[read] in codes:
                read += 1
            out["matrix"][tokens[0]] = {out["gpus"][i]: cells[i] for i in range(read)}
            if read == len(cells) == len(out["gpus"]):
                continue
            out["truncated"] = out["truncated"] or read < len(out["gpus"])
        elif capability is None and out["capability"] is None and _P2P_CAP_RE.search(stripped):
            out["capability"] = _P2P_CAP_RE.search(stripped).group(1)
        out["unparsed"].append(line)
    if len(out["matrix"]) < len(out["gpus"]):
        out["truncated"] = True
    return out


def diagnose_topo_p2p(parsed: dict, host: str | None = None) -> list[dict]:
    """Findings for ``parse_topo_p2p`` output of one host.

    - WARN ``topo.p2p_truncated`` when rows were missing or cut short: "G of N GPU rows read whole";
      nothing is said about the cells not read.
    - WARN ``topo.p2p_unsupported`` per GPU pair (subject ``GPU0-GPU1``) with a code other than
      ``OK`` (or ``X``) in either direction that was read: the message names the pair, the
      capability and each code with its meaning from the legend nvidia-smi printed (P2P_STATUS when
      the text had none); ``codes`` is ``{"GPU0->GPU1": code}`` and the remediation is
      P2P_REMEDIATION's line for the first code. Without P2P between two GPUs NCCL moves their
      traffic through host memory (SHM), at lower bandwidth than P2P over PCIe or NVLink.
    A matrix of all OK gives no finding.
    """
    out: list[dict] = []
    subject = host or "host"
    matrix, gpus = parsed.get("matrix", {}), parsed.get("gpus", [])
    whole = sum(1 for g in gpus if len(matrix.get(g, {})) == len(gpus))
    if parsed.get("truncated"):
        out.append(finding("topo.p2p_truncated", "WARN", subject,
                           f"truncated input: {whole} of {len(gpus)} GPU rows of the P2P matrix read whole",
                           "capture the whole nvidia-smi topo -p2p output", host=host, rows_read=whole,
                           announced_gpus=len(gpus)))
    cap = parsed.get("capability")
    what = f"P2P {P2P_CAPABILITIES[cap]}" if cap in P2P_CAPABILITIES else "P2P"
    legend = dict(P2P_STATUS, **parsed.get("legend", {}))
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            codes = {f"{x}->{y}": matrix[x][y] for x, y in ((a, b), (b, a))
                     if y in matrix.get(x, {}) and matrix[x][y] not in ("OK", "X")}
            if not codes:
                continue
            values = list(codes.values())
            if len(values) == 2 and values[0] == values[1]:
                said = f"{values[0]} ({legend.get(values[0], 'not in the legend')}) both ways"
            else:
                said = ", ".join(f"{pair} {code} ({legend.get(code, 'not in the legend')})"
                                 for pair, code in codes.items())
            first = values[0]
            out.append(finding("topo.p2p_unsupported", "WARN", f"{a}-{b}", f"{a} and {b}: {what} not OK: {said}",
                               P2P_REMEDIATION.get(first, "see nvidia-smi's legend for the code"), host=host,
                               pair=[a, b], codes=codes, capability=cap))
    return out
