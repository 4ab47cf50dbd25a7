"""Two runs side by side: what failed anew, what was fixed, and figures that moved.

``compare_runs(old, new)`` takes two cluster dicts (load_run's, any readable schema version:
only ``status``, ``hosts``, ``checks``, ``collectives`` and ``network`` are read, the same in
versions 1 and 2) and returns a JSON-ready dict; ``render_compare_markdown`` and
``render_compare_json`` render it.

Pure Python, standard library only: ``ansible.module_utils.ncclprep.report.compare``.
"""

from __future__ import annotations

import json

from ansible.module_utils.ncclprep.report.common import BAD, human_size


def _by_id(cluster: dict) -> dict[str, dict]:
    return {c["id"]: c for c in cluster.get("checks") or []}


def _run(cluster: dict) -> dict:
    return {"generated_at": cluster.get("generated_at"), "status": cluster.get("status"),
            "schema_version": cluster.get("schema_version"), "hosts": len(cluster.get("hosts") or [])}


def _rel(old: float, new: float) -> float | None:
    return None if not old else (new - old) / old


def compare_runs(old: dict, new: dict, busbw_tol: float = 0.10, latency_tol: float = 0.25) -> dict:
    """What changed from run ``old`` to run ``new`` (cluster dicts).

    Tolerances are relative: a change counts when ``|new - old| / old`` exceeds it
    (``busbw_tol`` 0.10: busbw moved more than 10 %; ``latency_tol`` 0.25: a link's TCP round
    trip p50 moved more than 25 %). Returns::

        {"old": {generated_at, status, schema_version, hosts}, "new": {...},
         "new_failures": [{id, status, old_status, hosts, message}],  # FAIL/HANG now and not before
                        # (old_status None: no such check), or naming hosts/links it did not name
         "fixed": [{id, status, old_status, hosts, message}],  # FAIL/HANG before, now not (status the
                        # new one), or a still-bad check no longer naming these hosts/links
         "status_changes": [{id, old, new}],  # every check whose status differs (None: absent)
         "busbw_changes": [{op, size_bytes, old_gbps, new_gbps, change}],  # per op at the largest size
                        # both runs measured; change relative (-0.3: 30 % lower); GB/s, GB = 1e9 bytes
         "latency_changes": [{link, src, dst, old_us, new_us, change}],   # per direction, p50, microseconds
         "hosts_added": [...], "hosts_removed": [...],
         "regressed": bool}  # a new failure, a busbw drop or a latency rise beyond its tolerance

    Raises ValueError for a negative tolerance.
    """
    if busbw_tol < 0 or latency_tol < 0:
        raise ValueError(f"busbw_tol={busbw_tol}, latency_tol={latency_tol}: tolerances are fractions >= 0")
    a, b = _by_id(old), _by_id(new)
    new_failures, fixed, changes = [], [], []
    for cid in list(a) + [c for c in b if c not in a]:
        was, now = a.get(cid), b.get(cid)
        s_old, s_new = (was or {}).get("status"), (now or {}).get("status")
        if s_old != s_new:
            changes.append({"id": cid, "old": s_old, "new": s_new})
        names_old, names_new = set((was or {}).get("hosts") or []), set((now or {}).get("hosts") or [])
        if s_new in BAD:
            gained = sorted(names_new - names_old) if s_old in BAD else sorted(names_new)
            if s_old not in BAD or gained:
                new_failures.append({"id": cid, "status": s_new, "old_status": s_old, "hosts": gained,
                                     "message": now.get("message") or ""})
        if s_old in BAD and now is not None:
            gone = sorted(names_old - names_new) if s_new in BAD else sorted(names_old)
            if s_new not in BAD or gone:
                fixed.append({"id": cid, "status": s_new, "old_status": s_old, "hosts": gone,
                              "message": now.get("message") or ""})
    busbw = []
    old_coll, new_coll = old.get("collectives") or {}, new.get("collectives") or {}
    for op in [o for o in new_coll if o in old_coll]:
        ra = {r["size_bytes"]: r for r in old_coll[op]}
        rb = {r["size_bytes"]: r for r in new_coll[op]}
        common = sorted(set(ra) & set(rb))
        if not common:
            continue
        size = common[-1]
        x, y = ra[size]["busbw_gbps"], rb[size]["busbw_gbps"]
        rel = _rel(x, y)
        if rel is not None and abs(rel) > busbw_tol:
            busbw.append({"op": op, "size_bytes": size, "old_gbps": x, "new_gbps": y, "change": rel})
    latency = []
    pa = (old.get("network") or {}).get("latency_p50_us") or {}
    pb = (new.get("network") or {}).get("latency_p50_us") or {}
    for src in sorted(set(pa) & set(pb)):
        for dst in sorted(set(pa[src]) & set(pb[src])):
            rel = _rel(pa[src][dst], pb[src][dst])
            if rel is not None and abs(rel) > latency_tol:
                latency.append({"link": f"{src} -> {dst}", "src": src, "dst": dst, "old_us": pa[src][dst],
                                "new_us": pb[src][dst], "change": rel})
    hosts_old, hosts_new = list(old.get("hosts") or []), list(new.get("hosts") or [])
    return {
        "old": _run(old), "new": _run(new),
        "tolerances": {"busbw": busbw_tol, "latency": latency_tol},
        "new_failures": new_failures, "fixed": fixed, "status_changes": changes,
        "busbw_changes": busbw, "latency_changes": latency,
        "hosts_added": [h for h in hosts_new if h not in hosts_old],
        "hosts_removed": [h for h in hosts_old if h not in hosts_new],
        "regressed": bool(new_failures or any(c["change"] < 0 for c in busbw)
                          or any(c["change"] > 0 for c in latency)),
    }


