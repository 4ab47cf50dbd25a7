"""The checks package agrees with the registry of concerns (playbooks/vars/concerns.yml):
every concern has its check module checks/<name>.py in the check registry, and every check
module is a concern's or one of the preflight's own, named in an explicit list."""

from __future__ import annotations

import ast
import glob
import os

import pytest
import yaml
from ansible.module_utils.ncclprep import checks

import ncclprep

REPO = ncclprep.REPO_ROOT
PACKAGE = os.path.join(REPO, "module_utils", "ncclprep", "checks")
with open(os.path.join(REPO, "playbooks", "vars", "concerns.yml"), encoding="utf-8") as _fh:
    CONCERNS = [c["name"] for c in yaml.safe_load(_fh)["ncclprep_concerns"]]
# Check modules that belong to the preflight itself, not to a provisioning concern.
PREFLIGHT = {"reachable": "host.reachable", "data_plane": "data_plane.interface",
             "network": "net.run, net.latency, net.bandwidth, net.path_mtu and net.ports",
             "limits": "limits.memlock (RDMA hosts) and limits.shm (GPU hosts)",
             "links": "links.rdma (IB/RoCE ports, rates, RoCE v2 GID) and links.counters (grown during the run)",
             "tools": "tools.findings: what numactl, nvidia-smi topo, ip, netplan ... say",
             "dataset": "dataset.path: the training data readable everywhere",
             "drift": "drift.files: the files site.yml manages as it would write them",
             "versions": "versions.<key>: kernel, Python, driver, CUDA, NCCL, cuDNN alike on every node",
             "collectives": "collective.run and collective.<op>", "smoke": "torchrun.smoke"}
# Modules of the package that hold no check.
SUPPORT = {"__init__": "evaluate and the registry", "model": "the check model, the record, shared helpers"}


def modules_on_disk() -> set[str]:
    return {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(PACKAGE, "*.py"))}


def agreement(concerns, on_disk, registry_modules, preflight, support) -> list[str]:
    """What disagrees between the concerns, the check modules on disk and the registry ([] when all agree)."""
    errors = [f"concern {c}: no check module checks/{c}.py" for c in concerns if c not in on_disk]
    errors += [f"concern {c}: checks/{c}.py has no check in the registry" for c in concerns
               if c in on_disk and c not in registry_modules]
    errors += [f"checks/{m}.py: not a concern of concerns.yml nor a preflight module" for m in sorted(on_disk)
               if m not in concerns and m not in preflight and m not in support]
    errors += [f"registry entry {m}: no module checks/{m}.py" for m in registry_modules if m not in on_disk]
    return errors


def test_every_concern_has_a_registered_check_module_and_every_module_a_concern():
    assert agreement(CONCERNS, modules_on_disk(), [e.module for e in checks.REGISTRY], PREFLIGHT, SUPPORT) == []


def test_the_package_exposes_the_same_lists():
    assert set(checks.CONCERN_MODULES) == set(CONCERNS)
    assert set(checks.PREFLIGHT_MODULES) == set(PREFLIGHT)
    assert set(checks.SUPPORT_MODULES) == set(SUPPORT) - {"__init__"}


@pytest.mark.parametrize("entry", checks.REGISTRY, ids=lambda e: e.module)
def test_each_registry_entry_lives_in_its_named_module(entry):
    assert entry.check.__module__ == f"ansible.module_utils.ncclprep.checks.{entry.module}"
    assert entry.check.__doc__, f"{entry.module}.{entry.check.__name__} has no docstring"


@pytest.mark.parametrize("concerns,on_disk,registry,message", [
    (CONCERNS + ["gpu_clocks"], modules_on_disk(), [e.module for e in checks.REGISTRY],
     "concern gpu_clocks: no check module checks/gpu_clocks.py"),
    (CONCERNS, modules_on_disk() | {"stray"}, [e.module for e in checks.REGISTRY],
     "checks/stray.py: not a concern of concerns.yml nor a preflight module"),
    (CONCERNS, modules_on_disk(), [e.module for e in checks.REGISTRY if e.module != "firewall"],
     "concern firewall: checks/firewall.py has no check in the registry"),
])
def test_a_missing_or_stray_module_is_named(concerns, on_disk, registry, message):
    assert message in agreement(concerns, on_disk, registry, PREFLIGHT, SUPPORT)


@pytest.mark.parametrize("module", sorted(modules_on_disk()))
def test_every_import_in_the_package_is_absolute(module):
    """Ansible ships module_utils with a module only along ``ansible.module_utils.ncclprep...`` imports."""
    with open(os.path.join(PACKAGE, f"{module}.py"), encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"checks/{module}.py:{node.lineno}: relative import"
            assert not (node.module or "").startswith(("ncclprep", "checks")), \
                f"checks/{module}.py:{node.lineno}: import {node.module} is not ansible.module_utils.ncclprep..."
        elif isinstance(node, ast.Import):
            for alias in node.names:
                assert not alias.name.startswith(("ncclprep", "checks")), f"checks/{module}.py: import {alias.name}"
