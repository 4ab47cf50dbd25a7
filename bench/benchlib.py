"""What the benchmarks under bench/ share: running ansible with the CLI's environment and reading
each task's times from the ansible.posix.json callback, and driving the local cluster.

The benchmarks import it as ``benchlib`` (Python puts a script's own folder first on sys.path).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime

# This checkout's package, not whichever one the venv was installed from (an editable install of
# another clone would run that clone's playbooks): its src/ first on sys.path, also where it is
# on the path already behind another.
_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if sys.path[:1] != [_SRC]:
    sys.path.insert(0, _SRC)

from ncclprep import REPO_ROOT as REPO  # noqa: E402
from ncclprep.runner import playbook_env  # noqa: E402

BIN = os.path.dirname(sys.executable)


def ansible_env(**extra: str) -> dict[str, str]:
    """The CLI's playbook environment (repository ansible.cfg, this venv first on PATH, the local
    cluster's podman settings), no colour, then ``extra`` (which may replace any of them)."""
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", **playbook_env())
    env.update(extra)
    return env


class Run:
    """One ansible command, its exit code, wall seconds, and the controller's cost: CPU seconds
    (user + system of ansible and every fork it waited for) and the largest resident set of
    any of them (bytes; Linux's ru_maxrss is in KiB); and ``nodes_cpu_s``, the CPU seconds the
    local cluster's containers used meanwhile (None: no accounting found)."""

    def __init__(self, cmd: list[str], rc: int, wall_s: float, cpu_s: float, maxrss_bytes: int,
                 stdout: str, stderr: str, started: float):
        self.cmd, self.rc, self.wall_s, self.cpu_s, self.maxrss_bytes = cmd, rc, wall_s, cpu_s, maxrss_bytes
        self.stdout, self.stderr, self.started = stdout, stderr, started
        self.nodes_cpu_s: float | None = None

    def save(self, folder: str | None, name: str) -> None:
        """Keep the ansible.posix.json document as FOLDER/NAME.json (created); nothing when
        ``folder`` is None (a benchmark's --save not given)."""
        if folder:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, f"{name}.json"), "w", encoding="utf-8") as fh:
                fh.write(self.stdout)

    def json(self) -> dict:
        """The ansible.posix.json callback's document; raises RuntimeError with the output's tail."""
        try:
            return json.loads(self.stdout)
        except ValueError as exc:
            raise RuntimeError(f"{' '.join(self.cmd[:3])}: no JSON (rc {self.rc}): "
                               f"{self.stdout[-800:]} {self.stderr[-800:]}") from exc


#: The local cluster's containers' CPU accounting: cgroup v1 (cpuacct.usage, ns) or v2 (cpu.stat).
CGROUP_GLOBS = ("/sys/fs/cgroup/cpuacct/libpod_parent/libpod-*/cpuacct.usage",
                "/sys/fs/cgroup/libpod_parent/libpod-*/cpu.stat", "/sys/fs/cgroup/machine.slice/libpod-*/cpu.stat")


def nodes_cpu_s() -> float | None:
    """CPU seconds every podman container on this host has used so far (the local cluster's
    nodes), from their cgroups; None where no container's accounting is found."""
    for pattern in CGROUP_GLOBS:
        paths = glob.glob(pattern)
        if not paths:
            continue
        total = 0.0
        for path in paths:
            try:
                with open(path, encoding="ascii") as fh:
                    text = fh.read()
            except OSError:
                continue  # a container removed meanwhile
            if path.endswith("cpuacct.usage"):
                total += int(text) / 1e9
            else:
                total += next((int(line.split()[1]) for line in text.splitlines()
                               if line.startswith("usage_usec ")), 0) / 1e6
        return total
    return None


