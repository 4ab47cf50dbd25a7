"""``ncclprep tune``: measure variants of the host and NCCL settings on the cluster, keep a winner
only when it wins, write it through the roles, verify it (issue 26; docs/tuning.md).

The steps, each one ``ansible-playbook tune.yml`` run (playbooks/tune.yml) through ``run_playbook``:

1. plan: tune_space against its argument spec (roles/tune), every node's value of each variable
   the space names;
2. check: site.yml's checking play once per variant, with its values (``site.yml --tags
   tune_check``: every role's input, nothing applied): a value any role refuses stops the run
   here, before any change;
3. measure: ``tuning.schedule``'s order (each round every variant once, rotated), each step
   applying its variant through the roles (the baseline step re-applies the inventory's values)
   and measuring the collective and the training job;
4. decide (``tuning.judge``); the winners written to the inventory's
   ``group_vars/all/ncclprep_tuned.yml`` (commented with the figures and the date), or nothing
   written; then the inventory's settings back in force: site.yml whole where something was kept
   (it becomes the node check's intent too), else site.yml over the tuned concerns; then
   validate.yml, whose busbw is compared with the tuning's (``--no-verify``: not run);
5. a run stopped before its end (Ctrl-C, SIGTERM, SIGHUP, a node lost, a failed measurement, a
   winner site.yml could not apply, the inventory resolving a written variable otherwise, an
   error of the tool) keeps nothing: the vars file put back, the inventory's settings re-applied.

Everything a run read and decided goes to ``reports/tune-<stamp>/tuning.json`` (and the steps'
JSON beside it); validate.yml's report takes it as its "Tuning" section.

Exit codes as the other commands: 0 done (a winner kept or none), 1 the verification failed
(validate.yml, or its busbw below every run of what was kept), 2 bad input (refused before any
change: tune_space, the inventory's layout, --check or --limit), 3 could not run or was stopped.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import stat
import statistics
import sys
import time

import yaml

# ncclprep must be imported before ansible.module_utils.ncclprep: keep this order.
# isort: off
from ncclprep import REPO_ROOT  # (extends ansible.module_utils.__path__)
from ansible.module_utils.ncclprep.tune import decide as tuning
from ansible.module_utils.ncclprep.atomic import held_lock, write_atomic
from ansible.module_utils.ncclprep.report import load_run
# isort: on
from ncclprep.runner import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_COULD_NOT_RUN, EXIT_PASS, run_playbook

PLAYBOOK = "tune.yml"
TUNED_FILE = os.path.join("group_vars", "all", "ncclprep_tuned.yml")


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class Interrupted(Exception):
    """SIGTERM as Ctrl-C: the run stops and the cluster is restored."""


def _sigterm(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


#: The signals that stop a run like Ctrl-C (a closed terminal or SSH session sends SIGHUP).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: ansible-playbook arguments tune refuses: it changes the nodes by design (--check would measure nothing
#: and write nothing) and decides for the whole cluster group (a --limit subset would decide for all).
REFUSED_ARGS = ("--check", "-C", "--limit", "-l")


def tuned_path(inventory: str) -> str:
    """The vars file of the winners: ``group_vars/all/ncclprep_tuned.yml`` beside the inventory
    (inside it when the inventory is a folder, next to it when a file)."""
    inv = os.path.abspath(inventory)
    return os.path.join(inv if os.path.isdir(inv) else os.path.dirname(inv), TUNED_FILE)


#: How long a write of the tuned file waits for another tune run's (seconds). The lock is held only to
#: read, merge and replace that one file, milliseconds; a longer wait means a stuck run.
LOCK_TIMEOUT_S = 30.0


def lock_path(path: str) -> str:
    """The lock file beside the tuned file ``path``: ``.<name>.lock``, a hidden name Ansible skips in a
    group_vars folder (ansible-core's DataLoader), so it is never read as variables."""
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.lock")


@contextlib.contextmanager
def tuned_lock(path: str, timeout: float | None = None):
    """Hold an exclusive ``flock`` on ``lock_path(path)`` (made when missing; its folder must exist),
    so two tune runs read, merge and replace the tuned file one after the other. Raises TimeoutError
    naming the lock file when another holds it longer than ``timeout`` seconds (None:
    LOCK_TIMEOUT_S), OSError when it cannot be opened."""
    lock = lock_path(path)
    timeout = LOCK_TIMEOUT_S if timeout is None else timeout
    with held_lock(lock, timeout, f"{lock}: another ncclprep tune held it for {timeout:g} s", mode=0o644):
        yield


def read_tuned(path: str) -> tuple[str | None, dict]:
    """The tuned file's text (None: no file) and its variables. Raises ValueError naming the file when
    it is not YAML or holds something else than a mapping of variable names (a list, a string): the
    winners cannot be merged into it, and Ansible would refuse it too."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None, {}
    try:
        values = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{getattr(exc, 'problem', None) or 'unreadable'}" + (f" at line {mark.line + 1}" if mark else "")
        raise ValueError(f"{path} is not valid YAML ({where}); fix or remove it") from None
    if values is None:
        return text, {}
    if not isinstance(values, dict):
        raise ValueError(f"{path} holds a YAML {type(values).__name__}, not a mapping of variable names to "
                         "values; fix or remove it")
    return text, values


def tuned_path_problem(inventory: str) -> str | None:
    """Why the winners could not go to ``tuned_path``, or None. Ansible reads ``group_vars/all`` as a
    folder *or* as a file (``all``, ``all.yml``, ``all.yaml``, ``all.json``), the first it finds in that
    order (ansible-core's DataLoader.find_vars_files): a folder made beside ``all.yml`` would hide it."""
    folder = os.path.dirname(tuned_path(inventory))
    if os.path.isdir(folder):
        return None
    if os.path.exists(folder):
        return f"{folder} is a file: the winners go to {TUNED_FILE} in a folder of that name"
    for ext in (".yml", ".yaml", ".json"):
        if os.path.exists(folder + ext):
            return (f"{folder + ext} exists: a folder {folder}/ for the winners would hide it from Ansible (it "
                    f"reads one or the other); move it to {folder}/main{ext} first")
    return None


def baseline_of(read: dict, names) -> dict:
    """The inventory's value of each variable in ``names`` (those the space tunes and their switches),
    the same on every node. Raises ValueError naming the variable and each node's value where they
    differ (tuning changes every node alike)."""
    rows = read["baselines"]
    first = {k: v for k, v in rows[read["hosts"][0]].items() if k in names}
    for var in first:
        values = {h: rows[h][var] for h in read["hosts"]}
        if any(v != first[var] for v in values.values()):
            shown = ", ".join(f"{h} {v!r}" for h, v in values.items())
            raise ValueError(f"{var} differs between the nodes ({shown}): ncclprep tune sets one value on every "
                             "node; make it one value in the inventory first")
    return first


def space_names(space) -> set[str]:
    """The variables a space sets, and the switches of their concerns (tuning.SWITCHES)."""
    names = {var for dim in space if isinstance(dim, dict) for value in dim.get("values") or []
             if isinstance(value, dict) for var in value}
    return names | {tuning.SWITCHES[n] for n in names if n in tuning.SWITCHES}


def vars_file_text(result: dict, variants: dict, previous: dict, stamp: str, op: str,
                   min_gain: float = tuning.MIN_GAIN, max_loss: float = tuning.MAX_LOSS) -> str:
    """The tuned vars file: the previous tuned values updated with the winners, each winner's figures
    as comments above (median busbw at the target, the gain, the interval and the method)."""
    lines = [f"# Written by `ncclprep tune` on {stamp} (docs/tuning.md). Kept because each variant below",
             "# won on this cluster; run `ncclprep tune` again after a change of hardware or software.", "#"]
    for name in result["winners"]:
        d = result["decisions"][name]
        row = d["sizes"][d["target"]]
        lines.append(f"# {variants[name]['label']}: {op} busbw at {d['target']} bytes {row['base_median']:.4g} -> "
                     f"{row['variant_median']:.4g} GB/s ({(row['ratio'] - 1) * 100:+.1f} %, medians of "
                     f"{d['runs']} runs), interval {d['interval'][0]:.3f}-{d['interval'][1]:.3f}")
        if d.get("step"):
            lines.append(f"#   training step {d['step']['base_median'] * 1e3:.1f} -> "
                         f"{d['step']['variant_median'] * 1e3:.1f} ms (median)")
    lines += [f"# Decision rule: {tuning.METHOD}; at least {min_gain * 100:g} % better at the target,",
              f"# no size more than {max_loss * 100:g} % worse.", "---"]
    values = dict(previous)
    values.update(result["vars"])
    return "\n".join(lines) + "\n" + yaml.safe_dump(values, default_flow_style=False, sort_keys=True)


class Tune:
    """One ``ncclprep tune`` run (module docstring)."""

    def __init__(self, inventory: str, extra: list[str], verbose: bool = False, verify: bool = True) -> None:
        self.inventory, self.extra, self.verbose, self.verify = inventory, list(extra), verbose, verify
        stamp = datetime.datetime.now(datetime.timezone.utc)
        self.stamp = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
        self.dir = os.path.join(REPO_ROOT, "reports", "tune-" + stamp.strftime("%Y%m%d-%H%M%S"))
        os.makedirs(self.dir, exist_ok=True)
        self.record: dict = {"generated_at": self.stamp, "inventory": os.path.abspath(inventory),
                             "method": tuning.METHOD, "runs": [], "status": "running"}
        self.concerns: list[str] = []
        self.changed = False

    # -- steps ---------------------------------------------------------------------------------
    def ansible(self, playbook: str, args: list[str], label: str, *, interruptible: bool = True):
        """``playbook`` on the inventory with the command's extra arguments and ``args``: its RunResult.
        A Ctrl-C that reached run_playbook (ansible-runner) is the whole command's: raised as
        KeyboardInterrupt, unless ``interruptible`` is false (the restore, which must not raise)."""
        result = run_playbook(playbook, self.inventory, [*self.extra, *args], label, verbose=self.verbose,
                              task_lines=False)
        if interruptible and result.error == "interrupted":
            raise KeyboardInterrupt
        return result

    def _play(self, tags: list[str], label: str, values: dict | None = None, out: str | None = None,
              playbook: str = PLAYBOOK):
        args = ["--tags", ",".join(tags)]
        if values:
            path = os.path.join(self.dir, "variant.json")
            with open(path, "w", encoding="utf-8") as fh:
                json.dump(values, fh)
            args += ["-e", "@" + path]
        if out:
            args += ["-e", json.dumps({"tune_out": out})]
        return self.ansible(playbook, args, label)

    def _failed(self, result, what: str) -> str:
        if result.error:
            return f"{what}: {result.error}"
        for f in result.failures:
            how = "unreachable" if f.kind == "unreachable" else "failed"
            return f"{what}: {f.host} {how} at '{f.task}': {f.message}"
        return f"{what}: ansible-playbook exited with {result.rc}" + (
            f" ({'; '.join(result.output_tail[-3:])})" if result.output_tail else "")

    def plan(self) -> list[dict]:
        read = self.read = self._read("plan.json")
        problem = tuned_path_problem(self.inventory)
        if problem:
            raise StepFailed(f"inventory {self.inventory}: {problem}", EXIT_BAD_INPUT)
        try:
            self.baseline = baseline_of(read, space_names(read["space"]))
        except ValueError as exc:
            raise StepFailed(f"inventory {self.inventory}: {exc}", EXIT_BAD_INPUT) from None
        try:
            variants = tuning.plan(read["space"], self.baseline)
        except ValueError as exc:
            raise StepFailed(str(exc), EXIT_BAD_INPUT) from None
        try:
            if len(variants) > 1:
                tuning.schedule([v["name"] for v in variants], int(read["runs"]))
        except ValueError as exc:
            raise StepFailed(f"tune_runs: {exc}", EXIT_BAD_INPUT) from None
        if read["target_size"] is not None and int(read["target_size"]) not in read["sizes"]:
            raise StepFailed(f"tune_target_size={read['target_size']}: valid: one of tune_sizes "
                             f"({', '.join(map(str, read['sizes']))}) or null", EXIT_BAD_INPUT)
        self.concerns = sorted({c for v in variants for c in v["concerns"]})
        self.record.update(plan=read, variants=variants, concerns=self.concerns)
        return variants

    def _read(self, name: str) -> dict:
        """The plan step (tune.yml --tags tune_plan): the space, the options and every node's values."""
        out = os.path.join(self.dir, name)
        result = self._play(["tune_plan"], "tune: read the space", out=out,
                            values={"tune_variables": tuning.READ})
        if result.exit_code != EXIT_PASS:
            raise StepFailed(self._failed(result, "reading tune_space"), result.exit_code)
        if not os.path.isfile(out):
            raise StepFailed(f"reading tune_space: the plan step wrote nothing to {out}", EXIT_COULD_NOT_RUN)
        with open(out, encoding="utf-8") as fh:
            return json.load(fh)

    def write_winners(self, result: dict, by_name: dict) -> str:
        """The winners into ``tuned_path`` (merged with an earlier tune's); the earlier content is kept
        for ``unwrite``. Rendered before anything is written, then replaced whole (``write_atomic``)
        under ``tuned_lock``: a file that cannot take the winners is left as it was. Returns the path;
        raises StepFailed naming the file when it cannot be read, merged or written."""
        path = tuned_path(self.inventory)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with tuned_lock(path):
                previous, values = read_tuned(path)
                text = vars_file_text(result, by_name, values, self.stamp, self.read["op"],
                                      float(self.read["min_gain"]), float(self.read["max_loss"]))
                mode = stat.S_IMODE(os.stat(path).st_mode) if previous is not None else 0o644
                write_atomic(path, text, mode=mode)
        except (OSError, ValueError) as exc:
            raise StepFailed(f"the winners were not written: {exc}", EXIT_COULD_NOT_RUN) from None
        self.previous_file, self.written_text = previous, text
        self.record["written"] = path
        return path

    def unwrite(self) -> bool:
        """Put the vars file back as it was before this run (removed when there was none); True when
        this run had written it. A file changed since (another tune run wrote it) is left as it is,
        and so is one that cannot be put back: ``record["unwritten"]`` says which. Raises nothing."""
        path = self.record.get("written")
        if not path:
            return False
        try:
            with tuned_lock(path):
                try:
                    with open(path, encoding="utf-8") as fh:
                        now: str | None = fh.read()
                except FileNotFoundError:
                    now = None
                if now != self.written_text:
                    said = f"{path} left as it is: it changed or went after this run wrote it (another ncclprep tune?)"
                elif self.previous_file is None:
                    os.remove(path)
                    said = f"{path} put back as it was before this run (removed)"
                else:
                    write_atomic(path, self.previous_file, mode=stat.S_IMODE(os.stat(path).st_mode))
                    said = f"{path} put back as it was before this run"
        except OSError as exc:  # TimeoutError from the lock too
            said = f"{path} could not be put back as it was before this run: {exc}"
        self.record["unwritten"] = said
        self.record["written"] = None
        return True

    def confirm_written(self, values: dict) -> None:
        """Read the inventory again and check that every node now resolves each written variable to it:
        a later file (another group_vars/all/*.yml sorting after it, group_vars/<group>/, host_vars/) would
        win over it. Raises StepFailed naming the variable, the host and what it resolves to."""
        read = self._read("confirm.json")
        for host in read["hosts"]:
            for var, want in values.items():
                got = read["baselines"][host].get(var)
                if not tuning.same_value(got, want):
                    raise StepFailed(f"after writing {self.record['written']}, {host} still resolves {var} to "
                                     f"{got!r} (not {want!r}): a file Ansible reads after it sets {var} "
                                     "(group_vars/all/ files sort by name, then group_vars/<group>/, host_vars/); "
                                     "move the setting into ncclprep_tuned.yml or remove it there", EXIT_COULD_NOT_RUN)

    def check(self, variants: list[dict]) -> None:
        for v in variants[1:]:
            _say(f"ncclprep tune: checking {v['label']} (every role's input, nothing changed)")
            result = self._play(["tune_check"], f"tune: check {v['name']}", values=v["vars"], playbook="site.yml")
            if result.exit_code != EXIT_PASS:
                raise StepFailed(self._failed(result, f"variant {v['label']} refused"), result.exit_code)

    def measure(self, variants: list[dict]) -> dict[str, list[dict]]:
        by_name = {v["name"]: v for v in variants}
        order = tuning.schedule(list(by_name), int(self.read["runs"]))
        runs: dict[str, list[dict]] = {name: [] for name in by_name}
        took: list[float] = []
        for i, (rnd, name) in enumerate(order, 1):
            v = by_name[name]
            left = (len(order) - i + 1) * statistics.median(took) if took else None
            _say(f"ncclprep tune: run {i}/{len(order)} (round {rnd + 1}/{self.read['runs']}): {v['label']}"
                 + (f", about {left / 60:.1f} min left" if left is not None else ""))
            out = os.path.join(self.dir, f"run-{i:03d}-{name}.json")
            started = time.monotonic()
            self.changed = True
            result = self._play(["tune_apply", "tune_measure"], f"tune {i}/{len(order)} {name}",
                                values=dict(v["vars"], tune_concerns=self.concerns), out=out)
            took.append(time.monotonic() - started)
            if result.exit_code != EXIT_PASS or not os.path.isfile(out):
                raise StepFailed(self._failed(result, f"run {i} ({v['label']})"), EXIT_COULD_NOT_RUN)
            with open(out, encoding="utf-8") as fh:
                fig = tuning.run_figures(json.load(fh), self.read["op"])
            fig.update(run=i, round=rnd, variant=name, seconds=round(took[-1], 1))
            self.record["runs"].append(fig)
            if fig["errors"] or not fig["busbw"]:
                raise StepFailed(f"run {i} ({v['label']}): " + ("; ".join(fig["errors"]) or "no busbw measured"),
                                 EXIT_COULD_NOT_RUN)
            runs[name].append(fig)
            shown = ", ".join(f"{s}: {b:.3g}" for s, b in sorted(fig["busbw"].items()))
            _say(f"  busbw GB/s {shown}" + (f"; step {fig['step_s'] * 1e3:.1f} ms" if fig.get("step_s") else "")
                 + f" ({took[-1]:.0f} s)")
        return runs

    def restore(self, why: str) -> bool:
        """Apply the inventory's settings (tuned or original) to the tuned concerns; True when it ran clean."""
        if not self.concerns:
            return True
        _say(f"ncclprep tune: {why}: applying the inventory's settings (site.yml --tags {','.join(self.concerns)})")
        result = self.ansible("site.yml", ["--tags", ",".join(self.concerns)], "tune: restore", interruptible=False)
        ok = result.exit_code == EXIT_PASS
        self.record["restored"] = {"ok": ok, "why": why, "error": None if ok else self._failed(result, "restore")}
        if not ok:
            print(f"ncclprep tune: {self.record['restored']['error']}; run `ncclprep provision -i {self.inventory}` "
                  "once the nodes are back", file=sys.stderr)
        return ok

    def write(self) -> str:
        path = os.path.join(self.dir, "tuning.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.record, fh, indent=1, sort_keys=True, default=list)
        return path


class StepFailed(Exception):
    """A step that failed: its message and the exit code it gives."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _decision_lines(result: dict, variants: list[dict], op: str) -> list[str]:
    by_name = {v["name"]: v for v in variants}
    lines = []
    for name, d in result["decisions"].items():
        row = d["sizes"][d["target"]]
        lines.append(f"  {by_name[name]['label']}: {d['verdict'].upper() if d['keep'] else d['verdict']}: {op} busbw "
                     f"at {d['target']} bytes {row['base_median']:.4g} -> {row['variant_median']:.4g} GB/s; {d['why']}")
    return lines


def tune_main(inventory: str, extra: list[str], verbose: bool = False, verify: bool = True) -> int:
    """The command (module docstring). Returns the exit code."""
    refused = [a for a in extra if a in REFUSED_ARGS or a.startswith(("--limit=", "--check="))]
    if refused:
        print(f"ncclprep tune: {' '.join(refused)}: not taken: tune applies each variant for real and decides for "
              "the whole cluster group (data_plane_group); run it on the cluster as a whole", file=sys.stderr)
        return EXIT_BAD_INPUT
    run = Tune(inventory, extra, verbose, verify)
    previous = {sig: signal.signal(sig, _sigterm) for sig in STOP_SIGNALS}
    try:
        return _tune(run)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        path = run.write()
        _say(f"ncclprep tune: the run's record: {path}")


def _tune(run: Tune) -> int:
    try:
        variants = run.plan()
        if len(variants) == 1:
            run.record["status"] = "nothing to measure"
            _say("ncclprep tune: " + ("tune_space is empty" if not run.read["space"] else
                                      "every value of tune_space is the inventory's own") + ": nothing to measure")
            return EXIT_PASS
        _say(f"ncclprep tune: {len(variants) - 1} variant(s) against the baseline, {run.read['runs']} runs each, "
             f"{run.read['op']} at {', '.join(map(str, run.read['sizes']))} bytes"
             + (" and the training job's step time" if run.read["training"] else ""))
        run.check(variants)
        runs = run.measure(variants)
        return _decide(run, variants, runs)
    except (StepFailed, KeyboardInterrupt, Interrupted) as exc:
        return _stopped(run, exc)
    except Exception as exc:  # noqa: BLE001  (a bug, a file that cannot be written: never leave a variant in force)
        return _stopped(run, StepFailed(f"{type(exc).__name__}: {exc}", EXIT_COULD_NOT_RUN))


def _stopped(run: Tune, exc: BaseException) -> int:
    """A run stopped before its end: nothing kept (a vars file this run wrote is put back as it was),
    the tuned concerns re-applied from the inventory when a run changed the nodes."""
    if isinstance(exc, StepFailed):
        code, why = exc.code, str(exc)
    else:
        code, why = EXIT_COULD_NOT_RUN, f"interrupted ({str(exc) or 'Ctrl-C'})"
    print(f"ncclprep tune: {why}", file=sys.stderr)
    run.record.update(status="interrupted" if run.changed else "refused", error=why)
    if run.unwrite():
        _say(f"ncclprep tune: {run.record['unwritten']}")
    if run.changed:
        if run.restore("stopped before the end"):
            _say("ncclprep tune: nothing was kept; the inventory's settings are back in force")
        else:
            _say("ncclprep tune: nothing was kept, but the restore did not finish (above)")
    return code


def _decide(run: Tune, variants: list[dict], runs: dict) -> int:
    read = run.read
    result = tuning.judge(variants, runs, read["target_size"], float(read["min_gain"]), float(read["max_loss"]))
    for d in result["decisions"].values():
        d["runs"] = int(read["runs"])
    run.record.update(result=result)
    _say("ncclprep tune: decision (" + tuning.METHOD + "):")
    for line in _decision_lines(result, variants, read["op"]):
        _say(line)
    by_name = {v["name"]: v for v in variants}
    if result["winners"]:
        path = run.write_winners(result, by_name)
        _say(f"ncclprep tune: kept {', '.join(by_name[w]['label'] for w in result['winners'])}: written to {path}")
        run.confirm_written(result["vars"])
        # site.yml whole: the winner on every node, and the node check's intent with it
        _say("ncclprep tune: provisioning with the tuned settings (site.yml)")
        site = run.ansible("site.yml", [], "tune: provision")
        if site.exit_code != EXIT_PASS:
            raise StepFailed(run._failed(site, "provisioning the winner (site.yml)"), EXIT_COULD_NOT_RUN)
    else:
        _say("ncclprep tune: no variant won: the inventory's settings stay (nothing written)")
        if not run.restore("the decision"):
            run.record["status"] = "decided, not restored"
            return EXIT_COULD_NOT_RUN
    run.record["status"] = "decided"
    if not run.verify:
        return EXIT_PASS
    return _verify(run, result, by_name)


def _verify(run: Tune, result: dict, by_name: dict) -> int:
    """validate.yml with this run's record as its report's Tuning section; its busbw at the target
    against the tuning's runs (tuning.verify_figures). Exit 1 when validate.yml fails or the figure is
    below every run of what was kept (the winner stays written: the message says how to drop it)."""
    read = run.read
    record = run.write()
    _say("ncclprep tune: verifying with validate.yml")
    val = run.ansible("validate.yml", ["-e", json.dumps({"preflight_tuning_file": record})], "tune: validate")
    report = (val.report or {}).get("report_dir")
    verify = {"status": (val.report or {}).get("status"), "report_dir": report, "exit_code": val.exit_code}
    if report:
        try:
            cluster, _ = load_run(report)
            rows = (cluster.get("collectives") or {}).get(read["op"]) or []
            verify["busbw"] = {int(r["size_bytes"]): r["busbw_gbps"] for r in rows}
        except (OSError, ValueError, KeyError) as exc:  # verify_figures then says there is no figure
            verify["report_error"] = str(exc)
    verify.update(tuning.verify_figures(result, run.record["runs"], verify.get("busbw") or {}, by_name))
    run.record["verify"] = verify
    _say(f"ncclprep tune: validate.yml {verify['status'] or 'did not report'}"
         + (f" ({report}/summary.md)" if report else "") + f"; {verify['note']}")
    if val.exit_code != EXIT_PASS:
        return EXIT_CHECK_FAILED if val.exit_code == EXIT_CHECK_FAILED else val.exit_code
    if verify["ok"] is False and result["winners"]:
        _say(f"ncclprep tune: the kept settings did not hold in validate.yml; to drop them, remove "
             f"{run.record['written']} and run `ncclprep provision -i {run.inventory}`")
        return EXIT_CHECK_FAILED
    return EXIT_PASS


def nccl_tuner_main(specs: list[str], collective: str | None, output: str | None) -> int:
    """``ncclprep tune --nccl-tuner``: the CSV of ``tuner_csv`` from the sweeps ``specs``
    (``[ALGO,PROTO=|default=]FILE``). Returns 0, or 2 naming the file or value refused."""
    from ansible.module_utils.ncclprep.tune import tuner_csv

    sweeps = []
    try:
        for spec in specs:
            # ALGO,PROTO=FILE or default=FILE; a spec that is a file as it stands has no label (its path
            # may hold "=")
            label, _, path = (None, "", spec) if os.path.isfile(spec) or "=" not in spec else spec.partition("=")
            with open(path, encoding="utf-8", errors="replace") as fh:
                sweeps.append(tuner_csv.read_sweep(fh.read(), label or None, source=path))
        chosen = tuner_csv.choose(sweeps)
        named = collective or next((s["collective"] for s in sweeps if s["collective"]), None) or "allreduce"
        if named not in tuner_csv.COLLECTIVES.values():
            raise ValueError(f"--collective {named}: valid: {', '.join(tuner_csv.COLLECTIVES.values())}")
        other = [f"{s['source']} ({s['collective']})" for s in sweeps if s["collective"] not in (None, named)]
        if other:
            raise ValueError(f"{', '.join(other)}: not {named}: one collective per CSV")
    except (OSError, ValueError) as exc:
        print(f"ncclprep tune --nccl-tuner: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    nodes = {s["nodes"] for s in sweeps if s["nodes"]}
    ranks = {s["ranks"] for s in sweeps if s["ranks"]}
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = tuner_csv.render(named, tuner_csv.ranges(chosen), chosen, nodes.pop() if len(nodes) == 1 else None,
                            ranks.pop() if len(ranks) == 1 else None, [s["source"] for s in sweeps], stamp)
    if output:
        try:
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            print(f"ncclprep tune --nccl-tuner: -o {output}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        _say(f"ncclprep tune: wrote {output}: set NCCL_TUNER_CONFIG_FILE={os.path.abspath(output)} and "
             "NCCL_TUNER_PLUGIN to NCCL's example tuner (docs/tuning.md)")
    else:
        sys.stdout.write(text)
    return EXIT_PASS
