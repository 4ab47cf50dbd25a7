"""``ncclprep node health`` and ``ncclprep node prolog``: Slurm's HealthCheckProgram and Prolog.

``node health``: the node's cached verdict acted on in seconds.

Slurm runs HealthCheckProgram as root on every node at once and kills it after 60 s (22.05 has no
HealthCheckTimeout; ../shared/reviews/slurm.md section 4), so this command judges by the record
the last ``ncclprep node check`` wrote (nodecheck.RECORD_FILE) and, when that record is older than
``--refresh-after`` seconds, starts a fresh node check in the background (detached; its record is
the next run's verdict). One exception: no record, or one made before this boot (``booted_at``),
says nothing of what the boot put back, and slurmd runs HealthCheckProgram as it starts, before it
registers, so that run runs the node check itself, under BOOT_CHECK_S (``check_now``), and judges
its record: a node that came back without its tuning is drained before it takes a job. Then, with a deadline
on every command:

1. the node's verdict from the record: PASS, FAIL (the failed rows) or UNKNOWN (no record, one
   older than ``--max-age``, or one that cannot be read);
2. under the node's lock (``node_lock``: the health check, the Prolog and the Epilog of one node
   act one at a time), the node's past verdicts, ``--ledger`` (JSON; ``prune`` keeps the last
   LEDGER_KEEP node checks and every network verdict and event of the strike window): this run's
   record is added once (its generated_at is the entry's run);
3. every node's state from ``sinfo`` (slurm.parse_sinfo); sinfo failing is UNKNOWN;
4. slurm.decide, then ``carry_out``: a drain through the breaker's mark (set the mark, read Slurm
   again, drain only while ncclprep holds fewer than the cap, remove the mark), a resume only of
   the drain read a moment before; unless ``--dry-run``. The decision enters the ledger with its
   entry (``report --history`` shows the rule).

It prints one line saying what it found and did. Exit codes: 0 the verdict was acted on (also
"nothing to do"); 3 UNKNOWN or a Slurm command that failed: slurmd logs a health check's
non-zero exit with its output, which is how UNKNOWN reaches the slurmd log; a non-zero exit
alone drains nothing. 2 bad usage.

``node prolog``: the quick gate before a job (Slurm expects a Prolog to end within MessageTimeout,
10 s). It reads what a job needs of the node now (PROLOG_CHECKS: the data-plane interface, the
members' names; not the job ports, which a running job's own torchrun holds: review N3), under a
deadline of PROLOG_DEADLINE seconds, beside the cached verdict. When either fails on this node
(slurm.judged) it drains the node with its own reason first (the rules of slurm.decide; Slurm writes
its "Prolog error" only on a node not drained yet, so the reason stays) and exits EXIT_REQUEUE (10),
which the wrapper turns into the exit 1 Slurm requeues the job on. It exits 0 (the job runs) when
the node passes, when ncclprep cannot tell (UNKNOWN: no intent, a reading past its deadline, Slurm's
view unreadable), when someone else drained the node and when the circuit breaker holds the drain
back: an exit 1 there would have Slurm drain the node anyway, past those rules.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import random
import socket
import subprocess
import sys
import time

from ansible.module_utils.ncclprep.atomic import held_lock, write_atomic
from ansible.module_utils.ncclprep.checks import BAD
from ansible.module_utils.ncclprep.deadline import run_with_deadline
from ansible.module_utils.ncclprep.node import check as nodecheck
from ansible.module_utils.ncclprep.node.check import INTENT_FILE, RECORD_FILE
from ansible.module_utils.ncclprep.node.hostinfo import Runner, subprocess_runner
from ansible.module_utils.ncclprep.slurm import rules as slurm
from ansible.module_utils.ncclprep.slurm.claims import CLAIMS_DIR, prolog_claims

LEDGER_FILE = "/var/lib/ncclprep/health-ledger.json"
#: Node check verdicts kept in the ledger (its oldest go first; network verdicts and events are
#: kept for the strike window, at most LEDGER_MAX entries in all).
LEDGER_KEEP = 20
LEDGER_MAX = 500
#: Seconds a hook waits for the node's lock (another hook of this node acting): the health check
#: and the Epilog wait, the Prolog (10 s in all) hardly.
LOCK_WAIT_S = 20.0
PROLOG_LOCK_WAIT_S = 1.0
#: Deadline of each Slurm command, seconds (the whole run stays inside Slurm's 60 s).
COMMAND_TIMEOUT = 10.0
#: The command that refreshes the record in the background.
REFRESH = ["/usr/local/sbin/ncclprep", "node", "check", "--json"]
EXIT_ACTED, EXIT_USAGE, EXIT_UNKNOWN = 0, 2, 3
#: What the Prolog reads now (node.read_quick: the data-plane interface, the job's members' names
#: looked up, none connected to): the node check's modules, and of their rows the ones a job needs
#: here (names.reachable is left out: a member down elsewhere is no fault of this node).
PROLOG_MODULES = ("data_plane", "host_names")
PROLOG_CHECKS = ("data_plane.interface", "names.resolve")
#: Seconds the Prolog's reading may take (its Slurm commands come after, 10 s in all is Slurm's ask).
PROLOG_DEADLINE = 6.0
#: The Prolog's exit when it drained the node (or found it drained by ncclprep) and the job is to
#: be requeued; the wrapper turns it, and only it, into the exit 1 that Slurm acts on, so that a
#: crash (Python exits 1 on an uncaught exception or a failed import) never drains a node past
#: the breaker with Slurm's own "Prolog error".
EXIT_REQUEUE = 10
#: Seconds a record may be dated ahead of this clock (clocks a little apart) and still count.
FUTURE_S = 60.0
#: Seconds the health check's own node check may take when the record predates the boot (slurmd
#: runs HealthCheckProgram as it starts, before it registers, and kills it after 60 s; the Slurm
#: commands, COMMAND_TIMEOUT each, come after).
BOOT_CHECK_S = 30.0


def booted_at(proc: str = "/proc") -> datetime.datetime | None:
    """When this node last booted, UTC: the start of its PID 1, ``btime`` of ``proc``/stat (seconds
    since the epoch the kernel booted) plus the ``starttime`` of ``proc``/1/stat (field 22, clock
    ticks after that; proc(5)). On a host that is the boot; in a container (the local cluster's
    nodes) the container's start, which is what a reboot is there. None when unreadable."""
    try:
        with open(os.path.join(proc, "stat"), encoding="ascii") as fh:
            btime = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
        with open(os.path.join(proc, "1", "stat"), encoding="ascii", errors="replace") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        return datetime.datetime.fromtimestamp(btime + ticks / os.sysconf("SC_CLK_TCK"), datetime.timezone.utc)
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def record_verdict(record: dict | None, max_age: float, now: datetime.datetime,
                   booted: datetime.datetime | None = None) -> dict:
    """The verdict a node check's record gives (slurm.node_verdict's shape plus ``run``, its
    generated_at, and ``age_s``): UNKNOWN without a record, with one older than ``max_age``
    seconds, with one made before ``booted`` (``before_boot`` True: a reboot loses what a boot does
    not put back, so the verdict of before says nothing of the node now), or with one that is not
    a node check's. Raises nothing."""
    if not record:
        return {"status": "UNKNOWN", "failed": [], "why": "no node check has run here yet", "run": None, "age_s": None}
    try:
        made = datetime.datetime.fromisoformat(str(record["generated_at"]))
        age = (now - made).total_seconds()
        rows = list(record["checks"])
    except (KeyError, TypeError, ValueError) as exc:  # TypeError: a time without its zone, or no list
        return {"status": "UNKNOWN", "failed": [], "why": f"the record is not a node check's: {exc}", "run": None,
                "age_s": None}
    base = {"run": record["generated_at"], "age_s": round(age, 1)}
    if age < -FUTURE_S:
        return dict(base, status="UNKNOWN", failed=[], why=f"the last node check is dated {-age:.0f} s ahead of this "
                                                           "clock: not a verdict on the node as it is")
    if booted is not None and made < booted:
        return dict(base, status="UNKNOWN", failed=[], before_boot=True,
                    why=f"the last node check ran before this boot ({booted.isoformat(timespec='seconds')}): "
                        "not a verdict on the node as it is")
    if age > max_age:
        return dict(base, status="UNKNOWN", failed=[], why=f"the last node check is {age:.0f} s old (at most "
                                                           f"{max_age:.0f}): not a verdict on the node as it is")
    failed = [r for r in rows if r.get("status") in BAD]
    warned = [r for r in rows if r.get("status") == "WARN"]
    degraded = [r for r in warned if r.get("id") in slurm.DEGRADED or r.get("degraded") is True]
    status = "FAIL" if failed else "WARN" if degraded else "PASS"
    return dict(base, status=status, failed=failed, warned=warned, why=None)


