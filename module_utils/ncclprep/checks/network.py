"""net.* (preflight's own checks): the network between nodes as the network probe measured it.

Each host's record ``net`` is its network probe's result (probes/net.py ``probe``): the
directions it measured as the sender, ``links`` rows ``{src, dst, phase, latency_us: {p50,
p99}, bandwidth_gbps, path_mtu: {mtu, ok, largest}, ports: {port: verdict}, hang, error}``,
and who was ``missing_hosts`` / ``gone_hosts``.

Links are named ``a -> b`` (one direction bad) or ``a <-> b`` (both). A node is named alone
when it is bad in every pairing it had (blame.classify): a throttled NIC slows every
direction it sends, so every pair it is in goes bad, while its peers each have good pairs.
Slow bandwidth is judged against the cluster's median (blame.slow_outliers). Ports: a port
bad from every node that probed it is the receiving node's (its firewall); bad from some
only, the links.

The probe's store can be reached by any process on a member node (review N4). A store some
node found tampered with (its ``store_state``) blames no node: net.run is a WARN naming no
host and the link checks are SKIP; a lost store blames no node by itself either.
"""

from __future__ import annotations

import statistics

from ansible.module_utils.ncclprep.model import Check, Context, HostRecord, make_check, retried_warning, verdict
from ansible.module_utils.ncclprep.probes.blame import classify, slow_bandwidth, slowest_per_direction

REMEDY = {
    "net.latency": "look for a congested or mis-routed path (tc qdisc, switch counters, a route via another NIC)",
    "net.bandwidth": "check the named node's NIC: link speed (ethtool), errors, a shaping qdisc (tc qdisc show), "
                     "its cable and switch port",
    "net.path_mtu": "set one MTU on every NIC and switch port of the data plane (nic_mtu_value); "
                    "the largest size that passes names the smallest hop",
    "net.ports": "let the cluster in on those ports (role firewall: firewall_rendezvous_ports and the cluster "
                 "CIDR rule), or free the port another process holds",
    "net.run": "bring the named host back (is it up, is its probe process stuck?) and re-run validate.yml",
}


def _rows(records: dict[str, HostRecord]) -> list[dict]:
    return [row for rec in records.values() for row in (((rec or {}).get("net") or {}).get("links") or [])]


def _link_names(bad: set[tuple[str, str]], pairs: list[tuple[str, str]]) -> list[str]:
    """``a -> b`` or ``a <-> b`` for each bad pair, from the bad directions."""
    out = []
    for a, b in pairs:
        ab, ba = (a, b) in bad, (b, a) in bad
        out.append(f"{a} <-> {b}" if ab and ba else (f"{a} -> {b}" if ab else f"{b} -> {a}"))
    return out


def _blame(tested: set[tuple[str, str]], bad: set[tuple[str, str]]) -> tuple[list[str], dict]:
    """The names to blame (nodes, then links) for bad directions among the tested ones."""
    found = classify(tested, bad)
    return found["nodes"] + _link_names(bad, found["links"]), found


def summarize_network(records: dict[str, HostRecord]) -> dict:
    """The matrices of the report: ``{latency_p50_us, latency_p99_us, bandwidth_gbps,
    path_mtu_largest, ports}``, each ``{src: {dst: value}}`` (ports: ``{src: {dst: {port:
    verdict}}}``); a direction measured twice keeps its worse figure. {} when nothing ran."""
    out: dict = {k: {} for k in ("latency_p50_us", "latency_p99_us", "bandwidth_gbps", "path_mtu_largest", "ports")}
    for row in _rows(records):
        src, dst = row["src"], row["dst"]
        lat = row.get("latency_us") or {}
        for key, value, worse in (("latency_p50_us", lat.get("p50"), max), ("latency_p99_us", lat.get("p99"), max),
                                  ("bandwidth_gbps", row.get("bandwidth_gbps"), min),
                                  ("path_mtu_largest", (row.get("path_mtu") or {}).get("largest"), min)):
            if value is not None:
                cell = out[key].setdefault(src, {})
                cell[dst] = worse(cell[dst], value) if dst in cell else value
        if row.get("ports"):
            out["ports"].setdefault(src, {}).setdefault(dst, {}).update(row["ports"])
    return out if any(out.values()) else {}


