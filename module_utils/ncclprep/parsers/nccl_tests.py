"""nccl-tests (``all_reduce_perf`` and friends) result table and summary lines.

A data row is ``size count type redop root`` followed by two halves, out-of-place
then in-place, of ``time algbw busbw #wrong``: size in bytes, count in elements,
time in microseconds, algbw/busbw in GB/s (GB = 1e9), ``#wrong`` the number of
wrong elements (a count, not a flag; ``N/A`` when checking was off). Older
nccl-tests print no ``root`` column. The summary lines are ``# Out of bounds
values : 0 OK`` and ``# Avg bus bandwidth : 84.8558`` (GB/s, averaged over all
rows, so pulled down by the small sizes). Source: NVIDIA nccl-tests, src/common.cu
and doc/PERFORMANCE.md.
"""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.parsers import finding

_OOB_RE = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\S+)?\s*$")
_AVG_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)\s*$")
_HALVES_RE = re.compile(r"^#.*out-of-place.*in-place")
_COLUMNS_RE = re.compile(r"^#\s*size\s+count\s+type")
_UNITS_RE = re.compile(r"^#\s*\(B\)\s+\(elements\)")
#: ``#  Rank  0 Group  0 Pid   8756 on     node1 device  0 [0x01] NVIDIA GeForce GTX 1050 Ti`` (nccl-tests 2.x)
#: and ``Rank  0 uses device  0 [0x05] Tesla M40 24GB`` (1.x); a leading ``#`` or ``>`` (a quote) is dropped.
_DEVICE_RE = re.compile(r"^[#>]?\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+on\s+(\S+)\s+)?(?:uses\s+)?"
                        r"device\s+(\d+)\s+\[0x([0-9a-fA-F]+)\]\s*(.*?)\s*$")
_OPTIONS_RE = re.compile(r"^[#>]?\s*nThread \d+ nGpus \d+|^[#>]?\s*Using devices\s*$")

#: Share of the line rate that peak busbw must reach to count as healthy.
HEALTHY_SHARE = 0.8
#: Below this share of the line rate the bandwidth is "far under" the link.
FAR_UNDER_SHARE = 0.5
#: Per-node network line rates (Gb/s) a peak busbw is set against when no line rate is given, with the
#: usual NIC combinations that make them up.
COMMON_LINE_RATES = ((100, "1 x 100 Gb/s"), (200, "1 x 200 Gb/s or 2 x 100 Gb/s"), (400, "1 x 400 Gb/s or "
                     "2 x 200 Gb/s"), (800, "4 x 200 Gb/s or 2 x 400 Gb/s"), (1600, "8 x 200 Gb/s or 4 x 400 Gb/s"),
                     (3200, "8 x 400 Gb/s"))


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _half(tokens: list[str]) -> dict:
    wrong = tokens[3]
    return {"time_us": _float(tokens[0]), "algbw_gbps": _float(tokens[1]), "busbw_gbps": _float(tokens[2]),
            "wrong": int(wrong) if wrong.isdigit() else None}


def _row(line: str) -> dict | None:
    """One data row, or None when the line is not one."""
    tokens = line.split()
    if len(tokens) not in (12, 13) or not tokens[0].isdigit() or not tokens[1].isdigit():
        return None
    root = None
    if len(tokens) == 13:
        if not re.match(r"^-?\d+$", tokens[4]):
            return None
        root = int(tokens[4])
    halves = tokens[-8:]
    if any(_float(t) is None for t in halves[:3] + halves[4:7]):
        return None
    return {"size": int(tokens[0]), "count": int(tokens[1]), "type": tokens[2], "redop": tokens[3], "root": root,
            "out_of_place": _half(halves[:4]), "in_place": _half(halves[4:])}


