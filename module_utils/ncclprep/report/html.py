"""report.html: one self-contained page (inline CSS and SVG, no JavaScript, no external URL)
that opens from disk.

Sections and the ids a test or a reader can find: ``summary``; ``failures`` (every FAIL and
HANG, then WARN: ``id="failure-<check id>"``, class ``status-<STATUS>``, with the evidence and
the fix); ``checks`` (every check per host, cells ``class="status-<STATUS>"``); ``hosts`` (what
the host records say of each host); ``versions`` (the versions table, outliers ``class="outlier"``);
``matrix-<key>`` for each network matrix (latency_p50_us, latency_p99_us, bandwidth_gbps,
path_mtu_largest, ports) as a heat map with its legend; ``plot-<op>``: busbw against the
message size for each collective (SVG, log2 x axis in bytes, y in GB/s, GB = 1e9 bytes, one
``polyline class="busbw"`` point per size).

The page is rendered by Jinja2 from TEMPLATE (a Python string: Ansible ships only .py files)
with autoescape on; every colour and coordinate is computed here, not in the template.
"""

from __future__ import annotations

import json
import math
import statistics

from ansible.module_utils.ncclprep.report.common import BAD, brief, counts, host_status, human_size, ordered
from jinja2 import Environment

#: Above this many hosts the checks grid shows only the hosts with a problem.
GRID_MAX_HOSTS = 256
#: Above this many hosts a matrix is shown as its worst directions.
MATRIX_MAX_HOSTS = 64
WORST_DIRECTIONS = 20

#: Matrices: key of checks.summarize_network, title, unit, cell format, colour rule.
MATRICES = (
    ("latency_p50_us", "TCP round trip p50", "us", "{:.0f}", "latency"),
    ("latency_p99_us", "TCP round trip p99", "us", "{:.0f}", "latency"),
    ("bandwidth_gbps", "One TCP stream", "GB/s", "{:.3g}", "bandwidth"),
    ("path_mtu_largest", "Largest packet with don't-fragment", "B", "{}", "mtu"),
)


def _colour(t: float) -> str:
    """Cell background for badness ``t`` in 0 (green) .. 1 (red)."""
    t = min(max(t, 0.0), 1.0)
    return f"background:hsl({120 * (1 - t):.0f},65%,78%)"


def _badness(rule: str, v: float, ref: float) -> float:
    """0 good .. 1 bad: latency against the median (2x the median: 1), bandwidth against the
    median (half the median, checks' slow_ratio default: 1), path MTU against the largest."""
    if rule == "latency":
        return (v / ref - 1) if ref else 0.0
    if rule == "bandwidth":
        return ((1 - v / ref) / 0.5) if ref else 0.0
    return 0.0 if v >= ref else 1.0


def _legend(rule: str, ref: float, unit: str) -> list[dict]:
    if rule == "latency":
        marks = ((0, f"<= median ({ref:.0f} {unit})"), (0.5, "1.5 x median"), (1, f">= 2 x median ({2 * ref:.0f})"))
    elif rule == "bandwidth":
        marks = ((0, f">= median ({ref:.3g} {unit})"), (0.5, "0.75 x median"), (1, f"<= 0.5 x median ({ref / 2:.3g})"))
    else:
        marks = ((0, f"the largest ({ref:g} {unit})"), (1, "smaller"))
    return [{"style": _colour(t), "label": label} for t, label in marks] + [{"style": "", "label": "not measured"}]


def _matrix(key: str, title: str, unit: str, fmt: str, rule: str, matrix: dict, hosts: list[str]) -> dict | None:
    values = [v for row in matrix.values() for v in row.values()]
    if not values:
        return None
    ref = max(values) if rule == "mtu" else statistics.median(values)
    out = {"id": f"matrix-{key}", "title": f"{title} ({unit})", "legend": _legend(rule, ref, unit)}
    if len(hosts) > MATRIX_MAX_HOSTS:
        cells = [(v, s, d) for s, row in matrix.items() for d, v in row.items()]
        cells.sort(key=lambda x: (-_badness(rule, x[0], ref), x[1], x[2]))
        out["worst"] = [{"src": s, "dst": d, "text": fmt.format(v), "style": _colour(_badness(rule, v, ref))}
                        for v, s, d in cells[:WORST_DIRECTIONS]]
        out["of"] = len(cells)
        return out
    out["hosts"] = hosts
    out["rows"] = [{"src": src, "cells": [
        {"text": fmt.format(matrix[src][dst]), "style": _colour(_badness(rule, matrix[src][dst], ref)),
         "title": f"{src} -> {dst}: {fmt.format(matrix[src][dst])} {unit}"}
        if dst in matrix.get(src, {}) else {"text": "", "style": "", "title": f"{src} -> {dst}: not measured"}
        for dst in hosts]} for src in hosts]
    return out


