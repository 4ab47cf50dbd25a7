"""The check model and the cluster checks of validate.yml.

A check is a dict with stable keys: ``id`` (stable, dotted), ``status`` (one of
STATUSES), ``hosts`` (the hosts or links to blame, sorted), ``measured``,
``expected``, ``message`` (one line) and ``remediation`` (one line).

``evaluate`` turns per-host records into checks. A record is
``{"facts": <node_facts ansible_facts.ncclprep> | None, "intent": {...},
"probe": <nccl_probe result> | None, "smoke": <torchrun_smoke result> | None}``
where intent holds ``sysctl`` (key -> value), ``torch_version`` (str),
``mtu`` (int | None), ``names`` (the host_names intent), ``rps_rfs``, ``numa``
(numa_pinning_intent), ``roce`` (roce_qos_intent) and ``firewall`` (firewall_intent).
"""

from __future__ import annotations

import re
from collections import Counter

from ansible.module_utils.ncclprep.parsers.torch_dist import diagnose_torch_dist, parse_torch_dist
from ansible.module_utils.ncclprep.parsers.ufw import diagnose_ufw, parse_ufw_status
from ansible.module_utils.ncclprep.sysctl import normalize

STATUSES = ("PASS", "WARN", "FAIL", "SKIP", "HANG")
BAD = ("FAIL", "HANG")


def make_check(cid: str, status: str, hosts=(), measured=None, expected=None, message: str = "",
               remediation: str = "") -> dict:
    """Build one check. Raises ValueError for a status not in STATUSES."""
    if status not in STATUSES:
        raise ValueError(f"check {cid}: status {status!r} not in {STATUSES}")
    return {"id": cid, "status": status, "hosts": sorted(set(hosts)), "measured": measured,
            "expected": expected, "message": message, "remediation": remediation}


def overall(checks: list[dict]) -> str:
    """Cluster status: FAIL when any check is FAIL or HANG, else PASS (WARN and SKIP pass)."""
    return "FAIL" if any(c["status"] in BAD for c in checks) else "PASS"


def _explain(text: str | None, host: str) -> dict | None:
    """First torch.distributed finding (port in use, unresolvable master, ...) in an error or log text."""
    findings = diagnose_torch_dist(parse_torch_dist(text or ""), host=host)
    return findings[0] if findings else None


def _majority(values: dict):
    """Most common value among hosts (ties broken by the smallest repr for stability)."""
    counts = Counter(values.values())
    best = max(counts.values())
    return sorted((v for v, n in counts.items() if n == best), key=repr)[0]


def check_reachable(all_hosts: list[str], records: dict) -> list[dict]:
    """FAIL naming every host that gave no facts, or failed / became unreachable during the run.

    A record's ``alive`` is False when the host dropped out of the play (absent: True).
    """
    missing = [h for h in all_hosts if not (records.get(h) or {}).get("facts")]
    dropped = [h for h in all_hosts if h not in missing and (records.get(h) or {}).get("alive") is False]
    if missing or dropped:
        parts = []
        if missing:
            parts.append(f"{', '.join(missing)} did not answer or failed before the checks")
        if dropped:
            parts.append(f"{', '.join(dropped)} failed or became unreachable during the run")
        return [make_check("host.reachable", "FAIL", missing + dropped, measured="; ".join(parts),
                           expected="every host answers for the whole run", message="; ".join(parts),
                           remediation="bring the host back (ssh, power, the Ansible error above) or "
                                       "remove it from the inventory")]
    return [make_check("host.reachable", "PASS", [], measured=len(all_hosts), expected=len(all_hosts),
                       message=f"all {len(all_hosts)} hosts answered")]


