"""``ip link`` / ``ip addr`` (iproute2) text: interfaces, flags, MTU, state, addresses.

A link starts with ``N: name[@parent]: <FLAGS> mtu M qdisc Q state S ...``;
indented lines below it give ``link/<type> <mac>``, ``inet``/``inet6`` addresses
and ``valid_lft`` lifetimes. MTUs are in bytes. IPoIB datagram mode has MTU
IB MTU - 4 (4092 on a 4K fabric, 2044 on 2K; Linux Documentation/infiniband/ipoib.rst),
connected mode up to 65520: those are normal values, not faults.
"""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.parsers import finding

_HEAD_RE = re.compile(r"^(\d+):\s+([^:@\s]+)(?:@(\S+?))?:\s+<([^>]*)>\s*(.*)$")
_ADDR_RE = re.compile(r"^(inet6?)\s+(\S+)(.*)$")
_LINK_RE = re.compile(r"^link/(\S+)(?:\s+(\S+))?")
_INT_ATTRS = ("mtu", "qlen")
IPOIB_NORMAL_MTUS = (2044, 4092, 65520)


def parse_ip_link(text: str) -> dict:
    """Parse ``ip link`` or ``ip addr`` output into ``{"links": [...], "unparsed": [lines]}``.

    A link is ``{"index": int, "name": str, "parent": str | None, "flags": [str], "mtu": int | None,
    "qdisc", "state", "qlen": int | None, "master", "link_type", "mac", "addresses": [{"family":
    "inet" | "inet6", "address": "10.0.0.1/24", "scope": str | None}]}``; attributes not printed
    are None. ``valid_lft``/``altname`` lines are understood and skipped. Never raises.
    """
    links: list[dict] = []
    unparsed: list[str] = []
    link: dict | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        m = _HEAD_RE.match(stripped)
        if m:
            link = {"index": int(m.group(1)), "name": m.group(2), "parent": m.group(3),
                    "flags": [f for f in m.group(4).split(",") if f], "mtu": None, "qdisc": None, "state": None,
                    "qlen": None, "master": None, "link_type": None, "mac": None, "addresses": []}
            words = m.group(5).split()
            for i in range(0, len(words) - 1, 2):  # "mtu 1500 qdisc mq state UP ..." pairs
                key, value = words[i], words[i + 1]
                if key in _INT_ATTRS:
                    link[key] = int(value) if value.isdigit() else None
                elif key in ("qdisc", "state", "master"):
                    link[key] = value
            links.append(link)
            continue
        if link is None:
            unparsed.append(line)
            continue
        m = _LINK_RE.match(stripped)
        if m:
            link["link_type"], link["mac"] = m.group(1), m.group(2)
            continue
        m = _ADDR_RE.match(stripped)
        if m:
            rest = m.group(3).split()
            scope = rest[rest.index("scope") + 1] if "scope" in rest[:-1] else None
            link["addresses"].append({"family": m.group(1), "address": m.group(2), "scope": scope})
        elif not stripped.startswith(("valid_lft", "altname")):
            unparsed.append(line)
    return {"links": links, "unparsed": unparsed}


def _is_ipoib(link: dict) -> bool:
    return link.get("link_type") == "infiniband" or str(link["name"]).startswith("ib")


def diagnose_ip_link(parsed: dict, host: str | None = None) -> list[dict]:
    """Findings for ``parse_ip_link`` output of one host.

    - WARN ``ip.ipoib_down`` per IPoIB interface (``link/infiniband`` or a name starting ``ib``)
      whose state is DOWN; its MTU is not judged when it is one of IPOIB_NORMAL_MTUS.
    - INFO ``ip.ipoib_mtu`` for an IPoIB MTU outside IPOIB_NORMAL_MTUS (2044/4092 datagram, 65520
      connected), which suggests a hand-set value.
    Other DOWN interfaces (unused Ethernet ports) give no finding.
    """
    out: list[dict] = []
    for link in parsed.get("links", []):
        if not _is_ipoib(link):
            continue
        if link["state"] == "DOWN":
            admin = "UP" not in link["flags"]
            out.append(finding("ip.ipoib_down", "WARN", link["name"],
                               f"{link['name']} is DOWN ({'administratively down' if admin else 'no carrier'})"
                               + (f"; MTU {link['mtu']} is a normal IPoIB MTU, not a fault by itself"
                                  if link["mtu"] in IPOIB_NORMAL_MTUS else ""),
                               f"ip link set {link['name']} up; check the IB port with ibstat", host=host,
                               mtu=link["mtu"]))
        if link["mtu"] is not None and link["mtu"] not in IPOIB_NORMAL_MTUS:
            out.append(finding("ip.ipoib_mtu", "INFO", link["name"],
                               f"{link['name']} MTU {link['mtu']} is not a usual IPoIB MTU ({IPOIB_NORMAL_MTUS})",
                               "leave the IPoIB MTU to the driver unless you know why", host=host, mtu=link["mtu"]))
    return out
