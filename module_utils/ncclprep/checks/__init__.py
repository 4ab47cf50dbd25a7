"""The checks of validate.yml: per-host records in, an ordered list of checks out.

The record. ``evaluate`` reads host -> ``HostRecord`` (model.py), built on each node by the
preflight engine (node/preflight.py; its first node gathers them, and validate.yml takes them from
it, roles/preflight/tasks/engine.yml)::

    {"alive": bool,              # False: never took part (unreachable, failed, or joined too late)
     "facts": dict | None,       # the node's reading (node/read.py, and facts[<concern>]); None: none
     "intent": {<concern>: ...}, # each concern's intent as site.yml installed it, or None
     "ssh": list | None,         # the logins to its peers (probes/sshmesh.py)
     "counters": dict | None,    # the port error counters when the run ends (facts.counters: when it starts)
     "net": dict | None,         # the network probe's result (directions this host sent)
     "drift": list | None,       # drift.check_all rows (files site.yml manages, against its record)
     "probe": dict | None,       # the collectives' result (probes/job.py)
     "blame": dict | None,       # the collective blame (pairs, bisect) after bad collectives
     "smoke": dict | None}       # the training smoke job's result (probes/smoke.py)

The check model. A check (``Check``) is ``{id, status, hosts, measured, expected, message,
remediation}``: a stable dotted id, a status of STATUSES (BAD ones fail the run), the hosts
or links to blame (sorted), the measured and expected values, a one-line message and a
one-line remediation. Most checks collect their problems first and then call
``model.verdict``: FAIL naming the problems, or PASS.

The registry. ``REGISTRY`` lists the check functions in report order: each concern's ``check``
from its module (concerns/<name>.py, the concerns of concerns.CONCERNS, names in
``CONCERN_MODULES``) and the preflight's own modules here (``PREFLIGHT_MODULES``: reachable,
data_plane, versions, limits, links, tools, dataset, drift, network, collectives, smoke). Every function is
``check(records, ctx) -> list[Check]`` with ``ctx`` a ``model.Context``; concern checks see
only the hosts that gave facts. A concern's check comes with its module (concerns/__init__.py).

Every import in this package is absolute (``ansible.module_utils.ncclprep.checks...``):
that is the only form Ansible follows when it ships module_utils with a module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from ansible.module_utils.ncclprep.checks.collectives import (
    check_blame,
    check_collectives,
    check_transport,
    summarize_collectives,
)
from ansible.module_utils.ncclprep.checks.data_plane import check_interface
from ansible.module_utils.ncclprep.checks.dataset import check_dataset
from ansible.module_utils.ncclprep.checks.drift import check_drift
from ansible.module_utils.ncclprep.checks.limits import check_limits
from ansible.module_utils.ncclprep.checks.links import check_links
from ansible.module_utils.ncclprep.checks.network import check_network, summarize_network
from ansible.module_utils.ncclprep.checks.reachable import check_reachable
from ansible.module_utils.ncclprep.checks.smoke import check_smoke
from ansible.module_utils.ncclprep.checks.tools import check_tools
from ansible.module_utils.ncclprep.checks.versions import check_versions
from ansible.module_utils.ncclprep.concerns import CONCERNS, name_of
from ansible.module_utils.ncclprep.model import (
    BAD,
    STATUSES,
    Check,
    Context,
    HostRecord,
    make_check,
    overall,
    verdict,
)

__all__ = [
    "BAD", "CONCERN_MODULES", "NODE_MODULES", "PREFLIGHT_MODULES", "REGISTRY", "STATUSES", "SUPPORT_MODULES",
    "Check", "Context", "Entry", "HostRecord", "evaluate", "evaluate_node", "make_check", "overall",
    "summarize_collectives", "summarize_network", "verdict",
]


class Entry(NamedTuple):
    """One registry entry: ``module`` (its module under checks/), ``check`` (the function) and
    ``with_facts_only`` (True: it sees only the records of hosts that gave facts)."""

    module: str
    check: Callable[[dict, Context], list[Check]]
    with_facts_only: bool = True


#: Every check function, in report order: reachable and data_plane, then every concern's in the
#: registry's order (concerns.CONCERNS), then the preflight's own.
REGISTRY: tuple[Entry, ...] = (
    Entry("reachable", check_reachable, with_facts_only=False),
    Entry("data_plane", check_interface),
    *(Entry(name_of(c), c.check) for c in CONCERNS),
    Entry("versions", check_versions),
    Entry("limits", check_limits),
    Entry("links", check_links),
    Entry("tools", check_tools),
    Entry("dataset", check_dataset),
    Entry("drift", check_drift, with_facts_only=False),
    Entry("network", check_network, with_facts_only=False),
    Entry("collectives", check_collectives, with_facts_only=False),
    Entry("collectives", check_transport, with_facts_only=False),
    Entry("collectives", check_blame, with_facts_only=False),
    Entry("smoke", check_smoke, with_facts_only=False),
)

#: Check modules that belong to the preflight itself, not to a concern of concerns.CONCERNS.
PREFLIGHT_MODULES = ("reachable", "data_plane", "versions", "limits", "links", "tools", "dataset", "drift", "network",
                     "collectives", "smoke")
#: Modules of this package that hold no check (the model and shared helpers).
SUPPORT_MODULES = ("model",)
#: The concerns (concerns.CONCERNS), whose checks live in their modules under concerns/.
CONCERN_MODULES = tuple(name_of(c) for c in CONCERNS)
#: The check modules that judge a host by its own record (facts and intent) alone, the checks
#: ``ncclprep node check`` runs on a node (``evaluate_node``): every concern's, and the preflight's
#: data_plane, limits, links, tools and dataset. The others need the cluster (reachable, versions:
#: the hosts against each other; network, collectives, smoke: runs between nodes) or the controller
#: (drift: site.yml's templates rendered again). A host's own facts include what it saw of the
#: others: host_names resolves and connects to every member (names.reachable).
NODE_MODULES = tuple(dict.fromkeys(e.module for e in REGISTRY
                                   if e.module in CONCERN_MODULES or e.module in ("data_plane", "limits", "links",
                                                                                  "tools", "dataset")))


def evaluate(records: dict[str, HostRecord], all_hosts: list[str], min_busbw_gbps: float | None = None,
             net_limits: dict | None = None, expect_net: str | None = None) -> list[Check]:
    """All checks for the cluster, in report order: every REGISTRY entry in turn.

    ``records``: host -> ``HostRecord`` (partial records are read with absent keys as None);
    ``all_hosts``: every host the run was meant to cover (a host missing from ``records``
    is reported unreachable); ``min_busbw_gbps``: busbw floor in GB/s (GB = 1e9 bytes) at the
    largest message size, None for none; ``expect_net``: the network NCCL must use (``ib``,
    ``socket``; None: any); ``net_limits``: the net.* limits (``Context.NET_LIMITS``
    keys; absent ones keep Context's defaults). Returns the checks (``Check``); raises
    TypeError for an unknown limit, nothing for well-formed records.
    """
    limits = {k: v for k, v in (net_limits or {}).items()}
    unknown = sorted(set(limits) - set(Context.NET_LIMITS))
    if unknown:
        raise TypeError(f"unknown net limits {unknown}; valid: {list(Context.NET_LIMITS)}")
    if expect_net not in (None, "ib", "socket"):
        raise TypeError(f"expect_net={expect_net!r}: valid: ib, socket or null")
    ctx = Context(all_hosts=tuple(all_hosts), min_busbw_gbps=min_busbw_gbps, expect_net=expect_net, **limits)
    with_facts = {h: r for h, r in records.items() if (r or {}).get("facts")}
    out: list[Check] = []
    for entry in REGISTRY:
        out.extend(entry.check(with_facts if entry.with_facts_only else records, ctx))
    return out


def evaluate_node(host: str, record: HostRecord, only: Iterable[str] | None = None) -> list[Check]:
    """The checks of NODE_MODULES (``only``: those of these modules; None: all) for one host
    judged alone: what validate.yml reports from this host's record as the only host, in report
    order. ``record``: the host's ``HostRecord`` (``ncclprep node check`` gives ``alive``,
    ``facts`` and ``intent``). Raises ValueError naming an ``only`` entry outside NODE_MODULES."""
    wanted = NODE_MODULES if only is None else tuple(only)
    unknown = [m for m in wanted if m not in NODE_MODULES]
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not a check of one node; valid: {', '.join(NODE_MODULES)}")
    ctx = Context(all_hosts=(host,))
    records = {host: record} if (record or {}).get("facts") else {}
    out: list[Check] = []
    for entry in REGISTRY:
        if entry.module in wanted:
            out.extend(entry.check(records, ctx))
    return out
