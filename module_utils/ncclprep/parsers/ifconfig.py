"""``ifconfig -a`` (net-tools) text, both layouts, read into the shape of ``parse_ip_link``.

net-tools 2.x (CentOS 7's 2.0 snapshots, 2.10 in current distributions) prints::

    eth0: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 1500
            inet 10.0.0.5  netmask 255.255.255.0  broadcast 10.0.0.255
            inet6 fe80::1  prefixlen 64  scopeid 0x20<link>
            ether 02:00:00:00:00:01  txqueuelen 1000  (Ethernet)
            RX packets 10  bytes 1000 (1000.0 B)

net-tools 1.60 (and inetutils) prints::

    eth0      Link encap:Ethernet  HWaddr 02:00:00:00:00:01
              inet addr:10.0.0.5  Bcast:10.0.0.255  Mask:255.255.255.0
              inet6 addr: fe80::1/64 Scope:Link
              UP BROADCAST RUNNING MULTICAST  MTU:1500  Metric:1
              collisions:0 txqueuelen:1000

A name of 10 characters or more runs into ``Link encap:`` in the old layout (``enp129s0f0Link
encap:...``); it is split off. Old net-tools does not know IPoIB's hardware type and prints
``Link encap:UNSPEC`` with only the first 16 of the 20 address bytes, dash-separated (and a warning
line that lands in ``unparsed``); patched builds print ``Link encap:InfiniBand``. MTUs are in bytes.
"""

from __future__ import annotations

import ipaddress
import re

#: net-tools 2.x header: ``name: flags=N<FLAGS>  mtu M``.
_NEW_HEAD_RE = re.compile(r"^(\S+?):\s+flags=\d+<([^>]*)>(.*)$")
#: net-tools 1.60 header: ``name  Link encap:Title  HWaddr mac`` (long names touch ``Link``).
_OLD_HEAD_RE = re.compile(r"^(\S+?)\s*Link encap:(.*?)(?:\s+HWaddr\s+(\S+))?\s*$")
_NEW_INET_RE = re.compile(r"^inet\s+(\S+)(?:\s+netmask\s+(\S+))?")
_NEW_INET6_RE = re.compile(r"^inet6\s+(\S+)\s+prefixlen\s+(\d+)(?:\s+scopeid\s+\S*?<([^>]*)>)?")
#: net-tools 2.x hardware line: ``ether 02:..  txqueuelen 1000  (Ethernet)`` (lo: ``loop``, no address).
_NEW_HW_RE = re.compile(r"^([a-z][\w-]*)(?:\s+([0-9A-Fa-f]{2}(?:[:-][0-9A-Fa-f]{2})+))?(?:\s+txqueuelen\s+(\d+))?"
                        r"\s+\(([^)]*)\)\s*$")
_OLD_INET_RE = re.compile(r"^inet addr:(\S+)(.*)$")
_OLD_INET6_RE = re.compile(r"^inet6 addr:\s*(\S+)(?:\s+Scope:(\S+))?\s*$")
_OLD_FLAGS_RE = re.compile(r"^((?:[A-Z][A-Z_-]*\s+)*)MTU:(\d*)(\s+Metric:\d+)?\s*$")
_OLD_QLEN_RE = re.compile(r"\btxqueuelen:(\d+)")
#: Counter and resource lines, understood and skipped (the ip_link shape has no counters).
_SKIPPED = ("RX ", "TX ", "device ", "collisions:", "Interrupt:", "Memory:", "Base address:", "DMA chan:")
#: ``Link encap:`` titles -> the link types ``ip`` prints (``link/ether``); others are lower-cased.
_TITLE_TYPES = {"ethernet": "ether", "local loopback": "loopback", "infiniband": "infiniband", "unspec": "unspec"}
#: net-tools 2.x hardware names that differ from ip's.
_NAME_TYPES = {"loop": "loopback"}


def _new_link(name: str) -> dict:
    return {"index": None, "name": name, "parent": None, "flags": [], "mtu": None, "qdisc": None, "state": None,
            "qlen": None, "master": None, "link_type": None, "mac": None, "addresses": []}


def _state(flags: list[str]) -> str:
    # The kernel sets IFF_RUNNING when the operstate is UP or UNKNOWN (RFC 2863 operstates,
    # Documentation/networking/operstates.rst): "UP" here, otherwise "DOWN" as ip would print it.
    return "UP" if "RUNNING" in flags else "DOWN"


def _prefixlen(mask: str | None) -> int | None:
    if mask is None:
        return None
    try:
        return ipaddress.IPv4Network(f"0.0.0.0/{mask}").prefixlen
    except ValueError:
        return None


def _valid(address: str) -> bool:
    try:
        ipaddress.ip_interface(address)
    except ValueError:
        return False
    return True


def _add_inet(link: dict, address: str, mask: str | None) -> bool:
    """Add an inet address (a cut-off one is not added); True when it and its netmask were read whole."""
    if not _valid(address):
        return False
    prefix = _prefixlen(mask)
    link["addresses"].append({"family": "inet", "address": f"{address}/{prefix}" if prefix is not None else address,
                              "scope": None})
    return prefix is not None


