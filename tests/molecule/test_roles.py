"""Run every role's Molecule scenario (roles/<role>/molecule/default): check mode on
fresh nodes, converge, a second converge that must change nothing, verify of the
live values. Shared driver, nodes and sequence: .config/molecule/config.yml.

Scenarios run two at a time (scripts/test.sh: pytest-xdist, ``-n 2``), each worker
in a lane of its own: worker gwK runs its scenarios on lane K's network of Molecule
nodes (lane 0: ncclprep-molecule-net, 10.77.31.0/24; lane K: ncclprep-moleculeK-net,
10.77.(31+K).0/24; .config/molecule/config.yml), made fresh when the worker starts and
removed at its end. Each scenario's create starts its nodes as new containers from the
image (tests/molecule/create.yml), so every check step still sees nodes nothing was
applied to. Each step's duration is recorded (see tests/conftest.py, NCCLPREP_TIMINGS)."""

from __future__ import annotations

import fcntl
import glob
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

import ncclprep

REPO = ncclprep.REPO_ROOT
#: Seconds each scenario took in one CI run (2026-12-07, all steps but the first destroy, two at a
#: time; firewall and nic_mtu less the node image build both waited on). Scenarios run
#: longest first (a role not listed first of all), so the two lanes end close together: in
#: name order the lane with firewall (241 s) and nic_mtu (163 s) ended about a minute after the other.
SCENARIO_SECONDS = {"firewall": 237, "nic_mtu": 207, "ssh_trust": 102, "rps_rfs": 86, "torch_runtime": 83,
                    "slurm_health": 83, "sysctl_tuning": 64, "numa_pinning": 55, "nccl_env": 43, "host_names": 41,
                    "roce_qos": 35}
ROLES = sorted((os.path.basename(os.path.dirname(os.path.dirname(os.path.dirname(p))))
                for p in glob.glob(os.path.join(REPO, "roles", "*", "molecule", "default", "molecule.yml"))),
               key=lambda role: (-SCENARIO_SECONDS.get(role, 10**6), role))
ANSI = re.compile(r"\x1b\[[0-9;]*m")
STEP = re.compile(r"\[default > (\w+)\] (Executing|Executed)")
#: This worker's lane: 0 outside pytest-xdist and on its worker gw0, K on gwK.
LANE = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
#: The lane's names (.config/molecule/config.yml): container and network prefix, first three octets.
LANE_NAME = "ncclprep-molecule" + (str(LANE) if LANE else "")
LANE_NET = f"10.77.{31 + LANE}"
# What tests/molecule/create.yml and destroy.yml manage in this lane (not the integration test's cluster).
MOLECULE_CLUSTER = json.dumps({"local_cluster_container_prefix": f"{LANE_NAME}-node",
                               "local_cluster_network": f"{LANE_NAME}-net",
                               "local_cluster_address_prefix": LANE_NET,
                               "local_cluster_inventory_dir": None,
                               "local_cluster_known_hosts": f"{{{{ __lc_dir }}}}/{LANE_NAME}_known_hosts"})

# Roles that change nothing on a node, each proved elsewhere.
NO_SCENARIO = {
    "data_plane": "sets a fact only; every scenario's converge runs it first",
    "preflight": "validate.yml's role, needs the whole cluster; tests/integration runs it",
    "boot_unit": "a task helper, not a concern: the rps_rfs scenario installs a unit through it; "
                 "tests/unit/test_boot_unit.py renders every caller's unit and runs it in check mode",
    "tune": "ncclprep tune's steps: changes nodes only through the other roles (their scenarios) and needs the "
            "whole cluster; tests/integration runs it, tests/unit/test_tune_cmd.py its flow",
}

pytestmark = pytest.mark.molecule


def molecule_env() -> dict:
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("ANSIBLE_CONFIG", None)  # Molecule writes its own from .config/molecule/config.yml
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["PY_COLORS"] = "0"
    env["NO_COLOR"] = "1"
    env["NCCLPREP_MOLECULE_NAME"] = LANE_NAME
    env["NCCLPREP_MOLECULE_NET"] = LANE_NET
    return env


def lane_cluster(*args: str) -> None:
    """playbooks/local_cluster.yml on this lane's Molecule nodes with ``-e ARG`` for each argument."""
    env = dict(molecule_env(), ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    extra = [a for arg in (*args, MOLECULE_CLUSTER) for a in ("-e", arg)]
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
                           "playbooks/local_cluster.yml", *extra],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-5000:]


@pytest.fixture(scope="module")
def molecule_network():
    """Nothing left by an earlier run (half-dead nodes or network) reaches this lane's scenarios:
    a full bring-up of one node makes the lane's network anew (and, the first time on a machine,
    the image, key and wheelhouse both lanes share), then the node goes and every create reuses
    the rest; removed at the end. The bring-ups take turns under a lock (.cluster/molecule.lock):
    two at once would build the one image twice into the same folder."""
    os.makedirs(os.path.join(REPO, ".cluster"), exist_ok=True)
    with open(os.path.join(REPO, ".cluster", "molecule.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            lane_cluster("local_cluster_state=present", "local_cluster_nodes=1")
            lane_cluster("local_cluster_state=absent", "local_cluster_keep_network=true")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    yield
    lane_cluster("local_cluster_state=absent")


def test_every_role_that_changes_nodes_has_a_scenario():
    roles = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, "roles", "*"))
                   if os.path.isdir(os.path.join(p, "tasks")))
    assert [r for r in roles if r not in ROLES and r not in NO_SCENARIO] == []


def failure_summary(out: str, limit: int = 4000) -> str:
    """What failed in a Molecule run's output, short enough for the assertion message (CI shows the
    message whole but only a part of the captured output): the step that failed, and each
    ``fatal:``/``[ERROR]`` line with the task it came from and the lines that follow it."""
    lines, kept, task = out.splitlines(), [], None
    for i, line in enumerate(lines):
        if line.startswith("TASK ["):
            task = line.rstrip("* ")
        elif re.search(r"^fatal: |^\[ERROR\]|An error occurred during the test sequence action", line):
            kept += [task or "", *lines[i:i + 6], ""]
    return "\n".join(kept)[-limit:] or out[-limit:]


@pytest.mark.parametrize("role", ROLES)
def test_molecule_scenario(role, molecule_network, timings):
    proc = subprocess.Popen(["molecule", "test"], cwd=os.path.join(REPO, "roles", role), env=molecule_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, started, steps = [], {}, []
    watchdog = threading.Timer(1500, proc.kill)  # a scenario that hangs fails instead of stalling the run
    watchdog.start()
    try:
        for line in proc.stdout:
            lines.append(line)
            m = STEP.search(ANSI.sub("", line))
            if m and m[2] == "Executing":
                started[m[1]] = time.monotonic()
            elif m and m[1] in started:
                steps.append((m[1], time.monotonic() - started.pop(m[1])))
        proc.wait(timeout=60)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
    for step, seconds in steps:
        timings("molecule", f"{role} {step}", seconds)
    out = ANSI.sub("", "".join(lines))
    if proc.returncode != 0:
        print(out[-20000:])
    assert proc.returncode == 0, f"molecule test failed for role {role}:\n{failure_summary(out)}"
    # every step of the sequence ran and passed; idempotence means a second converge changed nothing
    for step in ("check", "converge", "idempotence", "verify"):
        assert re.search(rf"{step}: Executed: Successful", out), f"{role}: step {step} did not pass"