def parse_nccl_tests(text: str) -> dict:
    """Parse nccl-tests output into a dict.

    Returns ``{"rows": [{"size": bytes, "count": elements, "type", "redop", "root": int | None,
    "out_of_place": {"time_us", "algbw_gbps", "busbw_gbps", "wrong": int | None}, "in_place": {...}}],
    "has_header": bool, "elided": int (number of "..." rows), "out_of_bounds": int | None,
    "out_of_bounds_ok": bool | None, "avg_busbw_gbps": float | None (the last), "avg_busbw_all": [every
    "Avg bus bandwidth" figure, GB/s], "devices": [{"rank", "host" (None in 1.x), "device", "bus": PCI
    bus number, "gpu": name}] (the "Using devices" list), "started": bool (the options line, the device
    list or the table header was printed), "unparsed": [lines]}``. Other ``#`` lines and anything else
    are returned unparsed; a header quoted with ``>`` reads as with ``#``. Never raises.
    """
    out: dict = {"rows": [], "has_header": False, "elided": 0, "out_of_bounds": None, "out_of_bounds_ok": None,
                 "avg_busbw_gbps": None, "avg_busbw_all": [], "devices": [], "started": False, "unparsed": []}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped == "...":
            out["elided"] += 1
            continue
        dev = _DEVICE_RE.match(stripped)
        if dev:
            out["devices"].append({"rank": int(dev.group(1)), "host": dev.group(2), "device": int(dev.group(3)),
                                   "bus": int(dev.group(4), 16), "gpu": dev.group(5) or None})
            out["started"] = True
            continue
        if _OPTIONS_RE.match(stripped):
            out["started"] = True
            continue
        if stripped.startswith(">"):  # a quoted header line
            stripped = "#" + stripped[1:]
        row = _row(stripped) if not stripped.startswith("#") else None
        oob, avg = _OOB_RE.match(stripped), _AVG_RE.match(stripped)
        if row:
            out["rows"].append(row)
        elif oob:
            out["out_of_bounds"] = int(oob.group(1))
            out["out_of_bounds_ok"] = (oob.group(2) == "OK") if oob.group(2) else None
        elif avg and _float(avg.group(1)) is not None:
            out["avg_busbw_gbps"] = float(avg.group(1))
            out["avg_busbw_all"].append(float(avg.group(1)))
        elif _HALVES_RE.match(stripped) or _COLUMNS_RE.match(stripped) or _UNITS_RE.match(stripped):
            out["has_header"] = True
            out["started"] = True
        else:
            out["unparsed"].append(line)
    return out


def busbw_values(parsed: dict) -> list[float]:
    """All busbw figures (GB/s) of both halves of every row, in row order, Nones left out."""
    return [r[h]["busbw_gbps"] for r in parsed["rows"] for h in ("out_of_place", "in_place")
            if r[h]["busbw_gbps"] is not None]


