"""numa.binding and numa.irq_affinity (concern numa_pinning)."""

from __future__ import annotations

from ansible.module_utils.ncclprep.checks.model import (
    Check,
    Context,
    HostRecord,
    intent_of,
    majority,
    make_check,
    verdict,
)


def map_lines(text: str | None) -> list[str] | None:
    """Non-comment, non-blank lines of a binding map text, stripped; None stays None (not installed)."""
    if text is None:
        return None
    return [line.strip() for line in str(text).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def check_numa(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """numa.binding and numa.irq_affinity, from intent ``numa_pinning`` (None: role off).

    intent ``numa_pinning``: {binding_text (map computed from today's topology, lines
    ``local_rank numa_node cpus gpu``), installed_text (the installed map, None when absent),
    irq: {interface, cpus, irqs, change (IRQs off the NIC's CPUs), reason, current{irq: cpus}}}.
    numa.binding FAILs hosts whose installed map differs from today's topology (a GPU moved, a
    map never installed); PASS measures host -> ranks in the map. numa.irq_affinity FAILs hosts
    with data-plane IRQs off the NIC's CPUs (measured: host -> {irq: current CPUs}), and is SKIP
    with the most common reason when no host has IRQs to pin (virtual NICs).
    """
    rows = {h: intent_of(r, "numa_pinning") for h, r in sorted(records.items()) if intent_of(r, "numa_pinning")}
    if not rows:
        return []
    stale = {h: (map_lines(n.get("installed_text")) if n.get("installed_text") is not None else "not installed")
             for h, n in rows.items() if map_lines(n.get("installed_text")) != map_lines(n.get("binding_text"))}
    out = [verdict("numa.binding", stale, expected={h: map_lines(rows[h].get("binding_text")) for h in stale},
                   message=f"NUMA binding map differs from the topology on {', '.join(sorted(stale))}",
                   remediation=f"re-run site.yml (role numa_pinning) on {', '.join(sorted(stale))}",
                   passed=f"binding map matches the topology on {len(rows)} hosts",
                   passed_measured={h: len(map_lines(n.get("binding_text")) or []) for h, n in rows.items()},
                   passed_expected=None)]
    irq = {h: n.get("irq") or {} for h, n in rows.items()}
    off = {h: {str(i): (p.get("current") or {}).get(str(i), (p.get("current") or {}).get(i)) for i in p["change"]}
           for h, p in irq.items() if p.get("change")}
    pinned = [h for h, p in irq.items() if p.get("irqs") and not p.get("change")]
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
        reasons = {h: p.get("reason") for h, p in irq.items()}
        out.append(make_check("numa.irq_affinity", "SKIP", measured=reasons,
                              message=f"no IRQs to pin: {majority(reasons)}"))
    return out
