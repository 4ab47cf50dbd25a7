"""Slurm node health: what a verdict of ncclprep does to a node's Slurm state, as pure rules.

The slurm_health concern's HealthCheckProgram and Prolog (issue 25) read the node's state from
``sinfo``, judge the node (``ncclprep node check``, or a job's preflight), and act through
``scontrol update``; this module holds every rule between the reading and the command, so that
they are tested without Slurm. The rules follow NHC's conventions and what users ask of a health
check (../shared/reviews/slurm.md, sections 3 and 4):

- A drain's reason starts with REASON_PREFIX (``ncclprep:``) and names the check with its
  measured and expected value (NHC: ``NHC: <note>``).
- Only a node whose reason starts with the prefix is resumed, and only when it passes now; a
  drain with any other reason (a human's, Slurm's own "Prolog error") is never touched.
- UNKNOWN (ncclprep itself could not tell: no intent file, a reader crashed, a timeout) neither
  drains nor resumes (mej/nhc#139 asks for this third outcome).
- A drain for a network check is resumed only by root's network re-test that passes, a drain for
  the node's own checks only by a node check that passes (network_drain).
- A node running a job (allocated, mixed, completing, draining) is never drained by a network
  verdict alone: the job may be what loads the link (soperator waits for DRAIN+ALLOC to be idle).
- A network verdict drains only on its second strike with another partner: two failures in the
  ledger (``strikes``) whose other ends differ, so one bad peer cannot drain its partners.
- A circuit breaker: no run drains a node when ncclprep's drains would then exceed
  max(1, 10 %) of the nodes (a fabric-wide fault must not empty the cluster).

Node states are sinfo's long names (``%T``; Slurm's doc/man/man1/sinfo.1, NODE STATE CODES).
Pure Python, no Slurm and no Ansible: imported as ``ansible.module_utils.ncclprep.slurm``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: The start of every reason ncclprep drains with; the only drains it resumes.
REASON_PREFIX = "ncclprep:"
#: Longest reason written (sinfo -R shows it whole; a short one reads better in its column).
REASON_MAX = 200
#: The sinfo format this module parses: ``sinfo --noheader --Node --format '%N|%T|%E'``.
SINFO_FORMAT = "%N|%T|%E"
#: States of a node that runs (or finishes) a job (sinfo %T; draining = allocated and drain).
BUSY = frozenset({"allocated", "mixed", "completing", "draining"})
#: States of a drained node, ncclprep's or another's.
DRAINED = frozenset({"drained", "draining", "drain"})
#: Check ids whose verdict is about the network between nodes (the rest is the node itself).
NETWORK_PREFIXES = ("net.", "collective.", "torchrun.")
#: Distinct partners a network verdict needs in the ledger before it drains.
STRIKES = 2
#: Share of the nodes ncclprep may hold drained at once (at least one node).
BREAKER_SHARE = 0.10
#: sinfo's suffixes on a state: * not responding, ~ powered off, # powering up, % powering
#: down, ! pending power down, $ maintenance reservation, @ pending reboot, ^ reboot issued,
#: - planned (backfill), + more states.
_SUFFIXES = "*~#%!$@^-+"


def parse_sinfo(text: str) -> dict[str, dict]:
    """``sinfo --noheader --Node --format '%N|%T|%E'`` -> ``{node: {state, responding, drained,
    busy, reason}}``.

    ``state``: the long state without its suffix (``idle``, ``drained``, ``mixed`` ...);
    ``responding``: False when sinfo marked it ``*``; ``reason``: the text after the second
    ``|`` (it may hold ``|`` itself), None for ``none``. A node listed once per partition is
    kept once. Raises ValueError naming a line of another shape.
    """
    nodes: dict[str, dict] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("|", 2)
        if len(fields) != 3 or not fields[0].strip() or not fields[1].strip():
            raise ValueError(f"sinfo line {n} is not '{SINFO_FORMAT}': {line!r}")
        raw = fields[1].strip().lower()
        state = raw.rstrip(_SUFFIXES)
        reason = fields[2].strip()
        nodes[fields[0].strip()] = {
            "state": state, "responding": "*" not in raw[len(state):],
            "drained": state in DRAINED, "busy": state in BUSY,
            "reason": None if reason in ("", "none", "(null)") else reason,
        }
    return nodes


def ours(info: Mapping[str, Any]) -> bool:
    """True when the node is drained with a reason of ncclprep's."""
    return bool(info.get("drained")) and str(info.get("reason") or "").startswith(REASON_PREFIX)


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
    for the first, ``(+N more)`` for the rest, at most REASON_MAX characters; a measured or
    expected value keyed by host gives this host's."""
    rows = list(rows)
    if not rows:
        raise ValueError("a drain needs at least one failed check")
    first = rows[0]
    text = (f"{REASON_PREFIX} {first.get('id')}: measured {_value(first.get('measured'), host)}, "
            f"expected {_value(first.get('expected'), host)}")
    if len(rows) > 1:
        text += f" (+{len(rows) - 1} more)"
    return " ".join(text.split())[:REASON_MAX]