def ledger_entry(host: str, verdict: dict, now: datetime.datetime | None = None) -> dict:
    """The ledger's entry for a verdict: ``{at, run, scope, status, network, partners, checks}``;
    ``at`` the verdict's time (its ``at``, else ``now``: ISO 8601, UTC), scope ``node`` (a node
    check) or ``network`` (root's re-test, retest.py); network is True when every failed row that
    judges the node (slurm.judged) is about the network (slurm.is_network), partners their other
    ends."""
    failed = slurm.judged(verdict.get("failed") or [], host)
    return {"at": verdict.get("at") or (now or _now()).isoformat(), "run": verdict.get("run"),
            "scope": verdict.get("scope") or "node", "status": verdict["status"],
            "network": bool(failed) and all(slurm.is_network(r) for r in failed),
            "partners": sorted({p for r in failed for p in slurm.partners(r, host)}),
            "checks": [r.get("id") for r in failed]}


def _entry_ok(entry) -> bool:
    """An entry this module wrote: a mapping whose lists hold strings and whose fields are strings
    or absent (review N19)."""
    return isinstance(entry, dict) and all(
        isinstance(entry.get(k, []), list) and all(isinstance(x, str) for x in entry.get(k, []))
        for k in ("partners", "checks")) and all(
        entry.get(k) is None or isinstance(entry.get(k), str) for k in ("at", "run", "scope", "status", "event"))


