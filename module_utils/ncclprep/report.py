"""Report files of a validate.yml run.

Layout under ``base``: ``<UTC timestamp>/cluster.json``, ``<ts>/hosts/<host>.json``,
``<ts>/summary.md`` and the symlink ``latest`` -> ``<ts>``. ``cluster.json`` holds
``schema_version``, ``status``, ``generated_at``, ``hosts``, ``checks`` (see
the checks package), ``network`` (the src -> dst matrices of checks.summarize_network)
and ``collectives`` (checks.summarize_collectives).
"""

from __future__ import annotations

import datetime
import json
import os

SCHEMA_VERSION = 1


def utc_stamp(now: datetime.datetime | None = None) -> str:
    """UTC timestamp used as the run folder name, e.g. ``20261130T221500Z``."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ")


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        value = json.dumps(value, sort_keys=True)
    return str(value).replace("|", "\\|").replace("\n", " ")[:160]


def render_markdown(cluster: dict) -> str:
    """Markdown summary: status line, checks table (problems first), collectives table."""
    checks = cluster["checks"]
    order = {"HANG": 0, "FAIL": 1, "WARN": 2, "SKIP": 3, "PASS": 4}
    counts = {s: sum(1 for c in checks if c["status"] == s) for s in order}
    lines = [
        f"# ncclprep preflight: {cluster['status']}",
        "",
        f"{cluster['generated_at']} - {len(cluster['hosts'])} hosts: {', '.join(cluster['hosts'])}",
        "",
        " ".join(f"{s} {n}" for s, n in counts.items() if n),
        "",
        "| status | check | hosts | measured | expected | message | remediation |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in sorted(checks, key=lambda c: (order[c["status"]], c["id"])):
        lines.append("| " + " | ".join(_cell(x) for x in (
            c["status"], c["id"], ", ".join(c["hosts"]), c["measured"], c["expected"],
            c["message"], c["remediation"])) + " |")
    lines += _network_tables(cluster.get("network") or {}, cluster["hosts"])
    if cluster.get("collectives"):
        lines += ["", "## Collectives (slowest rank; GB = 1e9 bytes)", "",
                  "| op | size (B) | time (us) | algbw (GB/s) | busbw (GB/s) | #wrong |",
                  "|---|---:|---:|---:|---:|---:|"]
        for op, rows in cluster["collectives"].items():
            for r in rows:
                lines.append(f"| {op} | {r['size_bytes']} | {r['time_us_max']:.1f} | "
                             f"{r['algbw_gbps']:.4g} | {r['busbw_gbps']:.4g} | {r['wrong']} |")
    return "\n".join(lines) + "\n"


#: The network matrices of the summary: key of checks.summarize_network, title, cell format.
NETWORK_TABLES = (
    ("latency_p50_us", "TCP round trip p50 (us)", "{:.0f}"),
    ("latency_p99_us", "TCP round trip p99 (us)", "{:.0f}"),
    ("bandwidth_gbps", "One TCP stream (GB/s, GB = 1e9 bytes)", "{:.3g}"),
    ("path_mtu_largest", "Largest packet with don't-fragment (B)", "{}"),
)


def _network_tables(network: dict, hosts: list[str]) -> list[str]:
    """One src x dst table per matrix (rows: sender, columns: receiver; blank: not measured),
    then the ports that were not open."""
    lines: list[str] = []
    for key, title, fmt in NETWORK_TABLES:
        matrix = network.get(key) or {}
        if not matrix:
            continue
        lines += ["", f"## {title}: rows send, columns receive", "",
                  "| from \\ to | " + " | ".join(hosts) + " |", "|---|" + "---:|" * len(hosts)]
        for src in hosts:
            cells = [fmt.format(matrix[src][dst]) if dst in matrix.get(src, {}) else "" for dst in hosts]
            lines.append(f"| {src} | " + " | ".join(cells) + " |")
    ports = network.get("ports") or {}
    closed = [(src, dst, port, v) for src, row in sorted(ports.items()) for dst, seen in sorted(row.items())
              for port, v in sorted(seen.items(), key=lambda kv: int(kv[0])) if v != "open"]
    if ports:
        probed = sorted({int(p) for row in ports.values() for seen in row.values() for p in seen})
        lines += ["", f"## Ports probed: {', '.join(map(str, probed))}", ""]
        lines += ([f"- {src} -> {dst}:{port} {v}" for src, dst, port, v in closed] if closed
                  else ["every port open between every pair measured"])
    return lines


def _write_json(path: str, data) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True, default=str)
        fh.write("\n")
    os.replace(tmp, path)


def write_reports(base: str, cluster: dict, host_records: dict, stamp: str | None = None) -> str:
    """Write one run's reports under ``base`` and point ``base/latest`` at it.

    ``host_records`` maps host -> whatever is known about it (facts, probe, smoke); each
    host file also lists the checks that name that host. Returns the run folder.
    Raises OSError when the folder cannot be written.
    """
    stamp = stamp or utc_stamp()
    run = os.path.join(base, stamp)
    os.makedirs(os.path.join(run, "hosts"), exist_ok=True)
    _write_json(os.path.join(run, "cluster.json"), cluster)
    for host in cluster["hosts"]:
        record = dict(host_records.get(host) or {})
        record["host"] = host
        record["checks"] = [c for c in cluster["checks"] if host in c["hosts"]]
        _write_json(os.path.join(run, "hosts", f"{host}.json"), record)
    with open(os.path.join(run, "summary.md"), "w", encoding="utf-8") as fh:
        fh.write(render_markdown(cluster))
    link = os.path.join(base, "latest")
    tmp = link + ".tmp"
    if os.path.lexists(tmp):
        os.remove(tmp)
    os.symlink(stamp, tmp)
    os.replace(tmp, link)
    return run
