"""host.reachable (preflight's own check): every host answered for the whole run."""

from __future__ import annotations

from ansible.module_utils.ncclprep.model import Check, Context, HostRecord, facts_of, verdict


def check_reachable(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """FAIL naming every host of ``ctx.all_hosts`` that gave no facts, or failed / became
    unreachable during the run (record ``alive`` False; absent: True).

    ``records``: every host's record, also those without facts. PASS measures the host count.
    """
    missing = [h for h in ctx.all_hosts if not facts_of(records.get(h))]
    dropped = [h for h in ctx.all_hosts if h not in missing and (records.get(h) or {}).get("alive") is False]
    parts = []
    if missing:
        parts.append(f"{', '.join(missing)} did not answer or failed before the checks")
    if dropped:
        parts.append(f"{', '.join(dropped)} failed or became unreachable during the run")
    n = len(ctx.all_hosts)
    return [verdict("host.reachable", missing + dropped, measured="; ".join(parts),
                    expected="every host answers for the whole run", message="; ".join(parts),
                    remediation="bring the host back (ssh, power, the Ansible error above) or "
                                "remove it from the inventory",
                    passed=f"all {n} hosts answered", passed_measured=n, passed_expected=n)]
