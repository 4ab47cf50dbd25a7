"""data_plane.mtu (concern nic_mtu): one MTU on every data-plane NIC, the intended one if set."""

from __future__ import annotations

from ansible.module_utils.ncclprep.checks.model import (
    Check,
    Context,
    HostRecord,
    facts_of,
    intent_of,
    majority,
    verdict,
)


def check_mtu(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """FAIL naming hosts whose data-plane MTU (bytes, facts ``data_plane.mtu``) differs.

    The expected MTU is the intended one (intent ``nic_mtu.mtu``) when every host that
    has one agrees, else the most common MTU. No check when no host has a data-plane
    interface (data_plane.interface names them).
    """
    mtus = {h: facts_of(r)["data_plane"].get("mtu") for h, r in records.items() if facts_of(r).get("data_plane")}
    if not mtus:
        return []
    intents = {(intent_of(r, "nic_mtu") or {}).get("mtu") for r in records.values()} - {None}
    want = intents.pop() if len(intents) == 1 else majority(mtus)
    odd = sorted(h for h, m in mtus.items() if m != want)
    return [verdict("data_plane.mtu", odd, measured=mtus, expected=want,
                    message=f"MTU differs on {', '.join(odd)} "
                            f"({', '.join(f'{h}={mtus[h]}' for h in odd)}; expected {want})",
                    remediation=f"set MTU {want} on the data-plane interface of {', '.join(odd)}",
                    passed=f"MTU {want} on every host", passed_measured=want)]
