"""rps_rfs.queues (concern rps_rfs): RPS CPUs and RFS flow counts on every rx queue."""

from __future__ import annotations

from ansible.module_utils.ncclprep.checks.model import Check, Context, HostRecord, facts_of, intent_of, verdict


def check_queues(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """Every rx queue of the NIC has the intended RPS CPUs and RFS flow count.

    intent ``rps_rfs``: {interface, queues, cpus (CPU list, e.g. "0-15"), mask, flow_cnt
    (flows per queue)}, None when the role is off. facts ``rps_rfs``: {interface, exists,
    queues: {rx-N: {rps_cpus (CPU list), rps_flow_cnt}}} (concern_facts.rps_rfs). FAIL
    measures host -> the queues that differ (or "no rx queues"); no check when no host has
    both an intent and those facts.
    """
    problems, checked = {}, 0
    for host, rec in sorted(records.items()):
        want = intent_of(rec, "rps_rfs")
        live = facts_of(rec).get("rps_rfs")
        if not want or live is None:
            continue
        checked += 1
        queues = live.get("queues") or {}
        wrong = {q: v for q, v in sorted(queues.items())
                 if v.get("rps_cpus") != want["cpus"] or v.get("rps_flow_cnt") != int(want["flow_cnt"])}
        if wrong or not queues:
            problems[host] = wrong or "no rx queues"
    if not checked:
        return []
    want_any = next(intent_of(r, "rps_rfs") for r in records.values() if intent_of(r, "rps_rfs"))
    expected = {"rps_cpus": want_any["cpus"], "rps_flow_cnt": int(want_any["flow_cnt"])}
    hosts = ", ".join(problems)
    return [verdict("rps_rfs.queues", problems, expected=expected,
                    message=f"RPS/RFS differs from intent on {hosts}",
                    remediation=f"re-run site.yml (role rps_rfs) or run /usr/local/sbin/ncclprep-rps-rfs on {hosts}",
                    passed="RPS CPUs and RFS flow counts as intended on every rx queue",
                    passed_measured=f"{checked} hosts")]
