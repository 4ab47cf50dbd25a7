"""The registry of concerns: what ncclprep provisions and checks, one module per concern.

A concern is its role (roles/<name>/) and its module here (``concerns/<name>.py``), which holds,
beside the concern's own logic:

- ``SWITCH``: the variable that turns it off (false), None when it is always on;
- ``DATA_PLANE``: True when it needs this node's data-plane interface (a node whose interface was
  not found skips it in validate.yml);
- ``FACTS``: True when its role reads live state off the node (roles/<name>/tasks/facts.yml,
  into ``ansible_facts.ncclprep.<name>``) before its intent is computed;
- ``IDS``: the ids of the checks it reports, as fnmatch patterns (``sysctl.*``); today's ids,
  kept for users' JUnit history, dashboards and metrics even where they predate the module's name;
- ``check(records, ctx) -> list[Check]``: the check of its intent against its facts
  (model.py: records, Context, Check);
- ``INTENT_VARS``, ``INTENT_FACTS`` and ``intent(v, node)``: the desired state, a pure function of
  the variables named in INTENT_VARS (the role's own, the membership ``data_plane``,
  ``data_plane_members``, ``data_plane_cidr``, an earlier concern's intent) and of the facts named
  in INTENT_FACTS (what it needs from the node and does not set: the firewall backend, the rx
  queues' names, the CPUs, the topology, the account's home); ``intent`` below hands over those
  only, so an intent cannot read what it sets (its role's tasks/intent.yml asks for it through
  lookup_plugins/ncclprep_intent.py);
- ``OPTIONS`` and ``read(run, options) -> dict`` where its facts come from a reader of its own
  (the role's ``<name>_reader`` variable; library/concern_facts.py and node.read_node run it):
  an Ansible argument spec and the reading (``run(argv, timeout) -> (rc, stdout, stderr)``).
  Without them node.read_facts reads its facts (host_names, sysctl_tuning, torch_runtime) or
  its own survey does (roce_qos).

``CONCERNS`` is the one list, in the order site.yml applies them and the report shows their checks.
playbooks/vars/concerns.yml hands it to the playbooks (lookup_plugins/ncclprep_concerns.py).
Adding a concern: its role and its module, and its name in CONCERNS.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ansible.module_utils.ncclprep.concerns import (
    firewall,
    host_names,
    nccl_env,
    nic_mtu,
    numa_pinning,
    roce_qos,
    rps_rfs,
    slurm_health,
    ssh_trust,
    sysctl_tuning,
    torch_runtime,
)
from ansible.module_utils.ncclprep.options import coerce

#: Every concern, in the order site.yml applies them.
CONCERNS: tuple[ModuleType, ...] = (host_names, nic_mtu, sysctl_tuning, rps_rfs, numa_pinning, roce_qos, ssh_trust,
                                    firewall, torch_runtime, nccl_env, slurm_health)


def name_of(concern: ModuleType) -> str:
    """The concern's name: its module's (``nic_mtu`` for concerns/nic_mtu.py)."""
    return concern.__name__.rsplit(".", 1)[-1]


#: name -> module
BY_NAME: dict[str, ModuleType] = {name_of(c): c for c in CONCERNS}
#: The concerns read by a reader of their own (``OPTIONS`` and ``read``), in registry order.
READERS: dict[str, ModuleType] = {n: c for n, c in BY_NAME.items() if getattr(c, "OPTIONS", None) is not None}


def rows() -> list[dict]:
    """The registry as the playbooks loop over it (playbooks/vars/concerns.yml): ``[{name, switch,
    data_plane, facts, reader}]`` in CONCERNS order; ``reader``: it has ``OPTIONS``/``read``."""
    return [{"name": n, "switch": c.SWITCH, "data_plane": c.DATA_PLANE, "facts": c.FACTS, "reader": n in READERS}
            for n, c in BY_NAME.items()]


def reader_options(concern: str, options: dict | None) -> dict:
    """``options`` of ``concern``'s reading checked and converted against its ``OPTIONS`` as Ansible
    would (options.coerce: ``"a,b"`` a list, ``"10"`` a number), defaults filled in. Raises
    ValueError naming the concern, option and value for an unknown concern or option, a wrong type
    or a value outside an option's choices."""
    if concern not in READERS:
        raise ValueError(f"{concern!r} is not a concern read here (valid: {', '.join(READERS)})")
    return coerce(READERS[concern].OPTIONS, options, concern)


def read(concern: str, run, options: dict | None) -> dict:
    """Read ``concern``'s facts with ``options`` (``reader_options``) through ``run``. Raises
    ValueError as ``reader_options`` does, or from the reading (a bad firewall backend)."""
    return READERS[concern].read(run, reader_options(concern, options))


def intent_inputs(concern: str, variables: Mapping, facts: Mapping | None) -> tuple[dict, dict]:
    """``(v, node)``: what ``concern``'s intent is computed from, ``variables[name]`` for each name
    of its INTENT_VARS (None where not defined) and its facts (``ansible_facts.ncclprep.<concern>``)
    cut to INTENT_FACTS: ``key`` as read, ``key:keys`` the sorted keys of a mapping (rps_rfs takes
    its rx queues' names, not their settings). Raises KeyError for a concern without an intent."""
    module = BY_NAME[concern]
    if not hasattr(module, "intent"):
        raise KeyError(f"{concern}: its intent is not computed here (its role's tasks/intent.yml computes it)")
    v = {name: variables.get(name) for name in module.INTENT_VARS}
    facts = facts or {}
    node = {}
    for key in module.INTENT_FACTS:
        name, _, part = key.partition(":")
        value = facts.get(name)
        node[name] = sorted(value or {}) if part == "keys" else value
    return v, node


def intent(concern: str, variables: Mapping, facts: Mapping | None) -> Any:
    """``concern``'s intent (its module's ``intent``) from its declared inputs only
    (``intent_inputs``). Raises KeyError for a concern without an intent, and ValueError/TypeError
    from the concern for a bad value."""
    v, node = intent_inputs(concern, variables, facts)
    return BY_NAME[concern].intent(v, node)