def check_sysctl(records: dict) -> list[dict]:
    """One check per intended sysctl key: FAIL naming hosts whose writable live value differs.

    A key that is absent or read-only on a host (host-global, seen from a container's
    network namespace) is SKIP there: it cannot be applied from that namespace.
    """
    keys = sorted({k for r in records.values() if r.get("facts")
                   for k in (r.get("intent", {}).get("sysctl") or {})})
    out = []
    for key in keys:
        measured, bad, skipped, expected = {}, [], [], {}
        for host, rec in sorted(records.items()):
            if not rec.get("facts") or key not in (rec["intent"].get("sysctl") or {}):
                continue
            want = normalize(rec["intent"]["sysctl"][key])
            expected[host] = want
            live = (rec["facts"].get("sysctl") or {}).get(key) or {}
            value = live.get("value")
            measured[host] = value
            if value is None:
                skipped.append(host)
            elif normalize(value) != want:
                (bad if live.get("writable") else skipped).append(host)
        exp = _majority(expected) if len(set(expected.values())) == 1 else expected
        if bad:
            detail = ", ".join(f"{h}={measured[h]}" for h in bad)
            out.append(make_check(
                f"sysctl.{key}", "FAIL", bad, measured={h: measured[h] for h in bad}, expected=exp,
                message=f"{key} differs from intent on {', '.join(bad)} ({detail}; intended {want})",
                remediation=f"re-run site.yml (role sysctl_tuning) or on {', '.join(bad)}: "
                            f"sysctl -w {key}='{want}'"))
        elif skipped and len(skipped) == len(measured):
            out.append(make_check(
                f"sysctl.{key}", "SKIP", skipped, measured=measured, expected=exp,
                message=f"{key} is host-global (absent or read-only in this network namespace) "
                        f"on {', '.join(skipped)}: not applicable here",
                remediation="set it on the physical host if it matters"))
        else:
            note = f"; not applicable (host-global) on {', '.join(skipped)}" if skipped else ""
            out.append(make_check(f"sysctl.{key}", "PASS", [], measured=measured, expected=exp,
                                  message=f"{key} as intended{note}"))
    return out


def check_names(records: dict) -> list[dict]:
    """Every published host name resolves on every node to its data-plane address (``names.resolve``),
    and that address answers on the probe port from every node (``names.reachable``).

    Blame: a name that does not resolve, or resolves elsewhere, is the resolving node's problem
    (its /etc/hosts or DNS). An address that does not answer names the link ``a -> b`` and blames
    the target b (down, or its firewall drops a peer).
    """
    resolve, reach, resolve_hosts, reach_hosts, rows = [], [], set(), set(), 0
    for host, rec in sorted(records.items()):
        for row in (rec.get("facts") or {}).get("names") or []:
            rows += 1
            if row.get("error") and not row.get("addresses"):
                resolve.append(f"on {host}: {row['name']} {row['error']}")
                resolve_hosts.add(host)
            elif row.get("expected") and row["expected"] not in row.get("addresses", []):
                resolve.append(f"on {host}: {row['name']} resolves to {', '.join(row['addresses'])}, "
                               f"not {row['expected']}")
                resolve_hosts.add(host)
            elif row.get("reachable") is False:
                target = row.get("host") or row["name"]
                reach.append(f"link {host} -> {target}: {row.get('error') or 'unreachable'}")
                reach_hosts.add(target)
    if rows == 0:
        return [make_check("names.resolve", "SKIP", message="no host names to check")]
    def verdict(cid, problems, blamed, expected, passed, remediation):
        if not problems:
            return make_check(cid, "PASS", measured=rows, expected=rows, message=passed)
        return make_check(cid, "FAIL", blamed, measured=problems, expected=expected,
                          message="; ".join(problems[:5]) + (" ..." if len(problems) > 5 else ""),
                          remediation=f"{remediation}, on {', '.join(sorted(blamed))}")

    return [
        verdict("names.resolve", resolve, resolve_hosts, "every node name -> its data-plane address",
                f"{rows} name look-ups resolved to the data-plane address",
                "re-run site.yml (role host_names); check /etc/hosts and DNS"),
        verdict("names.reachable", reach, reach_hosts, "every node's data-plane address answers from every node",
                "every resolved data-plane address answered",
                "check that the host is up and that its firewall lets cluster peers in"),
    ]


