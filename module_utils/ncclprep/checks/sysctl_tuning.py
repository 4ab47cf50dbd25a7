"""sysctl.<key> (concern sysctl_tuning): every intended sysctl holds its value."""

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
from ansible.module_utils.ncclprep.sysctl import normalize


def check_sysctl(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """One check per intended sysctl key (intent ``sysctl_tuning``: key -> value), sorted by key.

    FAIL names hosts whose writable live value (facts ``sysctl_tuning[key]``: {value (str | None),
    writable}, read by node_facts) differs from the intended value after ``sysctl.normalize``. A key that is
    absent or read-only on a host (host-global, seen from a container's network namespace)
    is not applicable there; SKIP when it is so on every host. expected: the intended value,
    or host -> value when hosts intend different values.
    """
    keys = sorted({k for r in records.values() for k in (intent_of(r, "sysctl_tuning") or {})})
    out = []
    for key in keys:
        measured, bad, skipped, expected = {}, [], [], {}
        for host, rec in sorted(records.items()):
            intent = intent_of(rec, "sysctl_tuning") or {}
            if key not in intent:
                continue
            want = normalize(intent[key])
            expected[host] = want
            live = (facts_of(rec).get("sysctl_tuning") or {}).get(key) or {}
            value = live.get("value")
            measured[host] = value
            if value is None:
                skipped.append(host)
            elif normalize(value) != want:
                (bad if live.get("writable") else skipped).append(host)
        exp = majority(expected) if len(set(expected.values())) == 1 else expected
        if not bad and skipped and len(skipped) == len(measured):
            out.append(make_check(
                f"sysctl.{key}", "SKIP", skipped, measured=measured, expected=exp,
                message=f"{key} is host-global (absent or read-only in this network namespace) "
                        f"on {', '.join(skipped)}: not applicable here",
                remediation="set it on the physical host if it matters"))
            continue
        problems = {h: measured[h] for h in bad}
        detail = ", ".join(f"{h}={v}" for h, v in problems.items())
        hosts = ", ".join(bad)
        note = f"; not applicable (host-global) on {', '.join(skipped)}" if skipped else ""
        out.append(verdict(
            f"sysctl.{key}", problems, expected=exp,
            message=f"{key} differs from intent on {hosts} ({detail}; intended {want})",
            remediation=f"re-run site.yml (role sysctl_tuning) or on {hosts}: sysctl -w {key}='{want}'",
            passed=f"{key} as intended{note}", passed_measured=measured))
    return out
