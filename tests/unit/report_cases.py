"""Runs for the report tests: host records shaped as the modules return them (the healthy
records of test_checks, net_probe rows of test_network_checks, nccl_probe rows at four sizes),
evaluated by the real checks into a cluster dict (report.build_cluster)."""

from __future__ import annotations

import copy

from ansible.module_utils.ncclprep.checks import evaluate
from ansible.module_utils.ncclprep.report import build_cluster
from test_checks import HOSTS, healthy
from test_network_checks import row

STAMP = "20261130T221500Z"
SIZES = [4096, 65536, 1048576, 16777216]
#: busbw (GB/s) per op and size of the healthy run; every rank's rows are these, node3's slowest
BUSBW = {"all_reduce": [0.003, 0.065, 0.52, 0.74], "all_gather": [0.0026, 0.0085, 0.093, 0.338]}
VERSIONS = {"torch": "2.13.0+cpu", "torch_nccl": "2.27.3", "driver": "570.86.10", "kernel": "6.8.0-45-generic",
            "python": "3.12.3", "cuda": None}


def _probe(rank: int, busbw: dict[str, list[float]]) -> dict:
    rows = []
    for op, values in busbw.items():
        for size, bw in zip(SIZES, values, strict=True):
            bw_rank = bw * (1 + 0.01 * (2 - rank))  # node3 (rank 2) is the slowest
            rows.append({"op": op, "size_bytes": size, "count": size // 4, "time_us": size / (bw_rank * 1e3),
                         "algbw_gbps": bw_rank * 0.75, "busbw_gbps": bw_rank, "wrong": 0})
    return {"status": "PASS", "rank": rank, "stage": "done", "hosts": list(HOSTS), "missing_hosts": [],
            "world_size": 3, "results": rows}


def make_records(*, somaxconn_node2: str | None = None, latency: dict | None = None, kernel_node3: str | None = None,
                 busbw_scale: dict[str, float] | None = None, hang_node3: bool = False) -> dict:
    """Three hosts that pass every check, unless a fault is given: node2's somaxconn value,
    p50 latency (us) per direction, node3's kernel, a factor on one op's busbw, node3's
    collective probe hanging with node3 never arriving."""
    records = healthy()
    latency = latency or {}
    scale = busbw_scale or {}
    busbw = {op: [v * scale.get(op, 1.0) for v in values] for op, values in BUSBW.items()}
    rows = [row(a, b, gbps=1.5, p50=latency.get((a, b), 40.0)) for a in HOSTS for b in HOSTS if a != b]
    for i, h in enumerate(HOSTS):
        rec = records[h]
        rec["facts"]["versions"] = dict(VERSIONS)
        rec["net"] = {"status": "PASS", "host": h, "hosts": list(HOSTS), "missing_hosts": [], "gone_hosts": [],
                      "store_error": None, "links": [r for r in rows if r["src"] == h]}
        rec["probe"] = _probe(i, busbw)
    if somaxconn_node2 is not None:
        records["node2"]["facts"]["sysctl_tuning"]["net.core.somaxconn"]["value"] = somaxconn_node2
    if kernel_node3 is not None:
        records["node3"]["facts"]["versions"]["kernel"] = kernel_node3
    if hang_node3:
        for h in HOSTS:
            records[h]["probe"] = {"status": "HANG", "rank": HOSTS.index(h), "stage": "rendezvous",
                                   "hosts": list(HOSTS), "missing_hosts": ["node3"], "results": []}
        records["node3"]["probe"] = None
    return records


def make_cluster(records: dict | None = None, stamp: str = STAMP, **faults) -> dict:
    """The cluster dict of a run of make_records(**faults) (or of the given records)."""
    records = copy.deepcopy(records) if records is not None else make_records(**faults)
    checks = evaluate(records, HOSTS, net_limits={"max_latency_us": 100})
    return build_cluster(checks, HOSTS, records, stamp,
                         limits={"min_busbw_gbps": None, "expect_net": None, "net_limits": {"max_latency_us": 100}})
