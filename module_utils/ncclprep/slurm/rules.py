"""Slurm node health: what a verdict of ncclprep does to a node's Slurm state, as pure rules.

The slurm_health concern's HealthCheckProgram, Prolog and Epilog (issues 25 and 40) read the
node's state from ``sinfo``, judge the node (its last ``ncclprep node check``, or root's network
re-test) and act through ``scontrol update``; this module holds every rule between the reading
and the command, so that they are tested without Slurm. The rules follow NHC's conventions, what
users ask of a health check and what peers guard against (../shared/reviews/slurm.md sections 3
and 4, ../shared/reviews/peers.md, ../shared/reviews/security.md N1-N7):

- **A node's verdict judges that node** (``judged``): only failed rows that name the node itself;
  never a row that names other hosts only (a member down, a link between two others), never
  ``names.reachable`` (a member that does not answer is no fault of the node asking) nor
  ``firewall.ports_free`` (a job's own torchrun or any user's listener on a job port).
- A drain's reason starts with REASON_PREFIX (``ncclprep:``) and names the check with its
  measured and expected value (NHC: ``NHC: <note>``).
- **Only ncclprep's own marks are undone**: a drain is resumed only when its reason starts with
  the prefix and the node passes now (REPEAT_PREFIX drains never: a person looks at them). A node
  in any state but idle, allocated, mixed, completing or planned, or with a reason of someone
  else's (a human's drain, DOWN, FAIL, MAINT, a reservation, Slurm's "Prolog error") is left
  alone.
- UNKNOWN (ncclprep could not tell: no record, a timeout, a tampered store, a verdict that blames
  several nodes at once) neither drains nor resumes (mej/nhc#139 asks for this third outcome).
- A drain for a network check is resumed only by root's network re-test that passes, a drain for
  the node's own checks only by a node check that passes (network_drain).
- A node running a job is never drained by a network verdict alone: the job may be what loads
  the link (soperator waits for DRAIN+ALLOC to be idle).
- **Strikes in a window**: a network verdict drains only on its second strike with another
  partner (``strikes``) within ``window`` seconds (default STRIKE_WINDOW_S, 24 h as NVSentinel
  counts repeats), counted after the last recorded pass of root's re-test.
- **Repeat**: a node that fails again within the window after ncclprep resumed it is drained with
  REPEAT_PREFIX and left for a person (NVSentinel: the same fault twice in 24 h is hardware).
- **A circuit breaker** (``limit``): ncclprep holds at most min(max(1, 10 % of the nodes),
  ``max_drained``) nodes drained (NVSentinel caps by a share and by an absolute count). decide
  checks the cap on its reading; nodehealth.carry_out makes it hold under concurrency (a mark
  set before the re-reading: docs/slurm.md says why it holds).

Node states are sinfo's long names (``%T``; Slurm's doc/man/man1/sinfo.1, NODE STATE CODES).
Pure Python, no Slurm and no Ansible: imported as ``ansible.module_utils.ncclprep.slurm.rules``.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any

#: The start of every reason ncclprep drains with; the only drains it resumes.
REASON_PREFIX = "ncclprep:"
#: The start of a drain for a node that failed again within the window after ncclprep resumed it:
#: ncclprep never resumes it (a person does, with ``scontrol update State=RESUME``).
REPEAT_PREFIX = "ncclprep: repeat:"
#: Longest reason written (sinfo -R shows it whole; a short one reads better in its column).
REASON_MAX = 200
#: The sinfo format this module parses: ``sinfo --noheader --Node --format '%N|%T|%w|%f|%E'``
#: (name, long state, scheduling weight, available features, reason; the reason last since it
#: may hold ``|``).
SINFO_FORMAT = "%N|%T|%w|%f|%E"
#: States of a node that runs (or finishes) a job (sinfo %T; draining = allocated and drain).
BUSY = frozenset({"allocated", "mixed", "completing", "draining"})
#: States of a drained node, ncclprep's or another's.
DRAINED = frozenset({"drained", "draining", "drain"})
#: States in which ncclprep may act on a node that is not drained by it; any other (down, fail,
#: failing, maint, reserved, future, power states ...) is someone else's (review N7).
SCHEDULABLE = frozenset({"idle", "allocated", "mixed", "completing", "planned"})
#: Check ids whose verdict is about the network between nodes (the rest is the node itself).
NETWORK_PREFIXES = ("net.", "collective.", "torchrun.")
#: Check ids that never drain the node that reports them (review N1, N3, N4): a member that does
#: not answer; any listener on a job port (a running job's own torchrun); a node that did not take
#: part in or vanished from a network run (a store key deleted by anyone on a member node).
NOT_VERDICTS = frozenset({"names.reachable", "firewall.ports_free", "net.run"})
#: Distinct partners a network verdict needs in the ledger before it drains.
STRIKES = 2
#: Default seconds a strike counts (slurm_health_strike_window): 24 h, as NVSentinel's analyzer.
STRIKE_WINDOW_S = 86400.0
#: Share of the nodes ncclprep may hold drained at once (at least one node).
BREAKER_SHARE = 0.10
#: Default absolute cap on the nodes ncclprep holds drained at once (slurm_health_max_drained).
MAX_DRAINED = 8
#: The node feature a hook sets on its node while it decides to drain (nodehealth.carry_out):
#: ``ncclprep_draining_<epoch seconds>``; the others count it against the breaker.
MARK_PREFIX = "ncclprep_draining_"
#: Seconds after which a mark is a dead hook's and no longer counts: every hook runs under a
#: deadline well inside it (HealthCheckProgram 45 s, Prolog 9 s; carry_out gives up after
#: MARK_TTL_S / 2 between its mark and its drain).
MARK_TTL_S = 300.0
#: WARN rows that say the node is degraded but working (the WARN tier: the scheduler avoids the
#: node, nothing drains it): an RDMA port down beside the others (links.rdma), and any row a check
#: marks ``degraded: true``. Other WARNs are advice about settings and mark nothing.
DEGRADED = frozenset({"links.rdma"})
#: The node feature that marks a node ncclprep asked the scheduler to avoid:
#: ``ncclprep_avoid_<scope>_<the weight it had>`` (scope node or network); the weight it set is
#: AVOID_WEIGHT (or the old weight + 1 when that was higher). Slurm gives a job the nodes of the
#: lowest weight that fit it, so a marked node runs jobs only when the others are busy (autopilot's
#: WARN -> AppWrapper's PreferNoSchedule).
AVOID_PREFIX = "ncclprep_avoid_"
AVOID_WEIGHT = 1000000
#: sinfo's suffixes on a state: * not responding, ~ powered off, # powering up, % powering
#: down, ! pending power down, $ maintenance reservation, @ pending reboot, ^ reboot issued,
#: - planned (backfill), + more states.
_SUFFIXES = "*~#%!$@^-+"


def name_ends(name: str) -> list[str]:
    """The hosts a blamed name stands for: ``node1`` -> [node1]; a link ``node1 -> node2`` or
    ``node1 <-> node2`` -> both ends (the checks' names, checks/network.py). The rule of
    report.common.name_ends, kept here because the hooks run under the node's own Python, which
    has no Jinja2 for the report package."""
    ends = [e.strip() for e in str(name).replace("<->", "->").removeprefix("link ").split("->")]
    return ends if len(ends) == 2 else [str(name)]


def parse_sinfo(text: str) -> dict[str, dict]:
    """``sinfo --noheader --Node --format '%N|%T|%w|%f|%E'`` -> ``{node: {state, responding,
    drained, busy, weight, features, reason}}``.

    ``state``: the long state without its suffix (``idle``, ``drained``, ``mixed`` ...);
    ``responding``: False when sinfo marked it ``*``; ``weight``: its scheduling weight (an int);
    ``features``: the available features, a list ([] for ``(null)``); ``reason``: the text after
    the fourth ``|`` (it may hold ``|`` itself), None for ``none``. A node listed once per
    partition is kept once. Raises ValueError naming a line of another shape.
    """
    nodes: dict[str, dict] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("|", 4)
        if len(fields) != 5 or not fields[0].strip() or not fields[1].strip() or not fields[2].strip().isdigit():
            raise ValueError(f"sinfo line {n} is not '{SINFO_FORMAT}': {line!r}")
        raw = fields[1].strip().lower()
        state = raw.rstrip(_SUFFIXES)
        features = [f for f in fields[3].strip().split(",") if f and f != "(null)"]
        reason = fields[4].strip()
        nodes[fields[0].strip()] = {
            "state": state, "responding": "*" not in raw[len(state):],
            "drained": state in DRAINED, "busy": state in BUSY, "weight": int(fields[2]), "features": features,
            "reason": None if reason in ("", "none", "(null)") else reason,
        }
    return nodes


def avoided(info: Mapping[str, Any]) -> dict | None:
    """``{scope, weight}`` of the node's AVOID_PREFIX mark (the scope that set it and the weight the
    node had before), None when ncclprep does not ask the scheduler to avoid it."""
    for feature in info.get("features") or []:
        scope, _, weight = feature[len(AVOID_PREFIX):].rpartition("_") if feature.startswith(AVOID_PREFIX) \
            else ("", "", "")
        if scope in ("node", "network") and weight.isdigit():
            return {"scope": scope, "weight": int(weight)}
    return None


def degraded(rows: Iterable[Mapping[str, Any]], host: str) -> list[dict]:
    """The WARN rows of ``rows`` that say ``host`` is degraded but working (DEGRADED, or a row's own
    ``degraded: true``) and judge it as ``judged`` does (naming it, or naming no host)."""
    warns = [dict(r, status="FAIL") for r in rows
             if r.get("status") == "WARN" and (r.get("id") in DEGRADED or r.get("degraded") is True)]
    return [dict(r, status="WARN") for r in judged(warns, host)]


def ours(info: Mapping[str, Any]) -> bool:
    """True when the node is drained with a reason of ncclprep's."""
    return bool(info.get("drained")) and str(info.get("reason") or "").startswith(REASON_PREFIX)


