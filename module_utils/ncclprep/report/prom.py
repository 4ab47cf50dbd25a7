"""metrics.prom: the run as node_exporter textfile-collector metrics (Prometheus text format 0.0.4).

Every metric is a gauge in base units with the ``ncclprep_`` prefix (METRICS lists them with
their labels): seconds, bytes, bytes per second (busbw_gbps x 1e9). Status metrics are
state sets with only the present state written: ``ncclprep_check_status{check, host,
status} 1`` per check and cluster host (common.host_status), so ``ncclprep_check_status
{status="FAIL"} == 1`` selects the failing ones. Written atomically (atomic.write_atomic: a temp
file then rename) so the collector never reads half a file.

Pure Python, standard library only: ``ansible.module_utils.ncclprep.report.prom``.
"""

from __future__ import annotations

import math

from ansible.module_utils.ncclprep.report.common import counts, host_status
from ansible.module_utils.ncclprep.report.schema import stamp_seconds

#: name -> help text (every metric is a gauge).
METRICS = {
    "ncclprep_run_timestamp_seconds": "When the preflight run wrote its report (seconds since the epoch).",
    "ncclprep_run_status": "The run's status: 1 for the present one (PASS or FAIL).",
    "ncclprep_run_hosts": "Hosts the run was meant to cover.",
    "ncclprep_checks": "Checks of the run by status.",
    "ncclprep_check_status": "1 for each check and host at its present status (PASS, WARN, FAIL, SKIP, HANG).",
    "ncclprep_collective_busbw_bytes_per_second": "busbw of the slowest rank per collective and message size "
                                                  "(nccl-tests doc/PERFORMANCE.md).",
    "ncclprep_collective_algbw_bytes_per_second": "algbw of the slowest rank per collective and message size.",
    "ncclprep_collective_time_seconds": "Time of one collective on the slowest rank per message size.",
    "ncclprep_collective_wrong_elements": "Wrong result elements per collective and message size, summed over ranks.",
    "ncclprep_net_latency_p50_seconds": "TCP round trip p50 from src to dst.",
    "ncclprep_net_latency_p99_seconds": "TCP round trip p99 from src to dst.",
    "ncclprep_net_bandwidth_bytes_per_second": "One TCP stream from src to dst.",
    "ncclprep_net_path_mtu_bytes": "Largest packet from src to dst that passes with don't-fragment.",
    "ncclprep_net_port_open": "1 when the port of dst is open from src, 0 when it is not.",
    "ncclprep_version_info": "1 per host and component, labelled with its version (outlier: it differs from "
                             "the majority).",
}

_NET = (("latency_p50_us", "ncclprep_net_latency_p50_seconds", 1e-6),
        ("latency_p99_us", "ncclprep_net_latency_p99_seconds", 1e-6),
        ("bandwidth_gbps", "ncclprep_net_bandwidth_bytes_per_second", 1e9),
        ("path_mtu_largest", "ncclprep_net_path_mtu_bytes", 1))


def _label(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _value(v: float) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "+Inf" if v > 0 else "-Inf"
        return repr(v)
    return str(v)


def render_prom(cluster: dict) -> str:
    """metrics.prom of a cluster dict: ``# HELP`` and ``# TYPE <name> gauge`` then the samples
    of each metric of METRICS that has any. Raises KeyError when ``checks`` or ``hosts`` is missing."""
    samples: dict[str, list[tuple[dict, float]]] = {name: [] for name in METRICS}
    hosts = list(cluster["hosts"])
    ts = (cluster.get("run") or {}).get("timestamp_s") or stamp_seconds(cluster.get("generated_at") or "")
    if ts is not None:
        samples["ncclprep_run_timestamp_seconds"].append(({}, float(ts)))
    for s in ("PASS", "FAIL"):
        samples["ncclprep_run_status"].append(({"status": s}, int(cluster.get("status") == s)))
    samples["ncclprep_run_hosts"].append(({}, len(hosts)))
    for s, n in counts(cluster["checks"]).items():
        samples["ncclprep_checks"].append(({"status": s}, n))
    for check in cluster["checks"]:
        for host, status in host_status(check, hosts).items():
            samples["ncclprep_check_status"].append(({"check": check["id"], "host": host, "status": status}, 1))
    for op, rows in (cluster.get("collectives") or {}).items():
        for r in rows:
            lab = {"op": op, "size_bytes": r["size_bytes"]}
            samples["ncclprep_collective_busbw_bytes_per_second"].append((lab, r["busbw_gbps"] * 1e9))
            samples["ncclprep_collective_algbw_bytes_per_second"].append((lab, r["algbw_gbps"] * 1e9))
            samples["ncclprep_collective_time_seconds"].append((lab, r["time_us_max"] * 1e-6))
            samples["ncclprep_collective_wrong_elements"].append((lab, r["wrong"]))
    network = cluster.get("network") or {}
    for key, name, scale in _NET:
        for src, row in sorted((network.get(key) or {}).items()):
            for dst, v in sorted(row.items()):
                samples[name].append(({"src": src, "dst": dst}, v * scale))
    for src, row in sorted((network.get("ports") or {}).items()):
        for dst, seen in sorted(row.items()):
            for port, verdict in sorted(seen.items(), key=lambda kv: int(kv[0])):
                samples["ncclprep_net_port_open"].append(({"src": src, "dst": dst, "port": port},
                                                          int(verdict == "open")))
    versions = cluster.get("versions") or {}
    outliers = versions.get("outliers") or {}
    for host, row in sorted((versions.get("hosts") or {}).items()):
        for key, v in row.items():
            samples["ncclprep_version_info"].append(
                ({"host": host, "component": key, "version": "absent" if v is None else v,
                  "outlier": str(host in outliers.get(key, [])).lower()}, 1))
    out = []
    for name, rows in samples.items():
        if not rows:
            continue
        out += [f"# HELP {name} {METRICS[name]}", f"# TYPE {name} gauge"]
        for labels, v in rows:
            lab = ",".join(f'{k}="{_label(x)}"' for k, x in labels.items())
            out.append(f"{name}{{{lab}}} {_value(v)}" if lab else f"{name} {_value(v)}")
    return "\n".join(out) + "\n"