def read_ledger(path: str) -> list[dict]:
    """The ledger's entries at ``path``, oldest first; [] when there is none yet; entries of
    another shape are left out. Raises OSError, ValueError or TypeError when it cannot be read
    or is not a list."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return []
    if not isinstance(data, list):
        raise TypeError(f"{path} holds a {type(data).__name__}, not a list of entries")
    return [e for e in data if _entry_ok(e)]


def prune(entries: list[dict], now: datetime.datetime, window: float, keep: int = LEDGER_KEEP) -> list[dict]:
    """What the ledger keeps of ``entries`` (oldest first): the last ``keep`` node check verdicts,
    and every network verdict and event (``resumed``) of the last ``window`` seconds, at most
    LEDGER_MAX entries in all, in their order. Node checks come every few minutes; the strikes and
    resumes that slurm.decide counts must outlive them for the whole window."""
    node_runs = [n for n, e in enumerate(entries) if (e.get("scope") or "node") == "node" and "event" not in e]
    kept_nodes = set(node_runs[-keep:])
    out = []
    for n, e in enumerate(entries):
        if n in kept_nodes:
            out.append(e)
            continue
        at = slurm._when(e)  # noqa: SLF001  (one reading of an entry's time)
        if n not in node_runs and at is not None and (now - at).total_seconds() <= window:
            out.append(e)
    return out[-LEDGER_MAX:]


def write_ledger(path: str, entries: list[dict]) -> None:
    """The ledger at ``path``, written atomically, mode 0600 (its folder 0700). Raises OSError."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    write_atomic(path, json.dumps(entries, indent=1) + "\n", mode=0o600)


@contextlib.contextmanager
def node_lock(ledger_path: str, wait: float):
    """This node's lock (``flock`` on ``<ledger>.lock``, root's folder): the health check, the
    Prolog and the Epilog read the ledger, decide, act and write it back one at a time (review
    N12: two writers lost a strike). Raises TimeoutError when another holds it for ``wait``
    seconds, OSError when it cannot be made."""
    os.makedirs(os.path.dirname(ledger_path) or ".", mode=0o700, exist_ok=True)
    with held_lock(ledger_path + ".lock", wait,
                   f"another ncclprep hook holds {ledger_path}.lock for more than {wait:g} s"):
        yield


def update_ledger(path: str, host: str, verdict: dict, keep: int = LEDGER_KEEP,
                  now: datetime.datetime | None = None, window: float = slurm.STRIKE_WINDOW_S) -> list[dict]:
    """The node's ledger with this verdict's entry added once (a run already in it is not added
    again), pruned (``prune``) and written back atomically (mode 0600), under the node's lock.
    UNKNOWN adds nothing. An unreadable ledger starts afresh. Returns the entries, oldest first.
    Raises OSError when it cannot be written, TimeoutError when the lock is held too long."""
    now = now or _now()
    with node_lock(path, LOCK_WAIT_S):
        entries = _with_entry(path, host, verdict, now)
        entries = prune(entries, now, window, keep)
        write_ledger(path, entries)
    return entries


def _with_entry(path: str, host: str, verdict: dict, now: datetime.datetime) -> list[dict]:
    entries = _read_or_empty(path)
    if verdict["status"] != "UNKNOWN" and (verdict.get("run") is None
                                           or verdict.get("run") not in {e.get("run") for e in entries}):
        entries = entries + [ledger_entry(host, verdict, now)]
    return entries


def render_history(host: str, entries: list[dict], now: datetime.datetime | None = None,
                   window: float = slurm.STRIKE_WINDOW_S) -> str:
    """The ledger as ``ncclprep report --history`` prints it: a line per verdict (its time, scope,
    verdict, whether every failure was the network's, the partners, the failed checks) and per
    event (a resume), each with what ncclprep did and the rule that decided it, then the network
    strikes that count toward a drain now (slurm.strikes: within ``window`` seconds, after the last
    pass of root's re-test)."""
    if not entries:
        return (f"{host}: no verdicts in the ledger yet (ncclprep node health adds each node check's, the "
                "Epilog's re-test its own)")
    lines = [f"{'at':25s} {'scope':7s} {'verdict':7s} {'network':7s} {'partners':16s} {'checks':30s} action: rule"]
    for e in entries:
        decision = e.get("decision") if isinstance(e.get("decision"), dict) else {}
        if e.get("event"):
            lines.append(f"{str(e.get('at'))[:25]:25s} {'-':7s} {'-':7s} {'-':7s} {'-':16s} {'-':30s} "
                         f"{e['event']}: {e.get('why') or ''}")
            continue
        lines.append(f"{str(e.get('at') or e.get('run'))[:25]:25s} {str(e.get('scope') or 'node'):7s} "
                     f"{str(e.get('status')):7s} {'yes' if e.get('network') else 'no':7s} "
                     f"{','.join(e.get('partners') or []) or '-':16s} "
                     f"{', '.join(e.get('checks') or []) or '-':30s} "
                     f"{decision.get('action') or '-'}: {decision.get('why') or '-'}")
    hits = sorted(slurm.strikes(entries, now, window))
    lines.append(f"{host}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}; network strikes now {len(hits)}"
                 + (f" ({', '.join(hits)})" if hits else "")
                 + f": a drain needs {slurm.STRIKES} with different partners within {window / 3600:g} h")
    return "\n".join(lines)