def held(info: Mapping[str, Any]) -> bool:
    """True when the breaker counts the node as held by ncclprep: its reason is ncclprep's,
    whatever its state (drained, draining, or gone down since: ``down*`` keeps the reason)."""
    return str(info.get("reason") or "").startswith(REASON_PREFIX)


def marked(info: Mapping[str, Any], now: float, ttl: float = MARK_TTL_S) -> bool:
    """True when the node carries a live MARK_PREFIX feature: a hook on it is deciding to drain it
    (set at most ``ttl`` seconds before ``now``, epoch seconds, and at most ``ttl / 2`` after)."""
    for feature in info.get("features") or []:
        if feature.startswith(MARK_PREFIX):
            try:
                # a mark from ahead of this clock by more than the skew allowed is no mark: it
                # would hold a slot until that time came (docs/slurm.md: clocks within 150 s)
                if -ttl / 2 <= now - int(feature[len(MARK_PREFIX):]) <= ttl:
                    return True
            except ValueError:
                continue
    return False


def theirs(info: Mapping[str, Any]) -> str | None:
    """Why the node is someone else's to handle, or None when ncclprep may act on it: a reason
    that is not ncclprep's (a human's drain or note, Slurm's own), or a state outside SCHEDULABLE
    and not ncclprep's drain (down, fail, failing, maint, reserved, ...; review N7)."""
    reason = info.get("reason")
    if reason and not str(reason).startswith(REASON_PREFIX):
        return f"{info.get('state')} with a reason of someone else's ({reason!r})"
    if ours(info) or info.get("state") in SCHEDULABLE:
        return None
    return f"{info.get('state')}, a state ncclprep leaves to others"