def check_data_plane(records: dict) -> list[dict]:
    """The data-plane interface exists and is up everywhere, with one MTU (the intended one if set)."""
    out = []
    present = {h: (r.get("facts") or {}).get("data_plane") for h, r in records.items() if r.get("facts")}
    missing = sorted(h for h, dp in present.items() if not dp)
    down = sorted(h for h, dp in present.items() if dp and dp.get("operstate") not in ("up", "unknown"))
    if missing or down:
        msg = []
        if missing:
            msg.append(f"no interface in the data-plane CIDR on {', '.join(missing)}")
        if down:
            msg.append(f"data-plane interface down on {', '.join(down)}")
        out.append(make_check("data_plane.interface", "FAIL", missing + down,
                              measured={h: (dp or {}).get("interface") for h, dp in present.items()},
                              expected="an up interface with an address in the data-plane CIDR",
                              message="; ".join(msg),
                              remediation="check data_plane_cidr / data_plane_interface and the link"))
    else:
        out.append(make_check("data_plane.interface", "PASS",
                              measured={h: dp["interface"] for h, dp in present.items()},
                              message="data-plane interface present and up on every host"))
    mtus = {h: dp.get("mtu") for h, dp in present.items() if dp}
    if not mtus:
        return out
    intents = {r.get("intent", {}).get("mtu") for r in records.values() if r.get("facts")} - {None}
    want = intents.pop() if len(intents) == 1 else _majority(mtus)
    odd = sorted(h for h, m in mtus.items() if m != want)
    if odd:
        out.append(make_check("data_plane.mtu", "FAIL", odd, measured=mtus, expected=want,
                              message=f"MTU differs on {', '.join(odd)} "
                                      f"({', '.join(f'{h}={mtus[h]}' for h in odd)}; expected {want})",
                              remediation=f"set MTU {want} on the data-plane interface of {', '.join(odd)}"))
    else:
        out.append(make_check("data_plane.mtu", "PASS", measured=want, expected=want,
                              message=f"MTU {want} on every host"))
    return out


def check_rps_rfs(records: dict) -> list[dict]:
    """Every rx queue of the data-plane NIC has the intended RPS CPUs and RFS flow count.

    intent ``rps_rfs``: {cpus: CPU list, flow_cnt: int} (absent when the role is off).
    """
    measured, bad, checked = {}, [], 0
    for host, rec in sorted(records.items()):
        want = (rec.get("intent") or {}).get("rps_rfs")
        dp = (rec.get("facts") or {}).get("data_plane") or {}
        if not want or not dp:
            continue
        checked += 1
        queues = dp.get("rx_queues") or {}
        wrong = {q: v for q, v in sorted(queues.items())
                 if v.get("rps_cpus") != want["cpus"] or v.get("rps_flow_cnt") != int(want["flow_cnt"])}
        if wrong or not queues:
            bad.append(host)
            measured[host] = wrong or "no rx queues"
    if not checked:
        return []
    want_any = next(r["intent"]["rps_rfs"] for r in records.values() if (r.get("intent") or {}).get("rps_rfs"))
    expected = {"rps_cpus": want_any["cpus"], "rps_flow_cnt": int(want_any["flow_cnt"])}
    if bad:
        return [make_check("rps_rfs.queues", "FAIL", bad, measured=measured, expected=expected,
                           message=f"RPS/RFS differs from intent on {', '.join(bad)}",
                           remediation="re-run site.yml (role rps_rfs) or run /usr/local/sbin/ncclprep-rps-rfs "
                                       f"on {', '.join(bad)}")]
    return [make_check("rps_rfs.queues", "PASS", measured=f"{checked} hosts", expected=expected,
                       message="RPS CPUs and RFS flow counts as intended on every rx queue")]


