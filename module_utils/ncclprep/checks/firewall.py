"""firewall.rules (concern firewall): active, default deny incoming, the cluster let in."""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.checks.model import Check, Context, HostRecord, facts_of, intent_of, verdict
from ansible.module_utils.ncclprep.parsers.ufw import diagnose_ufw, parse_ufw_status


def firewall_problem(fw: dict, live: dict | None) -> str | None:
    """Why a host's live firewall does not hold the role's intent (one line), or None when it does.

    ``fw``: intent ``firewall``; ``live``: facts ``firewall`` (see ``check_firewall``).
    nftables: the table must be loaded with a drop policy and a rule naming the cluster
    network; ufw: active, incoming default deny, and no FAIL finding of parsers/ufw.py
    ``diagnose_ufw`` for the cluster CIDR.
    """
    live = live or {}
    if live.get("rc") is None and live.get("backend") is not None:
        tool = "ufw" if live["backend"] == "ufw" else "nft"
        return f"{live['backend']} is chosen but its tool ({tool}) is not installed"
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


def check_firewall(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """firewall.rules: intent ``firewall`` (None: role off) against facts ``firewall``.

    intent ``firewall``: {backend (ufw, nftables), cluster_cidr, rules [{from, port, proto,
    interface, comment, var}]}. facts ``firewall``: {tools{ufw, nft}, backend, rc (None: the
    tool is not installed), stdout} of ``ufw status verbose`` or ``nft -j list table inet
    ncclprep`` (concern_facts.firewall). FAIL measures host -> why (``firewall_problem``);
    PASS measures host -> backend.
    """
    rows = {h: (intent_of(r, "firewall"), facts_of(r).get("firewall")) for h, r in sorted(records.items())
            if intent_of(r, "firewall")}
    if not rows:
        return []
    problems = {h: p for h, (fw, live) in rows.items() if (p := firewall_problem(fw, live))}
    return [verdict("firewall.rules", problems, expected="active, default deny incoming, cluster CIDR allowed",
                    message="firewall not as intended: " + "; ".join(f"{h}: {p}" for h, p in sorted(problems.items())),
                    remediation=f"re-run site.yml (role firewall) on {', '.join(sorted(problems))}",
                    passed=f"default deny incoming with the cluster allowed on {len(rows)} hosts",
                    passed_measured={h: fw.get("backend") for h, (fw, _) in rows.items()}, passed_expected=None)]