def diagnose_nccl_tests(parsed: dict, line_rate_gbit_s: float | None = None, host: str | None = None) -> list[dict]:
    """Findings for ``parse_nccl_tests`` output.

    ``line_rate_gbit_s`` is the network line rate per node in Gb/s (bits), summed over the NICs
    NCCL uses (4 x 200 Gb/s -> 800); busbw is compared with ``line_rate_gbit_s / 8`` GB/s, as
    nccl-tests doc/PERFORMANCE.md says busbw is comparable with the hardware's bandwidth.

    - FAIL ``nccl_tests.independent_runs`` when one output holds several "Avg bus bandwidth"
      summaries: each process ran its own test (nccl-tests built without MPI=1 under mpirun:
      NVIDIA/nccl-tests#27, #182).
    - FAIL ``nccl_tests.no_rows`` when the test started (options, devices or header printed) and
      printed no row or summary: it hung at the first size; GPUs of one host on several PCI buses
      point at PCIe ACS or the IOMMU blocking peer-to-peer (NVIDIA/nccl#104 and #257).
    - FAIL ``nccl_tests.wrong_results`` when any row has ``#wrong`` > 0: data corruption; the finding
      lists ``wrong`` as ``[{"size", "out_of_place", "in_place"}]`` counts.
    - FAIL ``nccl_tests.out_of_bounds`` when the out-of-bounds count is above 0.
    - With a line rate: INFO ``nccl_tests.healthy`` when peak busbw (largest of all rows) reaches
      HEALTHY_SHARE of it and nothing is wrong; WARN ``nccl_tests.low_busbw`` when it stays under
      FAR_UNDER_SHARE; the finding carries ``peak_busbw_gbps``, ``line_rate_gbps`` (GB/s) and
      ``largest_size`` (bytes).
    - Without a line rate: INFO ``nccl_tests.peak_busbw`` saying what the peak busbw needs from the
      network (``peak * 8`` Gb/s per node when the run spans nodes, since busbw compares with the
      bottleneck's bandwidth, doc/PERFORMANCE.md) and, from COMMON_LINE_RATES, the smallest usual
      per-node rate that carries it and the share of it reached; when the peak is under
      FAR_UNDER_SHARE of even a 100 Gb/s link (12.5 GB/s) the message says it is far under such a link.
    - INFO ``nccl_tests.avg_busbw`` when the table has an "Avg bus bandwidth": it averages every
      size, small ones included, and is not the figure to compare with the line rate.
    """
    out: list[dict] = []
    subject = host or "host"
    trailers = parsed.get("avg_busbw_all") or []
    hosts = sorted({d["host"] for d in parsed.get("devices") or [] if d.get("host")})
    # runs one after another pasted together list every rank of the job in each header: not this
    if len(trailers) > 1 and len(hosts) <= 1:
        out.append(finding("nccl_tests.independent_runs", "FAIL", subject,
                           f"{len(trailers)} result summaries in one run (Avg bus bandwidth "
                           f"{', '.join(f'{t:g}' for t in trailers)} GB/s): each process ran a test of its own"
                           + (f" ({', '.join(hosts)})" if hosts else "") + ", so no figure crossed the network: "
                           "nccl-tests was built without MPI support and mpirun started independent copies",
                           "rebuild nccl-tests with MPI: make clean && make MPI=1 MPI_HOME=<your MPI>; one summary "
                           "per run is the check", host=host, summaries=trailers))
    if parsed.get("started") and not parsed["rows"] and not trailers and parsed.get("out_of_bounds") is None:
        buses = sorted({d["bus"] for d in parsed.get("devices") or []})
        roots = sorted({b >> 7 for b in buses})  # bus numbers 0x00-0x7f and 0x80-0xff: two root complexes
        hosts = {d["host"] for d in parsed.get("devices") or []}
        one_host = len(hosts) <= 1 and len(buses) > 1
        models = list(dict.fromkeys(re.sub(r"^NVIDIA ", "", d["gpu"]) for d in parsed.get("devices") or []
                                    if d.get("gpu")))
        where = ""
        if one_host and len(models) > 1:
            where = (f"; its GPUs are of different models ({', '.join(models)}): CUDA has no peer-to-peer between "
                     "them, so NCCL goes through host memory (SHM) and each GPU's PCIe link")
            fix = ("run on GPUs of one model; check each GPU's PCIe link (nvidia-smi -q | grep -A3 'Link Width') and "
                   "retry with NCCL_SHM_DISABLE=1 (NVIDIA/nccl-tests#131)")
        elif one_host:
            where = (f"; its {len(buses)} GPUs are on one host, on PCI buses {', '.join(f'0x{b:02x}' for b in buses)}"
                     + (" (two root complexes)" if len(roots) > 1 else "")
                     + ": peer-to-peer between them is blocked (PCIe ACS or the IOMMU)")
            fix = ("check ACS (lspci -vvv | grep -i acsctl: every flag '-') and the IOMMU (boot with iommu=pt or "
                   "intel_iommu=off); NCCL_P2P_DISABLE=1 only to confirm")
        else:
            fix = "rerun with NCCL_DEBUG=INFO and look at the last lines each rank printed"
        out.append(finding("nccl_tests.no_rows", "FAIL", subject,
                           "the test printed its header and no result row or summary: it hung at its first size (or "
                           "the output is cut short)" + where, fix, host=host, buses=buses, models=models))
    wrong = [{"size": r["size"], "out_of_place": r["out_of_place"]["wrong"], "in_place": r["in_place"]["wrong"]}
             for r in parsed["rows"] if (r["out_of_place"]["wrong"] or 0) > 0 or (r["in_place"]["wrong"] or 0) > 0]
    if wrong:
        detail = "; ".join(f"#wrong {w['out_of_place']} (out-of-place) and {w['in_place']} (in-place) at {w['size']} B"
                           for w in wrong)
        out.append(finding("nccl_tests.wrong_results", "FAIL", subject, f"data corruption: {detail}",
                           "find the faulty GPU/NIC/link: rerun per node and per pair, check dmesg for Xid and "
                           "PCIe/AER errors", host=host, wrong=wrong))
    if parsed.get("out_of_bounds"):
        out.append(finding("nccl_tests.out_of_bounds", "FAIL", subject,
                           f"{parsed['out_of_bounds']} out-of-bounds values", "treat as data corruption", host=host,
                           out_of_bounds=parsed["out_of_bounds"]))
    values = busbw_values(parsed)
    if line_rate_gbit_s and values:
        peak, line = max(values), line_rate_gbit_s / 8
        largest = max(r["size"] for r in parsed["rows"])
        share = peak / line
        details = {"peak_busbw_gbps": peak, "line_rate_gbps": line, "largest_size": largest}
        if share >= HEALTHY_SHARE and not wrong:
            out.append(finding("nccl_tests.healthy", "INFO", subject,
                               f"healthy: peak busbw {peak:g} GB/s reaches {share:.0%} of the {line:g} GB/s line rate",
                               "", host=host, **details))
        elif share < FAR_UNDER_SHARE:
            out.append(finding("nccl_tests.low_busbw", "WARN", subject,
                               f"peak busbw {peak:g} GB/s is far under the {line:g} GB/s line rate "
                               f"({share:.0%}; largest size {largest} B)",
                               "rerun up to large sizes (-e 8G); check which transport NCCL uses (NCCL_DEBUG=INFO)",
                               host=host, **details))
    if not line_rate_gbit_s and values:
        out.append(_peak_without_line_rate(parsed, max(values), host))
    if parsed.get("avg_busbw_gbps") is not None:
        out.append(finding("nccl_tests.avg_busbw", "INFO", subject,
                           f"Avg bus bandwidth {parsed['avg_busbw_gbps']:g} GB/s averages all sizes, small ones "
                           "included: it is not the figure to compare with the line rate; use the peak busbw of "
                           "large sizes", "", host=host, avg_busbw_gbps=parsed["avg_busbw_gbps"]))
    return out


