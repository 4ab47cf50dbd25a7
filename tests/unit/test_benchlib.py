"""What the benchmarks share (bench/benchlib.py) and how each splits a run: a real playbook on
localhost read back through the ansible.posix.json callback, its tasks' times and files, the
stages summing to the wall time. The benchmarks themselves run on the local cluster (a short
run of each in tests/integration)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO, load_source

sys.path.insert(0, os.path.join(REPO, "bench"))
benchlib = load_source("benchlib", "bench/benchlib.py")
preflight = load_source("bench_preflight", "bench/preflight.py")
provision = load_source("bench_provision", "bench/provision.py")

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: first
      ansible.builtin.command: sleep 0.3
      changed_when: false
    - name: second
      ansible.builtin.command: sleep 0.6
    - name: third
      ansible.builtin.debug: {msg: hi}
"""


@pytest.fixture(scope="module")
def localhost_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "play.yml"
    path.write_text(PLAYBOOK)
    run = benchlib.run([os.path.join(benchlib.BIN, "ansible-playbook"), str(path), "-i", "localhost,",
                        "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}"],
                       timeout=120, json_out=True)
    assert run.rc == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return run, str(path)


def test_task_times_read_each_task_its_file_and_what_changed(localhost_run):
    run, path = localhost_run
    tasks = benchlib.task_times(run.json())
    assert [t["name"] for t in tasks] == ["first", "second", "third"]
    assert [t["path"].rsplit(":", 1)[0] for t in tasks] == [path] * 3
    assert [t["changed"] for t in tasks] == [[], ["localhost"], []]
    assert all(t["failed"] == [] for t in tasks)
    # the commands slept 0.3 and 0.6 s
    assert tasks[0]["end"] - tasks[0]["start"] >= 0.3 and tasks[1]["end"] - tasks[1]["start"] >= 0.6
    assert benchlib.recap(run)["localhost"]["changed"] == 1
    assert run.cpu_s > 0 and run.maxrss_bytes > 10e6


def test_a_run_is_saved_as_its_json_document_only_when_asked(localhost_run, tmp_path):
    run, _ = localhost_run
    run.save(None, "x")
    run.save(str(tmp_path / "docs"), "site-1-first")
    assert (tmp_path / "docs" / "site-1-first.json").read_text() == run.stdout
    assert list(tmp_path.iterdir()) == [tmp_path / "docs"]


def test_stages_sum_to_the_wall_time_and_a_shared_task_counts_to_the_stage_before(localhost_run):
    run, _ = localhost_run
    stage = {"first": "a", "second": None, "third": "b"}
    stages, tasks = benchlib.stage_times(run, lambda t: stage[t["name"]])
    assert set(stages) == {"start", "a", "b", "exit"}
    assert sum(stages.values()) == pytest.approx(run.wall_s, abs=1e-6)
    # "second" (no stage of its own) is charged to "a": at least both sleeps
    assert stages["a"] >= 0.9
    assert [round(t["seconds"], 3) >= 0 for t in tasks] == [True] * 3


def test_the_preflight_stages_come_from_the_role_files():
    def task(name, path):
        return {"name": name, "path": f"{REPO}/{path}:3"}

    assert preflight.stage_of(task("Gathering Facts", "playbooks/validate.yml")) == "facts"
    assert preflight.stage_of(task("x", "roles/preflight/tasks/facts.yml")) == "facts"
    assert preflight.stage_of(task("x", "roles/preflight/tasks/read.yml")) == "facts"
    assert preflight.stage_of(task("x", "roles/preflight/tasks/ssh.yml")) == "facts"
    # a concern's own facts.yml, included by the preflight's concerns.yml, is a check's input
    assert preflight.stage_of(task("x", "roles/nic_mtu/tasks/facts.yml")) == "checks"
    # the network probe and the collectives are one job (probe.yml); older trees' files, for --against
    assert preflight.stage_of(task("x", "roles/preflight/tasks/probe.yml")) == "probes"
    assert preflight.stage_of(task("x", "roles/preflight/tasks/net.yml")) == "probes"
    assert preflight.stage_of(task("x", "roles/preflight/tasks/blame.yml")) == "probes"
    assert preflight.stage_of(task("x", "roles/preflight/tasks/wait_job.yml")) is None
    assert preflight.stage_of(task("preflight : Read the port error counters again",
                                   "roles/preflight/tasks/main.yml")) == "checks"
    assert provision.role_of(task("x", "roles/nic_mtu/tasks/main.yml")) == "nic_mtu"
    assert provision.role_of(task("x", "playbooks/site.yml")) == "site.yml"


def test_nodes_cpu_is_none_or_a_count_of_seconds():
    cpu = benchlib.nodes_cpu_s()
    assert cpu is None or cpu >= 0


