"""``nvidia-smi topo -m``: the GPU/NIC connection matrix, CPU and NUMA affinity, legends.

The header row names the device columns (``GPU0 .. GPUn``, ``NIC0 .. NICm``; older
drivers print ``mlx5_0`` style names) followed by ``CPU Affinity``, ``NUMA Affinity``
and ``GPU NUMA ID``. Each GPU row gives one link code per device column and then
its affinities; NIC rows stop after the link codes. A ``Legend:`` block explains the
codes and a ``NIC Legend:`` block maps ``NIC0`` to the RDMA device (``mlx5_0``).

Link codes, nearest first: ``X`` self, ``NV#`` NVLink, ``PIX`` one PCIe bridge, ``PXB``
several PCIe bridges, ``PHB`` a PCIe host bridge, ``NODE`` between host bridges in one
NUMA node, ``SYS`` across the SMP interconnect between NUMA nodes (nvidia-smi's legend).
"""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.cpumask import parse_cpulist
from ansible.module_utils.ncclprep.parsers import finding

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
    ``truncated`` is True when fewer device rows than header columns were read. Never raises.
    """
    out: dict = {"columns": [], "affinity_columns": [], "gpus": {}, "nics": {}, "nic_names": {}, "legend": {},
                 "announced_gpus": 0, "announced_nics": 0, "truncated": False, "unparsed": []}
    section = "matrix"
    for line in text.splitlines():
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
