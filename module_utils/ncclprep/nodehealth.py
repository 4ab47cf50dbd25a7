"""``ncclprep node health`` and ``ncclprep node prolog``: Slurm's HealthCheckProgram and Prolog.

``node health``: the node's cached verdict acted on in seconds.

Slurm runs HealthCheckProgram as root on every node at once and kills it after 60 s (22.05 has no
HealthCheckTimeout; ../shared/reviews/slurm.md section 4), so this command never runs the checks
itself. It judges by the record the last ``ncclprep node check`` wrote (nodecheck.RECORD_FILE)
and, when that record is older than ``--refresh-after`` seconds, starts a fresh node check in the
background (detached; its record is the next run's verdict). Then, with a deadline on every
command:

1. the node's verdict from the record: PASS, FAIL (the failed rows) or UNKNOWN (no record, one
   older than ``--max-age``, or one that cannot be read);
2. the node's past verdicts, ``--ledger`` (JSON, one entry per node check run, the last
   LEDGER_KEEP kept): this run's record is added once (its generated_at is the entry's run);
3. every node's state from ``sinfo`` (slurm.parse_sinfo); sinfo failing is UNKNOWN;
4. slurm.decide, then ``scontrol update`` (drain with an ``ncclprep:`` reason, or resume one of
   ncclprep's drains), unless ``--dry-run``.

It prints one line saying what it found and did. Exit codes: 0 the verdict was acted on (also
"nothing to do"); 3 UNKNOWN or a Slurm command that failed: slurmd logs a health check's
non-zero exit with its output, which is how UNKNOWN reaches the slurmd log; a non-zero exit
alone drains nothing. 2 bad usage.

``node prolog``: the quick gate before a job (Slurm expects a Prolog to end within MessageTimeout,
10 s). It reads what a job needs of the node now (PROLOG_CHECKS: the data-plane interface, the
members' names, the job ports free), under a deadline of PROLOG_DEADLINE seconds, beside the
cached verdict. When either fails it drains the node with its own reason first (the rules of
slurm.decide; Slurm writes its "Prolog error" only on a node not drained yet, so the reason
stays) and exits 1: Slurm requeues the job. It exits 0 (the job runs) when the node passes, when
ncclprep cannot tell (UNKNOWN: no intent, a reading past its deadline, Slurm's view unreadable),
when someone else drained the node and when the circuit breaker holds the drain back: an exit 1
there would have Slurm drain the node anyway, past those rules.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import subprocess

from ansible.module_utils.ncclprep import nodecheck, slurm
from ansible.module_utils.ncclprep.atomic import write_atomic
from ansible.module_utils.ncclprep.checks import BAD
from ansible.module_utils.ncclprep.deadline import run_with_deadline
from ansible.module_utils.ncclprep.hostinfo import Runner, subprocess_runner
from ansible.module_utils.ncclprep.nodecheck import INTENT_FILE, RECORD_FILE

LEDGER_FILE = "/var/lib/ncclprep/health-ledger.json"
#: Entries kept in the ledger (its oldest go first).
LEDGER_KEEP = 20
#: Deadline of each Slurm command, seconds (the whole run stays inside Slurm's 60 s).
COMMAND_TIMEOUT = 10.0
#: The command that refreshes the record in the background.
REFRESH = ["/usr/local/sbin/ncclprep", "node", "check", "--json"]
EXIT_ACTED, EXIT_USAGE, EXIT_UNKNOWN = 0, 2, 3
#: What the Prolog reads now: the node check's modules, and of their rows the ones a job needs here
#: (names.reachable is left out: a member down elsewhere is no fault of this node).
PROLOG_MODULES = ("data_plane", "host_names", "firewall")
PROLOG_CHECKS = ("data_plane.interface", "names.resolve", "firewall.ports_free")
#: Seconds the Prolog's reading may take (its Slurm commands come after, 10 s in all is Slurm's ask).
PROLOG_DEADLINE = 6.0
EXIT_REQUEUE = 1


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def record_verdict(record: dict | None, max_age: float, now: datetime.datetime) -> dict:
    """The verdict a node check's record gives (slurm.node_verdict's shape plus ``run``, its
    generated_at, and ``age_s``): UNKNOWN without a record, with one older than ``max_age``
    seconds, or with one that is not a node check's. Raises nothing."""
    if not record:
        return {"status": "UNKNOWN", "failed": [], "why": "no node check has run here yet", "run": None, "age_s": None}
    try:
        age = (now - datetime.datetime.fromisoformat(str(record["generated_at"]))).total_seconds()
        rows = list(record["checks"])
    except (KeyError, TypeError, ValueError) as exc:  # TypeError: a time without its zone, or no list
        return {"status": "UNKNOWN", "failed": [], "why": f"the record is not a node check's: {exc}", "run": None,
                "age_s": None}
    base = {"run": record["generated_at"], "age_s": round(age, 1)}
    if age > max_age:
        return dict(base, status="UNKNOWN", failed=[], why=f"the last node check is {age:.0f} s old (at most "
                                                           f"{max_age:.0f}): not a verdict on the node as it is")
    failed = [r for r in rows if r.get("status") in BAD]
    return dict(base, status="FAIL" if failed else "PASS", failed=failed, why=None)