def run(cmd: list[str], timeout: int, json_out: bool = False, root: str = REPO) -> Run:
    """Run ``cmd`` from the repository (or from ``root``, another checkout of it, with that
    checkout's ansible.cfg); with ``json_out`` ansible prints the ansible.posix.json document
    instead of its usual output. Raises subprocess.TimeoutExpired past ``timeout`` s."""
    extra = {"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1"} if json_out else {}
    extra["ANSIBLE_CONFIG"] = os.path.join(root, "ansible.cfg")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    nodes_before = nodes_cpu_s()
    started = time.time()
    start = time.monotonic()
    out = subprocess.run(cmd, cwd=root, env=ansible_env(**extra), capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    nodes_after = nodes_cpu_s()
    res = Run(cmd, out.returncode, wall, cpu, after.ru_maxrss * 1024, out.stdout, out.stderr, started)
    res.nodes_cpu_s = nodes_after - nodes_before if nodes_before is not None and nodes_after is not None else None
    return res


def playbook(name: str, inventory: str, extra: list[str] = (), timeout: int = 1200, json_out: bool = True,
             root: str = REPO) -> Run:
    """``ansible-playbook NAME.yml -i INVENTORY EXTRA...`` from ``root`` (default the repository);
    a relative INVENTORY is the repository's."""
    return run([os.path.join(BIN, "ansible-playbook"), f"{name}.yml", "-i", os.path.join(REPO, inventory), *extra],
               timeout, json_out, root)


@contextlib.contextmanager
def worktree(rev: str) -> Iterator[str]:
    """A checkout of git revision ``rev`` of this repository (``git worktree add --detach`` in a
    temporary folder), for ``run(..., root=...)``; removed on leaving. Raises
    subprocess.CalledProcessError when git cannot check ``rev`` out."""
    with tempfile.TemporaryDirectory(prefix="ncclprep-against-") as tmp:
        tree = os.path.join(tmp, "tree")
        subprocess.run(["git", "worktree", "add", "--detach", tree, rev], cwd=REPO, check=True,
                       capture_output=True, text=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=REPO, capture_output=True)


def cluster(action: str, nodes: int | None = None, timeout: int = 900, slurm: bool = False) -> None:
    """``scripts/local_cluster.sh ACTION [NODES] [--slurm]`` (up, grow, down; ``slurm``: up with Slurm,
    which a grow keeps); raises RuntimeError when it fails."""
    cmd = ([os.path.join(REPO, "scripts", "local_cluster.sh"), action] + ([str(nodes)] if nodes else [])
           + (["--slurm"] if slurm and action == "up" else []))
    out = run(cmd, timeout)
    if out.rc != 0:
        raise RuntimeError(f"local_cluster.sh {action} {nodes or ''} failed (rc {out.rc}): {out.stdout[-1500:]}")


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def task_times(doc: dict) -> list[dict]:
    """Every task of an ansible.posix.json document, in the order it ran: its name, the file and
    line it comes from (``path``), the hosts it failed on and
    changed, and its start and end (epoch seconds: the first host's start,
    the last host's end)."""
    tasks = []
    for play in doc.get("plays", []):
        for task in play.get("tasks", []):
            t = task["task"]
            dur = t.get("duration") or {}
            if not dur.get("start") or not dur.get("end"):
                continue
            tasks.append({"name": t["name"], "path": t.get("path") or "", "start": _ts(dur["start"]),
                          "end": _ts(dur["end"]), "hosts": len(task.get("hosts") or {}),
                          "failed": sorted(h for h, r in (task.get("hosts") or {}).items()
                                           if r.get("failed")),
                          "changed": sorted(h for h, r in (task.get("hosts") or {}).items() if r.get("changed"))})
    return sorted(tasks, key=lambda t: t["start"])


def stage_times(run_: Run, stage_of, first: str = "start") -> tuple[dict[str, float], list[dict]]:
    """Wall seconds of each stage of one playbook run, and its tasks with their own seconds.

    ``stage_of(task)`` names the stage of a task, or None for a task shared by stages (it then
    counts to the stage before it). Each task is charged from the end of the task before it to
    its own end, so the strategy's time between tasks counts too; the time from the process'
    start to the first task is ``first``, from the last task to the exit "exit". The stages sum
    to the run's wall time."""
    tasks = task_times(run_.json())
    stages: dict[str, float] = {}
    if not tasks:
        return {first: run_.wall_s}, []
    stages[first] = tasks[0]["start"] - run_.started
    prev_end, stage = tasks[0]["start"], first
    for t in tasks:
        stage = stage_of(t) or stage
        t["seconds"] = max(0.0, t["end"] - prev_end)
        stages[stage] = stages.get(stage, 0.0) + t["seconds"]
        prev_end = max(prev_end, t["end"])
    stages["exit"] = run_.started + run_.wall_s - prev_end
    return stages, tasks


#: Actions that run on the controller only (no module run on the node).
CONTROLLER_ACTIONS = frozenset(f"{prefix}{name}" for prefix in ("", "ansible.builtin.", "ansible.legacy.")
                               for name in ("set_fact", "include_role", "include_tasks", "import_role",
                                            "import_tasks", "assert", "debug", "fail", "meta", "include_vars",
                                            "add_host", "group_by", "validate_argument_spec", "pause"))


def host_work(doc: dict) -> dict[str, dict[str, int]]:
    """Per host of an ansible.posix.json document: ``tasks`` (task results that ran, a loop's
    items and an ``until``'s retries each counted) and ``module_runs`` (those that ran a module
    on the node: not CONTROLLER_ACTIONS, not delegated to the controller). Skipped items and tasks
    count in neither. Source of the counting rule: issue 24, item 2 ("loop items and retries
    counted")."""
    out: dict[str, dict[str, int]] = {}
    for play in doc.get("plays", []):
        for task in play.get("tasks", []):
            for host, res in (task.get("hosts") or {}).items():
                # a loop's results carry ansible_loop_var; a module may return a list named results too
                loop = isinstance(res.get("results"), list) and res["results"] and all(
                    isinstance(i, dict) and "ansible_loop_var" in i for i in res["results"])
                items = res["results"] if loop else [res]
                ran = [i for i in items if isinstance(i, dict) and not i.get("skipped")]
                # attempts: an until loop's tries
                n = sum(max(1, i["attempts"]) if isinstance(i.get("attempts"), int) else 1 for i in ran)
                counts = out.setdefault(host, {"tasks": 0, "module_runs": 0})
                counts["tasks"] += n
                delegated = (res.get("_ansible_delegated_vars") or {}).get("ansible_host") in ("localhost", "127.0.0.1")
                if res.get("action") not in CONTROLLER_ACTIONS and not delegated:
                    counts["module_runs"] += n
    return out


def recap(run_: Run) -> dict[str, dict]:
    """The play recap of an ansible.posix.json document: per host ok, changed, failures, ..."""
    return run_.json().get("stats", {})