def history_main(argv: list[str]) -> int:
    """``ncclprep report --history [--ledger PATH] [--json]``: this node's ledger; exit 0, 2 bad
    usage, 3 when the ledger cannot be read."""
    p = argparse.ArgumentParser(prog="ncclprep report --history", allow_abbrev=False,
                                description="This node's past verdicts, as the health check keeps them (the ledger "
                                            "the two-strike rule reads).")
    p.add_argument("--ledger", default=LEDGER_FILE, help=f"the ledger (default {LEDGER_FILE})")
    p.add_argument("--json", action="store_true", help="print the entries as JSON")
    try:
        opts = p.parse_args(argv)
    except SystemExit as exc:
        return EXIT_ACTED if exc.code == 0 else EXIT_USAGE
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    try:
        entries = read_ledger(opts.ledger)
    except (OSError, ValueError, TypeError) as exc:
        print(f"ncclprep report --history: {host}: cannot read {opts.ledger}: {exc}")
        return EXIT_UNKNOWN
    print(json.dumps(entries, indent=1) if opts.json else render_history(host, entries))
    return EXIT_ACTED


def refresh(record_path: str, refresh_after: float, age_s: float | None, command: list[str] = REFRESH) -> bool:
    """Start ``command`` detached (its own session, no output kept) when the record is missing or
    older than ``refresh_after`` seconds and no refresh holds the lock file beside the record;
    True when one was started. Raises nothing."""
    if age_s is not None and 0 <= age_s < refresh_after:
        return False
    lock = record_path + ".refreshing"
    try:
        if os.path.exists(lock) and _now().timestamp() - os.path.getmtime(lock) < max(refresh_after, 60):
            return False
        os.makedirs(os.path.dirname(lock) or ".", mode=0o700, exist_ok=True)
        with open(lock, "w", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()}\n")
        # killed before the next may start (review N16: a hung check got a new sibling every interval)
        deadline = f"{max(max(refresh_after, 60) - 5, 1):g}"
        subprocess.Popen(["sh", "-c", '"$@"; rm -f "$0"', lock, "timeout", "-k", "5", deadline, *command],
                         stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        return True
    except OSError:
        return False


def check_now(record_path: str, record: dict | None, command: list[str] | None = None,
              deadline: float = BOOT_CHECK_S) -> tuple[dict | None, str]:
    """Run the node check (``command``, REFRESH when None) in the foreground under ``deadline``
    seconds, its record written to ``record_path``, and read that record: the health check's first
    run after a boot judges the node as it came back, not by the record of before. Returns ``(the
    new record, or ``record`` when none came; the note for the printed line)``. Raises nothing."""
    try:
        subprocess.run(["timeout", "-k", "5", f"{deadline:g}", *(command or REFRESH), "--record", record_path],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=deadline + 10, check=False)
        with open(record_path, encoding="utf-8") as fh:
            fresh = json.load(fh)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return record, f"; the node check run after this boot gave no record ({exc})"
    if not isinstance(fresh, dict) or fresh.get("generated_at") == (record or {}).get("generated_at"):
        return record, f"; the node check run after this boot gave no record within {deadline:g} s"
    return fresh, ("; judged by a node check run now (the last one predates this boot)" if record
                   else "; judged by a node check run now (there was none)")


def slurm_view(host: str, runner: Runner) -> tuple[dict | None, str | None]:
    """Every node's state as ``sinfo`` shows it (slurm.parse_sinfo), under COMMAND_TIMEOUT:
    ``(nodes, None)``, or ``(None, why)`` when sinfo failed, printed what is not its rows, or does
    not list ``host``. The one reading of Slurm's view by the health check, the Prolog and the
    re-test (retest.act). Raises nothing."""
    rc, text, err = runner(["sinfo", "--noheader", "--Node", "--format", slurm.SINFO_FORMAT], COMMAND_TIMEOUT)
    if rc != 0:
        return None, " ".join((err or "").split()) or f"sinfo exit {rc}"
    try:
        nodes = slurm.parse_sinfo(text)
    except ValueError as exc:
        return None, str(exc)
    return (nodes, None) if host in nodes else (None, f"sinfo does not list {host}")


def carry_out(host: str, decision: dict, view: dict, runner: Runner, max_drained: int = slurm.MAX_DRAINED,
              clock=time.time, attempts: int = 3, sleep=time.sleep) -> tuple[bool, str]:
    """Carry out slurm.decide's ``decision`` for ``host``, read in ``view`` (slurm_view's nodes):
    ``(done, line)``. Raises nothing.

    A resume reads Slurm again first and resumes only the drain it decided on (a person who
    drained or changed the node since keeps it: review N7). A drain holds the circuit breaker
    under concurrency (review N2) by a mark set before the reading that decides:

    1. set the feature ``slurm.MARK_PREFIX<epoch>`` on this node (``scontrol update``);
    2. read Slurm again: drain only when this node is still to be drained and the nodes that
       ncclprep holds or that carry a live mark of another hook (slurm.holding) number fewer than
       slurm.limit, and at most MARK_TTL_S / 2 seconds after step 1;
    3. drain; 4. remove the mark (also when any step failed).

    Hooks that mark at the same moment all see each other's marks and stand back; when only marks
    (no drain) kept this one back, it tries again after a random pause of 0.2-2 s, up to
    ``attempts`` rounds within MARK_TTL_S / 4 of the first: one of them then goes first.

    Why it holds: suppose more than the cap were drained at once, and let Z be the node among
    them whose mark came last. Each other one set its mark before Z did and kept it until after
    its own drain, so when Z read Slurm in step 2 each was marked or already drained: Z saw the
    cap reached and did not drain. A mark counts MARK_TTL_S (300 s) and a hook drains within
    MARK_TTL_S / 2 of its mark, so clocks may differ by up to 150 s. docs/slurm.md.
    """
    argv = slurm.scontrol(host, decision)
    if argv is None:
        return False, decision["why"]
    if decision["action"] in ("avoid", "clear"):
        nodes, why = slurm_view(host, runner)
        then, now = view[host], (nodes or {}).get(host, {})
        if nodes is None or any(now.get(k) != then.get(k) for k in ("weight", "features", "reason")):
            return False, f"{host}: left as it is: it changed since it was read ({why or now.get('weight')})"
        rc, _, err = runner(argv, COMMAND_TIMEOUT)
        if rc != 0:
            return False, f"{host}: {decision['action']} failed (scontrol exit {rc}: {' '.join(err.split())})"
        return True, decision["why"]
    if decision["action"] == "resume":
        nodes, why = slurm_view(host, runner)
        if nodes is None or nodes[host].get("reason") != view[host].get("reason") or not slurm.ours(nodes[host]):
            now = (nodes or {}).get(host, {})
            return False, (f"{host}: left as it is: it changed since it was read ({why or now.get('state')}, "
                           f"{now.get('reason')!r})")
        rc, _, err = runner(argv, COMMAND_TIMEOUT)
        if rc != 0:
            return False, f"{host}: resume failed (scontrol exit {rc}: {' '.join(err.split())})"
        return True, decision["why"]
    start = clock()
    features = list(view[host].get("features") or [])
    for attempt in range(1, attempts + 1):
        done, line, features, retry = _marked_drain(host, decision, argv, features, runner, max_drained, clock,
                                                    start)
        if not retry or attempt == attempts or clock() - start > slurm.MARK_TTL_S / 4:
            return done, line
        # every hook that marked at the same moment saw the others' marks and stood back: try
        # again after a random pause, so that the next round is not simultaneous too
        sleep(random.uniform(0.2, 2.0))
    return False, line


def _marked_drain(host, decision, argv, features, runner, max_drained, clock, start):
    """One round of carry_out's steps 1-4: ``(done, line, the node's features, retry)``; retry is
    True when only other hooks' live marks (no drain held) kept this one back."""
    rc, _, err = runner(slurm.mark_argv(host, features, f"{slurm.MARK_PREFIX}{int(clock())}"), COMMAND_TIMEOUT)
    if rc != 0:
        return False, (f"{host}: not drained: the breaker's mark could not be set (scontrol exit {rc}: "
                       f"{' '.join(err.split())}): {decision['why'][len(host) + 2:]}"), features, False
    try:
        nodes, why = slurm_view(host, runner)
        if nodes is None:
            return False, f"{host}: not drained: Slurm's view unreadable after the mark ({why})", features, False
        features = nodes[host].get("features") or features
        me = nodes[host]
        if slurm.theirs(me) or slurm.held(me):
            return False, (f"{host}: not drained: it changed since it was read ({me.get('state')}, "
                           f"{me.get('reason')!r})"), features, False
        now = clock()
        others = slurm.holding(nodes, host, now)
        cap = slurm.limit(len(nodes), max_drained)
        if len(others) + 1 > cap:
            held = [n for n in others if slurm.held(nodes[n])]
            return False, (f"{host}: would drain ({decision['reason']}), but ncclprep holds or is draining "
                           f"{len(others)} of {len(nodes)} nodes ({', '.join(others)}) already (at most {cap}: "
                           "the circuit breaker)"), features, len(held) < cap
        if now - start > slurm.MARK_TTL_S / 2:
            return False, (f"{host}: not drained: {now - start:.0f} s since the mark, past its "
                           f"{slurm.MARK_TTL_S / 2:g} s"), features, False
        rc, _, err = runner(argv, COMMAND_TIMEOUT)
        if rc != 0:
            return False, f"{host}: drain failed (scontrol exit {rc}: {' '.join(err.split())})", features, False
        return True, decision["why"], features, False
    finally:
        runner(slurm.mark_argv(host, features, None), COMMAND_TIMEOUT)


def other_jobs(host: str, job_id: str, runner: Runner) -> int | None:
    """How many jobs other than ``job_id`` run or are suspended on ``host`` (``squeue -h -w host
    -t R,S -o %A``), None when squeue fails: a node ``completing`` one job may run others (Slurm's
    node_state_string() shows COMPLETING before MIXED; review N6)."""
    rc, out, _ = runner(["squeue", "--noheader", "--nodelist", host, "--states", "R,S", "--format", "%A"],
                        COMMAND_TIMEOUT)
    if rc != 0:
        return None
    return len([j for j in out.split() if j != str(job_id)])


def act(host: str, verdict: dict, ledger_path: str, runner: Runner, *, record: bool = True,
        window: float = slurm.STRIKE_WINDOW_S, max_drained: int = slurm.MAX_DRAINED,
        ending_job: str | None = None, dry_run: bool = False, lock_wait: float = LOCK_WAIT_S,
        now: datetime.datetime | None = None, clock=time.time, attempts: int = 3) -> dict:
    """Judge ``host`` by ``verdict`` and act, under the node's lock: the ledger (this verdict's
    entry when ``record``), Slurm's view, slurm.decide, carry_out, the ledger written back with
    the decision (and a ``resumed`` event). The one path from a verdict to ``scontrol`` for the
    health check, the Prolog and root's re-test (retest.py). ``ending_job``: the Epilog's job id;
    a node ``completing`` it counts as busy only while other jobs run there (other_jobs);
    ``attempts``: carry_out's rounds when other hooks' marks keep a drain back (the Prolog: 1).

    Returns ``{status: acted|unknown, done, decision, line}``: ``unknown`` when the lock, Slurm's
    view or the ledger could not be had (``line`` says which). Raises nothing."""
    now = now or _now()
    out = {"status": "unknown", "done": False, "decision": None, "line": ""}
    try:
        with node_lock(ledger_path, lock_wait):
            entries = _with_entry(ledger_path, host, verdict, now) if record else _read_or_empty(ledger_path)
            nodes, why = slurm_view(host, runner)
            if nodes is None:
                out["line"] = f"{host}: UNKNOWN (Slurm's view unreadable: {why}): nothing done"
                if record:
                    write_ledger(ledger_path, prune(entries, now, window))
                return out
            info = dict(nodes[host])
            if ending_job is not None and info.get("state") == "completing":
                running = other_jobs(host, ending_job, runner)
                info["busy"] = running is None or running > 0
            decision = slurm.decide(host, info, verdict, entries, nodes, now, window, max_drained)
            if dry_run:
                done, line = False, decision["why"] + (" (dry run)" if decision["action"] != "none" else "")
            else:
                done, line = carry_out(host, decision, nodes, runner, max_drained, clock, attempts)
            if record and entries and entries[-1].get("run") == verdict.get("run") and "decision" not in entries[-1]:
                entries[-1] = dict(entries[-1], decision={"action": decision["action"] if done else "none",
                                                          "why": line})
            if done and decision["action"] == "resume":
                entries.append({"at": now.isoformat(), "event": "resumed", "why": line,
                                "scope": "network" if slurm.network_drain(info) else "node",
                                "checks": [c for c in [slurm.drained_for(info)] if c]})
            if record or done:
                write_ledger(ledger_path, prune(entries, now, window))
            out.update(status="acted", done=done, decision=decision, line=line)
            return out
    except (OSError, TimeoutError) as exc:
        out["line"] = f"{host}: UNKNOWN ({exc}): nothing done"
        return out


def _read_or_empty(path: str) -> list[dict]:
    try:
        return read_ledger(path)
    except (OSError, ValueError, TypeError):
        return []


def health(host: str, record: dict | None, ledger_path: str, runner: Runner, max_age: float,
           dry_run: bool = False, now: datetime.datetime | None = None, window: float = slurm.STRIKE_WINDOW_S,
           max_drained: int = slurm.MAX_DRAINED, clock=time.time,
           booted: datetime.datetime | None = None) -> tuple[int, str, dict]:
    """Steps 1-4 of the module docstring for ``host``: ``(exit code, the line to print, {verdict,
    decision, done})``. ``runner`` runs sinfo and scontrol (hostinfo.Runner); ``booted``: when the
    node booted (record_verdict). Raises nothing."""
    now = now or _now()
    verdict = record_verdict(record, max_age, now, booted)
    out = {"verdict": verdict, "decision": None, "done": False}
    if verdict["status"] == "UNKNOWN":
        return EXIT_UNKNOWN, f"ncclprep health {host}: UNKNOWN ({verdict['why']}): neither drained nor resumed", out
    result = act(host, dict(verdict, at=verdict.get("run")), ledger_path, runner, window=window,
                 max_drained=max_drained, dry_run=dry_run, now=now, clock=clock)
    out.update(decision=result["decision"], done=result["done"])
    if result["status"] == "unknown":
        return EXIT_UNKNOWN, f"ncclprep health {result['line']}", out
    failed_act = result["decision"]["action"] != "none" and not result["done"] and not dry_run
    return (EXIT_UNKNOWN if failed_act and "failed" in result["line"] else EXIT_ACTED), \
        f"ncclprep health {result['line']}", out


def _job_members(doc: dict, nodelist: str | None) -> set[str] | None:
    """The members among the job's Slurm nodes (``nodelist``: Slurm's expression; a Slurm name
    matches a member by full or short name, node/preflight.py job_members), None (every member) without
    a node list or when it cannot be expanded. A node that is no member has no name to look up."""
    from ansible.module_utils.ncclprep.node.preflight import hostnames, job_members

    if not nodelist:
        return None
    try:
        nodes = hostnames(nodelist)
    except nodecheck.CouldNotRun:
        return None
    entries = (doc.get("node") or {}).get("names") or []
    members = {e["host"]: e.get("address") for e in entries if isinstance(e, dict) and e.get("host")}
    found: set[str] = set()
    for name in nodes:
        try:
            found.update(job_members(members, [name])[0])
        except nodecheck.CouldNotRun:
            pass
    return found


def _read_quick(progress, intent: str, nodelist: str | None = None) -> None:
    """PROLOG_CHECKS' rows of this node now (run_with_deadline's child): node.read_quick, judged by
    the node check's functions."""
    from ansible.module_utils.ncclprep.node.read import read_quick

    doc = nodecheck.intent_document(intent)
    if not isinstance(doc["node"], dict):
        raise nodecheck.CouldNotRun(f"{intent}: no node options: run site.yml again")
    try:
        facts = read_quick(doc["node"], _job_members(doc, nodelist))
    except ValueError as exc:
        raise nodecheck.CouldNotRun(f"node: {exc} (from {intent})") from None
    progress.result([r for r in nodecheck.check(doc, facts, PROLOG_MODULES) if r["id"] in PROLOG_CHECKS])


def quick_rows(intent: str = INTENT_FILE, deadline: float = PROLOG_DEADLINE,
               nodelist: str | None = None) -> tuple[list[dict] | None, str | None]:
    """``(rows, None)`` of PROLOG_CHECKS read now, or ``(None, why)`` when the reading failed or
    passed ``deadline`` seconds (nodecheck.CouldNotRun's text: no intent file ...). ``nodelist``:
    the job's nodes (Slurm's expression, SLURM_JOB_NODELIST): only their names are looked up
    (None: every member's). Raises nothing."""
    run = run_with_deadline(_read_quick, {"intent": intent, "nodelist": nodelist}, deadline)
    if run["outcome"] == "result":
        return run["value"], None
    if run["outcome"] == "hang":
        return None, f"reading the node took more than {deadline:g} s"
    return None, str(run["value"])


def prolog(host: str, rows: list[dict] | None, why: str | None, record: dict | None, runner: Runner,
           max_age: float, dry_run: bool = False, now: datetime.datetime | None = None,
           ledger_path: str = LEDGER_FILE, window: float = slurm.STRIKE_WINDOW_S,
           max_drained: int = slurm.MAX_DRAINED, clock=time.time) -> tuple[int, str, dict]:
    """The Prolog's decision for ``host`` (module docstring): ``(exit code, line, {verdict, decision,
    done})``; ``rows``: quick_rows' rows read now (None: not read, ``why`` says why). Only rows that
    judge this node count (slurm.judged); the Prolog adds no entry to the ledger and waits at most
    PROLOG_LOCK_WAIT_S for the node's lock. Raises nothing."""
    now = now or _now()
    cached = record_verdict(record, max_age, now)
    failed_now = slurm.judged(rows or [], host)
    if failed_now:
        verdict = {"status": "FAIL", "failed": failed_now, "why": None}
    elif cached["status"] == "FAIL" and slurm.judged(cached["failed"], host):
        verdict = dict(cached)
    elif rows is None:
        verdict = {"status": "UNKNOWN", "failed": [], "why": why}
    else:
        verdict = {"status": "PASS", "failed": [], "why": None}
    out = {"verdict": verdict, "decision": None, "done": False}
    if verdict["status"] != "FAIL":
        text = "passes" if verdict["status"] == "PASS" else f"UNKNOWN ({verdict['why']})"
        return EXIT_ACTED, f"ncclprep prolog {host}: {text}: the job runs", out
    result = act(host, verdict, ledger_path, runner, record=False, window=window, max_drained=max_drained,
                 dry_run=dry_run, lock_wait=PROLOG_LOCK_WAIT_S, now=now, clock=clock, attempts=1)
    out.update(decision=result["decision"], done=result["done"])
    if result["status"] == "unknown":
        return EXIT_ACTED, (f"ncclprep prolog {host}: fails ({slurm.reason(verdict['failed'], host)}), but "
                            f"{result['line'][len(host) + 2:]}: the job runs"), out
    decision = result["decision"]
    requeue = result["done"] or (decision["action"] == "none" and "still drained" in decision["why"]) \
        or (dry_run and decision["action"] == "drain")
    return (EXIT_REQUEUE if requeue else EXIT_ACTED), \
        f"ncclprep prolog {result['line']}" + ("; the job is requeued" if requeue else "; the job runs"), out


def _seconds(text: str) -> float:
    """argparse type: a finite number of seconds, 0 or more (review N19: ``nan`` was accepted)."""
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: valid: a finite number of seconds, 0 or more")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: valid: a whole number of nodes, 1 or more")
    return value


