"""summary.md: the run as a person reads it in a terminal (100 columns).

Order: the status line; every FAIL and HANG as a short block (check, host or link, message,
evidence as measured against expected, the fix); the WARNs the same way; a status grid
(rows: checks that named hosts, or groups of checks; columns: hosts); the SKIPs and PASSes
one line each; the busbw tables; the network matrices and the ports that were not open.
Tables are padded so that they line up as plain text too.

Pure Python, standard library only: ``ansible.module_utils.ncclprep.report.markdown``.
"""

from __future__ import annotations

import textwrap

from ansible.module_utils.ncclprep.report.common import (
    BAD,
    brief,
    counts,
    grid_rows,
    human_size,
    ordered,
)

#: Terminal width the summary is laid out for.
WIDTH = 100
#: Above this many hosts the status grid shows only the hosts with a problem.
GRID_MAX_HOSTS = 24
#: Above this many hosts a network matrix is shown as its worst directions instead.
MATRIX_MAX_HOSTS = 16
#: Worst directions listed per matrix when the matrix itself is too large.
WORST_DIRECTIONS = 10

#: The network matrices of the summary: key of checks.summarize_network, title, cell format,
#: and which end is worse ("high": larger is worse, "low": smaller is worse).
NETWORK_TABLES = (
    ("latency_p50_us", "TCP round trip p50 (us)", "{:.0f}", "high"),
    ("latency_p99_us", "TCP round trip p99 (us)", "{:.0f}", "high"),
    ("bandwidth_gbps", "One TCP stream (GB/s, GB = 1e9 bytes)", "{:.3g}", "low"),
    ("path_mtu_largest", "Largest packet with don't-fragment (B)", "{}", "low"),
)


def render_markdown(cluster: dict) -> str:
    """summary.md of a cluster dict (schema.build_cluster; version 1 dicts render too).

    Returns Markdown text ending in a newline; long values are shortened (common.brief), never
    dumped as JSON. Raises KeyError when ``status``, ``hosts`` or ``checks`` is missing.
    """
    checks = cluster["checks"]
    hosts = list(cluster["hosts"])
    n = counts(checks)
    lines = [f"# ncclprep preflight: {cluster['status']}", ""]
    lines += _wrap(f"Run {cluster.get('generated_at', '?')}, {len(hosts)} hosts: {brief(hosts, 300)}")
    lines += [f"Checks: {len(checks)}: " + ", ".join(f"{v} {s}" for s, v in n.items() if v), ""]
    bad = [c for c in ordered(checks) if c["status"] in BAD]
    warn = [c for c in checks if c["status"] == "WARN"]
    lines += [f"## Problems: {len(bad)} checks failed or hung" if bad else "## Problems: none", ""]
    for c in bad:
        lines += _block(c)
    if warn:
        lines += [f"## Warnings: {len(warn)}", ""]
        for c in warn:
            lines += _block(c)
    lines += _grid(checks, hosts)
    for status, title in (("SKIP", "Skipped"), ("PASS", "Passed")):
        rows = [c for c in checks if c["status"] == status]
        if rows:
            lines += [f"## {title}: {len(rows)}", ""]
            for c in rows:
                lines += _wrap(_cut(f"- {c['id']}: {c['message']}", 2 * WIDTH), indent="  ")
            lines.append("")
    lines += _collective_tables(cluster.get("collectives") or {})
    lines += _training_table(checks)
    lines += _tuning_section(cluster.get("tuning"))
    lines += _network_tables(cluster.get("network") or {}, hosts)
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def _block(c: dict) -> list[str]:
    """One problem: ``### STATUS id: hosts``, the message, then evidence and the fix."""
    head = f"### {c['status']} {c['id']}: "
    where = brief(c["hosts"], max(WIDTH - len(head), 20)) if c.get("hosts") else "the cluster"
    out = [head + where, ""]
    out += _wrap(c.get("message") or "(no message)") + [""]
    if c.get("measured") is not None:
        out += _wrap(f"- measured: {brief(c['measured'])}", indent="  ")
    if c.get("expected") is not None:
        out += _wrap(f"- expected: {brief(c['expected'])}", indent="  ")
    if c.get("remediation"):
        out += _wrap(f"- fix: {c['remediation']}", indent="  ")
    return out + [""]


