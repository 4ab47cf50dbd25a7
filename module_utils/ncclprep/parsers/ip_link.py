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

#: Interface name prefixes of container and virtual networks, never a data-plane NIC.
VIRTUAL_IFACE_PREFIXES = ("docker", "br-", "veth", "virbr", "cni", "flannel", "cali", "vxlan", "tunl", "lo",
                          "ip6tnl", "sit", "gre", "ip6gre", "ip_vti", "ip6_vti")

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
    - WARN ``ip.no_carrier`` per physical interface that is administratively up but has no carrier
      (``NO-CARRIER``, state DOWN; ifconfig: UP without RUNNING): no cable, or the switch port or
      transceiver is down. Container and virtual interfaces (docker0 without containers) are left out.
    - INFO ``ip.bond_ports``: interfaces enslaved to a bond carry no address of their own; the bond
      is the interface to name (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME).
    - WARN ``ip.same_subnet`` when two interfaces (bond ports and virtual ones left out) have IPv4
      addresses in one subnet: Linux answers ARP for any local address on every interface and
      routes replies by the first matching route (ARP flux; Linux ip-sysctl.rst, arp_ignore and
      arp_announce), so a peer's traffic for one may arrive on, or leave by, the other.
    - WARN ``ip.ifname_prefix`` when an interface with an IPv4 address is a name prefix of another
      that has none (only link-local): NCCL_SOCKET_IFNAME is a prefix list, so naming the first
      selects the second too (NVIDIA/nccl-tests#9; ``=name`` matches exactly, NCCL 2.4+).
    - INFO ``ip.usable`` with any of the above: the physical interfaces up, with carrier and an
      IPv4 address (``usable``), bond ports left out.
    Other DOWN interfaces (administratively down Ethernet ports) give no finding.
    """
    out: list[dict] = []
    links = parsed.get("links", [])
    physical = [lk for lk in links if not str(lk["name"]).startswith(VIRTUAL_IFACE_PREFIXES)]
    for link in physical:
        if "UP" in link["flags"] and link["state"] == "DOWN" and not _is_ipoib(link):
            out.append(finding("ip.no_carrier", "WARN", link["name"],
                               f"{link['name']} is up but has no carrier: no cable, or its switch port or transceiver "
                               "is down; no traffic can use it", f"check the cable and the switch port of "
                               f"{link['name']} (ethtool {link['name']}: Link detected), or leave it out of "
                               "NCCL_SOCKET_IFNAME", host=host))
    ports: dict[str, list[str]] = {}
    for link in links:
        if link.get("master") or "SLAVE" in link["flags"]:
            ports.setdefault(link.get("master") or "a bond", []).append(link["name"])
    for bond, names in ports.items():
        out.append(finding("ip.bond_ports", "INFO", bond,
                           f"{', '.join(names)} {'are ports' if len(names) > 1 else 'is a port'} of {bond}: no address "
                           f"of {'their' if len(names) > 1 else 'its'} own; the interface to use is {bond}",
                           f"NCCL_SOCKET_IFNAME={bond} and GLOO_SOCKET_IFNAME={bond}", host=host, ports=names))
    import ipaddress

    nets: dict = {}
    for link in physical:
        if link.get("master") or "SLAVE" in link["flags"] or link["name"] == "lo":
            continue
        for a in link["addresses"]:
            if a["family"] != "inet" or "/" not in a["address"]:
                continue
            try:
                net = ipaddress.ip_interface(a["address"]).network
            except ValueError:
                continue
            if net.prefixlen < 32:
                nets.setdefault(net, []).append((link["name"], a["address"]))
    for net, members in nets.items():
        names = list(dict.fromkeys(n for n, _a in members))
        if len(names) > 1:
            shown = " and ".join(f"{n} ({a})" for n, a in members)
            out.append(finding("ip.same_subnet", "WARN", ", ".join(names),
                               f"{shown} are on one subnet {net}: Linux answers ARP for either address on both and "
                               "sends replies by the first route (ARP flux), so traffic meant for one may use the "
                               "other", "one interface per subnet, or net.ipv4.conf.all.arp_ignore=1 and "
                               "arp_announce=2 (sysctl_tuning sets them) with a route per interface; name one "
                               "interface to NCCL",
                               host=host, subnet=str(net), interfaces=names))
    v4 = {lk["name"] for lk in links if any(a["family"] == "inet" for a in lk["addresses"])}
    for short in sorted(v4):
        caught = [lk["name"] for lk in links if lk["name"] != short and str(lk["name"]).startswith(short)
                  and lk["name"] not in v4]
        if caught:
            out.append(finding("ip.ifname_prefix", "WARN", short,
                               f"NCCL_SOCKET_IFNAME={short} is a prefix: it also selects {', '.join(caught)}, which "
                               "has no IPv4 address (link-local at most)", f"name it exactly: "
                               f"NCCL_SOCKET_IFNAME=={short} (NCCL 2.4 and later), or exclude the others with ^",
                               host=host, also=caught))
    if out:  # with a port to leave out, say which ones can carry the job
        usable = [lk["name"] for lk in physical if lk["name"] != "lo" and "UP" in lk["flags"]
                  and lk["state"] != "DOWN" and not (lk.get("master") or "SLAVE" in lk["flags"])
                  and any(a["family"] == "inet" for a in lk["addresses"])]
        out.append(finding("ip.usable", "INFO", host or "host",
                           f"interfaces with carrier and an IPv4 address: {', '.join(usable) or 'none in this text'}",
                           "", host=host, usable=usable))
    for link in links:
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