def node_verdict(output: Mapping[str, Any] | None, rc: int | None) -> dict:
    """The verdict of ``ncclprep node check --json`` (its parsed output and exit code):
    ``{status, failed, why}``. status PASS (exit 0), FAIL (exit 1: ``failed`` holds the rows
    that failed or hung) or UNKNOWN (exit 3, killed, a timeout (rc None) or output that is not
    the command's: ``why`` says which). Raises nothing."""
    if rc == 0 and output and output.get("status") == "PASS":
        return {"status": "PASS", "failed": [], "why": None}
    if rc == 1 and output and isinstance(output.get("checks"), list):
        failed = [r for r in output["checks"] if r.get("status") in ("FAIL", "HANG")]
        if failed:
            return {"status": "FAIL", "failed": failed, "why": None}
    if rc is None:
        why = "the node check did not end in time"
    elif rc == 3:
        why = str((output or {}).get("error") or "the node check could not run (exit 3)")
    else:
        why = f"the node check ended with exit {rc} and no verdict of its own"
    return {"status": "UNKNOWN", "failed": [], "why": why}


def is_network(row: Mapping[str, Any]) -> bool:
    """True for a check about the network between nodes (NETWORK_PREFIXES)."""
    return str(row.get("id", "")).startswith(NETWORK_PREFIXES)


