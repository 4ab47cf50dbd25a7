"""Netplan YAML (``/etc/netplan/*.yaml``): interfaces, addresses, MTU; the RoCE MTU rule.

``read_netplan`` walks an already-loaded document (a dict), so it needs no YAML
library; ``parse_netplan`` loads text with PyYAML when it is importable and
otherwise says so in ``error``. Netplan is YAML 1.1 as PyYAML reads it:
``dhcp4: no`` is False. MTUs are netdev MTUs in bytes.
"""

from __future__ import annotations

from ansible.module_utils.ncclprep.parsers import finding
from ansible.module_utils.ncclprep.parsers.ibv_devinfo import ROCE_NETDEV_MTU_FOR_4096, roce_active_mtu

try:
    import yaml  # PyYAML: present on Ubuntu nodes (netplan itself depends on it) and on the controller
except ImportError:  # pragma: no cover - depends on the host
    yaml = None

if yaml is not None:
    class _NoAliasLoader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
        """PyYAML's safe loader that refuses aliases (``*name``): netplan files need none, and
        nested aliases expand a few hundred bytes into gigabytes when the result is walked or
        printed (review F14: 378 bytes became 3.8 MB, nine times more per level)."""

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(
                    None, None, "aliases (*name) are refused: netplan files need none, and nested aliases can "
                    "expand a few hundred bytes into gigabytes", mark)
            return super().compose_node(parent, index)

#: Netplan device kinds under ``network:``.
KINDS = ("ethernets", "bonds", "bridges", "vlans", "wifis", "tunnels", "vrfs", "modems", "dummy-devices",
         "virtual-ethernets", "nm-devices")
_NETWORK_KEYS = ("version", "renderer")


def _addresses(value) -> list[str]:
    """Addresses as strings; the mapping form ``- 10.0.0.1/24: {lifetime: 0}`` gives its key."""
    out = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, dict):
            out.extend(str(k) for k in item)
        else:
            out.append(str(item))
    return out


def read_netplan(doc) -> dict:
    """Read a loaded netplan document into ``{"version", "renderer", "interfaces": [...], "unparsed": [...]}``.

    An interface is ``{"name", "kind": "ethernets" | "bonds" | ..., "addresses": [str], "mtu": int | None,
    "dhcp4": bool | None, "dhcp6": bool | None, "members": [str] (bond/bridge ``interfaces``)}``.
    ``unparsed`` lists, as dotted paths, the parts not understood (unknown keys under ``network``,
    a device that is not a mapping, a non-integer mtu). Never raises.
    """
    out: dict = {"version": None, "renderer": None, "interfaces": [], "unparsed": []}
    network = doc.get("network") if isinstance(doc, dict) else None
    if not isinstance(network, dict):
        out["unparsed"].append("network (missing or not a mapping)")
        return out
    for key, value in network.items():
        if key in _NETWORK_KEYS:
            out[key] = value
        elif key in KINDS and isinstance(value, dict):
            for name, conf in value.items():
                if not isinstance(conf, dict):
                    out["unparsed"].append(f"network.{key}.{name}")
                    continue
                mtu = conf.get("mtu")
                if mtu is not None and (isinstance(mtu, bool) or not isinstance(mtu, int)):
                    out["unparsed"].append(f"network.{key}.{name}.mtu")
                    mtu = None
                out["interfaces"].append({"name": str(name), "kind": key,
                                          "addresses": _addresses(conf.get("addresses")), "mtu": mtu,
                                          "dhcp4": conf.get("dhcp4"), "dhcp6": conf.get("dhcp6"),
                                          "members": [str(m) for m in conf.get("interfaces") or []]})
        else:
            out["unparsed"].append(f"network.{key}")
    return out


def parse_netplan(text: str) -> dict:
    """Load netplan YAML text with PyYAML and read it (``read_netplan``), adding ``error``.

    ``error`` is None on success, ``"PyYAML is not importable"`` when the library is missing,
    or the YAML error message (also for an alias, which is refused: ``_NoAliasLoader``); in
    both error cases nothing is read and ``unparsed`` holds the non-blank lines. Never raises.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if yaml is None:
        return {"version": None, "renderer": None, "interfaces": [], "unparsed": lines,
                "error": "PyYAML is not importable"}
    try:
        doc = yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 (a SafeLoader that also refuses aliases)
    except yaml.YAMLError as exc:
        return {"version": None, "renderer": None, "interfaces": [], "unparsed": lines,
                "error": f"YAML error: {exc}"}
    out = read_netplan(doc)
    out["error"] = None
    return out


def diagnose_netplan(parsed: dict, roce_interfaces: list[str] | None = None, host: str | None = None) -> list[dict]:
    """Findings for ``parse_netplan``/``read_netplan`` output of one host.

    WARN ``netplan.roce_mtu`` per interface with an explicit MTU that gives a RoCE active_mtu
    below 4096 (``roce_active_mtu``: 4096 -> 2048). ``roce_interfaces`` names the RoCE ports;
    when None it is not known which ports are RoCE, so every interface with an MTU set above
    1500 is judged (raising the MTU without reaching 4200 is the usual mistake) and the message
    says "if this is a RoCE port". The remediation is 4200 (or 9000), ROCE_NETDEV_MTU_FOR_4096.
    """
    out: list[dict] = []
    for iface in parsed.get("interfaces", []):
        mtu = iface["mtu"]
        if mtu is None:
            continue
        if roce_interfaces is not None:
            if iface["name"] not in roce_interfaces:
                continue
            lead = f"RoCE port {iface['name']}"
        elif mtu > 1500:
            lead = f"{iface['name']} (if this is a RoCE port)"
        else:
            continue
        active = roce_active_mtu(mtu)
        if active is not None and active >= 4096:
            continue
        out.append(finding("netplan.roce_mtu", "WARN", iface["name"],
                           f"{lead}: netdev MTU {mtu} gives RoCE active_mtu {active}, not 4096",
                           f"set mtu: {ROCE_NETDEV_MTU_FOR_4096} (or 9000) on {iface['name']} and its switch ports",
                           host=host, mtu=mtu, roce_active_mtu=active,
                           recommended_mtu=ROCE_NETDEV_MTU_FOR_4096))
    return out
