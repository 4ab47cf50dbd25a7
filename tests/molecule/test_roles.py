"""Run every role's Molecule scenario (roles/<role>/molecule/default): check mode on
fresh nodes, converge, a second converge that must change nothing, verify of the
live values. Shared driver, nodes and sequence: .config/molecule/config.yml."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import pytest

import ncclprep

REPO = ncclprep.REPO_ROOT
ROLES = sorted(os.path.basename(os.path.dirname(os.path.dirname(os.path.dirname(p))))
               for p in glob.glob(os.path.join(REPO, "roles", "*", "molecule", "default", "molecule.yml")))
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Roles that change nothing on a node, each proved elsewhere.
NO_SCENARIO = {
    "data_plane": "sets a fact only; every scenario's converge runs it first",
    "preflight": "validate.yml's role, needs the whole cluster; tests/integration runs it",
}

pytestmark = pytest.mark.molecule


def test_every_role_that_changes_nodes_has_a_scenario():
    roles = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, "roles", "*"))
                   if os.path.isdir(os.path.join(p, "tasks")))
    assert [r for r in roles if r not in ROLES and r not in NO_SCENARIO] == []


@pytest.mark.parametrize("role", ROLES)
def test_molecule_scenario(role):
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("ANSIBLE_CONFIG", None)  # Molecule writes its own from .config/molecule/config.yml
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["PY_COLORS"] = "0"
    env["NO_COLOR"] = "1"
    proc = subprocess.run(["molecule", "test"], cwd=os.path.join(REPO, "roles", role), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1500)
    out = ANSI.sub("", proc.stdout)
    if proc.returncode != 0:
        print(out[-20000:])
    assert proc.returncode == 0, f"molecule test failed for role {role}"
    # every step of the sequence ran and passed; idempotence means a second converge changed nothing
    for step in ("check", "converge", "idempotence", "verify"):
        assert re.search(rf"{step}: Executed: Successful", out), f"{role}: step {step} did not pass"