def _ports(ports: dict, hosts: list[str]) -> dict | None:
    if not ports:
        return None
    legend = [{"style": _colour(0), "label": "every port open"}, {"style": _colour(1), "label": "a port not open"},
              {"style": "", "label": "not probed"}]
    out = {"id": "matrix-ports", "title": "Ports (open / probed; the others named)", "legend": legend}

    def cell(seen: dict) -> tuple[str, float]:
        bad = [f"{p} {v}" for p, v in sorted(seen.items(), key=lambda kv: int(kv[0])) if v != "open"]
        return ("; ".join(bad) if bad else f"{len(seen)}/{len(seen)}"), float(bool(bad))
    if len(hosts) > MATRIX_MAX_HOSTS:
        rows = [(s, d, *cell(seen)) for s, row in sorted(ports.items()) for d, seen in sorted(row.items())]
        out["worst"] = [{"src": s, "dst": d, "text": t, "style": _colour(b)} for s, d, t, b in rows if b][
            :WORST_DIRECTIONS]
        out["of"] = len(rows)
        return out
    out["hosts"] = hosts
    out["rows"] = []
    for src in hosts:
        cells = []
        for dst in hosts:
            seen = (ports.get(src) or {}).get(dst)
            if seen:
                text, bad = cell(seen)
                cells.append({"text": text, "style": _colour(bad), "title": f"{src} -> {dst}: {text}"})
            else:
                cells.append({"text": "", "style": "", "title": f"{src} -> {dst}: not probed"})
        out["rows"].append({"src": src, "cells": cells})
    return out


def _nice(top: float) -> tuple[float, float]:
    """An axis maximum >= ``top`` and a tick step (1, 2 or 5 x 10^k, at most 5 ticks)."""
    if top <= 0:
        return 1.0, 0.2
    exp = math.floor(math.log10(top))
    for mult in (1, 2, 5, 10):
        step = mult * 10 ** (exp - 1) if mult < 10 else 10 ** exp
        if top / step <= 5:
            return math.ceil(top / step - 1e-9) * step, step
    step = 2 * 10 ** exp
    return math.ceil(top / step) * step, step


PLOT = {"width": 520, "height": 280, "left": 64, "right": 36, "top": 16, "bottom": 52}


def _plot(op: str, rows: list[dict], floor: float | None) -> dict:
    """One collective's busbw against the message size: SVG coordinates for the template."""
    w, h, left, top = PLOT["width"], PLOT["height"], PLOT["left"], PLOT["top"]
    pw, ph = w - left - PLOT["right"], h - top - PLOT["bottom"]
    sizes = [r["size_bytes"] for r in rows]
    lx = [math.log2(max(s, 1)) for s in sizes]
    lo, hi = min(lx), max(lx)
    ymax, step = _nice(max([r["busbw_gbps"] for r in rows] + [floor or 0]) * 1.05)

    def x(v: float) -> float:
        return left + (pw / 2 if hi == lo else (v - lo) / (hi - lo) * pw)

    def y(v: float) -> float:
        return top + ph - v / ymax * ph
    points = [{"x": round(x(lv), 1), "y": round(y(r["busbw_gbps"]), 1),
               "title": f"{op} {human_size(r['size_bytes'])} ({r['size_bytes']} B): busbw {r['busbw_gbps']:.4g} GB/s, "
                        f"algbw {r['algbw_gbps']:.4g} GB/s, {r['time_us_max']:.1f} us, slowest rank "
                        f"{r.get('slowest_host')}"} for lv, r in zip(lx, rows, strict=True)]
    every = max(1, math.ceil(len(sizes) / 8))
    xticks = [{"x": round(x(lv), 1), "label": human_size(s) if i % every == 0 else ""}
              for i, (lv, s) in enumerate(zip(lx, sizes, strict=True))]
    yticks = []
    v = 0.0
    while v <= ymax + 1e-9:
        yticks.append({"y": round(y(v), 1), "label": f"{v:.3g}"})
        v += step
    return {"id": f"plot-{op}", "op": op, "points": points,
            "polyline": " ".join(f"{p['x']},{p['y']}" for p in points), "xticks": xticks, "yticks": yticks,
            "floor": None if floor is None else {"y": round(y(floor), 1), "label": f"floor {floor:g} GB/s"},
            "x0": left, "x1": left + pw, "y0": top + ph, "y1": top, "width": w, "height": h,
            "xlabel_x": left + pw / 2, "xlabel_y": h - 10, "ylabel_x": 16, "ylabel_y": top + ph / 2}


