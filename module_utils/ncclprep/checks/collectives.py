"""collective.run and collective.<op> (preflight's own checks): the collectives' results."""

from __future__ import annotations

from ansible.module_utils.ncclprep.checks.explain import explain
from ansible.module_utils.ncclprep.model import (
    Check,
    Context,
    HostRecord,
    majority,
    make_check,
    verdict,
)
from ansible.module_utils.ncclprep.parsers.torch_dist import waited_on_peer
from ansible.module_utils.ncclprep.probes.collectives import summarize_collectives


def check_collectives(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """Collectives ran on every rank, gave correct results, and (optionally) reached a busbw floor.

    ``records``: every host's record, also those without facts; record ``probe``: the
    collectives' result (probes/job.py host_collectives) {status (PASS, FAIL, HANG, SKIP), hosts (the ranks), stage,
    missing_hosts, error, results}. The ranks are the hosts the probe was started with.
    collective.run: HANG naming the ranks that never arrived (or the hung hosts); FAIL with
    the probe error, explained when it is a known torch.distributed failure, naming the ranks
    that failed on their own (not those that only waited for them, parsers/torch_dist.py
    ``waited_on_peer``); SKIP when
    nothing ran. Otherwise one collective.<op> per op: SKIP with the reason the worker gave,
    FAIL naming the hosts with wrong elements, FAIL naming the slowest rank when busbw at the
    largest size is below ``ctx.min_busbw_gbps`` (GB/s), else PASS measuring the largest size.
    """
    all_hosts = list(ctx.all_hosts)
    min_busbw_gbps = ctx.min_busbw_gbps
    probes = {h: (records.get(h) or {}).get("probe") for h in all_hosts}
    probes = {h: p for h, p in probes.items() if not (p and p.get("status") == "SKIP")} or {h: None for h in all_hosts}
    # The ranks are the hosts the probe was started with; a host that was already gone is
    # not a rank (host.reachable names it) and must not turn into a made-up HANG.
    ranks = sorted({h for p in probes.values() if p for h in p.get("hosts", [])}) or list(all_hosts)
    probes = {h: probes.get(h) for h in ranks}
    absent = sorted(h for h, p in probes.items() if not p)
    hung = {h: p for h, p in probes.items() if p and p.get("status") == "HANG"}
    failed = {h: p for h, p in probes.items() if p and p.get("status") == "FAIL"}
    if hung or (absent and len(absent) < len(ranks)):
        missing = sorted({m for p in hung.values() for m in p.get("missing_hosts", [])} | set(absent))
        stages = sorted({f"{p.get('stage')}" for p in hung.values()})
        blame = missing or sorted(hung)
        return [make_check("collective.run", "HANG", blame,
                           measured={h: (p or {}).get("stage", "no result") for h, p in probes.items()},
                           expected="every rank completes",
                           message=(f"ranks on {', '.join(missing)} never arrived; " if missing else "")
                                   + f"stuck at {', '.join(stages) or 'start'}",
                           remediation="check that the host is up, the rendezvous/ephemeral ports are open "
                                       "between nodes and NCCL/GLOO_SOCKET_IFNAME names the data-plane NIC")]
    if absent:
        return [make_check("collective.run", "SKIP", message="no probe results (nothing ran)")]
    if failed and not any(p.get("results") for p in failed.values()):
        errors = "; ".join(f"{h}: {p.get('error')}" for h, p in sorted(failed.items()))
        # the ranks that failed on their own, not those that only waited for them
        cause = {h: p for h, p in failed.items() if not waited_on_peer(p.get("error"))} or failed
        waited = sorted(set(failed) - set(cause))
        known = [(h, explain(p.get("error"), h)) for h, p in sorted(cause.items())]
        known = [(h, f) for h, f in known if f]
        message = ("; ".join(f"{h}: {f['message']}" for h, f in known) if known else
                   "; ".join(f"{h}: {p.get('error')}" for h, p in sorted(cause.items()))[:400])
        if waited:
            message += f" ({', '.join(waited)} only waited for {'it' if len(cause) == 1 else 'them'})"
        return [make_check("collective.run", "FAIL", sorted(cause), measured=errors,
                           expected="every rank completes", message=message,
                           remediation=(known[0][1]["remediation"] if known else
                                        "read the error; run with NCCL_DEBUG=INFO for the transport log"))]
    out = []
    skipped = sorted({(r["op"], r["skipped"]) for p in probes.values() for r in (p or {}).get("results", [])
                      if "skipped" in r})
    for op, why in skipped:
        out.append(make_check(f"collective.{op}", "SKIP", message=f"{op}: {why}"))
    summary = summarize_collectives(records)
    # one rank per host, or the hosts' local ranks together (the collectives' world_size)
    world = max([(p or {}).get("world_size") or 0 for p in probes.values()] + [len(ranks)])
    for op, rows in summary.items():
        wrong_hosts = sorted(h for h, p in probes.items()
                             for r in (p or {}).get("results", []) if r.get("op") == op and r.get("wrong"))
        largest = rows[-1]
        measured = {"size_bytes": largest["size_bytes"], "busbw_gbps": largest["busbw_gbps"],
                    "algbw_gbps": largest["algbw_gbps"], "time_us": largest["time_us_max"],
                    "world_size": world}
        if wrong_hosts:
            total = sum(r["wrong"] for r in rows)
            out.append(make_check(f"collective.{op}", "FAIL", wrong_hosts, measured=dict(measured, wrong=total),
                                  expected="0 wrong elements",
                                  message=f"{op}: {total} wrong elements, seen on {', '.join(wrong_hosts)}",
                                  remediation="data corruption: check GPU/NIC health (dmesg, ECC) on those hosts"))
        elif min_busbw_gbps is not None and largest["busbw_gbps"] < min_busbw_gbps:
            out.append(make_check(f"collective.{op}", "FAIL", [largest["slowest_host"]], measured=measured,
                                  expected=f">= {min_busbw_gbps} GB/s busbw",
                                  message=f"{op} busbw {largest['busbw_gbps']:.3g} GB/s at "
                                          f"{largest['size_bytes']} B, below {min_busbw_gbps} GB/s "
                                          f"(slowest rank on {largest['slowest_host']})",
                                  remediation="check link speed, MTU and NCCL transport on the slowest host"))
        else:
            out.append(make_check(f"collective.{op}", "PASS", measured=measured,
                                  expected=(f">= {min_busbw_gbps} GB/s busbw" if min_busbw_gbps else "correct"),
                                  message=f"{op} correct on {world} ranks; busbw {largest['busbw_gbps']:.3g} GB/s "
                                          f"at {largest['size_bytes']} B"))
    return out


def check_transport(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """collective.transport: what NCCL used, from each rank's NCCL_DEBUG=INFO log (probe ``nccl_log``,
    parsers/nccl_log.nccl_path), held against the intent.

    FAIL naming the hosts whose NCCL version differs from the majority (ranks of one job must
    run one NCCL), or whose network differs from ``ctx.expect_net`` (``ib``: NCCL fell back to
    sockets there; ``socket``; None: not held). PASS measures version, network, GPUDirect RDMA
    and the transports. Under Gloo (no ``nccl_log``): the address Gloo bound (probe
    ``gloo_bind``) against the host's data-plane address: FAIL naming hosts where it bound
    another (a host name resolving to 127.0.1.1, a GLOO_SOCKET_IFNAME of another network);
    SKIP where neither is known. No probe results: no check.
    """
    probes = {h: (r or {}).get("probe") for h, r in records.items()}
    probes = {h: p for h, p in probes.items() if p and p.get("status") in ("PASS", "FAIL")}
    if not probes:
        return []
    logs = {h: p["nccl_log"] for h, p in probes.items() if p.get("nccl_log")}
    if not logs:
        return [_gloo_transport(records, probes)]
    versions = {h: log.get("version") or "/".join(log.get("versions") or []) or None for h, log in logs.items()}
    common = majority(versions)
    odd = {h: v for h, v in versions.items() if v != common}
    wrong_net = {h: log.get("network") for h, log in logs.items()
                 if ctx.expect_net is not None and log.get("net") != ctx.expect_net}
    problems = {h: {"nccl_version": versions[h]} for h in odd}
    for h, net in wrong_net.items():
        problems.setdefault(h, {})["network"] = net
    first = logs[sorted(logs)[0]]
    parts = []
    if odd:
        parts.append(f"NCCL {', '.join(f'{h} {v}' for h, v in sorted(odd.items()))} against {common} elsewhere")
    if wrong_net:
        parts.append(f"NCCL used {', '.join(f'{h} {n}' for h, n in sorted(wrong_net.items()))}, "
                     f"expected {ctx.expect_net}")
    return [verdict("collective.transport", problems, expected={"nccl_version": common, "net": ctx.expect_net},
                    message="; ".join(parts),
                    remediation="one NCCL on every node (torch_runtime's torch or NCCL_LIB); for ib: the HCAs up "
                                "(ibstat), NCCL_IB_HCA and NCCL_IB_GID_INDEX set, NCCL_IB_DISABLE unset",
                    passed=f"NCCL {common} on every rank over {first.get('network')} (GPUDirect RDMA "
                           f"{first.get('gdr')}; between hosts {', '.join(first['transports']['inter_host']) or '-'})",
                    passed_measured={"nccl_version": common, "network": first.get("network"), "gdr": first.get("gdr"),
                                     "transports": first.get("transports")})]


def check_blame(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """collective.blame, only when the blame ran (record ``blame``, module_utils/ncclprep/probes/blame.py):
    FAIL naming the nodes bad in every pairing, the links bad in their pairing only (``a <-> b``)
    or, when every pair passed, the smallest failing groups of the bisection (measured: each
    group's outcome and busbw in GB/s); WARN when the rounds ran out before a verdict or the
    blame found no pair or group at fault (it fails only at full size). No check otherwise."""
    blame = next((r.get("blame") for r in records.values() if (r or {}).get("blame")), None)
    if not blame:
        return []
    verdict = blame.get("verdict") or {}
    why = (blame.get("trigger") or {}).get("reason") or "the collectives went wrong"
    measured = {"rounds": len(blame.get("rounds") or []), "outcomes": verdict.get("outcomes")}
    if verdict.get("stage") != "done":
        stopped = blame.get("error")
        return [make_check("collective.blame", "WARN", measured=measured, expected="a verdict",
                           message=f"the blame stopped before a verdict: {stopped} ({why})" if stopped
                           else f"the blame ran out of rounds before a verdict ({why})",
                           remediation="run validate.yml on fewer nodes (--limit) to narrow it down")]
    names = list(verdict.get("nodes") or []) + [f"{a} <-> {b}" for a, b in verdict.get("links") or []]
    groups = [", ".join(g) for g in verdict.get("groups") or []]
    if not names and not groups:
        return [make_check("collective.blame", "WARN", measured=measured, expected="a node, link or group at fault",
                           message=f"{verdict.get('message')} ({why})",
                           remediation="a fault of scale, not of one node: check the switch fabric and NCCL's "
                                       "settings for the full job size")]
    return [make_check("collective.blame", "FAIL", names or [h for g in verdict["groups"] for h in g],
                       measured=dict(measured, groups=verdict.get("groups")),
                       expected="every pairing passes",
                       message=f"{verdict.get('message')} (after {why})",
                       remediation="a node: its NIC, link and NCCL settings (see net.* for the same node); a "
                                   "link: the cable or switch port between the two; a group: bisect further "
                                   "by hand with --limit")]


def _gloo_transport(records: dict[str, HostRecord], probes: dict[str, dict]) -> Check:
    """collective.transport under Gloo: the bound address (probe ``gloo_bind``) is the host's
    data-plane address (facts ``data_plane.address``)."""
    bound = {h: p.get("gloo_bind") or {} for h, p in probes.items()}
    want = {h: ((records.get(h) or {}).get("facts") or {}).get("data_plane") or {} for h in probes}
    known = {h: b for h, b in bound.items() if (b.get("address") or b.get("error")) and want[h].get("address")}
    if not known:
        ifnames = sorted({str(p.get("gloo_ifname")) for p in probes.values()})
        return make_check("collective.transport", "SKIP", measured={"gloo_ifname": ifnames},
                          message=f"gloo backend (no NCCL): Gloo binds GLOO_SOCKET_IFNAME={', '.join(ifnames)}")
    wrong = {h: {"bound": b.get("address"), "how": b.get("how"), "ifname": b.get("ifname"), "error": b.get("error"),
                 "data_plane": want[h]["address"]}
             for h, b in known.items() if b.get("address") != want[h]["address"]}

    def why(v: dict) -> str:
        via = f"GLOO_SOCKET_IFNAME={v['ifname']}" if v["how"] == "GLOO_SOCKET_IFNAME" else "its host name"
        return f"{v['error']}" if v["error"] else f"{v['bound']} through {via}, not {v['data_plane']}"
    return verdict("collective.transport", wrong, expected="Gloo bound to the data-plane address",
                   message="Gloo bound another address on "
                           + "; ".join(f"{h}: {why(v)}" for h, v in sorted(wrong.items())),
                   remediation="set GLOO_SOCKET_IFNAME to the data-plane interface (nccl_env) or make the host name "
                               "resolve to the data-plane address (host_names)",
                   passed=f"gloo backend: every rank bound its data-plane address ({len(known)} hosts)",
                   passed_measured={h: b.get("address") for h, b in sorted(known.items())})
