"""numa.binding and numa.irq_affinity (concern numa_pinning)."""

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
from ansible.module_utils.ncclprep.numa import irqs_off


def map_lines(text: str | None) -> list[str] | None:
    """Non-comment, non-blank lines of a binding map text, stripped; None stays None (not installed)."""
    if text is None:
        return None
    return [line.strip() for line in str(text).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def check_numa(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """numa.binding and numa.irq_affinity: intent ``numa_pinning`` (None: role off) against
    facts ``numa_pinning``.

    intent ``numa_pinning``: {binding_text (the map computed from the topology, lines
    ``local_rank numa_node cpus gpu``), irq: {interface, cpus, irqs, reason} or None, ...}
    (numa.numa_intent). facts ``numa_pinning``: {installed_text (the installed map, None when
    absent), irq_affinity: {irq: smp_affinity_list now}, topology} (concern_facts.numa_pinning).
    numa.binding FAILs hosts whose installed map differs from today's topology (a GPU moved, a
    map never installed); PASS measures host -> ranks in the map. numa.irq_affinity FAILs hosts
    with data-plane IRQs off the intended CPUs (numa.irqs_off; measured: host -> {irq: CPUs
    now}), and is SKIP with the most common reason when no host has IRQs to pin (virtual NICs).
    """
    rows = {h: (intent_of(r, "numa_pinning"), facts_of(r).get("numa_pinning") or {})
            for h, r in sorted(records.items()) if intent_of(r, "numa_pinning")}
    if not rows:
        return []
    stale = {h: (map_lines(f.get("installed_text")) if f.get("installed_text") is not None else "not installed")
             for h, (n, f) in rows.items() if map_lines(f.get("installed_text")) != map_lines(n.get("binding_text"))}
    out = [verdict("numa.binding", stale, expected={h: map_lines(rows[h][0].get("binding_text")) for h in stale},
                   message=f"NUMA binding map differs from the topology on {', '.join(sorted(stale))}",
                   remediation=f"re-run site.yml (role numa_pinning) on {', '.join(sorted(stale))}",
                   passed=f"binding map matches the topology on {len(rows)} hosts",
                   passed_measured={h: len(map_lines(n.get("binding_text")) or []) for h, (n, _) in rows.items()},
                   passed_expected=None)]
    irq = {h: n.get("irq") or {} for h, (n, _) in rows.items()}
    current = {h: f.get("irq_affinity") or {} for h, (_, f) in rows.items()}
    off = {}
    for h, plan in irq.items():
        now = current[h]
        wrong = irqs_off(plan, now)
        if wrong:
            off[h] = {str(i): now.get(i, now.get(str(i))) for i in wrong}
    pinned = [h for h, p in irq.items() if p.get("irqs") and h not in off]
    if off or pinned:
        out.append(verdict(
            "numa.irq_affinity", off, expected={h: irq[h].get("cpus") for h in off},
            message="data-plane IRQs off the NIC's local CPUs on "
                    + ", ".join(f"{h} (IRQ {', '.join(v)})" for h, v in sorted(off.items())),
            remediation=f"re-run site.yml (role numa_pinning) on {', '.join(sorted(off))}; "
                        "check irqbalance is banned from them or stopped",
            passed=f"data-plane IRQs on the NIC's local CPUs on {len(pinned)} hosts",
            passed_measured={h: irq[h].get("cpus") for h in pinned}, passed_expected=None))
    else:
        reasons = {h: p.get("reason") or "no IRQ plan (no interface)" for h, p in irq.items()}
        out.append(make_check("numa.irq_affinity", "SKIP", measured=reasons,
                              message=f"no IRQs to pin: {majority(reasons)}"))
    return out