#: Colours of the tuning plot's variants (the baseline first).
SERIES = ("#444444", "#1f5fbf", "#d9641f", "#2a9d3a", "#9b3fbf", "#bf1f4f", "#1f9dbf", "#8c6d1f")


def _tuning(tuning: dict | None) -> dict | None:
    """The Tuning section: each variant's busbw against size (its runs' median, a bar from the lowest
    to the highest run), and the rows of the decision table."""
    if not tuning or not tuning.get("variants"):
        return None
    w, h, left, top = PLOT["width"], PLOT["height"], PLOT["left"], PLOT["top"]
    pw, ph = w - left - PLOT["right"], h - top - PLOT["bottom"]
    sizes = sorted({int(k) for v in tuning["variants"] for k in v["sizes"]})
    rows = [{"label": v["label"], "verdict": v.get("verdict") or "", "why": v.get("why") or "",
             "keep": v.get("keep"), "step": "" if v.get("step_s") is None else f"{v['step_s'] * 1e3:.1f}",
             "gain": "" if v.get("ratio") is None else f"{(v['ratio'] - 1) * 100:+.1f} %",
             "interval": "" if not v.get("interval") else f"{v['interval'][0]:.3f}-{v['interval'][1]:.3f}",
             "cells": [("" if str(s) not in v["sizes"] else
                        f"{v['sizes'][str(s)]['median']:.3g} ({v['sizes'][str(s)]['low']:.3g}-"
                        f"{v['sizes'][str(s)]['high']:.3g})") for s in sizes]} for v in tuning["variants"]]
    out = {"decision": tuning.get("decision"), "method": tuning.get("method"), "op": tuning.get("op"),
           "written": tuning.get("written"), "sizes": [human_size(s) for s in sizes], "rows": rows, "series": []}
    if not sizes:
        return out
    lx = {s: math.log2(max(s, 1)) for s in sizes}
    lo, hi = min(lx.values()), max(lx.values())
    ymax, step = _nice(max(c["high"] for v in tuning["variants"] for c in v["sizes"].values()) * 1.05)

    def x(s: int, i: int) -> float:  # the variants side by side around each size
        base = left + (pw / 2 if hi == lo else (lx[s] - lo) / (hi - lo) * pw)
        return round(base + (i - (len(tuning["variants"]) - 1) / 2) * 4, 1)

    def y(v: float) -> float:
        return round(top + ph - v / ymax * ph, 1)
    for i, v in enumerate(tuning["variants"]):
        pts = [{"x": x(int(k), i), "y": y(c["median"]), "y_low": y(c["low"]), "y_high": y(c["high"]),
                "title": f"{v['label']}: {human_size(int(k))} busbw median {c['median']:.4g} GB/s, runs "
                         f"{c['low']:.4g}-{c['high']:.4g} ({c['runs']})"}
               for k, c in sorted(v["sizes"].items(), key=lambda kv: int(kv[0]))]
        out["series"].append({"label": v["label"], "colour": SERIES[i % len(SERIES)], "points": pts,
                              "polyline": " ".join(f"{p['x']},{p['y']}" for p in pts)})
    ticks, t = [], 0.0
    while t <= ymax + 1e-9:
        ticks.append({"y": y(t), "label": f"{t:.3g}"})
        t += step
    out["plot"] = {"width": w, "height": h, "x0": left, "x1": left + pw, "y0": top + ph, "y1": top, "yticks": ticks,
                   "xticks": [{"x": x(s, (len(tuning["variants"]) - 1) / 2), "label": human_size(s)} for s in sizes],
                   "xlabel_x": left + pw / 2, "xlabel_y": h - 10, "ylabel_x": 16, "ylabel_y": top + ph / 2}
    return out


