"""firewall.rules and firewall.ports_free (concern firewall): active, default deny incoming, the
cluster let in; the job's rendezvous ports free for the job."""

from __future__ import annotations

from ansible.module_utils.ncclprep.checks.model import Check, Context, HostRecord, facts_of, intent_of, verdict
from ansible.module_utils.ncclprep.firewall import nft_unintended, ufw_unintended
from ansible.module_utils.ncclprep.parsers.nft import parse_nft_table
from ansible.module_utils.ncclprep.parsers.ufw import diagnose_ufw, parse_ufw_status


def firewall_problem(fw: dict, live: dict | None) -> str | None:
    """Why a host's live firewall does not hold the role's intent (one line), or None when it does.

    ``fw``: intent ``firewall``; ``live``: facts ``firewall`` (see ``check_firewall``).
    nftables: the table loaded, read from nft's JSON (parsers/nft.py), its input chain with a
    drop policy, every intended rule there and no accept beyond them (``firewall.nft_unintended``);
    ufw: active, incoming default deny, every intended rule in ufw's own rule files (where they
    were not read: no FAIL finding of parsers/ufw.py ``diagnose_ufw`` for the cluster CIDR), IPv6
    filtered (IPV6=no in /etc/default/ufw leaves every IPv6 port open) and no ALLOW beyond the
    intended rules (``firewall.ufw_unintended``, review F7: a rule ncclprep no longer intends, or
    anyone's, such as ``allow from any``).
    """
    live = live or {}
    if live.get("rc") is None and live.get("backend") is not None:
        tool = "ufw" if live["backend"] == "ufw" else "nft"
        return f"{live['backend']} is chosen but its tool ({tool}) is not installed"
    cluster = fw.get("cluster_cidr")
    interface = next((r.get("interface") for r in fw.get("rules") or []
                      if r.get("var") in ("firewall_cluster_cidr", "data_plane_members")), None)
    if fw.get("backend") == "nftables":
        if live.get("rc") != 0:
            return "nftables table inet ncclprep is not loaded"
        table = parse_nft_table(live.get("stdout") or "")
        if table["error"]:
            return f"table inet ncclprep not readable: {table['error']}"
        if table["policy"] != "drop":
            return f"table inet ncclprep's input policy is {table['policy']}, not drop"
        diff = nft_unintended(fw.get("rules") or [], table, fw.get("unknown_in"))
        problems = [f"no rule for {r['from']}" + (f" port {r['port']}" if r["port"] is not None else "")
                    + f" ({r['comment']})" for r in diff["missing"]]
        problems += [f"accepts what ncclprep does not intend: {r['text']}" for r in diff["foreign"]]
        return "; ".join(problems) or None
    parsed = parse_ufw_status(live.get("stdout") or "")
    if parsed.get("status") != "active":
        return f"ufw is {parsed.get('status') or 'not reported'}"
    if (parsed.get("default") or {}).get("incoming") != "deny":
        return f"ufw's incoming default is {(parsed.get('default') or {}).get('incoming')}, not deny"
    problems = []
    if live.get("ufw_rules") is None:  # ufw's own files not read: its status decides about the cluster
        findings = diagnose_ufw(parsed, cluster, interface=interface) if cluster else []
        problems = [f["message"] for f in findings if f["severity"] == "FAIL"][:1]
    if live.get("ufw_ipv6") == "no":
        problems.append("IPV6=no in /etc/default/ufw: ufw filters no IPv6 traffic, every port listening on [::] "
                        "is open over IPv6 (set IPV6=yes, then ufw reload)")
    if live.get("ufw_rules") is not None:
        diff = ufw_unintended(fw.get("rules") or [], live["ufw_rules"], fw.get("unknown_in"))
        problems += [f"no rule for {r['from']}" + (f" port {r['port']}" if r["port"] is not None else "")
                     + (f" on {r['interface']}" if r.get("interface") else "") + f" ({r['comment']})"
                     for r in diff["missing"]]
        problems += [f"allows what ncclprep does not intend: {r['text']}" + (" (v6)" if r["v6"] else "")
                     + (" (ncclprep's, no longer intended: re-run site.yml)" if r in diff["stale"] else
                        f" (remove it: ufw delete {r['text']}, or list it in firewall_extra_rules)")
                     for r in diff["stale"] + diff["foreign"]]
    return "; ".join(problems) or None


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
    out = [verdict("firewall.rules", problems, expected="active, default deny incoming, cluster CIDR allowed",
                    message="firewall not as intended: " + "; ".join(f"{h}: {p}" for h, p in sorted(problems.items())),
                    remediation=f"re-run site.yml (role firewall) on {', '.join(sorted(problems))}",
                    passed=f"default deny incoming with the cluster allowed on {len(rows)} hosts",
                    passed_measured={h: fw.get("backend") for h, (fw, _) in rows.items()}, passed_expected=None)]
    return out + check_ports_free(rows)


def job_ports(fw: dict) -> list[int]:
    """The TCP ports of the rendezvous rules of intent ``firewall`` (firewall_rendezvous_ports), sorted."""
    return sorted({int(r["port"]) for r in fw.get("rules") or []
                   if r.get("var") == "firewall_rendezvous_sources" and r.get("port") is not None})


def check_ports_free(rows: dict[str, tuple[dict, dict | None]]) -> list[Check]:
    """firewall.ports_free: no process listens on a job port (``job_ports``) before the job starts.

    ``rows``: host -> (intent ``firewall``, facts ``firewall``); facts ``listening`` are the
    TCP listeners [{port, address, pid, name}] read from ``ss -Htlnp`` (parsers/ss.py; the
    role's own facts.yml: community.general.listen_ports_facts) (None: not read; that host is
    left out). A job's torchrun then fails to bind the
    port (EADDRINUSE, errno 98) on whichever node is its rendezvous host or MASTER_ADDR, so
    a holder on any node is a FAIL naming host, port and process. No check when no host
    has both job ports and listeners read.
    """
    held: dict[str, dict[str, str]] = {}
    seen = []
    for host, (fw, live) in sorted(rows.items()):
        listening, ports = (live or {}).get("listening"), job_ports(fw)
        if listening is None or not ports:
            continue
        seen.append(host)
        for sock in sorted(listening, key=lambda s: (s.get("port") or 0, str(s.get("pid")))):
            if sock.get("port") in ports:
                held.setdefault(host, {})[str(sock["port"])] = (f"{sock.get('name') or 'unknown process'} "
                                                                f"(pid {sock.get('pid') or '?'}) on "
                                                                f"{sock.get('address') or '*'}")
    if not seen:
        return []
    ports = sorted({p for h in seen for p in job_ports(rows[h][0])})
    return [verdict("firewall.ports_free", held, expected=f"TCP {', '.join(map(str, ports))} free",
                    message="job ports already taken: " + "; ".join(f"{h}:{port} held by {who}" for h, by in
                                                                   held.items() for port, who in by.items()),
                    remediation="stop the process holding the port (ss -ltnp) on " + ", ".join(held)
                                + ", or give the job other ports (nccl_env_rendezvous_port, firewall_rendezvous_ports)",
                    passed=f"TCP {', '.join(map(str, ports))} free on {len(seen)} hosts",
                    passed_measured=ports, passed_expected=None)]
