"""Option values checked and converted as an Ansible argument spec converts them, for the readings
that also run without Ansible (``ncclprep node check``; module_utils/ncclprep/node/read.py read_node).

A value from the inventory may arrive as text (``-e roce_qos_ecn=false``, an INI inventory):
Ansible's argument spec turns ``"false"`` into False and ``"ed25519"`` into ``["ed25519"]``; a
reading handed the raw value would take ``bool("false")`` for True. ``coerce`` applies the same
rules (ansible-core's module_utils/common/validation.py: check_type_bool, check_type_list,
check_type_int, check_type_float; parsing/convert_bool.py for the boolean words).
"""

from __future__ import annotations

#: The words Ansible reads as booleans (parsing/convert_bool.py), lower case.
BOOLEANS_TRUE = frozenset({"y", "yes", "on", "1", "true", "t"})
BOOLEANS_FALSE = frozenset({"n", "no", "off", "0", "false", "f"})


def _bool(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in BOOLEANS_TRUE | BOOLEANS_FALSE:
        return value.strip().lower() in BOOLEANS_TRUE
    raise ValueError("not a boolean (true/false, yes/no, on/off, 1/0)")


def _list(value):
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, (int, float)):
        return [str(value)]
    raise ValueError("not a list (nor a comma-separated text)")


def _int(value):
    if isinstance(value, bool):
        raise ValueError("not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise ValueError("not an integer")


def _float(value):
    if isinstance(value, bool):
        raise ValueError("not a number")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError("not a number") from None


def _str(value):
    if isinstance(value, (dict, list)):
        raise ValueError("not a text")
    return str(value)


def _dict(value):
    if isinstance(value, dict):
        return value
    raise ValueError("not a dict")


CONVERT = {"str": _str, "path": _str, "bool": _bool, "list": _list, "int": _int, "float": _float, "dict": _dict}


def coerce(spec: dict, options: dict | None, where: str) -> dict:
    """``options`` checked against ``spec`` (an Ansible argument spec: ``{name: {type, default,
    choices, elements}}``), converted to each option's type, defaults filled in; None stays None.
    ``where`` names the options' owner in errors. Raises ValueError naming ``where``, the option
    and the value for an unknown option, a value of the wrong type or outside ``choices``."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(spec))
    if unknown:
        raise ValueError(f"{where}: unknown option(s) {unknown}; valid: {sorted(spec)}")
    out = {}
    for name, rule in spec.items():
        value = options.get(name, rule.get("default"))
        if value is not None:
            try:
                value = CONVERT[rule.get("type", "str")](value)
                if rule.get("type") == "list" and rule.get("elements") in ("str", "path"):
                    value = [_str(v) for v in value]
                elif rule.get("type") == "list" and rule.get("elements") == "dict":
                    value = [_dict(v) for v in value]
            except ValueError as exc:
                raise ValueError(f"{where}: {name}={value!r}: {exc}") from None
            if rule.get("choices") and value not in rule["choices"]:
                raise ValueError(f"{where}: {name}={value!r}; valid: {', '.join(map(str, rule['choices']))}")
        out[name] = value
    return out