def add_rule_options(p: argparse.ArgumentParser) -> None:
    """The options every hook that may drain shares: the ledger, the strike window, the breaker's cap."""
    p.add_argument("--ledger", default=LEDGER_FILE, help=f"this node's past verdicts (default {LEDGER_FILE})")
    p.add_argument("--strike-window", type=_seconds, default=slurm.STRIKE_WINDOW_S,
                   help="seconds a network strike or a resume counts (default 86400: 24 h; "
                        "slurm_health_strike_window)")
    p.add_argument("--max-drained", type=_count, default=slurm.MAX_DRAINED,
                   help=f"most nodes ncclprep holds drained at once, beside 10 %% of the nodes (default "
                        f"{slurm.MAX_DRAINED}; slurm_health_max_drained)")


def parser(command: str = "health") -> argparse.ArgumentParser:
    """The options of ``ncclprep node health`` or ``ncclprep node prolog``."""
    if command == "health":
        p = argparse.ArgumentParser(
            prog="ncclprep node health", allow_abbrev=False,
            description="Slurm's HealthCheckProgram: drain this node with an 'ncclprep:' reason when its last node "
                        "check failed on the node itself, resume it when ncclprep drained it and it passes now; "
                        "never touch another's drain or state. Judges by the last node check's record and refreshes "
                        "it in the background.",
            epilog="exit codes: 0 acted (or nothing to do); 2 bad usage; 3 UNKNOWN (nothing done) or Slurm refused.")
        p.add_argument("--refresh-after", type=_seconds, default=240.0,
                       help="seconds after which a fresh node check starts in the background (default 240)")
        p.add_argument("--no-refresh", action="store_true", help="start no background node check")
    else:
        p = argparse.ArgumentParser(
            prog="ncclprep node prolog", allow_abbrev=False,
            description="Slurm's Prolog: the data-plane interface and the members' names read now, and the last node "
                        "check's verdict; on a failure of this node drain it with an 'ncclprep:' reason and exit 10 "
                        "(Slurm requeues the job).",
            epilog="exit codes: 0 the job runs (passes, UNKNOWN, another's drain, the circuit breaker, a crash); 10 "
                   "drained, the job is to be requeued (the wrapper exits 1 for Slurm); 2 bad usage.")
        p.add_argument("--intent", default=INTENT_FILE, help=f"the intent document (default {INTENT_FILE})")
        p.add_argument("--claims", default=CLAIMS_DIR, help=f"root's folder of the jobs' claims folders, where "
                                                            f"this job's is made (default {CLAIMS_DIR})")
    add_rule_options(p)
    p.add_argument("--record", default=RECORD_FILE, help=f"the node check's record (default {RECORD_FILE})")
    p.add_argument("--max-age", type=_seconds, default=900.0,
                   help="seconds a record stays a verdict (default 900: three of Slurm's usual 300 s intervals)")
    p.add_argument("--dry-run", action="store_true", help="say what would be done, run no scontrol")
    p.add_argument("--node", default=None, help="Slurm's name of this node (default $SLURMD_NODENAME, then the host "
                                                "name of the record or of this machine)")
    return p


