"""``ethtool <dev>`` (link settings) and ``ethtool -i <dev>`` (driver information) text.

``ethtool <dev>`` prints ``Settings for <dev>:`` and then tab-indented ``Key: value`` lines; a
list value (``Supported link modes``, ``Advertised link modes``, ``Current message level``)
continues on further lines that hold no colon, indented deeper than the key (under the value). Speeds are
printed in Mb/s, 10^6 bit/s (``Speed: 100000Mb/s`` is 100 Gb/s; the kernel's ethtool API counts
link speed in Mb/s, include/uapi/linux/ethtool.h); a link without carrier or a virtual device
prints ``Speed: Unknown!`` and ``Duplex: Unknown! (255)``. ``ethtool -i <dev>`` prints
``key: value`` lines: ``driver``, ``version``, ``firmware-version``, ``bus-info``,
``supports-*: yes|no``.
"""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.parsers import finding, on_off

_SETTINGS_RE = re.compile(r"^Settings for (\S+):\s*$")
_KEY_RE = re.compile(r"^([A-Za-z][\w ()/.-]*?):\s*(.*)$")
_SPEED_RE = re.compile(r"^(\d+)\s*Mb/s$")
#: Lines ethtool writes when a query fails; kept in ``unparsed``, never read as settings.
_ERROR_PREFIXES = ("Cannot ", "netlink error", "No data available", "Operation not supported")
#: ``ethtool -i`` keys always present in its result (None when not printed).
DRIVER_KEYS = ("driver", "version", "firmware_version", "expansion_rom_version", "bus_info", "supports_statistics",
               "supports_test", "supports_eeprom_access", "supports_register_dump", "supports_priv_flags")


def _modes(value: str | None) -> list[str]:
    if not value or value == "Not reported":
        return []
    return value.split()


def _yes_no(value: str | None) -> bool | None:
    return {"yes": True, "no": False}.get((value or "").strip().lower())


def parse_ethtool(text: str) -> dict:
    """Parse ``ethtool <dev>`` into a dict.

    Returns ``{"interface": str | None, "speed_mbps": int | None, "duplex": "Full" | "Half" | None,
    "port": str | None, "link_detected": bool | None, "auto_negotiation": bool | None,
    "supported_modes": [str], "advertised_modes": [str], "fields": {key: value}, "unparsed": [lines]}``.

    ``speed_mbps`` is in Mb/s as ethtool prints it (``speed_gbps`` converts); ``Unknown!`` speed or
    duplex reads None. ``port`` is as printed (``Direct Attach Copper``, ``FIBRE``, ``Twisted Pair``,
    ``Other``). ``link_detected`` is ``Link detected: yes|no``; ``auto_negotiation`` the
    ``Auto-negotiation: on|off`` line. Mode lists are the words of the ``Supported``/``Advertised
    link modes`` values (continuation lines included; ``Not reported`` gives []). ``fields`` holds
    every ``Key: value`` read (continuations joined with one space), so nothing read is lost.
    Lines before ``Settings for``, a second ``Settings for`` block, and ethtool's error lines
    (``Cannot get ...: Operation not permitted``) are unparsed. Never raises.
    """
    fields: dict[str, str] = {}
    unparsed: list[str] = []
    interface: str | None = None
    key: str | None = None
    key_indent = 0
    done = False
    for line in text.splitlines():
        stripped = " ".join(line.split())
        if not stripped:
            continue
        m = _SETTINGS_RE.match(stripped)
        if m and interface is None:
            interface = m.group(1)
            continue
        done = done or bool(m)  # a second "Settings for" block: not this interface's
        if interface is None or done:
            unparsed.append(line)
            continue
        if stripped.startswith(_ERROR_PREFIXES):
            unparsed.append(line)
            key = None
            continue
        indent = len(line) - len(line.lstrip())
        if key is not None and indent > key_indent and ":" not in stripped:
            fields[key] = f"{fields[key]} {stripped}".strip()  # a list continued, indented under its value
            continue
        km = _KEY_RE.match(stripped)
        if km:
            key, key_indent = km.group(1), indent
            fields.setdefault(key, km.group(2))
            continue
        unparsed.append(line)
    speed = _SPEED_RE.match(fields.get("Speed", ""))
    duplex = fields.get("Duplex")
    return {"interface": interface, "speed_mbps": int(speed.group(1)) if speed else None,
            "duplex": duplex if duplex in ("Full", "Half") else None, "port": fields.get("Port") or None,
            "link_detected": _yes_no(fields.get("Link detected")),
            "auto_negotiation": on_off(fields.get("Auto-negotiation")),
            "supported_modes": _modes(fields.get("Supported link modes")),
            "advertised_modes": _modes(fields.get("Advertised link modes")), "fields": fields, "unparsed": unparsed}