def _map_lines(text: str | None) -> list[str] | None:
    """Non-comment, non-blank lines of a binding map text; None stays None (not installed)."""
    if text is None:
        return None
    return [line.strip() for line in str(text).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def check_numa(records: dict) -> list[dict]:
    """numa.binding and numa.irq_affinity (role numa_pinning).

    intent ``numa``: {binding_text (map computed from today's topology), installed_text (the
    installed map, None when absent), irq: {interface, cpus, irqs, change, reason, current}}.
    numa.binding FAILs hosts whose installed map differs from today's topology (a GPU moved, a
    map never installed); numa.irq_affinity FAILs hosts with data-plane IRQs off the NIC's CPUs,
    and is SKIP when no host has IRQs to pin (virtual NICs).
    """
    rows = {h: r["intent"]["numa"] for h, r in sorted(records.items())
            if (r.get("intent") or {}).get("numa")}
    if not rows:
        return []
    out = []
    bad = {h: (_map_lines(n.get("installed_text")) if n.get("installed_text") is not None else "not installed")
           for h, n in rows.items() if _map_lines(n.get("installed_text")) != _map_lines(n.get("binding_text"))}
    if bad:
        out.append(make_check(
            "numa.binding", "FAIL", bad, measured=bad,
            expected={h: _map_lines(rows[h].get("binding_text")) for h in bad},
            message=f"NUMA binding map differs from the topology on {', '.join(sorted(bad))}",
            remediation=f"re-run site.yml (role numa_pinning) on {', '.join(sorted(bad))}"))
    else:
        ranks = {h: len(_map_lines(n.get("binding_text")) or []) for h, n in rows.items()}
        out.append(make_check("numa.binding", "PASS", measured=ranks,
                              message=f"binding map matches the topology on {len(rows)} hosts"))
    irq = {h: n.get("irq") or {} for h, n in rows.items()}
    off = {h: {str(i): (p.get("current") or {}).get(str(i), (p.get("current") or {}).get(i)) for i in p["change"]}
           for h, p in irq.items() if p.get("change")}
    pinned = [h for h, p in irq.items() if p.get("irqs") and not p.get("change")]
    if off:
        out.append(make_check(
            "numa.irq_affinity", "FAIL", off, measured=off, expected={h: irq[h].get("cpus") for h in off},
            message="data-plane IRQs off the NIC's local CPUs on "
                    + ", ".join(f"{h} (IRQ {', '.join(v)})" for h, v in sorted(off.items())),
            remediation=f"re-run site.yml (role numa_pinning) on {', '.join(sorted(off))}; "
                        "check irqbalance is banned from them or stopped"))
    elif pinned:
        out.append(make_check("numa.irq_affinity", "PASS", measured={h: irq[h].get("cpus") for h in pinned},
                              message=f"data-plane IRQs on the NIC's local CPUs on {len(pinned)} hosts"))
    else:
        reasons = {h: p.get("reason") for h, p in irq.items()}
        out.append(make_check("numa.irq_affinity", "SKIP", measured=reasons,
                              message=f"no IRQs to pin: {_majority(reasons)}"))
    return out


def check_roce(records: dict) -> list[dict]:
    """roce.qos (role roce_qos): PFC priority, trust and ECN as intended on every RoCE port.

    intent ``roce``: the roce_qos module's check-mode result {ports, changes{netdev: [{what, from,
    to}]}, unsupported, skipped, skip_reason}. FAIL names each host and netdev with a pending
    change; SKIP (with the reason) when no host has a RoCE port to manage.
    """
    rows = {h: r["intent"]["roce"] for h, r in sorted(records.items())
            if (r.get("intent") or {}).get("roce")}
    if not rows:
        return []
    pending = {h: {dev: [c["what"] for c in ch] for dev, ch in (n.get("changes") or {}).items() if ch}
               for h, n in rows.items()}
    pending = {h: v for h, v in pending.items() if v}
    managed = [h for h, n in rows.items() if not n.get("skipped")]
    skipped = {h: n.get("skip_reason") for h, n in rows.items() if n.get("skipped")}
    if pending:
        return [make_check(
            "roce.qos", "FAIL", pending, measured={h: (rows[h].get("changes")) for h in pending},
            expected={"pfc_priority": next(iter(rows.values())).get("priority"),
                      "trust": next(iter(rows.values())).get("trust")},
            message="RoCE QoS differs from intent on "
                    + "; ".join(f"{h}: " + ", ".join(f"{d} {'/'.join(w)}" for d, w in sorted(v.items()))
                                for h, v in sorted(pending.items())),
            remediation=f"re-run site.yml (role roce_qos) on {', '.join(sorted(pending))}")]
    if managed:
        note = f"; no RoCE on {', '.join(sorted(skipped))}" if skipped else ""
        return [make_check("roce.qos", "PASS", measured={h: [p.get("netdev") for p in rows[h].get("ports") or []]
                                                         for h in managed},
                           message=f"PFC, trust and ECN as intended on the RoCE ports of {len(managed)} hosts{note}")]
    return [make_check("roce.qos", "SKIP", measured=skipped,
                       message="not applicable: " + _majority(skipped))]


def _firewall_problem(fw: dict) -> str | None:
    """Why a host's live firewall does not hold the role's intent, or None when it does."""
    live = fw.get("live") or {}
    cluster = fw.get("cluster_cidr")
    interface = next((r.get("interface") for r in fw.get("rules") or [] if r.get("var") == "firewall_cluster_cidr"),
                     None)
    if fw.get("backend") == "nftables":
        if live.get("rc") != 0:
            return "nftables table inet ncclprep is not loaded"
        text = live.get("stdout") or ""
        if not re.search(r'"policy":\s*"drop"|policy drop', text):
            return "table inet ncclprep has no drop policy"
        return None if cluster and cluster.split("/")[0] in text else f"no rule for the cluster {cluster}"
    parsed = parse_ufw_status(live.get("stdout") or "")
    if parsed.get("status") != "active":
        return f"ufw is {parsed.get('status') or 'not reported'}"
    if (parsed.get("default") or {}).get("incoming") != "deny":
        return f"ufw's incoming default is {(parsed.get('default') or {}).get('incoming')}, not deny"
    findings = diagnose_ufw(parsed, cluster, interface=interface) if cluster else []
    bad = [f for f in findings if f["severity"] == "FAIL"]
    return bad[0]["message"] if bad else None


def check_firewall(records: dict) -> list[dict]:
    """firewall.rules (role firewall): active, default deny incoming, the cluster allowed on every port.

    intent ``firewall``: {backend (ufw, nftables), cluster_cidr, rules, live: {rc, stdout} of
    ``ufw status verbose`` or ``nft -j list table inet ncclprep``}.
    """
    rows = {h: r["intent"]["firewall"] for h, r in sorted(records.items())
            if (r.get("intent") or {}).get("firewall")}
    if not rows:
        return []
    problems = {h: p for h, fw in rows.items() if (p := _firewall_problem(fw))}
    if problems:
        return [make_check("firewall.rules", "FAIL", problems, measured=problems,
                           expected="active, default deny incoming, cluster CIDR allowed",
                           message="firewall not as intended: " + "; ".join(f"{h}: {p}"
                                                                           for h, p in sorted(problems.items())),
                           remediation=f"re-run site.yml (role firewall) on {', '.join(sorted(problems))}")]
    return [make_check("firewall.rules", "PASS", measured={h: fw.get("backend") for h, fw in rows.items()},
                       message=f"default deny incoming with the cluster allowed on {len(rows)} hosts")]


def check_ssh(records: dict) -> list[dict]:
    """ssh.trust (role ssh_trust): every node logs in to every other node, by name and by
    data-plane address, with host keys checked and no prompt.

    record ``ssh``: the ssh_mesh module's results [{host, name, ok, cause, explanation}] run on that
    host. Links to a host without facts are left to host.reachable. FAIL names each link
    ``src -> dst (name): cause``.
    """
    rows = {h: r.get("ssh") for h, r in sorted(records.items()) if r.get("ssh") is not None}
    if not rows:
        return []
    alive = {h for h, r in records.items() if r.get("facts")}
    bad: dict[str, list[str]] = {}
    logins = failed = 0
    for src, results in rows.items():
        for res in results:
            if res.get("host") not in alive:
                continue
            logins += 1
            if not res.get("ok"):
                failed += 1
                bad.setdefault(f"{src} -> {res.get('host')}", []).append(
                    f"{res.get('name')}: {res.get('cause')} ({res.get('explanation')})")
    if bad:
        return [make_check("ssh.trust", "FAIL", bad, measured=bad, expected="login with host key checked, no prompt",
                           message=f"{failed} of {logins} node-to-node SSH logins failed: "
                                   + "; ".join(f"{k} {', '.join(v)}" for k, v in sorted(bad.items())),
                           remediation="re-run site.yml (roles ssh_trust and host_names); a changed host key "
                                       "means a reinstalled node or an impostor: check it before trusting it")]
    return [make_check("ssh.trust", "PASS", measured={"logins": logins},
                       message=f"{logins} node-to-node SSH logins with host keys checked, no prompt")]


def check_versions(records: dict) -> list[dict]:
    """torch is installed at the pinned version (local label ignored) on every host."""
    seen = {h: ((r.get("facts") or {}).get("versions") or {}).get("torch")
            for h, r in records.items() if r.get("facts")}
    pins = {h: r.get("intent", {}).get("torch_version") for h, r in records.items() if r.get("facts")}
    bad = sorted(h for h, v in seen.items()
                 if v is None or (pins.get(h) and v.split("+")[0] != str(pins[h]).split("+")[0]))
    if not seen:
        return []
    expected = _majority(pins) if pins else None
    if bad:
        return [make_check("versions.torch", "FAIL", bad, measured=seen, expected=expected,
                           message=f"torch missing or not at the pin on {', '.join(bad)} "
                                   f"({', '.join(f'{h}={seen[h]}' for h in bad)})",
                           remediation="re-run site.yml (role torch_runtime)")]
    return [make_check("versions.torch", "PASS", measured=_majority(seen), expected=expected,
                       message=f"torch {_majority(seen)} on every host")]


def summarize_collectives(records: dict) -> dict:
    """Merge every rank's rows: per op and size the slowest rank's time and the busbw it gives.

    Returns ``{op: [{size_bytes, time_us_max, algbw_gbps, busbw_gbps, wrong, slowest_host}]}``
    (bandwidths in GB/s from the slowest rank, nccl-tests style; wrong summed over ranks).
    """
    merged: dict = {}
    for host, rec in sorted(records.items()):
        for row in (rec.get("probe") or {}).get("results") or []:
            if "skipped" in row:
                continue
            key = (row["op"], row["size_bytes"])
            cur = merged.get(key)
            if cur is None or row["time_us"] > cur["time_us_max"]:
                wrong = row["wrong"] + (cur["wrong"] if cur else 0)
                merged[key] = {"size_bytes": row["size_bytes"], "time_us_max": row["time_us"],
                               "algbw_gbps": row["algbw_gbps"], "busbw_gbps": row["busbw_gbps"],
                               "wrong": wrong, "slowest_host": host}
            else:
                cur["wrong"] += row["wrong"]
    out: dict = {}
    for (op, _size), row in sorted(merged.items()):
        out.setdefault(op, []).append(row)
    return out


def check_collectives(records: dict, all_hosts: list[str], min_busbw_gbps: float | None = None) -> list[dict]:
    """Collectives ran on every rank, gave correct results, and (optionally) reached a busbw floor."""
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
        known = [(h, _explain(p.get("error"), h)) for h, p in sorted(failed.items())]
        known = [(h, f) for h, f in known if f]
        message = "; ".join(f"{h}: {f['message']}" for h, f in known) if known else errors[:400]
        return [make_check("collective.run", "FAIL", sorted(failed), measured=errors,
                           expected="every rank completes", message=message,
                           remediation=(known[0][1]["remediation"] if known else
                                        "read the error; run with NCCL_DEBUG=INFO for the transport log"))]
    out = []
    skipped = sorted({(r["op"], r["skipped"]) for p in probes.values() for r in (p or {}).get("results", [])
                      if "skipped" in r})
    for op, why in skipped:
        out.append(make_check(f"collective.{op}", "SKIP", message=f"{op}: {why}"))
    summary = summarize_collectives(records)
    world = len(ranks)
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


def check_smoke(records: dict, all_hosts: list[str]) -> list[dict]:
    """The torchrun DDP job finished on every node with identical parameters everywhere."""
    smokes = {h: (records.get(h) or {}).get("smoke") for h in all_hosts}
    smokes = {h: (None if s and s.get("status") == "SKIP" else s) for h, s in smokes.items()}
    if not any(smokes.values()):
        return [make_check("torchrun.smoke", "SKIP",
                           message="the smoke job did not run (disabled, or only part of the cluster was in the "
                                   "run: --limit, or a host gone)")]
    hung = sorted(h for h, s in smokes.items() if s and s.get("status") == "HANG")
    failed = sorted(h for h, s in smokes.items() if s and s.get("status") == "FAIL")
    absent = sorted(h for h, s in smokes.items() if not s)
    status_of = {h: (s or {}).get("status", "no result") for h, s in smokes.items()}
    if hung or failed or absent:
        status = "HANG" if hung and not failed else "FAIL"
        blame = absent or failed or hung
        detail = "; ".join(f"{h}: {(smokes[h] or {}).get('error') or 'no result'}" for h in (failed + hung + absent))
        known = [(h, _explain("\n".join((smokes[h] or {}).get("log_tail") or []), h)) for h in failed + hung]
        known = [(h, f) for h, f in known if f]
        if known:
            detail = "; ".join(f"{h}: {f['message']}" for h, f in known[:3]) + f" ({detail})"
        return [make_check("torchrun.smoke", status, blame, measured=status_of, expected="PASS on every node",
                           message=detail[:500],
                           remediation=(known[0][1]["remediation"] if known else
                                        "read log_tail in the host reports; a hang with 'gai error' warnings "
                                        "means the rank-0 host name does not resolve (role host_names)"))]
    workers = [w for s in smokes.values() for w in s.get("workers", [])]
    world = {w.get("world_size") for w in workers}
    if not workers or world != {len(workers)}:
        return [make_check("torchrun.smoke", "FAIL", sorted(smokes), measured={"workers": len(workers),
                           "world_size": sorted(world)}, expected="one result per worker, same world size",
                           message=f"torchrun job reported {len(workers)} workers for world size(s) {sorted(world)}",
                           remediation="read log_tail in the host reports")]
    return [make_check("torchrun.smoke", "PASS", measured={"workers": len(workers), "world_size": sorted(world)},
                       expected="identical parameters on every rank",
                       message=f"torchrun c10d DDP job: {len(workers)} workers, parameters identical")]


def evaluate(records: dict, all_hosts: list[str], min_busbw_gbps: float | None = None) -> list[dict]:
    """All checks for the cluster, in report order."""
    with_facts = {h: r for h, r in records.items() if (r or {}).get("facts")}
    return (check_reachable(all_hosts, records)
            + check_data_plane(with_facts)
            + check_names(with_facts)
            + check_sysctl(with_facts)
            + check_rps_rfs(with_facts)
            + check_numa(with_facts)
            + check_roce(with_facts)
            + check_firewall(with_facts)
            + check_ssh(with_facts)
            + check_versions(with_facts)
            + check_collectives(records, all_hosts, min_busbw_gbps)
            + check_smoke(records, all_hosts))
