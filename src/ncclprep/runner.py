"""Run one of the repository's playbooks through ansible-runner, with a live progress line.

``run_playbook`` starts ``ansible-playbook`` the way ``ansible-playbook <playbook>``
from the repository root would (same ansible.cfg, same inventory and arguments),
feeds every event ansible-runner emits to a ``Progress``, and returns a ``RunResult``:
what failed where, the report the preflight wrote (validate.yml), the play recap,
and the exit code of the CLI (``exit_code``).

Exit codes of the ``ncclprep`` commands (``EXIT_*``):

- 0: the run passed (every check PASS, WARN or SKIP; provisioning succeeded);
- 1: a check failed or hung (validate.yml wrote a FAIL report);
- 2: bad input or usage: an inventory that does not exist, an argument ansible-playbook
  refuses, or a variable the playbooks' input checks refuse before anything changed (an
  ``assert``, a role's argument spec, any task of site.yml's checking play);
- 3: could not run: a host unreachable during provisioning, a task that failed for
  another reason, ansible-playbook not found, or the run interrupted.

The event names and fields read here are those of ansible-runner's event stream
(https://ansible.readthedocs.io/projects/runner/en/latest/intro/#runner-artifact-job-events):
``event`` (``playbook_on_play_start``, ``playbook_on_task_start``, ``runner_on_ok``,
``runner_on_failed``, ``runner_on_unreachable``, ``runner_retry``, ``runner_on_skipped``,
``playbook_on_stats``) and ``event_data`` (``task``, ``task_action``, ``host``, ``res``,
``ignore_errors``, and the recap dicts ``ok``, ``changed``, ``failures``, ``dark``, ``skipped``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import IO

from ncclprep import REPO_ROOT

EXIT_PASS = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_COULD_NOT_RUN = 3

#: Task actions whose failure means "the input was refused before any change".
INPUT_ACTIONS = frozenset({"assert", "ansible.builtin.assert", "validate_argument_spec",
                           "ansible.builtin.validate_argument_spec"})
#: Plays that only check the inventory and change nothing (playbooks/site.yml play 1): any failure
#: there is a refused input.
INPUT_PLAYS = frozenset({"Check the inventory before any change"})
#: The preflight's task that fails the run on a FAIL report (roles/preflight/tasks/report.yml).
VERDICT_TASK = "Fail the run when a check failed or hung"
#: The module that writes the preflight's reports (library/cluster_report.py).
REPORT_ACTIONS = frozenset({"cluster_report"})
#: ansible-playbook's own exit codes for bad options and for a parse error of the playbook or
#: inventory (ansible-core lib/ansible/cli/__init__.py: 5 = bad options, 4 = parser error).
PLAYBOOK_USAGE_RCS = frozenset({4, 5})
#: ansible-playbook's exit status for an error before any task ran ("ERROR! Specified inventory, host
#: pattern and/or --limit leaves us with no hosts to target", an unreadable -e @file).
PLAYBOOK_ERROR_RC = 1
#: ansible-playbook's exit status for an option its argument parser refuses (argparse), and for a
#: failed task; with no task started it is the former.
PLAYBOOK_ARGPARSE_RC = 2
#: Terminal colour codes in ansible-playbook's output.
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclasses.dataclass
class Failure:
    """One failed task on one host: ``kind`` is ``failed`` or ``unreachable``."""

    host: str
    task: str
    action: str
    message: str
    kind: str = "failed"
    play: str = ""

    @property
    def refused_input(self) -> bool:
        """A failed input check: an assert or argument spec, or any task of an input-checking play."""
        return self.kind == "failed" and (self.action in INPUT_ACTIONS or self.play in INPUT_PLAYS)


@dataclasses.dataclass
class RunResult:
    """What one playbook run did.

    ``rc`` is ansible-playbook's exit status; ``failures`` the failed or unreachable tasks
    (not those with ignore_errors); ``report`` the cluster_report module's result
    (``status``, ``report_dir``, ``problems``) when the preflight wrote one, else None;
    ``recap`` host -> {ok, changed, failed, unreachable, skipped} counts; ``elapsed_s`` seconds.
    """

    rc: int
    failures: list[Failure] = dataclasses.field(default_factory=list)
    report: dict | None = None
    recap: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    elapsed_s: float = 0.0
    error: str | None = None
    output_tail: list[str] = dataclasses.field(default_factory=list)
    #: host patterns of the plays that matched no host (an empty or unparsable inventory)
    no_hosts: list[str] = dataclasses.field(default_factory=list)
    #: tasks started (None: not counted)
    tasks: int | None = None

    @property
    def exit_code(self) -> int:
        return exit_code(self)


def exit_code(result: RunResult) -> int:
    """The CLI's exit code (``EXIT_*``) for one run, by the rules of the module docstring.

    A report written in this run decides between 0 and 1, unless an input check failed too;
    with no report, a refused input is 2 and any other failure 3.
    """
    if result.error is not None:
        return EXIT_COULD_NOT_RUN
    if any(f.refused_input for f in result.failures):
        return EXIT_BAD_INPUT
    if result.report is not None:
        return EXIT_PASS if result.report.get("status") == "PASS" else EXIT_CHECK_FAILED
    others = [f for f in result.failures if f.task != VERDICT_TASK]
    if result.rc == 0 and not others:
        # every play matched no host and nothing ran: the inventory gave no host, nothing passed
        return EXIT_BAD_INPUT if result.no_hosts and not result.recap else EXIT_PASS
    if result.rc in PLAYBOOK_USAGE_RCS and not result.failures:
        return EXIT_BAD_INPUT
    if result.rc in (PLAYBOOK_ERROR_RC, PLAYBOOK_ARGPARSE_RC) and not result.failures and result.tasks == 0:
        return EXIT_BAD_INPUT
    return EXIT_COULD_NOT_RUN


def _message(res) -> str:
    """One line for a failed task's result: its msg (stderr, reason); for a loop whose msg only says
    that items failed, the failed items' own messages."""
    if not isinstance(res, dict):
        return str(res)
    items = [r for r in res.get("results") or [] if isinstance(r, dict) and r.get("failed")]
    if items and str(res.get("msg", "")).startswith("One or more items failed"):
        return "; ".join(dict.fromkeys(_message(r) for r in items))[:400]
    msg = res.get("msg") or res.get("stderr") or res.get("reason") or ""
    if isinstance(msg, list):
        msg = "; ".join(str(m) for m in msg)
    return " ".join(str(msg).split())[:400]