def strikes(ledger: Iterable[Mapping[str, Any]]) -> set[str]:
    """The distinct partners of the network failures in a node's ledger (oldest first, each
    ``{run, status, network, partners}``): a link's other end, or ``run:<id>`` for a failure that
    named the node itself (the median over all its pairs, one strike per run)."""
    seen: set[str] = set()
    for entry in ledger:
        if entry.get("status") == "FAIL" and entry.get("network"):
            seen.update(entry.get("partners") or [f"run:{entry.get('run')}"])
    return seen


def network_drain(info: Mapping[str, Any]) -> bool:
    """True when ncclprep drained the node for a network check: its reason is ``ncclprep: <id>: ...``
    with a network id (is_network). Such a drain is resumed only by root's network re-test that
    passes (retest.py): a node check's pass says nothing of the network."""
    text = str(info.get("reason") or "")
    if not text.startswith(REASON_PREFIX):
        return False
    return is_network({"id": text[len(REASON_PREFIX):].strip().split(":", 1)[0]})


def breaker_limit(total: int) -> int:
    """How many nodes ncclprep may hold drained at once: max(1, 10 % of ``total``, rounded down)."""
    return max(1, int(total * BREAKER_SHARE))


def decide(host: str, info: Mapping[str, Any], verdict: Mapping[str, Any], ledger: Iterable[Mapping[str, Any]],
           cluster: Mapping[str, Mapping[str, Any]]) -> dict:
    """What to do with ``host`` after ``verdict`` (``node_verdict``'s shape).

    ``verdict`` may say its ``scope``: ``node`` (a node check, the default) or ``network`` (root's
    re-test); a pass resumes only a drain of its own scope (network_drain).
    ``info``: the host's row of ``parse_sinfo``; ``ledger``: its past verdicts, oldest first,
    this one included (``strikes``); ``cluster``: every node's row (the circuit breaker counts
    ncclprep's drains among them). Returns ``{action, reason, why}``: action ``drain`` (reason:
    the one to write), ``resume`` or ``none``; ``why`` is one line for the log, naming the rule.
    Raises ValueError for a verdict status other than PASS, FAIL and UNKNOWN.
    """
    status = verdict.get("status")
    theirs = info.get("drained") and not ours(info)
    if status == "UNKNOWN":
        return {"action": "none", "reason": None,
                "why": f"{host}: UNKNOWN ({verdict.get('why')}): ncclprep neither drains nor resumes"}
    if status == "PASS":
        if ours(info):
            scope = verdict.get("scope") or "node"
            if (scope == "network") != network_drain(info):
                what = "root's network re-test" if scope == "network" else "the node check"
                needs = "the node check" if scope == "network" else "only root's network re-test"
                return {"action": "none", "reason": None,
                        "why": f"{host}: passes {what}, but drained for {info['reason']!r}, which {needs} "
                               "resumes: left drained"}
            return {"action": "resume", "reason": None, "why": f"{host}: passes now; resumed from {info['reason']!r}"}
        if theirs:
            return {"action": "none", "reason": None,
                    "why": f"{host}: passes, but drained by someone else ({info.get('reason')!r}): left alone"}
        return {"action": "none", "reason": None, "why": f"{host}: passes"}
    if status != "FAIL":
        raise ValueError(f"{host}: verdict status {status!r}; valid: PASS, FAIL, UNKNOWN")
    failed = list(verdict.get("failed") or [])
    if theirs:
        return {"action": "none", "reason": None,
                "why": f"{host}: fails, already drained by someone else ({info.get('reason')!r}): left alone"}
    if ours(info):
        return {"action": "none", "reason": None, "why": f"{host}: fails, still drained ({info['reason']!r})"}
    text = reason(failed, host)
    if failed and all(is_network(r) for r in failed):
        if info.get("busy"):
            return {"action": "none", "reason": None,
                    "why": f"{host}: {text[len(REASON_PREFIX):].strip()}; it runs a job ({info.get('state')}), "
                           "and a network verdict alone never drains a busy node"}
        seen = strikes(ledger)
        if len(seen) < STRIKES:
            return {"action": "none", "reason": None,
                    "why": f"{host}: network strike {len(seen)} of {STRIKES} ({', '.join(sorted(seen)) or 'none'}); "
                           "drains on a failure with another partner"}
    held = sum(1 for name, row in cluster.items() if name != host and ours(row))
    limit = breaker_limit(len(cluster))
    if held + 1 > limit:
        return {"action": "none", "reason": None,
                "why": f"{host}: would drain ({text}), but ncclprep holds {held} of {len(cluster)} nodes drained "
                       f"already (at most {limit}: the circuit breaker)"}
    return {"action": "drain", "reason": text, "why": f"{host}: drained: {text}"}


def scontrol(host: str, decision: Mapping[str, Any]) -> list[str] | None:
    """The ``scontrol update`` argv that carries out ``decide``'s decision, None for ``none``."""
    if decision["action"] == "drain":
        return ["scontrol", "update", f"NodeName={host}", "State=DRAIN", f"Reason={decision['reason']}"]
    if decision["action"] == "resume":
        return ["scontrol", "update", f"NodeName={host}", "State=RESUME"]
    return None