def partners(row: Mapping[str, Any], host: str) -> list[str]:
    """The other ends of the links ``row`` names that end at ``host`` (``"a -> b"``), sorted;
    [] when it names the host itself (a node blame: the median of all its pairs)."""
    out = set()
    for name in row.get("hosts") or []:
        ends = [e.strip() for e in str(name).split("->")]
        if len(ends) == 2 and host in ends:
            out.add(ends[1] if ends[0] == host else ends[0])
    return sorted(out)


def _value(value: Any, host: str) -> str:
    """A measured or expected value as a reason shows it: this host's where it is keyed by host, also
    one level down (net.bandwidth's ``{median_gbps, nodes: {host: why}, ...}``), else the links
    one level down that end at the host; a mapping as ``k: v, k: v``, a list joined with commas."""
    if isinstance(value, Mapping) and host not in value:
        inner = [v for v in value.values() if isinstance(v, Mapping)]
        mine = next((v for v in inner if host in v), None)
        links = {k: x for v in inner for k, x in v.items()
                 if host in [e.strip() for e in str(k).replace("<->", "->").split("->")]}
        value = mine if mine is not None else (links or value)
    if isinstance(value, Mapping) and host in value:
        value = value[host]
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {v}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def reason(rows: Iterable[Mapping[str, Any]], host: str) -> str:
    """The drain reason for the failed ``rows``: ``ncclprep: <id>: measured <m>, expected <e>``
    for the first (a part the row does not carry left out, its message when it carries neither),
    ``(+N more)`` for the rest, at most REASON_MAX characters; a measured or expected value keyed
    by host gives this host's."""
    rows = list(rows)
    if not rows:
        raise ValueError("a drain needs at least one failed check")
    first = rows[0]
    said = [f"{word} {_value(first[key], host)}" for word, key in (("measured", "measured"), ("expected", "expected"))
            if first.get(key) is not None]
    text = f"{REASON_PREFIX} {first.get('id')}: " + (", ".join(said) or str(first.get("message") or "no detail"))
    if len(rows) > 1:
        text += f" (+{len(rows) - 1} more)"
    return " ".join(text.split())[:REASON_MAX]


def malformed(rows: Any) -> str | None:
    """Why ``rows`` are not check rows as the checks write them (a list of mappings, each ``id`` a
    string, ``hosts`` absent or a list of strings), None when they are. A verdict built of such
    rows is UNKNOWN: never read as a pass (``hosts: "node2"`` would name n, o, d, e ...)."""
    if not isinstance(rows, list):
        return f"the rows are a {type(rows).__name__}, not a list"
    for row in rows:
        if not isinstance(row, Mapping) or not isinstance(row.get("id"), str):
            return f"a row that is not a check's: {str(row)[:80]!r}"
        hosts = row.get("hosts")
        if hosts is not None and not (isinstance(hosts, list) and all(isinstance(h, str) for h in hosts)):
            return f"{row['id']}: hosts {str(hosts)[:80]!r} is not a list of names"
    return None


def judged(rows: Iterable[Mapping[str, Any]], host: str) -> list[dict]:
    """The failed or hung rows of ``rows`` that judge ``host`` itself (review N1, N3): a row that
    names the host (directly or as an end of a link) or names no host at all (a node check's row
    about the node it ran on); never a row that names other hosts only, nor NOT_VERDICTS."""
    out = []
    for row in rows:
        if row.get("status") not in ("FAIL", "HANG") or row.get("id") in NOT_VERDICTS:
            continue
        names = [str(n) for n in row.get("hosts") or []]
        if not names or any(host in name_ends(n) for n in names):
            out.append(dict(row))
    return out


def fabric(rows: Iterable[Mapping[str, Any]]) -> str | None:
    """Why one run's failed network ``rows`` are a fabric or membership fault rather than a node's
    or a link's, None when they blame at most one node or one link (both directions of it): a row
    that names no host (the whole run: a store lost or tampered with), several nodes named at
    once, links with no node in common, or a node named beside a link that does not end at it.
    Such a verdict drains no one (issue 40 item 2); NOT_VERDICTS rows are left out."""
    rows = [r for r in rows if r.get("status") in ("FAIL", "HANG") and r.get("id") not in NOT_VERDICTS]
    if any(not r.get("hosts") for r in rows):
        return "a network check failed naming no host (the whole run)"
    nodes, links = set(), set()
    for row in rows:
        for name in row.get("hosts") or []:
            ends = name_ends(str(name))
            (links.add(frozenset(ends)) if len(ends) == 2 else nodes.add(ends[0]))
    if not nodes and not links:
        return None
    if len(nodes) > 1:
        return f"one run blames {len(nodes)} nodes at once ({', '.join(sorted(nodes))})"
    common = set.intersection(*map(set, links)) if links else set(nodes)
    if not common or not nodes <= common:
        named = sorted(nodes | {" <-> ".join(sorted(link)) for link in links})
        return f"one run blames links and nodes with no node in common ({', '.join(named)})"
    return None


