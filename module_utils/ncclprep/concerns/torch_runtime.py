"""The torch_runtime concern: the pinned torch in its own venv on every node.

Reading: node.read_facts runs the venv's python (facts ``torch_runtime``). Intent:
``intent``. Check: ``versions.torch``.
"""

from __future__ import annotations

from ansible.module_utils.ncclprep.model import (
    Check,
    Context,
    HostRecord,
    facts_of,
    intent_of,
    majority,
    verdict,
)


def _base(version: object) -> str:
    """A version without its local label: ``2.13.0+cpu`` -> ``2.13.0``."""
    return str(version).split("+")[0]


def check(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """versions.torch: torch is installed at the pinned version (local label ignored) on every host.

    facts ``versions.torch``: the installed version or None; intent ``torch_runtime.version``:
    the pin (None: not pinned, any version passes). FAIL names hosts without torch or off the
    pin (measured: host -> version); expected: the most common pin. No check without hosts.
    """
    seen = {h: (facts_of(r).get("versions") or {}).get("torch") for h, r in records.items()}
    if not seen:
        return []
    pins = {h: (intent_of(r, "torch_runtime") or {}).get("version") for h, r in records.items()}
    bad = sorted(h for h, v in seen.items() if v is None or (pins.get(h) and _base(v) != _base(pins[h])))
    expected = majority(pins) if pins else None
    return [verdict("versions.torch", bad, measured=seen, expected=expected,
                    message=f"torch missing or not at the pin on {', '.join(bad)} "
                            f"({', '.join(f'{h}={seen[h]}' for h in bad)})",
                    remediation="re-run site.yml (role torch_runtime)",
                    passed=f"torch {majority(seen)} on every host", passed_measured=majority(seen))]


# This concern's entry in the registry (concerns/__init__.py).
SWITCH = None
DATA_PLANE = False
FACTS = False
IDS = ("versions.torch",)


#: The variables the intent is computed from (concerns.intent hands over these only).
INTENT_VARS = ("torch_runtime_version", "torch_runtime_venv")
#: The facts it takes from the node: none (the installed torch is what it sets).
INTENT_FACTS = ()


def intent(v: dict, node: dict) -> dict:
    """``{version (the pin), python, torchrun (the venv's)}``."""
    venv = v["torch_runtime_venv"]
    return {"version": v["torch_runtime_version"], "python": f"{venv}/bin/python", "torchrun": f"{venv}/bin/torchrun"}