def speed_gbps(parsed_or_mbps) -> float | None:
    """Link speed in Gb/s (10^9 bit/s) from ``parse_ethtool``'s dict or a Mb/s int; None when unknown.

    ``speed_gbps({"speed_mbps": 100000})`` -> 100.0; ``speed_gbps(25000)`` -> 25.0.
    """
    mbps = parsed_or_mbps.get("speed_mbps") if isinstance(parsed_or_mbps, dict) else parsed_or_mbps
    if isinstance(mbps, bool) or not isinstance(mbps, int):
        return None
    return mbps / 1000.0


def parse_ethtool_driver(text: str) -> dict:
    """Parse ``ethtool -i <dev>`` into ``{key: value, ..., "unparsed": [lines]}``.

    Keys are ethtool's with ``-`` as ``_``; the DRIVER_KEYS are always present (None when not
    printed or empty): ``driver`` (``mlx5_core``), ``version``, ``firmware_version`` as printed
    (``16.35.2000 (MT_0000000012)``), ``expansion_rom_version``, ``bus_info`` (PCI address
    ``0000:01:00.0``), and the ``supports_*`` flags as bool (``yes``/``no``; other text None).
    Other keys are kept as printed. Never raises.
    """
    out: dict = dict.fromkeys(DRIVER_KEYS)
    unparsed: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        key, sep, value = stripped.partition(":")
        key = key.strip().replace("-", "_")
        if not sep or not re.match(r"^[a-z][a-z0-9_]*$", key):
            unparsed.append(line)
            continue
        value = value.strip()
        out[key] = (_yes_no(value) if key.startswith("supports_") else value) if value else None
    out["unparsed"] = unparsed
    return out


def diagnose_ethtool(parsed: dict, host: str | None = None) -> list[dict]:
    """Findings for ``parse_ethtool`` output of one interface.

    - FAIL ``ethtool.no_link`` when ``Link detected: no`` (no carrier: cable, transceiver, the
      switch port, or the interface is administratively down).
    - WARN ``ethtool.speed_unknown`` when a link is detected but ethtool prints ``Speed: Unknown!``
      (virtual NICs such as virtio report no speed; on a physical data-plane NIC the link has not
      negotiated properly). No Speed line at all (``lo``) says nothing.
    Both carry ``speed_mbps`` and the subject is the interface (``host`` when ethtool named none).
    """
    out: list[dict] = []
    iface = parsed.get("interface") or host or "host"
    if parsed.get("link_detected") is False:
        out.append(finding("ethtool.no_link", "FAIL", iface, f"{iface}: no link detected (ethtool)",
                           f"check the cable or transceiver and the switch port; ip link set {iface} up if it is "
                           "administratively down", host=host, speed_mbps=parsed.get("speed_mbps")))
    elif parsed.get("link_detected") and "Speed" in parsed.get("fields", {}) and parsed.get("speed_mbps") is None:
        out.append(finding("ethtool.speed_unknown", "WARN", iface,
                           f"{iface}: link detected but speed unknown (Speed: {parsed['fields']['Speed']})",
                           "a virtual NIC reports no speed; on a physical NIC check autonegotiation, the "
                           "transceiver and ethtool -m", host=host, speed_mbps=None))
    return out