def _when(entry: Mapping[str, Any]) -> datetime.datetime | None:
    try:
        at = datetime.datetime.fromisoformat(str(entry.get("at")))
    except ValueError:
        return None
    return at if at.tzinfo else None


def recent(ledger: Iterable[Mapping[str, Any]], now: datetime.datetime, window: float) -> list[dict]:
    """The ledger's entries of the last ``window`` seconds before ``now`` (an aware datetime),
    after the last recorded pass of root's network re-test (scope network); an entry without a
    time (``at``) counts as outside the window. Oldest first."""
    out: list[dict] = []
    for entry in ledger:
        at = _when(entry)
        if at is None or (now - at).total_seconds() > window:
            continue
        if entry.get("status") == "PASS" and entry.get("scope") == "network":
            out = []
            continue
        out.append(dict(entry))
    return out


def strikes(ledger: Iterable[Mapping[str, Any]], now: datetime.datetime | None = None,
            window: float = STRIKE_WINDOW_S) -> set[str]:
    """The distinct partners of the network failures in a node's ledger (``{at, run, status,
    network, partners}``, oldest first) that count now: within ``window`` seconds before ``now``
    (default: the present) and after the last pass of root's re-test (``recent``). A partner is a
    link's other end, or ``run:<id>`` for a failure that named the node itself (one per run)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    seen: set[str] = set()
    for entry in recent(ledger, now, window):
        if entry.get("status") == "FAIL" and entry.get("network"):
            seen.update(entry.get("partners") or [f"run:{entry.get('run')}"])
    return seen


def resumed_lately(ledger: Iterable[Mapping[str, Any]], now: datetime.datetime, window: float,
                   scope: str = "node", checks: Iterable[str] = ()) -> str | None:
    """When ncclprep last resumed the node from a drain of the same ``scope`` for one of the same
    ``checks`` within ``window`` seconds before ``now`` (the ledger's ``{at, event: resumed, scope,
    checks}`` entries), else None: the same fault back, not any fault after any resume."""
    last, checks = None, set(checks)
    for entry in ledger:
        at = _when(entry)
        if entry.get("event") == "resumed" and at is not None and (now - at).total_seconds() <= window \
                and (entry.get("scope") or "node") == scope and checks & set(entry.get("checks") or []):
            last = str(entry.get("at"))
    return last


def drained_for(info: Mapping[str, Any]) -> str | None:
    """The check id of ncclprep's drain reason (``ncclprep: <id>: ...``, or a repeat's), else None."""
    text = str(info.get("reason") or "")
    if not text.startswith(REASON_PREFIX):
        return None
    rest = text[len(REPEAT_PREFIX):] if text.startswith(REPEAT_PREFIX) else text[len(REASON_PREFIX):]
    return rest.strip().split(":", 1)[0] or None


def network_drain(info: Mapping[str, Any]) -> bool:
    """True when ncclprep drained the node for a network check: its reason is ``ncclprep: <id>: ...``
    with a network id (is_network). Such a drain is resumed only by root's network re-test that
    passes (retest.py): a node check's pass says nothing of the network."""
    check = drained_for(info)
    return check is not None and is_network({"id": check})


def limit(total: int, max_drained: int = MAX_DRAINED) -> int:
    """How many nodes ncclprep may hold drained at once: min(max(1, 10 % of ``total`` rounded
    down), ``max_drained``), and at least 1 (NVSentinel caps by a share and an absolute count)."""
    return max(1, min(max(1, int(total * BREAKER_SHARE)), int(max_drained)))


def holding(cluster: Mapping[str, Mapping[str, Any]], host: str, now: float) -> list[str]:
    """The nodes other than ``host`` the breaker counts: held by ncclprep (``held``) or marked by a
    hook deciding to drain them (``marked``), sorted."""
    return sorted(n for n, row in cluster.items() if n != host and (held(row) or marked(row, now)))