def _peak_without_line_rate(parsed: dict, peak: float, host: str | None) -> dict:
    """INFO ``nccl_tests.peak_busbw``: the peak busbw (GB/s) set against COMMON_LINE_RATES."""
    largest = max(r["size"] for r in parsed["rows"])
    at = next(r["size"] for r in parsed["rows"]
              if peak in (r["out_of_place"]["busbw_gbps"], r["in_place"]["busbw_gbps"]))
    need = peak * 8
    details = {"peak_busbw_gbps": peak, "peak_size": at, "largest_size": largest, "needs_gbit_s": need}
    lead = f"peak busbw {peak:g} GB/s (at {at} B; largest size {largest} B)"
    slowest = COMMON_LINE_RATES[0][0]
    if peak < FAR_UNDER_SHARE * slowest / 8:
        message = (f"{lead} is far under even a {slowest} Gb/s link (~{slowest / 8:g} GB/s busbw); "
                   "busbw compares with the network's line rate when the run spans nodes")
        if largest < 1 << 26:
            message += f"; sizes up to {largest} B are too small to reach the peak"
    else:
        rate, combo = next(((r, c) for r, c in COMMON_LINE_RATES if r >= need), COMMON_LINE_RATES[-1])
        message = (f"{lead} needs about {need:.0f} Gb/s of network per node when the run spans nodes: "
                   f"{rate} Gb/s per node (e.g. {combo} NICs, {rate / 8:g} GB/s) would be {peak / (rate / 8):.0%} used")
        details["nearest_line_rate_gbit_s"] = rate
    return finding("nccl_tests.peak_busbw", "INFO", host or "host", message,
                   "give the nodes' line rate (ncclprep doctor --line-rate GBITS) to judge it", host=host, **details)