def render_compare_json(diff: dict) -> str:
    """compare_runs' result as indented JSON text (sorted keys, newline at the end)."""
    return json.dumps(diff, indent=2, sort_keys=True) + "\n"


def _names(hosts: list[str]) -> str:
    return ", ".join(hosts) if hosts else "the cluster"


def render_compare_markdown(diff: dict) -> str:
    """compare_runs' result as Markdown: a headline, then one section per kind of change
    that has any (busbw and latency as tables of old, new and the change in %)."""
    o, n = diff["old"], diff["new"]
    lines = [f"# ncclprep: {o['generated_at']} ({o['status']}) -> {n['generated_at']} ({n['status']})", ""]
    verdict = "regressed" if diff["regressed"] else "no regression"
    tol = diff.get("tolerances") or {}
    lines += [f"{verdict}: {len(diff['new_failures'])} new failures, {len(diff['fixed'])} fixed, "
              f"{len(diff['busbw_changes'])} busbw and {len(diff['latency_changes'])} latency changes beyond "
              f"{tol.get('busbw', 0):.0%} / {tol.get('latency', 0):.0%}", ""]
    if diff["hosts_added"] or diff["hosts_removed"]:
        lines += ["## Hosts", ""]
        lines += [f"- added: {', '.join(diff['hosts_added'])}"] if diff["hosts_added"] else []
        lines += [f"- removed: {', '.join(diff['hosts_removed'])}"] if diff["hosts_removed"] else []
        lines.append("")
    if diff["new_failures"]:
        lines += ["## New failures", ""]
        lines += [f"- {f['status']} {f['id']} ({f['old_status'] or 'new check'} before): {_names(f['hosts'])}: "
                  f"{f['message']}" for f in diff["new_failures"]] + [""]
    if diff["fixed"]:
        lines += ["## Fixed", ""]
        lines += [f"- {f['id']} ({f['old_status']} -> {f['status']}): {_names(f['hosts'])}" for f in diff["fixed"]]
        lines.append("")
    other = [c for c in diff["status_changes"]
             if c["id"] not in {f["id"] for f in diff["new_failures"] + diff["fixed"]}]
    if other:
        lines += ["## Other status changes", ""]
        lines += [f"- {c['id']}: {c['old'] or 'absent'} -> {c['new'] or 'absent'}" for c in other] + [""]
    if diff["busbw_changes"]:
        lines += ["## busbw at the largest common size (GB/s, GB = 1e9 bytes)", "",
                  "| op | size | old | new | change |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {c['op']} | {human_size(c['size_bytes'])} | {c['old_gbps']:.4g} | {c['new_gbps']:.4g} | "
                  f"{c['change']:+.1%} |" for c in diff["busbw_changes"]] + [""]
    if diff["latency_changes"]:
        lines += ["## TCP round trip p50 (us)", "", "| link | old | new | change |", "|---|---:|---:|---:|"]
        lines += [f"| {c['link']} | {c['old_us']:.0f} | {c['new_us']:.0f} | {c['change']:+.1%} |"
                  for c in diff["latency_changes"]] + [""]
    while lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"