def _none(why: str) -> dict:
    return {"action": "none", "reason": None, "why": why}


def decide(host: str, info: Mapping[str, Any], verdict: Mapping[str, Any], ledger: Iterable[Mapping[str, Any]],
           cluster: Mapping[str, Mapping[str, Any]], now: datetime.datetime | None = None,
           window: float = STRIKE_WINDOW_S, max_drained: int = MAX_DRAINED) -> dict:
    """What to do with ``host`` after ``verdict`` (``node_verdict``'s shape; its ``failed`` rows are
    narrowed to ``judged``, its ``warned`` rows to ``degraded``). The tiers: FAIL drains (a repeat
    within the window drains for a person); WARN, a node degraded but working, is marked for the
    scheduler to avoid (``avoid``: a higher Weight, AVOID_PREFIX) and the mark is cleared
    (``clear``) by a pass of the same scope; UNKNOWN does nothing. A FAIL whose failed rows do not
    judge the node counts as its WARN or PASS.

    ``verdict`` may say its ``scope``: ``node`` (a node check, the default) or ``network`` (root's
    re-test); a pass resumes only a drain of its own scope (network_drain), never a REPEAT_PREFIX one.
    ``info``: the host's row of ``parse_sinfo``; ``ledger``: its past verdicts and events, oldest
    first, this one included (``strikes``, ``resumed_lately``); ``cluster``: every node's row (the
    breaker counts ``holding``); ``now``: an aware datetime (default the present), ``window``:
    seconds a strike or a resume counts, ``max_drained``: the breaker's absolute cap (``limit``).
    Returns ``{action, reason, why}``: action ``drain`` (reason: the one to write), ``resume``,
    ``avoid`` or ``clear`` (with the ``weight`` and ``features`` to set) or ``none``; ``why`` is one
    line for the log, naming the rule. Raises ValueError for a verdict status other than PASS,
    WARN, FAIL and UNKNOWN.
    """
    now = now or datetime.datetime.now(datetime.timezone.utc)
    status = verdict.get("status")
    if status not in ("PASS", "WARN", "FAIL", "UNKNOWN"):
        raise ValueError(f"{host}: verdict status {status!r}; valid: PASS, WARN, FAIL, UNKNOWN")
    bad_rows = malformed(list(verdict.get("failed") or [])) or malformed(list(verdict.get("warned") or []))
    if status != "UNKNOWN" and bad_rows:
        status, verdict = "UNKNOWN", dict(verdict, why=f"the verdict's rows cannot be read: {bad_rows}")
    if status == "UNKNOWN":
        return _none(f"{host}: UNKNOWN ({verdict.get('why')}): ncclprep neither drains nor resumes")
    failed = judged(verdict.get("failed") or [], host) if status == "FAIL" else []
    warned = degraded(verdict.get("warned") or [], host)
    aside = ""
    if status == "FAIL" and not failed:
        aside = (" (fails only checks that do not judge it: "
                 f"{', '.join(sorted({str(r.get('id')) for r in verdict.get('failed') or []}))})")
    if status != "FAIL" or not failed:
        status = "WARN" if warned else "PASS"
    other = theirs(info)
    if other:
        said = {"PASS": "passes", "WARN": "is degraded", "FAIL": "fails"}[status]
        return _none(f"{host}: {said}{aside}, but it is {other}: left alone")
    scope = verdict.get("scope") or "node"
    if status in ("PASS", "WARN") and not ours(info):
        return _avoid(host, info, scope, warned, aside)
    if status in ("PASS", "WARN"):
        if str(info.get("reason")).startswith(REPEAT_PREFIX):
            return _none(f"{host}: passes, but drained as a repeat ({info['reason']!r}): left for a person")
        if (scope == "network") != network_drain(info):
            what = "root's network re-test" if scope == "network" else "the node check"
            needs = "the node check" if scope == "network" else "only root's network re-test"
            return _none(f"{host}: passes {what}, but drained for {info['reason']!r}, which {needs} "
                         "resumes: left drained")
        return {"action": "resume", "reason": None, "why": f"{host}: passes now; resumed from {info['reason']!r}"}
    if ours(info):
        return _none(f"{host}: fails, still drained ({info['reason']!r})")
    ledger = list(ledger)
    text = reason(failed, host)
    if all(is_network(r) for r in failed):
        if info.get("busy"):
            return _none(f"{host}: {text[len(REASON_PREFIX):].strip()}; it runs a job ({info.get('state')}), "
                         "and a network verdict alone never drains a busy node")
        seen = strikes(ledger, now, window)
        if len(seen) < STRIKES:
            return _none(f"{host}: network strike {len(seen)} of {STRIKES} within {window / 3600:g} h "
                         f"({', '.join(sorted(seen)) or 'none'}); drains on a failure with another partner")
    again = resumed_lately(ledger, now, window, scope, [str(r.get("id")) for r in failed])
    if again:
        text = f"{REPEAT_PREFIX} {text[len(REASON_PREFIX):].strip()} (resumed {again})"[:REASON_MAX]
    others = holding(cluster, host, now.timestamp())
    cap = limit(len(cluster), max_drained)
    if len(others) + 1 > cap:
        return _none(f"{host}: would drain ({text}), but ncclprep holds {len(others)} of {len(cluster)} nodes "
                     f"({', '.join(others)}) already (at most {cap}: the circuit breaker)")
    return {"action": "drain", "reason": text, "why": f"{host}: drained: {text}"}