def check_network(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """net.run, net.latency, net.bandwidth, net.path_mtu, net.ports from every host's ``net``.

    ``records``: every host's record (also hosts without facts). ``ctx``: ``max_latency_us``
    (p50 limit, microseconds; None: none), ``slow_z`` / ``slow_ratio`` (the robust rule of
    blame.slow_outliers) and ``min_gbps`` (a bandwidth floor in GB/s, GB = 1e9 bytes; None:
    none). No net result anywhere: one net.run SKIP. A store some host found tampered with
    (``store_state`` ``"tampered"``): net.run WARN naming no host and the four others SKIP, not
    judged (``_check_tampered``). Returns the checks in that order.
    """
    nets = {h: (r or {}).get("net") for h, r in records.items()}
    nets = {h: n for h, n in nets.items() if n}
    if not nets:
        return [make_check("net.run", "SKIP", message="the network probe did not run")]
    rows = _rows(records)
    if "tampered" in store_states(nets).values():
        return _check_tampered(nets, rows)
    out = [_check_run(nets, rows)]
    # a direction to or from a node the probe lost (gone mid-run, never came) is net.run's: what it
    # measured once the node froze (a path-MTU search with no echo at all, a stream cut short) would
    # blame the link for the node (a paused node3 gave net.path_mtu FAIL [node2 -> node3])
    lost = {h for hosts in _lost(nets).values() for h in hosts}
    good = [r for r in rows if not r.get("hang") and not r.get("error") and r["src"] not in lost
            and r["dst"] not in lost]
    tested = {(r["src"], r["dst"]) for r in good}
    out.append(_check_latency(good, tested, ctx))
    out.append(_check_bandwidth(good, tested, ctx, link_speeds(records)))
    out.append(_check_path_mtu(good, tested))
    out.append(_check_ports(rows))
    return out


def store_states(nets: dict[str, dict]) -> dict[str, str]:
    """host -> the state in which its probe found the store on the first node (the network probe's
    ``store_state``: ``tampered``, ``lost``, ``unreached``), for the hosts whose probe found it
    failing. A result without one (a node that runs an older ncclprep: the job's preflight and
    the re-test run the installed one) is read from its ``store_error``."""
    return {h: n.get("store_state") or ("tampered" if "was tampered with" in n["store_error"] else "lost")
            for h, n in sorted(nets.items()) if n.get("store_error")}


def _lost(nets: dict[str, dict]) -> dict[str, list[str]]:
    """The hosts some node's probe lost: ``missing`` (never joined) and ``gone`` (left mid-run)."""
    return {"missing": sorted({h for n in nets.values() for h in n.get("missing_hosts") or []}),
            "gone": sorted({h for n in nets.values() for h in n.get("gone_hosts") or []})}


def _run_evidence(nets: dict[str, dict], rows: list[dict]) -> dict:
    """What the probes said about the run: ``missing``, ``gone`` (hosts), ``hung`` (directions),
    ``store`` (the store errors), ``store_state`` (``store_states``), ``killed`` (host -> the
    stage its probe was killed at: status HANG with an error, as ``deadline.outcome_fields``
    writes it)."""
    return {**_lost(nets),
            "hung": sorted(f"{r['src']} -> {r['dst']}" for r in rows if r.get("hang")),
            "store": sorted({n["store_error"] for n in nets.values() if n.get("store_error")}),
            "store_state": store_states(nets),
            "killed": {h: n.get("stage") for h, n in nets.items() if n.get("status") == "HANG" and n.get("error")}}


def _check_tampered(nets: dict[str, dict], rows: list[dict]) -> list[Check]:
    """A run whose store some host found tampered with (review N4): a host outside the run wrote a
    value or deleted one, so who arrived, who left and who hung (a node that stops on it breaks
    its peers' tests) is what that host made it. net.run WARN naming no host, with the evidence
    as the store showed it in ``measured``; net.latency, net.bandwidth, net.path_mtu, net.ports
    SKIP: their figures stay in the matrices (summarize_network), judged by no check."""
    seen = _run_evidence(nets, rows)
    first = next((n["hosts"][0] for n in nets.values() if n.get("hosts")), "the first node")
    by = {h: nets[h]["store_error"] for h, state in seen["store_state"].items() if state == "tampered"}
    shown = [f"{', '.join(seen['missing'])} never arrived" if seen["missing"] else "",
             f"{', '.join(seen['gone'])} stopped answering" if seen["gone"] else "",
             f"{', '.join(seen['hung'])} hung" if seen["hung"] else ""]
    shown = "; ".join(p for p in shown if p)
    message = (f"the store on {first} was tampered with: no node is blamed ("
               + "; ".join(f"{h}: {e}" for h, e in sorted(by.items()))[:400] + ")"
               + (f"; as the store showed it: {shown}" if shown else ""))
    run = make_check("net.run", "WARN", (), measured=seen, expected="every node takes part and answers, through a "
                     "store only this run's nodes write to", message=message,
                     remediation=f"a process outside the run reached the probe's store on {first} (its store_port) "
                                 "and wrote to it or deleted from it: find it (ss -tnp on that port), then re-run")
    skipped = [make_check(cid, "SKIP", measured={"store_state": seen["store_state"]},
                          message=f"not judged: the store on {first} was tampered with (net.run)")
               for cid in ("net.latency", "net.bandwidth", "net.path_mtu", "net.ports")]
    return [run] + skipped


def _check_run(nets: dict[str, dict], rows: list[dict]) -> Check:
    """HANG naming who never arrived, stopped answering or hung a test (classified like any bad
    link), as the first node decided it from the values it read (netprobe: a deleted key only
    delays, and its node then reports the store tampered with, ``check_network``); a probe
    killed at its deadline (``killed``: status HANG with an error, as
    ``deadline.outcome_fields`` writes it) is named when nothing above explains it. A lost store
    (``store_state`` ``lost`` or ``unreached``) blames no one by itself, neither its host nor
    those that lost it (review N4: a host outside the run can make the nodes lose it); with
    nothing above to name, it is a WARN naming no host. FAIL naming hosts whose probe raised;
    WARN naming the directions that passed only on a second try (rows' ``retried``, the first
    try's evidence); else PASS."""
    seen = _run_evidence(nets, rows)
    missing, gone, store, killed = seen["missing"], seen["gone"], seen["store"], seen["killed"]
    failed = {h: n.get("error") for h, n in nets.items() if n.get("status") == "FAIL"}
    hung = [r for r in rows if r.get("hang")]
    tested = {(r["src"], r["dst"]) for r in rows}
    # a direction to or from a node that left the run is that node's, not a link's
    unexplained = {(r["src"], r["dst"]) for r in hung} - {k for k in tested if set(k) & (set(missing) | set(gone))}
    hung_names = _blame(tested, unexplained)[0] if unexplained else []
    explained = set(missing) | set(gone) | set(hung_names)
    blame = explained | (set() if explained else set(killed))
    expected = "every node takes part and answers"
    if blame:
        parts = [f"{', '.join(missing)} never arrived" if missing else "",
                 f"{', '.join(gone)} stopped answering during the rounds" if gone else "",
                 "; ".join(sorted({f"{r['src']} -> {r['dst']}: {r['hang']}" for r in hung}))[:300],
                 store[0] if store else "",
                 "; ".join(f"{h}'s probe: {nets[h]['error']}" for h in sorted(killed))[:300]]
        return make_check("net.run", "HANG", blame, measured=seen, expected=expected,
                          message="; ".join(p for p in parts if p), remediation=REMEDY["net.run"])
    if failed:
        return make_check("net.run", "FAIL", failed, measured=failed, expected=expected,
                          message="; ".join(f"{h}: {e}" for h, e in sorted(failed.items()))[:400],
                          remediation="read the error; torch must import in torch_runtime's venv (run site.yml)")
    if store:
        first = next((n["hosts"][0] for n in nets.values() if n.get("hosts")), "the first node")
        return make_check("net.run", "WARN", (), measured=seen, expected=expected,
                          message=(f"the store on {first} was lost by {', '.join(seen['store_state'])}: no node is "
                                   f"blamed ({store[0]})")[:400],
                          remediation=f"re-run; if it comes back, look at {first}'s probe (stopped, killed?) and the "
                                      "path to its store_port")
    retried = {f"{r['src']} -> {r['dst']}": r["retried"] for r in rows if r.get("retried")}
    if retried:
        return retried_warning(
            "net.run", retried, expected="every test passes on its first try",
            summary=f"{len(retried)} of {len(tested)} directions passed only on a second try",
            remediation="a transient fault (a flapping link, a port that a rule or a process let go of mid-run): "
                        "re-run validate.yml; if it comes back, check that link's NIC and switch port")
    return make_check("net.run", "PASS", measured={"nodes": len(nets), "directions": len(tested)}, expected=expected,
                      message=f"{len(nets)} nodes measured {len(tested)} directions")


def _check_latency(rows: list[dict], tested: set, ctx: Context) -> Check:
    p50 = {(r["src"], r["dst"]): r["latency_us"]["p50"] for r in rows if r.get("latency_us")}
    p99 = {(r["src"], r["dst"]): r["latency_us"]["p99"] for r in rows if r.get("latency_us")}
    limit = ctx.max_latency_us
    if not p50:
        return make_check("net.latency", "SKIP", message="no latency was measured")
    bad = {k for k, v in p50.items() if limit is not None and v > limit}
    names, _ = _blame(tested, bad)
    med = statistics.median(p50.values())
    return verdict("net.latency", names,
                   measured={f"{a} -> {b}": {"p50": p50[(a, b)], "p99": p99[(a, b)]} for a, b in sorted(bad)}
                   | {"median_p50": med},
                   expected=f"p50 <= {limit:g} us" if limit is not None else "measured",
                   message=f"TCP round trip p50 above {limit} us on {', '.join(names)}: "
                           + ", ".join(f"{a} -> {b} {p50[(a, b)]:.0f} us" for a, b in sorted(bad))
                           + f" (median {med:.0f} us)",
                   remediation=REMEDY["net.latency"],
                   passed=f"TCP round trip p50 median {med:.0f} us, worst {max(p50.values()):.0f} us, "
                          f"worst p99 {max(p99.values()):.0f} us over {len(p50)} directions",
                   passed_measured={"median_p50": med, "max_p50": max(p50.values()), "max_p99": max(p99.values())})


def link_speeds(records: dict[str, HostRecord]) -> dict[str, float]:
    """host -> the data-plane link's speed in Gb/s as ethtool reports it (node_facts'
    ``hostinfo.link``, parsers/ethtool.py), for the hosts where it is known."""
    out = {}
    for host, rec in records.items():
        link = ((((rec or {}).get("facts") or {}).get("hostinfo") or {}).get("link") or {}).get("data") or {}
        if link.get("speed_mbps"):
            out[host] = link["speed_mbps"] / 1000
    return out


def link_floors(speeds: dict[str, float], ratio: float | None, directions) -> dict[tuple[str, str], float]:
    """Per direction, the floor of one TCP stream derived from the link speed: ``ratio`` x the
    slower end's speed (Gb/s) / 8, in GB/s; only where both ends' speeds are known (None: no
    floors). One stream rarely fills a fast link, hence a small ratio (default 0.1: below
    10 Gb/s on a 100 Gb/s link the link or its host is at fault, not TCP)."""
    if ratio is None:
        return {}
    return {(a, b): ratio * min(speeds[a], speeds[b]) / 8 for a, b in directions if a in speeds and b in speeds}


def _check_bandwidth(rows: list[dict], tested: set, ctx: Context, speeds: dict[str, float] | None = None) -> Check:
    """Slow nodes first (blame.slow_bandwidth's per-node rule), then the slow directions no
    slow node explains, and the directions below the floor their link speed gives
    (``link_floors``), classified into nodes and links like any bad pair."""
    rates = slowest_per_direction(rows)
    if not rates:
        return make_check("net.bandwidth", "SKIP", message="no bandwidth was measured")
    slow = slow_bandwidth(rates, z=ctx.slow_z, ratio=ctx.slow_ratio, floor=ctx.min_gbps)
    floors = link_floors(speeds or {}, ctx.link_floor_ratio, rates)
    for (a, b), floor in sorted(floors.items()):
        if rates[(a, b)] < floor and (a, b) not in slow["explained"] and (a, b) not in slow["links"]:
            slow["links"][(a, b)] = (f"{rates[(a, b)]:.3g} below {floor:.3g} ({ctx.link_floor_ratio:g} x the "
                                     f"{min(speeds[a], speeds[b]):g} Gb/s link)")
    link_names, found = _blame(tested, set(slow["links"]))
    names = sorted(set(slow["nodes"]) | set(found["nodes"])) + [n for n in link_names if n not in found["nodes"]]
    med = statistics.median(rates.values())
    detail = [f"{n} {why}" for n, why in sorted(slow["nodes"].items())]
    detail += [f"{a} -> {b} {why}" for (a, b), why in sorted(slow["links"].items())]
    node_rates = {f"{a} -> {b}": v for (a, b), v in sorted(rates.items()) if a in slow["nodes"] or b in slow["nodes"]}
    expected = f"not far below the median (modified z >= {ctx.slow_z:g} or >= {ctx.slow_ratio:g} x median)" + (
        f" and >= {ctx.min_gbps:g} GB/s" if ctx.min_gbps is not None else "") + (
        f" and >= {ctx.link_floor_ratio:g} x the link speed" if floors else "")
    return verdict("net.bandwidth", names,
                   measured={"median_gbps": med, "nodes": slow["nodes"], "node_directions": node_rates,
                             "links": {f"{a} -> {b}": rates[(a, b)] for a, b in sorted(slow["links"])}},
                   expected=expected,
                   message=f"slow TCP stream (GB/s) on {', '.join(names)}: {'; '.join(detail)} "
                           f"(median of all directions {med:.3g} GB/s)",
                   remediation=REMEDY["net.bandwidth"],
                   passed=f"one TCP stream: median {med:.3g} GB/s, slowest {min(rates.values()):.3g} GB/s "
                          f"over {len(rates)} directions",
                   passed_measured={"median_gbps": med, "min_gbps": min(rates.values())})


def _check_path_mtu(rows: list[dict], tested: set) -> Check:
    pm = {(r["src"], r["dst"]): r["path_mtu"] for r in rows if r.get("path_mtu")}
    if not pm:
        return make_check("net.path_mtu", "SKIP", message="no path MTU was measured (no MTU intended)")
    bad = {k for k, v in pm.items() if not v.get("ok")}
    names, _ = _blame(tested, bad)
    mtu = max(v["mtu"] for v in pm.values())
    return verdict("net.path_mtu", names,
                   measured={f"{a} -> {b}": {"largest": pm[(a, b)].get("largest")} for a, b in sorted(bad)},
                   expected=f"{mtu} B with don't-fragment on every path",
                   message=f"{mtu} B does not pass with don't-fragment on {', '.join(names)}: "
                           + ", ".join(f"{a} -> {b} largest {pm[(a, b)].get('largest')} B" for a, b in sorted(bad)),
                   remediation=REMEDY["net.path_mtu"],
                   passed=f"{mtu} B passes with don't-fragment on {len(pm)} directions", passed_measured=mtu)


def _check_ports(rows: list[dict]) -> Check:
    """A (dst, port) that is filtered, refused or unroutable from every source that probed it
    blames dst; from some sources only, the links. ``hang`` verdicts belong to net.run."""
    probed: dict[tuple[str, str], dict[str, str]] = {}
    for r in rows:
        for port, v in (r.get("ports") or {}).items():
            probed.setdefault((r["dst"], port), {})[r["src"]] = v
    if not probed:
        return make_check("net.ports", "SKIP", message="no port was probed")
    bad = {key: {s: v for s, v in seen.items() if v not in ("open", "hang")} for key, seen in probed.items()}
    bad = {key: seen for key, seen in bad.items() if seen}
    blame: set[str] = set()
    for (dst, _port), seen in bad.items():
        if len(seen) == len(probed[(dst, _port)]) and len(seen) >= 2:
            blame.add(dst)
        else:
            blame.update(f"{src} -> {dst}" for src in seen)
    measured = {}
    for (dst, port), seen in sorted(bad.items()):
        measured.setdefault(dst, {})[port] = seen
    ports = sorted({int(p) for _, p in probed})
    return verdict("net.ports", sorted(blame), measured=measured, expected="open from every peer",
                   message="; ".join(f"{dst}:{port} " + ", ".join(f"{v} from {s}" for s, v in sorted(seen.items()))
                                     for (dst, port), seen in sorted(bad.items()))[:400],
                   remediation=REMEDY["net.ports"],
                   passed=f"ports {', '.join(map(str, ports))} open between every pair measured",
                   passed_measured=ports)
