"""The registry of concerns (module_utils/ncclprep/concerns): every module of the package is a concern
of CONCERNS with the registry's interface, the check registry and the playbooks' list are built from
it, and a concern's check reports only the ids its module declares."""

from __future__ import annotations

import ast
import fnmatch
import glob
import os

import pytest
from ansible.module_utils.ncclprep import checks, concerns
from ansible.module_utils.ncclprep.model import Context
from test_checks import HOSTS, every_concern

import ncclprep

REPO = ncclprep.REPO_ROOT
PACKAGE = os.path.join(REPO, "module_utils", "ncclprep", "concerns")
NAMES = [concerns.name_of(c) for c in concerns.CONCERNS]


def test_every_module_of_the_package_is_a_concern_of_the_registry_once():
    on_disk = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(PACKAGE, "*.py")))
    assert sorted(NAMES) == [m for m in on_disk if m != "__init__"]
    assert len(set(NAMES)) == len(NAMES)


@pytest.mark.parametrize("concern", concerns.CONCERNS, ids=NAMES)
def test_each_concern_has_the_registry_interface(concern):
    name = concerns.name_of(concern)
    assert concern.SWITCH in (None, f"{name}_enabled")
    assert isinstance(concern.DATA_PLANE, bool) and isinstance(concern.FACTS, bool)
    assert concern.IDS and all(isinstance(i, str) and "." in i for i in concern.IDS)
    assert callable(concern.check) and concern.check.__doc__
    assert (getattr(concern, "OPTIONS", None) is None) == (getattr(concern, "read", None) is None)
    if name in concerns.READERS:
        assert concern.FACTS, f"{name} has a reader but FACTS is False"


def test_no_two_concerns_claim_the_same_check_id():
    owners = {}
    for concern in concerns.CONCERNS:
        for pattern in concern.IDS:
            assert pattern not in owners, f"{pattern}: {owners.get(pattern)} and {concerns.name_of(concern)}"
            owners[pattern] = concerns.name_of(concern)


@pytest.mark.parametrize("concern", concerns.CONCERNS, ids=NAMES)
def test_a_concerns_check_reports_only_the_ids_it_declares(concern):
    """On test_checks' records with every concern on, each concern's check reports at least one check,
    and every id it reports matches its module's IDS."""
    reported = [c["id"] for c in concern.check(every_concern(), Context(tuple(HOSTS)))]
    assert reported and all(any(fnmatch.fnmatchcase(i, p) for p in concern.IDS) for i in reported), reported


def test_the_check_registry_and_the_playbooks_list_come_from_the_concerns():
    assert list(checks.CONCERN_MODULES) == NAMES
    assert [e.check for e in checks.REGISTRY if e.module in NAMES] == [c.check for c in concerns.CONCERNS]
    assert [r["name"] for r in concerns.rows()] == NAMES
    assert {r["name"] for r in concerns.rows() if r["reader"]} == {"nic_mtu", "rps_rfs", "numa_pinning", "ssh_trust",
                                                                   "firewall", "nccl_env", "slurm_health"}


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(PACKAGE, "*.py"))
                                        + glob.glob(os.path.join(REPO, "module_utils", "ncclprep", "checks", "*.py"))),
                         ids=lambda p: os.path.relpath(p, os.path.join(REPO, "module_utils", "ncclprep")))
def test_every_import_in_the_packages_is_absolute(path):
    """Ansible ships module_utils with a module only along ``ansible.module_utils.ncclprep...`` imports."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import"
            assert not (node.module or "").startswith(("ncclprep", "checks", "concerns")), \
                f"{path}:{node.lineno}: import {node.module} is not ansible.module_utils.ncclprep..."
        elif isinstance(node, ast.Import):
            for alias in node.names:
                assert not alias.name.startswith(("ncclprep", "checks", "concerns")), f"{path}: import {alias.name}"
