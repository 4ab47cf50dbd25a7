"""The check model and the per-host record that every check reads.

A check (``Check``) is a dict with stable keys: ``id`` (stable, dotted, e.g.
``sysctl.net.core.somaxconn``), ``status`` (one of STATUSES), ``hosts`` (the hosts or
links to blame, sorted, no duplicates), ``measured``, ``expected`` (any JSON value),
``message`` (one line) and ``remediation`` (one line).

A host record (``HostRecord``) is what the preflight knows about one host at the end of
the run; the preflight engine builds it on each node (node/preflight.py) and its first node
gathers them all.

Pure Python, no Ansible: imported as ``ansible.module_utils.ncclprep.model``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

STATUSES = ("PASS", "WARN", "FAIL", "SKIP", "HANG")
BAD = ("FAIL", "HANG")


class Check(TypedDict):
    """One check of the report (see the module docstring for each key)."""

    id: str
    status: str
    hosts: list[str]
    measured: Any
    expected: Any
    message: str
    remediation: str


class HostRecord(TypedDict):
    """Everything the checks know about one host.

    - ``alive``: False when the host never took part (unreachable, its engine failed, or it
      did not join the first node's store by the deadline); True otherwise.
    - ``facts``: what the node's reading gave (node/read.py read_node, as library/node_facts.py
      returns it) and, under ``facts[<concern>]``, each concern's live state read by its reader
      (module_utils/ncclprep/concerns/<concern>.py); None when the reading failed. Checks
      compare ``intent[<concern>]`` with these.
    - ``intent``: concern name -> that concern's intent on the host (the desired state its role
      computed and site.yml installed, e.g. ``intent["sysctl_tuning"]`` the merged sysctl dict,
      ``intent["torch_runtime"]["version"]`` the pinned torch, ``intent["nic_mtu"]["mtu"]`` the
      MTU in bytes), or None where the concern is off or its intent was not computed.
    - ``ssh``: this host's logins to its peers (probes/sshmesh.py run_in_rounds: ``[{host,
      name, ok, cause, explanation}]``), or None when they did not run.
    - ``counters``: the port error counters read when the run ends (portstate.read_counters:
      the RDMA ports' and the data-plane netdev's; ``facts["counters"]`` holds them as read
      when it started), or None when not read.
    - ``drift``: the rows of drift.check_all (every file site.yml manages on the host, against
      its record of what it wrote), or None when not compared.
    - ``net``: the network probe's result (probes/net.py probe: the directions this host
      measured as the sender), or None when it did not run.
    - ``probe``: the collectives' result (probes/job.py host_collectives), or None.
    - ``blame``: the collective blame run after bad collectives (the same on every host):
      ``{trigger: collectives.collective_trigger, verdict: blame.collective_plan's last plan,
      rounds: its history}``, or None when the collectives needed none.
    - ``smoke``: the training smoke job's result (probes/smoke.py run_job), or None.

    Checks also accept partial records (absent keys read as None; absent ``alive`` as True).
    """

    alive: bool
    facts: dict | None
    intent: dict[str, Any]
    ssh: list | None
    counters: dict | None
    drift: list | None
    net: dict | None
    probe: dict | None
    blame: dict | None
    smoke: dict | None


@dataclass(frozen=True)
class Context:
    """What a check may need beyond the records: ``all_hosts`` (every host the run was meant
    to cover, inventory order), ``min_busbw_gbps`` (busbw floor in GB/s, GB = 1e9 bytes,
    at the largest message size; None: no floor), and the network limits of net.*:
    ``max_latency_us`` (TCP round-trip p50 limit in microseconds; None: none), ``slow_z`` and
    ``slow_ratio`` (a bandwidth is slow below this modified z-score and this fraction of the
    median, blame.slow_outliers), ``min_gbps`` (bandwidth floor in GB/s; None: none);
    ``expect_net``: the network NCCL must have used (``ib`` or ``socket``; None: any)."""

    all_hosts: tuple[str, ...]
    min_busbw_gbps: float | None = None
    max_latency_us: float | None = 50.0
    slow_z: float = -3.5
    slow_ratio: float = 0.5
    min_gbps: float | None = None
    #: collective.transport: the network NCCL must use, "ib" or "socket" (None: not held).
    expect_net: str | None = None
    #: net.bandwidth: one stream's floor as this fraction of the slower end's link speed
    #: (ethtool's, Gb/s / 8 in GB/s); None: no floor from the link speed.
    link_floor_ratio: float | None = 0.1

    #: The net.* limits cluster_report passes (all but link_floor_ratio are also the network
    #: probe's options of the same names, probes/net.py OPTIONS).
    NET_LIMITS = ("max_latency_us", "slow_z", "slow_ratio", "min_gbps", "link_floor_ratio")


def make_check(cid: str, status: str, hosts: Iterable[str] = (), measured: Any = None, expected: Any = None,
               message: str = "", remediation: str = "") -> Check:
    """Build one check; ``hosts`` (any iterable, a dict gives its keys) is sorted and deduplicated.

    Raises ValueError for a status not in STATUSES.
    """
    if status not in STATUSES:
        raise ValueError(f"check {cid}: status {status!r} not in {STATUSES}")
    return Check(id=cid, status=status, hosts=sorted(set(hosts)), measured=measured, expected=expected,
                 message=message, remediation=remediation)


_PROBLEMS = object()
_SAME = object()


def verdict(cid: str, problems: Mapping[str, Any] | Iterable[str], *, message: str, remediation: str,
            passed: str, blame: Iterable[str] | None = None, measured: Any = _PROBLEMS, expected: Any = None,
            passed_measured: Any = None, passed_expected: Any = _SAME) -> Check:
    """The shared verdict: a check first collects its problems, then FAILs on any or PASSes.

    ``problems``: host -> what is wrong there (a dict), or the hosts/links at fault (a list);
    empty means PASS. FAIL blames ``blame`` (default: the problems' hosts, i.e. the dict's
    keys or the list's items), with ``measured`` (default: ``problems`` itself),
    ``expected``, ``message`` and ``remediation``. PASS has no hosts, ``passed_measured``,
    ``passed_expected`` (default: ``expected``) and the message ``passed``. Messages are
    built by the caller (they may name the problems). Raises nothing of its own.
    """
    if problems:
        return make_check(cid, "FAIL", problems if blame is None else blame,
                          measured=problems if measured is _PROBLEMS else measured, expected=expected,
                          message=message, remediation=remediation)
    return make_check(cid, "PASS", (), measured=passed_measured,
                      expected=expected if passed_expected is _SAME else passed_expected, message=passed)


def retry_evidence(name: str, errors: list[str]) -> str:
    """How one target passed only on a retry: ``"<name>: ok on try <n> after <errors>"``, with
    ``errors`` the failed tries' errors in order (n = len(errors) + 1)."""
    return f"{name}: ok on try {len(errors) + 1} after {'; '.join(errors)}"


def retried_warning(cid: str, retried: Mapping[str, list[str]], *, summary: str, expected: str,
                    remediation: str, limit: int = 400) -> Check:
    """The house's rule for a transient fault: a try that failed once and passed on the retry is
    a WARN with the evidence, never a FAIL (a fault that persists fails every try and is a FAIL).

    ``retried``: link or direction (``"a -> b"``) -> its evidence lines (retry_evidence's);
    ``summary``: the message's head, e.g. ``"2 of 12 logins passed only on a retry"``. The WARN
    names the links, measures ``retried`` and lists them, sorted, after the summary as
    ``a -> b (evidence, ...)``, cut at ``limit`` characters. Used by ssh.trust, names.reachable
    and net.run.
    """
    listed = "; ".join(f"{k} ({', '.join(v)})" for k, v in sorted(retried.items()))
    return make_check(cid, "WARN", retried, measured=dict(retried), expected=expected,
                      message=f"{summary}: {listed[:limit]}", remediation=remediation)


def overall(checks: list[Check]) -> str:
    """Cluster status: FAIL when any check is FAIL or HANG, else PASS (WARN and SKIP pass)."""
    return "FAIL" if any(c["status"] in BAD for c in checks) else "PASS"


def facts_of(record: Mapping[str, Any] | None) -> dict:
    """A record's node facts, ``{}`` when it has none."""
    return (record or {}).get("facts") or {}


def intent_of(record: Mapping[str, Any] | None, concern: str) -> Any:
    """A record's intent for ``concern`` (a concern name of concerns.CONCERNS), None when absent."""
    return ((record or {}).get("intent") or {}).get(concern)


def majority(values: Mapping[str, Any]) -> Any:
    """Most common value of a host -> value dict (ties broken by the smallest repr, for
    stable reports). Raises ValueError when ``values`` is empty."""
    if not values:
        raise ValueError("majority of no values")
    counts = Counter(values.values())
    best = max(counts.values())
    return sorted((v for v, n in counts.items() if n == best), key=repr)[0]