def _avoid(host: str, info: Mapping[str, Any], scope: str, warned: list[dict], aside: str) -> dict:
    """decide's WARN tier for a node ncclprep has not drained: ``avoid`` a degraded node not marked
    yet, ``clear`` the mark of the same scope once the node passes, else nothing."""
    mark = avoided(info)
    weight = int(info.get("weight") or 1)
    keep = [f for f in info.get("features") or [] if not f.startswith(AVOID_PREFIX)]
    if warned and mark is None and weight >= AVOID_WEIGHT:
        # kept away already, by a person or by a mark of ours whose feature someone removed: a mark
        # now would remember this weight as the one to put back, and the node would stay avoided
        return _none(f"{host}: degraded{aside}; its weight {weight} keeps jobs away already, not by ncclprep's "
                     "mark: left as it is")
    if warned and mark is None:
        text = reason(warned, host)[len(REASON_PREFIX):].strip()
        features = keep + [f"{AVOID_PREFIX}{scope}_{weight}"]
        return {"action": "avoid", "reason": None, "weight": max(AVOID_WEIGHT, weight + 1), "features": features,
                "why": f"{host}: degraded ({text}){aside}: the scheduler avoids it (weight "
                       f"{max(AVOID_WEIGHT, weight + 1)}, was {weight})"}
    if warned:
        return _none(f"{host}: degraded{aside}, already avoided (weight {weight})")
    if mark is None:
        return _none(f"{host}: passes{aside}")
    if mark["scope"] != scope:
        return _none(f"{host}: passes{aside}; avoided for the {mark['scope']} check's WARN, which only a pass of "
                     "that scope clears")
    back = mark["weight"] if weight == max(AVOID_WEIGHT, mark["weight"] + 1) else weight
    return {"action": "clear", "reason": None, "weight": back, "features": keep,
            "why": f"{host}: passes{aside}; no longer avoided (weight {back})"}


def scontrol(host: str, decision: Mapping[str, Any]) -> list[str] | None:
    """The ``scontrol update`` argv that carries out ``decide``'s decision, None for ``none``."""
    if decision["action"] in ("avoid", "clear"):
        value = ",".join(decision["features"])
        return ["scontrol", "update", f"NodeName={host}", f"Weight={decision['weight']}",
                f"AvailableFeatures={value}", f"ActiveFeatures={value}"]
    if decision["action"] == "drain":
        return ["scontrol", "update", f"NodeName={host}", "State=DRAIN", f"Reason={decision['reason']}"]
    if decision["action"] == "resume":
        return ["scontrol", "update", f"NodeName={host}", "State=RESUME"]
    return None


def mark_argv(host: str, features: Iterable[str], mark: str | None) -> list[str]:
    """The ``scontrol update`` argv that sets the node's available (and active) features to
    ``features`` without any MARK_PREFIX one, plus ``mark`` when given (nodehealth.carry_out)."""
    keep = [f for f in features if not f.startswith(MARK_PREFIX)] + ([mark] if mark else [])
    value = ",".join(keep)
    return ["scontrol", "update", f"NodeName={host}", f"AvailableFeatures={value}", f"ActiveFeatures={value}"]