def test_worktree_checks_a_revision_out_and_removes_it():
    import subprocess

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    with benchlib.worktree("HEAD") as tree:
        assert os.path.isfile(os.path.join(tree, "ansible.cfg"))
        assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True,
                              text=True).stdout.strip() == head
    assert not os.path.exists(tree)
    listed = subprocess.run(["git", "worktree", "list"], cwd=REPO, capture_output=True, text=True).stdout
    assert tree not in listed


def test_host_work_counts_loop_items_and_retries_and_leaves_out_the_controller():
    doc = {"plays": [{"tasks": [
        {"hosts": {"n1": {"action": "node_facts"}, "n2": {"action": "node_facts"}}},
        {"hosts": {"n1": {"action": "ansible.builtin.set_fact"}, "n2": {"action": "set_fact", "skipped": True}}},
        {"hosts": {"n2": {"action": "ansible.builtin.file", "results": [
            {"changed": False, "ansible_loop_var": "item"}, {"skipped": True, "ansible_loop_var": "item"},
            {"changed": True, "ansible_loop_var": "item"}]}}},
        # a module's own list named results (ssh_mesh: one per login) is one run
        {"hosts": {"n2": {"action": "ssh_mesh", "results": [{"host": "n1", "attempts": 2}, {"host": "n3"}]}}},
        {"hosts": {"n2": {"action": "ansible.builtin.async_status", "attempts": 4}}},
        {"hosts": {"n1": {"action": "cluster_report", "_ansible_delegated_vars": {"ansible_host": "localhost"}}}},
    ]}]}
    assert benchlib.host_work(doc) == {"n1": {"tasks": 3, "module_runs": 1}, "n2": {"tasks": 8, "module_runs": 8}}


def test_provision_against_a_revision_leaves_the_node_check_out_of_both_sides(monkeypatch):
    """bench/provision.py --against: each tree's re-run installed its own node-side core over the
    other's, a change on every node, and the benchmark stopped at the first re-run (seen at stop 37
    against 5265dae). Both sides' re-runs skip the tag node_check; the first run does not."""
    import argparse

    class Done:
        rc, wall_s, cpu_s, nodes_cpu_s, stdout, stderr = 0, 1.0, 1.0, 1.0, "", ""

        def save(self, *_):
            return None

        def json(self):
            return {"plays": []}

    calls = []

    def playbook(name, inventory, extra=(), timeout=1200, json_out=True, root=REPO):
        calls.append((root, list(extra)))
        return Done()

    monkeypatch.setattr(provision.benchlib, "playbook", playbook)
    monkeypatch.setattr(provision.benchlib, "cluster", lambda *a: None)
    monkeypatch.setattr(provision.benchlib, "recap", lambda run: {"node1": {"changed": 0}})
    monkeypatch.setattr(provision.benchlib, "stage_times", lambda run, of: ({}, []))
    args = argparse.Namespace(no_cluster=False, nodes=2, reruns=1, inventory="inventory/local", timeout=60,
                              save=None, against="abc123", target_s=20.0, strict=False)
    assert provision.measure(args, "/tmp/other") == 0
    assert calls == [(provision.benchlib.REPO, []), ("/tmp/other", ["--skip-tags", "node_check"]),
                     (provision.benchlib.REPO, ["--skip-tags", "node_check"])]
    calls.clear()
    assert provision.measure(argparse.Namespace(**dict(vars(args), against=None)), None) == 0
    assert [extra for _, extra in calls] == [[], []]



def test_the_benchmarks_run_this_checkout_even_when_another_ncclprep_comes_first(tmp_path):
    """A venv installed editable from another clone put that clone's ncclprep first: the benchmarks
    then ran its playbooks and scripts (a stale validate.yml failed drift here). benchlib puts this
    checkout's src/ first."""
    other = tmp_path / "ncclprep"
    other.mkdir()
    (other / "__init__.py").write_text("REPO_ROOT = '/elsewhere'\n")
    (other / "runner.py").write_text("def playbook_env():\n    return {}\n")
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); sys.path.insert(0, {os.path.join(REPO, 'bench')!r});"
            " import benchlib; print(benchlib.REPO)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == REPO


def test_this_checkout_wins_also_when_its_src_is_on_the_path_behind_another(tmp_path):
    """CI's venv is installed editable from the checkout itself: its src/ is on sys.path already,
    behind whatever comes first. benchlib must still put it first."""
    other = tmp_path / "ncclprep"
    other.mkdir()
    (other / "__init__.py").write_text("REPO_ROOT = '/elsewhere'\n")
    (other / "runner.py").write_text("def playbook_env():\n    return {}\n")
    src = os.path.join(REPO, "src")
    code = (f"import sys; sys.path.append({src!r}); sys.path.insert(0, {str(tmp_path)!r}); "
            f"sys.path.insert(0, {os.path.join(REPO, 'bench')!r}); import benchlib; print(benchlib.REPO)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == REPO