def ledger_entry(host: str, verdict: dict) -> dict:
    """The ledger's entry for a verdict: ``{run, scope, status, network, partners, checks}``; scope
    ``node`` (a node check) or ``network`` (root's re-test, retest.py); network is True when every
    failed row is about the network (slurm.is_network), partners their other ends."""
    failed = verdict.get("failed") or []
    return {"run": verdict.get("run"), "scope": verdict.get("scope") or "node", "status": verdict["status"],
            "network": bool(failed) and all(slurm.is_network(r) for r in failed),
            "partners": sorted({p for r in failed for p in slurm.partners(r, host)}),
            "checks": [r.get("id") for r in failed]}


def read_ledger(path: str) -> list[dict]:
    """The ledger's entries at ``path``, oldest first; [] when there is none yet. Raises OSError,
    ValueError or TypeError when it cannot be read or is not a list."""
    try:
        with open(path, encoding="utf-8") as fh:
            return [e for e in json.load(fh) if isinstance(e, dict)]
    except FileNotFoundError:
        return []


def update_ledger(path: str, host: str, verdict: dict, keep: int = LEDGER_KEEP) -> list[dict]:
    """The node's ledger with this verdict's entry added once (a run already in it is not added
    again), the last ``keep`` kept, written back atomically (mode 0600). UNKNOWN adds nothing.
    An unreadable ledger starts afresh. Returns the entries, oldest first. Raises OSError when
    it cannot be written."""
    try:
        entries = read_ledger(path)
    except (OSError, ValueError, TypeError):
        entries = []
    if verdict["status"] != "UNKNOWN" and verdict.get("run") not in {e.get("run") for e in entries}:
        entries = (entries + [ledger_entry(host, verdict)])[-keep:]
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        write_atomic(path, json.dumps(entries, indent=1) + "\n", mode=0o600)
    return entries


