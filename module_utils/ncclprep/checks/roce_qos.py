"""roce.qos (concern roce_qos): PFC, trust and ECN as intended on every RoCE port."""

from __future__ import annotations

from ansible.module_utils.ncclprep.checks.model import (
    Check,
    Context,
    HostRecord,
    facts_of,
    intent_of,
    majority,
    make_check,
    verdict,
)


def check_roce(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """roce.qos: intent ``roce_qos`` (None: role off) against facts ``roce_qos``.

    intent ``roce_qos``: {interfaces, priority, trust, ecn, tool} (the role's variables).
    facts ``roce_qos``: the roce_qos module's read in check mode {ports [{device, port,
    netdev}], changes{netdev: [{what, from, to}]} (what differs from the intent now),
    unsupported, skipped, skip_reason, tool}. FAIL names each host with a pending change
    (message: host and netdev with what would change); PASS measures host -> managed netdevs
    and names the hosts without RoCE; SKIP (with the most common reason) when no host has a
    RoCE port to manage.
    """
    wanted = {h: intent_of(r, "roce_qos") for h, r in sorted(records.items()) if intent_of(r, "roce_qos")}
    rows = {h: facts_of(records[h]).get("roce_qos") for h in wanted if facts_of(records[h]).get("roce_qos")}
    if not rows:
        return []
    pending = {h: {dev: [c["what"] for c in ch] for dev, ch in (n.get("changes") or {}).items() if ch}
               for h, n in rows.items()}
    pending = {h: v for h, v in pending.items() if v}
    managed = [h for h, n in rows.items() if not n.get("skipped")]
    skipped = {h: n.get("skip_reason") for h, n in rows.items() if n.get("skipped")}
    if not pending and not managed:
        return [make_check("roce.qos", "SKIP", measured=skipped, message="not applicable: " + majority(skipped))]
    first = wanted[next(iter(rows))]
    note = f"; no RoCE on {', '.join(sorted(skipped))}" if skipped else ""
    return [verdict(
        "roce.qos", pending, measured={h: rows[h].get("changes") for h in pending},
        expected={"pfc_priority": first.get("priority"), "trust": first.get("trust")},
        message="RoCE QoS differs from intent on "
                + "; ".join(f"{h}: " + ", ".join(f"{d} {'/'.join(w)}" for d, w in sorted(v.items()))
                            for h, v in sorted(pending.items())),
        remediation=f"re-run site.yml (role roce_qos) on {', '.join(sorted(pending))}",
        passed=f"PFC, trust and ECN as intended on the RoCE ports of {len(managed)} hosts{note}",
        passed_measured={h: [p.get("netdev") for p in rows[h].get("ports") or []] for h in managed},
        passed_expected=None)]
