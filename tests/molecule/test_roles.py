"""Run every role's Molecule scenario (roles/<role>/molecule/default): check mode on
fresh nodes, converge, a second converge that must change nothing, verify of the
live values. Shared driver, nodes and sequence: .config/molecule/config.yml.

The scenarios share one network of Molecule nodes (ncclprep-molecule-net), made
fresh at the start of the session and removed at its end; each scenario's create
starts its nodes as new containers from the image (tests/molecule/create.yml), so
every check step still sees nodes nothing was applied to. Each step's duration is
recorded (see tests/conftest.py, NCCLPREP_TIMINGS)."""

from __future__ import annotations

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
ROLES = sorted(os.path.basename(os.path.dirname(os.path.dirname(os.path.dirname(p))))
               for p in glob.glob(os.path.join(REPO, "roles", "*", "molecule", "default", "molecule.yml")))
ANSI = re.compile(r"\x1b\[[0-9;]*m")
STEP = re.compile(r"\[default > (\w+)\] (Executing|Executed)")
# What tests/molecule/create.yml and destroy.yml manage (not the integration test's cluster).
MOLECULE_CLUSTER = json.dumps({"local_cluster_container_prefix": "ncclprep-molecule-node",
                               "local_cluster_network": "ncclprep-molecule-net",
                               "local_cluster_address_prefix": "10.77.31",
                               "local_cluster_inventory_dir": None,
                               "local_cluster_known_hosts": "{{ __lc_dir }}/molecule_known_hosts"})

# Roles that change nothing on a node, each proved elsewhere.
NO_SCENARIO = {
    "data_plane": "sets a fact only; every scenario's converge runs it first",
    "preflight": "validate.yml's role, needs the whole cluster; tests/integration runs it",
    "boot_unit": "a task helper, not a concern: the rps_rfs scenario installs a unit through it; "
                 "tests/unit/test_boot_unit.py renders every caller's unit and runs it in check mode",
}

pytestmark = pytest.mark.molecule


def molecule_env() -> dict:
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("ANSIBLE_CONFIG", None)  # Molecule writes its own from .config/molecule/config.yml
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["PY_COLORS"] = "0"
    env["NO_COLOR"] = "1"
    return env


def remove_molecule_cluster() -> None:
    """Remove every Molecule node and the network they share (safe to repeat)."""
    env = dict(molecule_env(), ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
                           "playbooks/local_cluster.yml", "-e", "local_cluster_state=absent", "-e", MOLECULE_CLUSTER],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-5000:]


@pytest.fixture(scope="module")
def molecule_network():
    """Nothing left by an earlier run (half-dead nodes or network) reaches the scenarios:
    the first create makes the network anew, every later one reuses it; removed at the end."""
    remove_molecule_cluster()
    yield
    remove_molecule_cluster()


def test_every_role_that_changes_nodes_has_a_scenario():
    roles = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, "roles", "*"))
                   if os.path.isdir(os.path.join(p, "tasks")))
    assert [r for r in roles if r not in ROLES and r not in NO_SCENARIO] == []


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
    assert proc.returncode == 0, f"molecule test failed for role {role}"
    # every step of the sequence ran and passed; idempotence means a second converge changed nothing
    for step in ("check", "converge", "idempotence", "verify"):
        assert re.search(rf"{step}: Executed: Successful", out), f"{role}: step {step} did not pass"
