"""``mlnx_qos -i IF`` (Mellanox/NVIDIA mlnx-tools, python/mlnx_qos): trust state and PFC of a netdev.

It prints ``Priority trust state: dscp`` (``none`` when the driver cannot report trust) and a
``PFC configuration:`` table whose ``enabled`` row holds one 0/1 per priority under a
``priority`` header row, plus DCBX mode, cable length, the dscp2prio map, receive buffers and
tc rows. The roce_qos module (``module_utils/ncclprep/concerns/roce_qos.py`` for the rules) reads it.
Standard library only.
"""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.parsers import PRIORITIES, on_off, unknown_priority_map

#: Trust states mlnx_qos reports that roce_qos can set.
TRUST_STATES = ("dscp", "pcp")

_TRUST_RE = re.compile(r"^Priority trust state:\s*(\S*)\s*$")
_DCBX_RE = re.compile(r"^DCBX mode:\s*(.+?)\s*$")
_CABLE_RE = re.compile(r"^Cable len:\s*(\d+)\s*$")
_ROW_RE = re.compile(r"^(priority|enabled|buffer)\s+((?:\d+\s*)+)$")
_KNOWN_RES = (
    re.compile(r"^prio:\d+(\s+dscp:[\d,]*)?$"),              # dscp2prio / default priority rows
    re.compile(r"^(dscp2prio mapping|default priority|PFC configuration):$"),
    re.compile(r"^Receive buffer size \(bytes\):"),
    re.compile(r"^tc:\s*\d+\s+ratelimit:"),
    re.compile(r"^priority:\s*\d+$"),                          # priorities of a tc
)
_WARNING_RES = (
    re.compile(r"WARNING"),
    re.compile(r"not supported on your system"),
)


def parse_mlnx_qos(text: str) -> dict:
    """Parse ``mlnx_qos -i IF`` output.

    Returns ``{"trust": "dscp" | "pcp" | None, "pfc": {prio: bool | None}, "dcbx": str | None,
    "cable_len": int | None, "warnings": [lines], "unparsed": [lines]}``. ``trust`` is None when
    the line is missing or reads ``none`` (mlnx_qos prints that when the driver cannot report
    trust). ``pfc`` comes from the ``enabled`` row under ``PFC configuration:``, matched to the
    ``priority`` header row; without it every priority is None. Lines mlnx_qos prints as
    warnings (lldpad running, "... is not supported on your system") go to ``warnings``; the
    dscp2prio map, buffer and tc rows are recognised and skipped; any other line goes to
    ``unparsed``. Never raises.
    """
    out = {"trust": None, "pfc": unknown_priority_map(), "dcbx": None, "cable_len": None,
           "warnings": [], "unparsed": []}
    header: list[int] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if any(r.search(stripped) for r in _WARNING_RES):
            out["warnings"].append(stripped)
            continue
        m = _TRUST_RE.match(stripped)
        if m:
            out["trust"] = m.group(1) if m.group(1) in TRUST_STATES else None
            continue
        m = _DCBX_RE.match(stripped)
        if m:
            out["dcbx"] = m.group(1)
            continue
        m = _CABLE_RE.match(stripped)
        if m:
            out["cable_len"] = int(m.group(1))
            continue
        m = _ROW_RE.match(stripped)
        if m:
            values = [int(v) for v in m.group(2).split()]
            if m.group(1) == "priority":
                header = values
            elif m.group(1) == "enabled":
                prios = header if header and len(header) == len(values) else list(PRIORITIES)[:len(values)]
                for prio, value in zip(prios, values, strict=False):
                    if prio in out["pfc"]:
                        out["pfc"][prio] = on_off(value)
            continue
        if any(r.match(stripped) for r in _KNOWN_RES):
            continue
        out["unparsed"].append(line)
    return out
