"""``dcb`` (iproute2 >= 6.1 for ``apptrust``): the PFC and trust state of a netdev.

With ``-j`` (dcb(8)) ``dcb -j pfc show dev IF`` prints one object whose ``prio_pfc`` is an
array of 8 booleans, priority 0 first (iproute2 dcb/dcb_pfc.c, dcb_print_array_on_off), and
``dcb -j apptrust show dev IF`` prints ``{"order": ["dscp", ...]}`` (dcb/dcb_apptrust.c).
The roce_qos module (``module_utils/ncclprep/concerns/roce_qos.py`` for the rules) reads them. Priority
maps are ``{prio (int 0..7): bool | None}``; None is "not shown". Standard library only.
"""

from __future__ import annotations

import json

from ansible.module_utils.ncclprep.parsers import on_off, unknown_priority_map


def _json_object(text: str) -> dict | None:
    """The one JSON object of ``text`` (a one-element list counts), None when it is not that."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError):
        return None
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    return data if isinstance(data, dict) else None


def parse_dcb_pfc(json_text: str) -> dict:
    """Parse ``dcb -j pfc show dev IF`` into ``{prio (0..7): bool | None}``.

    Reads ``prio_pfc``: an array of 8 booleans in iproute2 (index = priority); the strings
    ``on``/``off`` and an object keyed by priority are accepted too. A priority the output does
    not show, or the whole map when the text is not dcb's JSON, is None. Never raises.
    """
    out = unknown_priority_map()
    data = _json_object(json_text)
    if data is None:
        return out
    raw = data.get("prio_pfc")
    if isinstance(raw, list):
        items = enumerate(raw)
    elif isinstance(raw, dict):
        items = ((int(k), v) for k, v in raw.items() if str(k).isdigit())
    else:
        return out
    for prio, value in items:
        if prio in out:
            out[prio] = on_off(value)
    return out


def parse_dcb_apptrust(json_text: str) -> list[str] | None:
    """Parse ``dcb -j apptrust show dev IF`` into the trust order, most trusted first.

    ``{"order": ["dscp", "pcp"]}`` gives ``["dscp", "pcp"]``; an empty order (nothing trusted)
    gives []. None when the text is not that JSON. Never raises.
    """
    data = _json_object(json_text)
    if data is None or not isinstance(data.get("order"), list):
        return None
    return [str(sel) for sel in data["order"]]


def trust_from_order(order: list[str] | None) -> str | None:
    """The trust state an apptrust order amounts to: its first selector (``dscp``, ``pcp``, ...).

    [] (nothing trusted) gives ``"none"``; None (unreadable) gives None. Rule: dcb-apptrust(8),
    the order says which selector takes precedence.
    """
    if order is None:
        return None
    return order[0] if order else "none"