def render_history(host: str, entries: list[dict]) -> str:
    """The ledger as ``ncclprep report --history`` prints it: a line per node check run, oldest
    first (its time, verdict, whether every failure was the network's, the partners, the failed
    checks), then the network strikes that count toward a drain (slurm.strikes)."""
    if not entries:
        return (f"{host}: no verdicts in the ledger yet (ncclprep node health adds each node check's, the "
                "Epilog's re-test its own)")
    lines = [f"{'run':36s} {'scope':7s} {'verdict':7s} {'network':7s} {'partners':16s} checks"]
    for e in entries:
        lines.append(f"{str(e.get('run')):36s} {str(e.get('scope') or 'node'):7s} {str(e.get('status')):7s} "
                     f"{'yes' if e.get('network') else 'no':7s} "
                     f"{','.join(e.get('partners') or []) or '-':16s} {', '.join(e.get('checks') or []) or '-'}")
    hits = sorted(slurm.strikes(entries))
    lines.append(f"{host}: {len(entries)} verdict{'' if len(entries) == 1 else 's'}; network strikes {len(hits)}"
                 + (f" ({', '.join(hits)}): a drain needs 2 with different partners" if hits else ""))
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
    if age_s is not None and age_s < refresh_after:
        return False
    lock = record_path + ".refreshing"
    try:
        if os.path.exists(lock) and _now().timestamp() - os.path.getmtime(lock) < max(refresh_after, 60):
            return False
        os.makedirs(os.path.dirname(lock) or ".", mode=0o700, exist_ok=True)
        with open(lock, "w", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()}\n")
        subprocess.Popen(["sh", "-c", '"$@"; rm -f "$0"', lock, *command], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        return True
    except OSError:
        return False


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


def health(host: str, record: dict | None, ledger_path: str, runner: Runner, max_age: float,
           dry_run: bool = False, now: datetime.datetime | None = None) -> tuple[int, str, dict]:
    """Steps 1-4 of the module docstring for ``host``: ``(exit code, the line to print, {verdict,
    decision, argv})``. ``runner`` runs sinfo and scontrol (hostinfo.Runner). Raises OSError when
    the ledger cannot be written."""
    verdict = record_verdict(record, max_age, now or _now())
    out = {"verdict": verdict, "decision": None, "argv": None}
    if verdict["status"] == "UNKNOWN":
        return EXIT_UNKNOWN, f"ncclprep health {host}: UNKNOWN ({verdict['why']}): neither drained nor resumed", out
    ledger = update_ledger(ledger_path, host, verdict)
    nodes, why = slurm_view(host, runner)
    if nodes is None:
        return EXIT_UNKNOWN, f"ncclprep health {host}: UNKNOWN (Slurm's view unreadable: {why}): nothing done", out
    decision = slurm.decide(host, nodes[host], verdict, ledger, nodes)
    argv = slurm.scontrol(host, decision)
    out.update(decision=decision, argv=argv)
    if argv is None or dry_run:
        return EXIT_ACTED, f"ncclprep health {decision['why']}" + (" (dry run)" if argv else ""), out
    rc, _, err = runner(argv, COMMAND_TIMEOUT)
    if rc != 0:
        return EXIT_UNKNOWN, f"ncclprep health {host}: {decision['action']} failed (scontrol exit {rc}: " \
                             f"{' '.join(err.split())}): {decision['why'][len(host) + 2:]}", out
    return EXIT_ACTED, f"ncclprep health {decision['why']}", out


def _read_quick(progress, intent: str) -> None:
    """PROLOG_CHECKS' rows of this node now (run_with_deadline's child)."""
    doc = nodecheck.intent_document(intent)
    facts = nodecheck.read_node(doc, PROLOG_MODULES, intent)
    progress.result([r for r in nodecheck.check(doc, facts, PROLOG_MODULES) if r["id"] in PROLOG_CHECKS])


def quick_rows(intent: str = INTENT_FILE, deadline: float = PROLOG_DEADLINE) -> tuple[list[dict] | None, str | None]:
    """``(rows, None)`` of PROLOG_CHECKS read now, or ``(None, why)`` when the reading failed or
    passed ``deadline`` seconds (nodecheck.CouldNotRun's text: no intent file ...). Raises nothing."""
    run = run_with_deadline(_read_quick, {"intent": intent}, deadline)
    if run["outcome"] == "result":
        return run["value"], None
    if run["outcome"] == "hang":
        return None, f"reading the node took more than {deadline:g} s"
    return None, str(run["value"])


def prolog(host: str, rows: list[dict] | None, why: str | None, record: dict | None, runner: Runner,
           max_age: float, dry_run: bool = False, now: datetime.datetime | None = None) -> tuple[int, str, dict]:
    """The Prolog's decision for ``host`` (module docstring): ``(exit code, line, {verdict, decision,
    argv})``; ``rows``: quick_rows' rows read now (None: not read, ``why`` says why). Raises nothing."""
    cached = record_verdict(record, max_age, now or _now())
    failed_now = [r for r in rows or [] if r.get("status") in BAD]
    if failed_now:
        verdict = {"status": "FAIL", "failed": failed_now, "why": None}
    elif cached["status"] == "FAIL":
        verdict = dict(cached)
    elif rows is None:
        verdict = {"status": "UNKNOWN", "failed": [], "why": why}
    else:
        verdict = {"status": "PASS", "failed": [], "why": None}
    out = {"verdict": verdict, "decision": None, "argv": None}
    if verdict["status"] != "FAIL":
        text = "passes" if verdict["status"] == "PASS" else f"UNKNOWN ({verdict['why']})"
        return EXIT_ACTED, f"ncclprep prolog {host}: {text}: the job runs", out
    nodes, why = slurm_view(host, runner)
    if nodes is None:
        return EXIT_ACTED, (f"ncclprep prolog {host}: fails ({slurm.reason(verdict['failed'], host)}), but Slurm's "
                            f"view is unreadable ({why}): UNKNOWN, the job runs"), out
    decision = slurm.decide(host, nodes[host], verdict, [], nodes)
    argv = slurm.scontrol(host, decision)
    out.update(decision=decision, argv=argv)
    if argv is None:
        code = EXIT_REQUEUE if slurm.ours(nodes[host]) else EXIT_ACTED
        return code, f"ncclprep prolog {decision['why']}" + ("; the job is requeued" if code else "; the job runs"), out
    if not dry_run:
        rc, _, err = runner(argv, COMMAND_TIMEOUT)
        if rc != 0:
            return EXIT_ACTED, (f"ncclprep prolog {host}: drain failed (scontrol exit {rc}: {' '.join(err.split())}): "
                                "the job runs"), out
    return EXIT_REQUEUE, f"ncclprep prolog {decision['why']}; the job is requeued" + (
        " (dry run)" if dry_run else ""), out


def parser(command: str = "health") -> argparse.ArgumentParser:
    """The options of ``ncclprep node health`` or ``ncclprep node prolog``."""
    if command == "health":
        p = argparse.ArgumentParser(
            prog="ncclprep node health", allow_abbrev=False,
            description="Slurm's HealthCheckProgram: drain this node with an 'ncclprep:' reason when its last node "
                        "check failed, resume it when ncclprep drained it and it passes now; never touch another's "
                        "drain. Judges by the last node check's record and refreshes it in the background.",
            epilog="exit codes: 0 acted (or nothing to do); 2 bad usage; 3 UNKNOWN (nothing done) or Slurm refused.")
        p.add_argument("--ledger", default=LEDGER_FILE, help=f"this node's past verdicts (default {LEDGER_FILE})")
        p.add_argument("--refresh-after", type=float, default=240.0,
                       help="seconds after which a fresh node check starts in the background (default 240)")
        p.add_argument("--no-refresh", action="store_true", help="start no background node check")
    else:
        p = argparse.ArgumentParser(
            prog="ncclprep node prolog", allow_abbrev=False,
            description="Slurm's Prolog: the data-plane interface, the members' names and the job ports read now, "
                        "and the last node check's verdict; on a failure drain this node with an 'ncclprep:' reason "
                        "and exit 1 (Slurm requeues the job).",
            epilog="exit codes: 0 the job runs (passes, UNKNOWN, another's drain, the circuit breaker); 1 drained, "
                   "the job is requeued; 2 bad usage.")
        p.add_argument("--intent", default=INTENT_FILE, help=f"the intent document (default {INTENT_FILE})")
    p.add_argument("--record", default=RECORD_FILE, help=f"the node check's record (default {RECORD_FILE})")
    p.add_argument("--max-age", type=float, default=900.0,
                   help="seconds a record stays a verdict (default 900: three of Slurm's usual 300 s intervals)")
    p.add_argument("--dry-run", action="store_true", help="say what would be done, run no scontrol")
    p.add_argument("--node", default=None, help="Slurm's name of this node (default $SLURMD_NODENAME, then the host "
                                                "name of the record or of this machine)")
    return p


def main(argv: list[str], command: str = "health") -> int:
    """``ncclprep node health|prolog [options]`` (``argv`` without ``node <command>``): the exit code."""
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
    host = (opts.node or os.environ.get("SLURMD_NODENAME") or (record or {}).get("host")
            or socket.gethostname().split(".")[0])
    if command == "prolog":
        rows, why = quick_rows(opts.intent)
        code, line, _ = prolog(host, rows, why, record, subprocess_runner, opts.max_age, opts.dry_run)
        print(line)
        return code
    try:
        code, line, result = health(host, record, opts.ledger, subprocess_runner, opts.max_age, opts.dry_run)
    except OSError as exc:
        print(f"ncclprep health {host}: UNKNOWN (cannot write the ledger {opts.ledger}: {exc}): nothing done")
        return EXIT_UNKNOWN
    if not opts.no_refresh and refresh(opts.record, opts.refresh_after, result["verdict"].get("age_s")):
        line += "; a fresh node check runs in the background"
    print(line)
    return code