def _wrap(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH, subsequent_indent=indent, break_long_words=True, break_on_hyphens=False) or [""]


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def table(header: list[str], rows: list[list[str]], right: set[int] | None = None) -> list[str]:
    """A Markdown table padded to line up as plain text; ``right``: indexes of right-aligned
    columns; ``|`` in a cell is escaped."""
    right = right or set()
    cells = [[str(x).replace("|", "\\|") for x in row] for row in [header, *rows]]
    widths = [max(3, *(len(row[i]) for row in cells)) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(x.rjust(w) if i in right else x.ljust(w)
                                 for i, (x, w) in enumerate(zip(row, widths, strict=True))) + " |"
    sep = "|" + "|".join("-" * (w + 1) + ":" if i in right else "-" * (w + 2) for i, w in enumerate(widths)) + "|"
    return [line(cells[0]), sep, *(line(r) for r in cells[1:])]


def _columns(hosts: list[str], first: int) -> tuple[list[str], list[str]]:
    """Column headers for ``hosts`` beside a first column ``first`` wide: the names when they
    fit in WIDTH, else numbers with a legend line."""
    if first + sum(max(len(h), 4) + 3 for h in hosts) + 2 <= WIDTH:
        return list(hosts), []
    legend = _wrap("columns: " + ", ".join(f"{i} = {h}" for i, h in enumerate(hosts, 1)), indent="  ")
    return [str(i) for i in range(1, len(hosts) + 1)], legend


def _grid(checks: list, hosts: list[str]) -> list[str]:
    """Status per host: rows from common.grid_rows, host columns in chunks that fit WIDTH."""
    if not checks or not hosts:
        return []
    rows = grid_rows(checks, hosts)
    shown = hosts
    note = []
    if len(hosts) > GRID_MAX_HOSTS:
        shown = [h for h in hosts if any(st[h] not in ("PASS", "SKIP") for _, st in rows)]
        note = [f"{len(hosts) - len(shown)} of {len(hosts)} hosts pass every check (not shown).", ""]
    out = ["## Status per host", "",
           *_wrap("Rows: a check that named hosts, or a group of checks (a problem in any of them, "
                  "else PASS where one passed); columns: hosts."), ""] + note
    if not shown:
        return out
    first = max(len(label) for label, _ in rows)
    per = max(1, (WIDTH - first - 4) // 7)
    for start in range(0, len(shown), per):
        part = shown[start:start + per]
        header, legend = _columns(part, first)
        out += table(["check", *header], [[label, *(st[h] for h in part)] for label, st in rows])
        out += legend + [""]
    return out


def _collective_tables(collectives: dict) -> list[str]:
    """busbw per size (rows) and op (columns), then each op at its largest size."""
    if not collectives:
        return []
    ops = list(collectives)
    sizes = sorted({r["size_bytes"] for rows in collectives.values() for r in rows})
    at = {(op, r["size_bytes"]): r for op, rows in collectives.items() for r in rows}
    out = ["## Collectives: busbw of the slowest rank (GB/s, GB = 1e9 bytes)", ""]
    out += table(["size", *ops], [[human_size(s), *(f"{at[(op, s)]['busbw_gbps']:.4g}" if (op, s) in at else ""
                                                      for op in ops)] for s in sizes],
                 right=set(range(len(ops) + 1)))
    out += ["", "At the largest size:", ""]
    rows = []
    for op, series in collectives.items():
        r = series[-1]
        rows.append([op, human_size(r["size_bytes"]), f"{r['time_us_max']:.1f}", f"{r['algbw_gbps']:.4g}",
                     f"{r['busbw_gbps']:.4g}", str(r.get("slowest_host") or ""), str(sum(x["wrong"] for x in series))])
    out += table(["op", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "slowest rank", "wrong"], rows,
                 right={1, 2, 3, 4, 6})
    return out + [""]


def _training_table(checks: list) -> list[str]:
    """The template training job's figures from check torchrun.smoke's measured (checks/smoke.py
    training_figures): global batch, step time, communication share, all-reduce bytes per step."""
    fig = next((c.get("measured") for c in checks if c["id"] == "torchrun.smoke"), None)
    if not isinstance(fig, dict) or fig.get("step_ms") is None:
        return []
    share = fig.get("comm_share")
    out = ["## Training job: the template through the launcher on every node", ""]
    out += table(["world size", "global batch", "step (ms, median)", "communication", "all-reduce (B/step)",
                  "slowest rank (ms)"],
                 [[str(fig.get("workers")), str(fig.get("global_batch")), f"{fig['step_ms']:.1f}",
                   "" if share is None else f"{share * 100:.0f}%", str(fig.get("allreduce_bytes_per_step")),
                   f"{fig.get('slowest_rank')} ({fig.get('slowest_step_ms', 0):.1f})"]],
                 right={0, 1, 2, 3, 4})
    out += ["", "Communication: the part of the synchronising backward spent waiting for all-reduce after the last "
                "gradient bucket was ready (not hidden behind computation).", ""]
    return out


def _tuning_section(tuning: dict | None) -> list[str]:
    """The Tuning section (cluster.json ``tuning``, tuning.report_section): the decision, then per
    variant its busbw per size (median of its runs, and their spread), the training step and the verdict."""
    if not tuning:
        return []
    out = [f"## Tuning: {tuning['decision']}", ""]
    out += _wrap(f"`ncclprep tune` of {tuning.get('generated_at')}: {tuning.get('op')} busbw against the inventory's "
                 f"settings, {tuning.get('runs_per_variant')} runs a variant, alternating; kept only when at least "
                 f"{(tuning.get('min_gain') or 0) * 100:g} % better at {tuning.get('target_bytes')} bytes, the "
                 f"{tuning.get('method')} above 1, and no size (nor the training step) more than "
                 f"{(tuning.get('max_loss') or 0) * 100:g} % worse.")
    out.append("")
    sizes = sorted({int(s) for v in tuning["variants"] for s in v["sizes"]})
    rows = []
    for v in tuning["variants"]:
        cells = [_cut(v["label"], 60)]
        for size in sizes:
            c = v["sizes"].get(str(size))
            cells.append("" if c is None else f"{c['median']:.3g} ({c['low']:.3g}-{c['high']:.3g})")
        cells.append("" if v.get("step_s") is None else f"{v['step_s'] * 1e3:.1f}")
        cells.append("" if v.get("ratio") is None else f"{(v['ratio'] - 1) * 100:+.1f} %")
        cells.append("" if not v.get("interval") else f"{v['interval'][0]:.3f}-{v['interval'][1]:.3f}")
        cells.append(str(v.get("verdict") or ""))
        rows.append(cells)
    out += table(["variant", *(f"{human_size(s)} GB/s" for s in sizes), "step (ms)", "gain", "interval", "verdict"],
                 rows, right=set(range(1, len(sizes) + 4)))
    out.append("")
    for v in tuning["variants"]:
        if v.get("why"):
            out += _wrap(f"- {v['label']}: {v['why']}", indent="  ")
    if tuning.get("written"):
        out += ["", f"Written to {tuning['written']}."]
    out.append("")
    return out


def _network_tables(network: dict, hosts: list[str]) -> list[str]:
    """One src x dst table per matrix (rows: sender, columns: receiver; blank: not measured),
    or its worst directions above MATRIX_MAX_HOSTS hosts; then the ports that were not open."""
    lines: list[str] = []
    for key, title, fmt, bad_end in NETWORK_TABLES:
        matrix = network.get(key) or {}
        if not matrix:
            continue
        if len(hosts) > MATRIX_MAX_HOSTS:
            cells = [(v, s, d) for s, row in matrix.items() for d, v in row.items()]
            cells.sort(key=lambda x: (-x[0] if bad_end == "high" else x[0], x[1], x[2]))
            lines += [f"## {title}: the {min(WORST_DIRECTIONS, len(cells))} worst of {len(cells)} directions", ""]
            lines += table(["from", "to", "value"], [[s, d, fmt.format(v)] for v, s, d in cells[:WORST_DIRECTIONS]],
                           right={2})
            lines.append("")
            continue
        first = max(len("from \\ to"), *(len(h) for h in hosts))
        header, legend = _columns(hosts, first)
        lines += [f"## {title}: rows send, columns receive", ""]
        lines += table(["from \\ to", *header],
                       [[src, *(fmt.format(matrix[src][dst]) if dst in matrix.get(src, {}) else "" for dst in hosts)]
                        for src in hosts], right=set(range(1, len(hosts) + 1)))
        lines += legend + [""]
    ports = network.get("ports") or {}
    closed = [(src, dst, port, v) for src, row in sorted(ports.items()) for dst, seen in sorted(row.items())
              for port, v in sorted(seen.items(), key=lambda kv: int(kv[0])) if v != "open"]
    if ports:
        probed = sorted({int(p) for row in ports.values() for seen in row.values() for p in seen})
        lines += [f"## Ports probed: {', '.join(map(str, probed))}", ""]
        lines += ([f"- {src} -> {dst}:{port} {v}" for src, dst, port, v in closed] if closed
                  else ["every port open between every pair measured"])
        lines.append("")
    return lines


def status_line(cluster: dict) -> str:
    """One line: ``FAIL: 1 HANG, 2 FAIL, 30 PASS on 3 hosts (20261130T221500Z)``."""
    n = counts(cluster["checks"])
    return (f"{cluster['status']}: " + ", ".join(f"{v} {s}" for s, v in n.items() if v)
            + f" on {len(cluster['hosts'])} hosts ({cluster.get('generated_at', '?')})")

