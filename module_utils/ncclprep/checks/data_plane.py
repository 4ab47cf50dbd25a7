"""data_plane.interface (preflight's own check): the data-plane interface node_facts found."""

from __future__ import annotations

from ansible.module_utils.ncclprep.model import Check, Context, HostRecord, facts_of, verdict

#: operstate values that carry traffic (``unknown``: virtual links such as veth report it).
UP_STATES = ("up", "unknown")


def check_interface(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """The data-plane interface exists and is up on every host with facts.

    facts ``data_plane``: {interface, address, mtu (bytes), operstate, ...} or None (no
    interface in data_plane_cidr). FAIL names the hosts without one or with it down;
    measured: host -> interface name (None where missing).
    """
    present = {h: facts_of(r).get("data_plane") for h, r in records.items()}
    missing = sorted(h for h, dp in present.items() if not dp)
    down = sorted(h for h, dp in present.items() if dp and dp.get("operstate") not in UP_STATES)
    msg = []
    if missing:
        msg.append(f"no interface in the data-plane CIDR on {', '.join(missing)}")
    if down:
        msg.append(f"data-plane interface down on {', '.join(down)}")
    names = {h: (dp or {}).get("interface") for h, dp in present.items()}
    return [verdict("data_plane.interface", missing + down, measured=names,
                    expected="an up interface with an address in the data-plane CIDR",
                    message="; ".join(msg),
                    remediation="check data_plane_cidr / data_plane_interface and the link",
                    passed="data-plane interface present and up on every host",
                    passed_measured=names, passed_expected=None)]
