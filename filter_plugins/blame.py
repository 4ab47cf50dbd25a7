"""The collective blame's round-by-round planning, on the controller (roles/preflight/tasks/blame.yml).

Filters ``ncclprep_collective_trigger``, ``ncclprep_collective_plan`` and
``ncclprep_blame_round``: the logic is ``collective_plan`` and ``blame_round`` in
module_utils/ncclprep/blame.py and ``collective_trigger`` in checks/collectives.py. Like
filter_plugins/ncclprep.py, this file puts the repository's src/ on sys.path and imports the
ncclprep package first.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

# ncclprep must be imported before ansible.module_utils.ncclprep: keep this order.
# isort: off
import ncclprep  # noqa: E402,F401  (extends ansible.module_utils.__path__)
from ansible.errors import AnsibleFilterError  # noqa: E402
from ansible.module_utils.ncclprep.blame import blame_round, collective_plan  # noqa: E402
from ansible.module_utils.ncclprep.checks.collectives import collective_trigger  # noqa: E402
# isort: on


def _probes(hostvars: Mapping, hosts: list, var: str) -> dict:
    """host -> the ``probe`` of the result registered as ``var`` on it (None when absent)."""
    return {h: ((hostvars.get(h) or {}).get(var) or {}).get("probe") for h in hosts}


def trigger(hostvars: Mapping, hosts: list, var: str, floor=None) -> dict:
    """``collective_trigger`` over the hosts' results registered as ``var``."""
    try:
        return collective_trigger(_probes(hostvars, hosts, var), None if floor is None else float(floor))
    except (TypeError, ValueError, KeyError) as exc:
        raise AnsibleFilterError(f"ncclprep_collective_trigger: {exc}") from exc


def plan(hosts: list, history: list, z=-3.5, ratio=0.5, floor=None) -> dict:
    """``collective_plan`` (raises AnsibleFilterError naming the input for fewer than 2 hosts)."""
    try:
        return collective_plan(list(hosts), list(history or []), float(z), float(ratio),
                               None if floor is None else float(floor))
    except (TypeError, ValueError, KeyError) as exc:
        raise AnsibleFilterError(f"ncclprep_collective_plan: hosts={list(hosts)!r}: {exc}") from exc


def round_result(next_plan: Mapping, hostvars: Mapping, var: str) -> dict:
    """``blame_round`` of ``next_plan`` from the results registered as ``var``."""
    hosts = [g[0] for g in next_plan.get("groups") or []]
    return blame_round(next_plan, _probes(hostvars, hosts, var))


class FilterModule:
    """The collective blame filters."""

    def filters(self):
        return {"ncclprep_collective_trigger": trigger, "ncclprep_collective_plan": plan,
                "ncclprep_blame_round": round_result}