def main(argv: list[str], command: str = "health") -> int:
    """``ncclprep node health|prolog [options]`` (``argv`` without ``node <command>``): the exit code.
    A crash is UNKNOWN: exit 3 for the health check, 0 (the job runs) for the Prolog."""
    try:
        return _main(argv, command)
    except Exception as exc:  # noqa: BLE001  (a hook never ends in a traceback Slurm acts on)
        import traceback

        print(f"ncclprep {command}: UNKNOWN (crashed: {type(exc).__name__}: {exc}): nothing done")
        print(traceback.format_exc(), file=sys.stderr)
        return EXIT_ACTED if command == "prolog" else EXIT_UNKNOWN


def _main(argv: list[str], command: str) -> int:
    try:
        opts = parser(command).parse_args(argv)
    except SystemExit as exc:
        return EXIT_ACTED if exc.code == 0 else EXIT_USAGE
    try:
        with open(opts.record, encoding="utf-8") as fh:
            record = json.load(fh)
    except FileNotFoundError:
        record = None
    except (OSError, ValueError) as exc:
        record = {"unreadable": str(exc)}
    if not isinstance(record, dict) and record is not None:
        record = {"unreadable": f"a {type(record).__name__}, not a record"}
    host = (opts.node or os.environ.get("SLURMD_NODENAME") or (record or {}).get("host")
            or socket.gethostname().split(".")[0])
    rules = {"window": opts.strike_window, "max_drained": opts.max_drained}
    if command == "prolog":
        # the job's claims folder first, whatever the verdict: its tasks may leave a claim there
        # for the Epilog (retest.py); without it they cannot, which never stops the job
        no_claims = prolog_claims(os.environ, opts.claims)
        rows, why = quick_rows(opts.intent, nodelist=os.environ.get("SLURM_JOB_NODELIST")
                               or os.environ.get("SLURM_NODELIST"))
        code, line, _ = prolog(host, rows, why, record, subprocess_runner, opts.max_age, opts.dry_run,
                               ledger_path=opts.ledger, **rules)
        print(line + (f"; no claim can be left for the Epilog ({no_claims})" if no_claims else ""))
        return code
    booted, checked = booted_at(), ""
    if not opts.no_refresh and (record is None or record_verdict(record, math.inf, _now(), booted).get("before_boot")):
        record, checked = check_now(opts.record, record)
    code, line, result = health(host, record, opts.ledger, subprocess_runner, opts.max_age, opts.dry_run,
                                booted=booted, **rules)
    line += checked
    if not opts.no_refresh and refresh(opts.record, opts.refresh_after, result["verdict"].get("age_s")):
        line += "; a fresh node check runs in the background"
    print(line)
    return code