def _hosts(cluster: dict, host_records: dict) -> list[dict]:
    bad_per_host = {h: 0 for h in cluster["hosts"]}
    for c in cluster["checks"]:
        for h, s in host_status(c, cluster["hosts"]).items():
            bad_per_host[h] += s in BAD
    out = []
    for h in cluster["hosts"]:
        rec = host_records.get(h) or {}
        facts = rec.get("facts") or {}
        dp = facts.get("data_plane") or {}
        link = (((facts.get("hostinfo") or {}).get("link") or {}).get("data")) or {}
        gpus = (facts.get("versions") or {}).get("gpus")
        out.append({"host": h, "facts": "yes" if facts else "no", "alive": "no" if rec.get("alive") is False else "yes",
                    "interface": dp.get("interface") or "", "address": dp.get("address") or "",
                    "mtu": dp.get("mtu") or "", "speed": (f"{link['speed_mbps'] / 1000:g}" if link.get("speed_mbps")
                                                          else ""),
                    "gpus": "" if gpus is None else gpus, "bad": bad_per_host[h],
                    "status": "FAIL" if bad_per_host[h] else "PASS"})
    return out


def _problem(c: dict) -> dict:
    return {"id": c["id"], "status": c["status"], "where": ", ".join(c.get("hosts") or []) or "the cluster",
            "message": c.get("message") or "", "measured": brief(c.get("measured"), 600),
            "expected": brief(c.get("expected"), 600), "fix": c.get("remediation") or "",
            "json": json.dumps({"measured": c.get("measured"), "expected": c.get("expected")}, indent=2,
                               sort_keys=True, default=str)}


def view(cluster: dict, host_records: dict | None = None) -> dict:
    """What TEMPLATE renders: plain data (text, colours, coordinates) from the cluster dict."""
    hosts = list(cluster["hosts"])
    checks = cluster["checks"]
    statuses = [(c, host_status(c, hosts)) for c in checks]
    shown, note = hosts, ""
    if len(hosts) > GRID_MAX_HOSTS:
        shown = [h for h in hosts if any(st[h] not in ("PASS", "SKIP") for _, st in statuses)]
        note = f"{len(hosts) - len(shown)} of {len(hosts)} hosts pass every check (not shown)."
    network = cluster.get("network") or {}
    matrices = [m for m in (_matrix(k, t, u, f, r, network.get(k) or {}, hosts) for k, t, u, f, r in MATRICES) if m]
    ports = _ports(network.get("ports") or {}, hosts)
    if ports:
        matrices.append(ports)
    floor = ((cluster.get("run") or {}).get("limits") or {}).get("min_busbw_gbps")
    versions = cluster.get("versions") or {}
    outliers = versions.get("outliers") or {}
    return {
        "status": cluster["status"], "generated_at": cluster.get("generated_at", ""), "hosts": hosts,
        "counts": [(s, n) for s, n in counts(checks).items() if n],
        "schema_version": cluster.get("schema_version"),
        "problems": [_problem(c) for c in ordered(checks) if c["status"] in BAD + ("WARN",)],
        "grid": {"hosts": shown, "note": note, "rows": [
            {"id": c["id"], "status": c["status"], "message": c.get("message") or "",
             "anchor": f"failure-{c['id']}" if c["status"] in BAD + ("WARN",) else "",
             "cells": [{"host": h, "status": st[h]} for h in shown]} for c, st in statuses]},
        "host_rows": _hosts(cluster, host_records or {}),
        "versions": {"columns": versions.get("keys") or [], "majority": versions.get("majority") or {},
                     "rows": [{"host": h, "cells": [{"value": "absent" if row.get(k) is None else row[k],
                                                     "outlier": h in outliers.get(k, []),
                                                     "majority": (versions.get("majority") or {}).get(k)}
                                                    for k in versions.get("keys") or []]}
                              for h, row in (versions.get("hosts") or {}).items()]},
        "matrices": matrices,
        "plots": [_plot(op, rows, floor) for op, rows in (cluster.get("collectives") or {}).items() if rows],
        "tuning": _tuning(cluster.get("tuning")),
    }


TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>ncclprep preflight {{ v.status }} {{ v.generated_at }}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { margin: 0 0 .3em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
td.num, td.heat { text-align: right; font-variant-numeric: tabular-nums; }
.status-PASS { background: #d9f2d9; } .status-WARN { background: #fff2b3; }
.status-FAIL { background: #f7c6c6; } .status-HANG { background: #e0b3ff; }
.status-SKIP { background: #eee; color: #666; }
.problem { border-left: 6px solid #c33; padding: .3em .8em; margin: .8em 0; background: #fafafa; }
.problem.status-WARN { border-color: #d9a400; } .problem.status-HANG { border-color: #83c; }
.problem dt { font-weight: bold; float: left; width: 6em; } .problem dd { margin-left: 6.5em; }
td.outlier { background: #f7c6c6; font-weight: bold; }
.legend span { display: inline-block; border: 1px solid #ccc; padding: 0 6px; margin-right: 4px; }
.badge { font-weight: bold; padding: 0 .4em; }
svg text { font-size: 11px; } svg .axis { stroke: #444; } svg .grid { stroke: #ddd; }
svg polyline.busbw { fill: none; stroke: #1f5fbf; stroke-width: 2; } svg circle { fill: #1f5fbf; }
svg line.floor { stroke: #c33; stroke-dasharray: 4 3; }
.plots { display: flex; flex-wrap: wrap; gap: 1em; }
</style>
</head>
<body>
<section id="summary">
<h1>ncclprep preflight: <span class="badge status-{{ v.status }}">{{ v.status }}</span></h1>
<p>Run {{ v.generated_at }} (report schema {{ v.schema_version }}), {{ v.hosts | length }} hosts.
Checks: {% for s, n in v.counts %}<span class="badge status-{{ s }}">{{ n }} {{ s }}</span> {% endfor %}</p>
</section>

<section id="failures">
<h2>Problems</h2>
{% if not v.problems %}<p>No check failed, hung or warned.</p>{% endif %}
{% for p in v.problems %}
<div class="problem status-{{ p.status }}" id="failure-{{ p.id }}">
<h3>{{ p.status }} {{ p.id }}: {{ p.where }}</h3>
<p>{{ p.message }}</p>
<dl><dt>measured</dt><dd>{{ p.measured }}</dd><dt>expected</dt><dd>{{ p.expected }}</dd>
<dt>fix</dt><dd>{{ p.fix }}</dd></dl>
<details><summary>measured and expected as recorded</summary><pre>{{ p.json }}</pre></details>
</div>
{% endfor %}
</section>

<section>
<h2>Every check per host</h2>
{% if v.grid.note %}<p>{{ v.grid.note }}</p>{% endif %}
<table id="checks">
<thead><tr><th>check</th><th>status</th>{% for h in v.grid.hosts %}<th>{{ h }}</th>{% endfor %}</tr></thead>
<tbody>
{% for r in v.grid.rows %}
<tr data-check="{{ r.id }}"><th title="{{ r.message }}">
{%- if r.anchor %}<a href="#{{ r.anchor }}">{{ r.id }}</a>{% else %}{{ r.id }}{% endif %}</th>
<td class="status-{{ r.status }}">{{ r.status }}</td>
{% for c in r.cells %}<td class="status-{{ c.status }}" data-host="{{ c.host }}">{{ c.status }}</td>{% endfor %}
</tr>
{% endfor %}
</tbody>
</table>
</section>

<section>
<h2>Hosts</h2>
<table id="hosts">
<thead><tr><th>host</th><th>facts</th><th>alive</th><th>data plane</th><th>address</th><th>MTU (B)</th>
<th>link (Gb/s)</th><th>GPUs</th><th>checks failed</th></tr></thead>
<tbody>
{% for r in v.host_rows %}
<tr><th>{{ r.host }}</th><td>{{ r.facts }}</td><td>{{ r.alive }}</td><td>{{ r.interface }}</td><td>{{ r.address }}</td>
<td class="num">{{ r.mtu }}</td><td class="num">{{ r.speed }}</td><td class="num">{{ r.gpus }}</td>
<td class="num status-{{ r.status }}">{{ r.bad }}</td></tr>
{% endfor %}
</tbody>
</table>
</section>

<section>
<h2>Versions</h2>
{% if v.versions.columns %}
<table id="versions">
<thead><tr><th>host</th>{% for k in v.versions.columns %}<th>{{ k }}</th>{% endfor %}</tr>
<tr><th>majority</th>{% for k in v.versions.columns %}
<td>{{ v.versions.majority[k] if v.versions.majority[k] is not none else 'absent' }}</td>{% endfor %}</tr></thead>
<tbody>
{% for r in v.versions.rows %}
<tr><th>{{ r.host }}</th>{% for c in r.cells %}
<td{% if c.outlier %} class="outlier" title="the majority has {{ c.majority if c.majority is not none else 'none' }}"
{%- endif %}>{{ c.value }}</td>{% endfor %}</tr>
{% endfor %}
</tbody>
</table>
<p>Outliers (a value that differs from the majority) are marked.</p>
{% else %}<p id="versions">No host reported versions.</p>{% endif %}
</section>

<section>
<h2>Network</h2>
{% if not v.matrices %}<p>The network probe did not run.</p>{% endif %}
{% for m in v.matrices %}
<h3>{{ m.title }}</h3>
{% if m.worst is defined %}
<p>The {{ m.worst | length }} worst of {{ m.of }} directions:</p>
<table id="{{ m.id }}" class="worst"><thead><tr><th>from</th><th>to</th><th>value</th></tr></thead><tbody>
{% for c in m.worst %}
<tr><td>{{ c.src }}</td><td>{{ c.dst }}</td><td class="heat" style="{{ c.style }}">{{ c.text }}</td></tr>
{% endfor %}</tbody></table>
{% else %}
<table id="{{ m.id }}" class="heatmap">
<thead><tr><th>from \\ to</th>{% for h in m.hosts %}<th>{{ h }}</th>{% endfor %}</tr></thead>
<tbody>
{% for r in m.rows %}
<tr><th>{{ r.src }}</th>{% for c in r.cells %}
<td class="heat" style="{{ c.style }}" title="{{ c.title }}">{{ c.text }}</td>{% endfor %}</tr>
{% endfor %}
</tbody>
</table>
{% endif %}
<p class="legend">{% for l in m.legend %}<span style="{{ l.style }}">{{ l.label }}</span>{% endfor %}</p>
{% endfor %}
</section>

<section>
<h2>Collectives: busbw against message size</h2>
{% if not v.plots %}<p>No collective ran.</p>{% endif %}
<div class="plots">
{% for p in v.plots %}
<figure>
<svg id="{{ p.id }}" class="plot" width="{{ p.width }}" height="{{ p.height }}"
 viewBox="0 0 {{ p.width }} {{ p.height }}" role="img" aria-label="{{ p.op }} busbw against message size">
<title>{{ p.op }}: busbw (GB/s) against message size (bytes)</title>
{% for t in p.yticks %}
<line class="grid" x1="{{ p.x0 }}" x2="{{ p.x1 }}" y1="{{ t.y }}" y2="{{ t.y }}"/>
<text x="{{ p.x0 - 6 }}" y="{{ t.y + 4 }}" text-anchor="end">{{ t.label }}</text>
{% endfor %}
{% for t in p.xticks %}
<line class="axis" x1="{{ t.x }}" x2="{{ t.x }}" y1="{{ p.y0 }}" y2="{{ p.y0 + 4 }}"/>
<text x="{{ t.x }}" y="{{ p.y0 + 16 }}" text-anchor="middle">{{ t.label }}</text>
{% endfor %}
<line class="axis" x1="{{ p.x0 }}" x2="{{ p.x1 }}" y1="{{ p.y0 }}" y2="{{ p.y0 }}"/>
<line class="axis" x1="{{ p.x0 }}" x2="{{ p.x0 }}" y1="{{ p.y0 }}" y2="{{ p.y1 }}"/>
{% if p.floor %}
<line class="floor" x1="{{ p.x0 }}" x2="{{ p.x1 }}" y1="{{ p.floor.y }}" y2="{{ p.floor.y }}"/>
<text x="{{ p.x1 }}" y="{{ p.floor.y - 4 }}" text-anchor="end">{{ p.floor.label }}</text>
{% endif %}
<polyline class="busbw" data-op="{{ p.op }}" points="{{ p.polyline }}"/>
{% for pt in p.points %}<circle cx="{{ pt.x }}" cy="{{ pt.y }}" r="3"><title>{{ pt.title }}</title></circle>
{% endfor %}
<text x="{{ p.xlabel_x }}" y="{{ p.xlabel_y }}" text-anchor="middle">message size (bytes, log2 scale)</text>
<text x="{{ p.ylabel_x }}" y="{{ p.ylabel_y }}" text-anchor="middle"
 transform="rotate(-90 {{ p.ylabel_x }} {{ p.ylabel_y }})">busbw (GB/s)</text>
</svg>
<figcaption>{{ p.op }}: busbw of the slowest rank (GB = 1e9 bytes)</figcaption>
</figure>
{% endfor %}
</div>
</section>
{% if v.tuning %}
{% set t = v.tuning %}
<section id="tuning">
<h2>Tuning: {{ t.decision }}</h2>
<p>{{ t.op }} busbw of each variant against the inventory's settings: the median of its runs, the bar
from the lowest to the highest run. Decision rule: {{ t.method }}.</p>
{% if t.plot %}
{% set p = t.plot %}
<figure>
<svg id="plot-tuning" class="plot" width="{{ p.width }}" height="{{ p.height }}"
 viewBox="0 0 {{ p.width }} {{ p.height }}" role="img" aria-label="busbw of each tuning variant against message size">
<title>{{ t.op }}: busbw (GB/s) of each variant against message size (bytes)</title>
{% for tk in p.yticks %}
<line class="grid" x1="{{ p.x0 }}" x2="{{ p.x1 }}" y1="{{ tk.y }}" y2="{{ tk.y }}"/>
<text x="{{ p.x0 - 6 }}" y="{{ tk.y + 4 }}" text-anchor="end">{{ tk.label }}</text>
{% endfor %}
{% for tk in p.xticks %}
<text x="{{ tk.x }}" y="{{ p.y0 + 16 }}" text-anchor="middle">{{ tk.label }}</text>
{% endfor %}
<line class="axis" x1="{{ p.x0 }}" x2="{{ p.x1 }}" y1="{{ p.y0 }}" y2="{{ p.y0 }}"/>
<line class="axis" x1="{{ p.x0 }}" x2="{{ p.x0 }}" y1="{{ p.y0 }}" y2="{{ p.y1 }}"/>
{% for se in t.series %}
<polyline fill="none" stroke="{{ se.colour }}" stroke-width="2" data-variant="{{ se.label }}"
 points="{{ se.polyline }}"/>
{% for pt in se.points %}
<line stroke="{{ se.colour }}" x1="{{ pt.x }}" x2="{{ pt.x }}" y1="{{ pt.y_low }}" y2="{{ pt.y_high }}"/>
<circle style="fill: {{ se.colour }}" cx="{{ pt.x }}" cy="{{ pt.y }}" r="3"><title>{{ pt.title }}</title></circle>
{% endfor %}
{% endfor %}
<text x="{{ p.xlabel_x }}" y="{{ p.xlabel_y }}" text-anchor="middle">message size (bytes, log2 scale)</text>
<text x="{{ p.ylabel_x }}" y="{{ p.ylabel_y }}" text-anchor="middle"
 transform="rotate(-90 {{ p.ylabel_x }} {{ p.ylabel_y }})">busbw (GB/s)</text>
</svg>
<figcaption>{% for se in t.series %}<span style="color: {{ se.colour }}">&#9632; {{ se.label }}</span>
{% endfor %}</figcaption>
</figure>
{% endif %}
<table>
<tr><th>variant</th>{% for s in t.sizes %}<th>{{ s }} GB/s</th>{% endfor %}<th>step (ms)</th><th>gain</th>
<th>interval</th><th>verdict</th><th>why</th></tr>
{% for r in t.rows %}
<tr{% if r.keep %} class="status-PASS"{% endif %}><td>{{ r.label }}</td>
{% for c in r.cells %}<td class="num">{{ c }}</td>{% endfor %}
<td class="num">{{ r.step }}</td><td class="num">{{ r.gain }}</td><td class="num">{{ r.interval }}</td>
<td>{{ r.verdict }}</td><td>{{ r.why }}</td></tr>
{% endfor %}
</table>
{% if t.written %}<p>Written to {{ t.written }}.</p>{% endif %}
</section>
{% endif %}
</body>
</html>
"""

_ENV = Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True)


def render_html(cluster: dict, host_records: dict | None = None) -> str:
    """report.html of a cluster dict and (optionally) its host records (host -> HostRecord or
    hosts/<host>.json content; they fill the hosts table). Returns the page as text.
    Raises KeyError when ``status``, ``hosts`` or ``checks`` is missing."""
    return _ENV.from_string(TEMPLATE).render(v=view(cluster, host_records))