def _add_inet6(link: dict, address: str, scope: str | None) -> bool:
    """Add an inet6 address with its ``/prefix`` (a cut-off one is not added); True when read whole."""
    if not _valid(address):
        return False
    link["addresses"].append({"family": "inet6", "address": address, "scope": scope.lower() if scope else None})
    return "/" in address


def _body_line(link: dict, stripped: str) -> bool:
    """Read one indented line of ``link``'s block into it; False when the line is not understood
    (or only partly: an address whose netmask is missing is kept without a prefix length)."""
    m = _OLD_INET_RE.match(stripped)
    if m:
        mask = re.search(r"\bMask:(\S+)", m.group(2))
        return _add_inet(link, m.group(1), mask.group(1) if mask else None)
    m = _NEW_INET_RE.match(stripped)
    if m:
        return _add_inet(link, m.group(1), m.group(2))
    m = _NEW_INET6_RE.match(stripped)
    if m:
        return _add_inet6(link, f"{m.group(1)}/{m.group(2)}", m.group(3).split(",")[0] if m.group(3) else None)
    m = _NEW_HW_RE.match(stripped)
    if m:
        name = m.group(1)
        link["link_type"] = _NAME_TYPES.get(name, name)
        link["mac"] = m.group(2).lower() if m.group(2) else None
        link["qlen"] = int(m.group(3)) if m.group(3) else link["qlen"]
        return True
    m = _OLD_INET6_RE.match(stripped)
    if m:
        return _add_inet6(link, m.group(1), m.group(2))
    m = _OLD_FLAGS_RE.match(stripped)
    if m:
        link["flags"] = m.group(1).split()
        link["state"] = _state(link["flags"])
        if m.group(3) and m.group(2):  # without the Metric field the line, and so the MTU, may be cut short
            link["mtu"] = int(m.group(2))
        return bool(m.group(3) and m.group(2))
    if stripped.startswith(_SKIPPED):
        qlen = _OLD_QLEN_RE.search(stripped)
        if qlen:
            link["qlen"] = int(qlen.group(1))
        return True
    return False


def parse_ifconfig(text: str) -> dict:
    """Parse ``ifconfig -a`` (either layout, mixed too) into ``parse_ip_link``'s shape plus ``layout``.

    Returns ``{"links": [...], "layout": "net-tools 2" | "net-tools 1.60" | None (the first header's
    layout), "unparsed": [lines]}``. A link has exactly the keys of ``parse_ip_link``'s links, filled
    as ifconfig shows them:

    - ``index``, ``parent``, ``qdisc``, ``master``: None (ifconfig does not print them).
    - ``flags``: the IFF flag words as printed (``UP``, ``BROADCAST``, ``RUNNING``, ...); ``mtu``
      (bytes) and ``qlen`` (``txqueuelen``) ints. An old-layout flags line cut before its
      ``Metric:`` field keeps its flags but not its MTU (the digits may be cut too).
    - ``state``: derived from the flags, ``"UP"`` when ``RUNNING`` is set, else ``"DOWN"`` (the
      kernel sets RUNNING for operstate UP or UNKNOWN, so ``lo`` reads ``"UP"`` where ip says
      UNKNOWN); None in the old layout until its flags line is read.
    - ``link_type``: ip's names (``ether``, ``loopback``, ``infiniband``; ``unspec`` for old
      net-tools' IPoIB and tun devices), else the printed type lower-cased. ``mac``: lower-cased as
      printed (for ``unspec`` only the first 16 bytes, dash-separated), None when not printed.
    - ``addresses``: ``{"family": "inet" | "inet6", "address": "10.0.0.5/24", "scope": str | None}``;
      the netmask (``255.255.255.0``, ``Mask:...``) becomes the prefix length; inet scope is not
      printed (None), inet6 scope is ``link``/``global``/``host``/``site`` lower-cased.

    Counter lines (``RX packets``, ``collisions``, ``Interrupt``, ...) are understood and skipped.
    A line not understood goes to ``unparsed``, as does one only partly read: an inet address
    without a readable netmask is kept without ``/prefix``, a cut-off address is not kept.
    Findings: ``parsers.ip_link.diagnose_ip_link`` reads this shape unchanged. Never raises.
    """
    links: list[dict] = []
    unparsed: list[str] = []
    layout: str | None = None
    link: dict | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        m = _NEW_HEAD_RE.match(stripped)
        if m:
            link = _new_link(m.group(1))
            link["flags"] = [f for f in m.group(2).split(",") if f]
            link["state"] = _state(link["flags"])
            mtu = re.search(r"\bmtu\s+(\d+)", m.group(3))
            link["mtu"] = int(mtu.group(1)) if mtu else None
            links.append(link)
            layout = layout or "net-tools 2"
            continue
        m = _OLD_HEAD_RE.match(stripped) if line[:1] not in (" ", "\t") else None
        if m:
            link = _new_link(m.group(1))
            title = m.group(2).strip()
            link["link_type"] = _TITLE_TYPES.get(title.lower(), title.lower() or None)
            link["mac"] = m.group(3).lower() if m.group(3) else None
            links.append(link)
            layout = layout or "net-tools 1.60"
            continue
        if link is None or not _body_line(link, stripped):
            unparsed.append(line)
    return {"links": links, "layout": layout, "unparsed": unparsed}