class Progress:
    """Consumes ansible-runner events; keeps the run's state and draws a progress line.

    On a terminal the line is redrawn in place (``[mm:ss] label | task | host state |
    ok N changed N failed N``) and a failure stays on a line of its own; elsewhere (a CI log)
    one line per task start and one per failure are printed.
    With ``verbose`` ansible-playbook's own output is shown instead and nothing is drawn.
    """

    def __init__(self, label: str, stream: IO[str] | None = None, verbose: bool = False,
                 clock=time.monotonic, echo: IO[str] | None = None, task_lines: bool = True) -> None:
        self.label, self.verbose, self.clock = label, verbose, clock
        #: off the terminal, a line per task start (False: only the failures; a caller that prints
        #: its own progress between runs, ``ncclprep tune``)
        self.task_lines = task_lines
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        # where -v shows ansible-playbook's output: standard output, colour kept only on a terminal
        self.echo = echo if echo is not None else sys.stdout
        self.echo_tty = bool(getattr(self.echo, "isatty", lambda: False)())
        self.start = clock()
        self.task = ""
        self.play = ""
        self.pattern = ""
        self.tasks = 0
        self.no_hosts: list[str] = []
        self.counts = {"ok": 0, "changed": 0, "failed": 0, "unreachable": 0}
        self.failures: list[Failure] = []
        self.report: dict | None = None
        self.recap: dict[str, dict[str, int]] = {}
        self._width = 0

    def elapsed(self) -> str:
        s = int(self.clock() - self.start)
        return f"{s // 60:02d}:{s % 60:02d}"

    def __call__(self, event: dict) -> bool:
        """ansible-runner's ``event_handler``: update the state, redraw; True keeps the event."""
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        host = data.get("host") or ""
        if self.verbose and event.get("stdout"):
            self._echo(event["stdout"])
        if kind == "playbook_on_play_start":
            self.play = data.get("play") or data.get("name") or ""
            self.pattern = data.get("pattern") or self.play
        elif kind == "playbook_on_no_hosts_matched":
            self.no_hosts.append(self.pattern or data.get("play") or "")
        elif kind == "playbook_on_task_start":
            self.task, self.tasks = data.get("task") or data.get("name") or "", self.tasks + 1
            if self.tty or self.task_lines:
                self._draw("", newline=not self.tty)
        elif kind == "runner_on_ok":
            res = data.get("res") or {}
            self.counts["changed" if res.get("changed") else "ok"] += 1
            if data.get("task_action") in REPORT_ACTIONS and isinstance(res, dict) and "status" in res:
                self.report = {k: res.get(k) for k in ("status", "report_dir", "problems")}
            self._draw(f"{host} ok")
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            self.counts["failed"] += 1
            self.failures.append(Failure(host, data.get("task") or self.task, data.get("task_action") or "",
                                         _message(data.get("res")), play=data.get("play") or self.play))
            self._draw(f"{host} FAILED: {self.failures[-1].message[:160]}", newline=True)
        elif kind == "runner_on_unreachable":
            self.counts["unreachable"] += 1
            self.failures.append(Failure(host, data.get("task") or self.task, data.get("task_action") or "",
                                         _message(data.get("res")), kind="unreachable",
                                         play=data.get("play") or self.play))
            self._draw(f"{host} UNREACHABLE: {self.failures[-1].message[:160]}", newline=True)
        elif kind == "runner_retry":
            left = (data.get("res") or {}).get("retries", 0) - (data.get("res") or {}).get("attempts", 0)
            self._draw(f"{host} waiting ({left} tries left)")
        elif kind == "playbook_on_stats":
            for key, name in (("ok", "ok"), ("changed", "changed"), ("failures", "failed"),
                              ("dark", "unreachable"), ("skipped", "skipped")):
                for h, n in (data.get(key) or {}).items():
                    self.recap.setdefault(h, {"ok": 0, "changed": 0, "failed": 0, "unreachable": 0,
                                              "skipped": 0})[name] = n
        return True

    def _echo(self, text: str) -> None:
        """Show one event's output as ansible-playbook printed it (its pty's CRs dropped; its colour
        codes dropped unless standard output is a terminal)."""
        text = text.replace("\r", "")
        if not self.echo_tty:
            text = _ANSI_RE.sub("", text)
        self.echo.write(text + "\n")
        self.echo.flush()

    def _draw(self, state: str, newline: bool = False) -> None:
        if self.verbose or (not self.tty and not newline):
            return
        c = self.counts
        line = (f"[{self.elapsed()}] {self.label} | {self.task}" + (f" | {state}" if state else "")
                + f" | ok {c['ok']} changed {c['changed']} failed {c['failed'] + c['unreachable']}")
        if self.tty:
            cols = shutil.get_terminal_size((100, 20)).columns
            line = line[: cols - 1]
            self.stream.write("\r" + line.ljust(self._width) + ("\n" if newline else ""))
            self._width = 0 if newline else len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the live line (a newline on a terminal)."""
        if self.tty and not self.verbose and self._width:
            self.stream.write("\n")
            self.stream.flush()


def _descendants(root: int) -> list[int]:
    """The processes below ``root`` (Linux /proc), children first; [] where /proc cannot be read."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: the command may hold spaces and parentheses
        parent[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        kids = [p for p, pp in parent.items() if pp == pid]
        out += kids
        todo += kids
    return out


def _stop_workers() -> None:
    """SIGKILL ansible-playbook's workers before ansible-runner kills ansible-playbook's own process
    group: each worker runs in a session of its own (ansible-core detaches them), so that kill does
    not reach them, and a worker left behind goes on with its task on a node, or hangs for good."""
    mine = os.getpgid(0)
    for pid in _descendants(os.getpid()):
        try:
            if os.getpgid(pid) != mine:
                os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


def playbook_env() -> dict[str, str]:
    """Environment of ansible-playbook: the repository's ansible.cfg, the venv's tools first on PATH,
    and the local cluster's podman settings where bring-up wrote them (as scripts/env.sh sets)."""
    env = {"ANSIBLE_CONFIG": os.path.join(REPO_ROOT, "ansible.cfg")}
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    conf = os.path.join(REPO_ROOT, ".cluster", "containers.conf")
    if os.path.isfile(conf):
        env["CONTAINERS_CONF"] = conf
    return env


def run_playbook(playbook: str, inventory: str | None, extra: list[str], label: str,
                 verbose: bool = False, stream: IO[str] | None = None, task_lines: bool = True) -> RunResult:
    """Run ``playbook`` (a path relative to the repository root) and return what happened.

    ``inventory``: a path (relative to the current folder) or None for ansible.cfg's;
    ``extra``: more ansible-playbook arguments, passed as given (``-l``, ``-e``, ``--check``...).
    ``task_lines``: False prints, off a terminal, only the failures (not a line per task).
    Never raises for a failed run: a failure is in the result. Raises FileNotFoundError for an
    inventory path that does not exist (the caller reports it as bad input).
    """
    import ansible_runner

    args = list(extra)
    if inventory is not None:
        inv = os.path.abspath(inventory)
        if not os.path.exists(inv):
            raise FileNotFoundError(f"inventory {inventory!r} does not exist (looked at {inv})")
        args = ["-i", inv, *args]
    progress = Progress(label, stream=stream, verbose=verbose, task_lines=task_lines)
    private = tempfile.mkdtemp(prefix="ncclprep-run-")
    env = dict(os.environ, **playbook_env())
    if not (verbose and progress.echo_tty):  # ansible-playbook runs on a pty: no colour unless shown on one
        env["ANSIBLE_NOCOLOR"] = "1"
    started = time.monotonic()
    saved = dict(os.environ)
    # Ctrl-C, SIGTERM or SIGHUP cancels the run (ansible-runner kills ansible-playbook's process group) and the
    # result says "interrupted". Given no cancel_callback, ansible-runner would install handlers of its
    # own and leave them for the rest of the process: the next Ctrl-C would then stop nothing.
    interrupted = threading.Event()

    def cancel() -> bool:
        if interrupted.is_set():
            _stop_workers()
            return True
        return False

    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            handlers[sig] = signal.signal(sig, lambda _n, _f: interrupted.set())
    try:
        # ansible-runner passes `envvars` only to the child; PATH must also be right for the
        # lookup of ansible-playbook itself, so the parent's environment is set for the call.
        os.environ.update(env)
        runner = ansible_runner.run(
            private_data_dir=private, project_dir=REPO_ROOT, playbook=playbook,
            cmdline=" ".join(shlex.quote(a) for a in args), envvars=env,
            event_handler=progress, quiet=True, suppress_env_files=True, cancel_callback=cancel,
        )
        rc = runner.rc if isinstance(runner.rc, int) else EXIT_COULD_NOT_RUN
        error = None if runner.status in ("successful", "failed") else f"ansible-playbook {runner.status}"
        if interrupted.is_set():
            error = "interrupted"
        text = _stdout(runner)
        _keep_log(saved.get("NCCLPREP_LOG"), label, playbook, args, text)
        tail = _tail(text) if (rc != 0 and not progress.failures) or (progress.no_hosts and not progress.recap) \
            else []
    except KeyboardInterrupt:
        rc, error, tail = 130, "interrupted", []
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        os.environ.clear()
        os.environ.update(saved)
        progress.close()
        shutil.rmtree(private, ignore_errors=True)
    return RunResult(rc=rc, failures=progress.failures, report=progress.report, recap=progress.recap,
                     elapsed_s=round(time.monotonic() - started, 1), error=error, output_tail=tail,
                     no_hosts=progress.no_hosts, tasks=progress.tasks)


def _stdout(runner) -> str:
    """Everything ansible-playbook printed in the run (ansible-runner keeps it in its private folder)."""
    try:
        return runner.stdout.read()
    except (OSError, AttributeError):
        return ""


def _keep_log(path: str | None, label: str, playbook: str, args: list[str], text: str) -> None:
    """Append ansible-playbook's whole output of one run to ``path`` (``NCCLPREP_LOG``; nothing when
    unset), under a line naming the run, so that the progress line can stand in for it on screen
    (scripts/demo.sh). A file that cannot be written is said on standard error, once per run."""
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"== ncclprep {label}: ansible-playbook {playbook} {shlex.join(args)}\n")
            fh.write(_ANSI_RE.sub("", text))
    except OSError as exc:
        print(f"ncclprep: NCCLPREP_LOG={path}: cannot write Ansible's output there: {exc}", file=sys.stderr)


def _tail(text: str, lines: int = 15) -> list[str]:
    """The last lines ansible-playbook printed (its own error for a refused argument or inventory)."""
    out = [ln for ln in (_ANSI_RE.sub("", t) for t in text.splitlines()) if ln.strip()]
    # a refused option: argparse's one error line, not the help text printed after it
    return [ln for ln in out if ln.startswith("ansible-playbook: error:")] or out[-lines:]
