"""Shared test setup: makes ``ansible.module_utils.ncclprep`` importable on the controller.

Importing the ``ncclprep`` package is the one arrangement the CLI and the filter
plugins use too (see src/ncclprep/__init__.py and docs/layout.md, Imports).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import sys

import pytest

# torch._dynamo (imported lazily, e.g. by the first torch.optim optimizer) registers a polyfill
# for sys.intern and refuses anything but the builtin; importing ansible.module_utils.basic
# replaces sys.intern with a patch object (ansible.module_utils._internal._patches). Once a
# test in this process has imported Ansible's module code, an optimizer built in-process fails
# with "substitute_in_graph expects a function". Import it first, while sys.intern is builtin.
try:
    import torch._dynamo  # noqa: F401
except ImportError:  # the quick tier without torch
    pass

import ncclprep  # noqa: F401  (extends ansible.module_utils.__path__)

REPO = ncclprep.REPO_ROOT
CASES = os.environ.get("NCCLPREP_CASES", os.path.join(os.path.dirname(REPO), "shared", "cases"))
#: This venv's bin (ansible-playbook, ansible) and the environment that runs them with the
#: repository's ansible.cfg and the json stdout callback (one document on stdout).
BIN = os.path.dirname(sys.executable)
ANSIBLE_JSON_ENV = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
                        ANSIBLE_LOAD_CALLBACK_PLUGINS="1", PATH=BIN + os.pathsep + os.environ.get("PATH", ""))


#: Tool output and files the tests read (tests/fixtures/<topic>/, each folder's README says where from).
FIXTURES = os.path.join(REPO, "tests", "fixtures")


def read_fixture(relpath: str) -> str:
    """The text of tests/fixtures/<relpath>. Raises FileNotFoundError when it is not there."""
    with open(os.path.join(FIXTURES, relpath), encoding="utf-8") as fh:
        return fh.read()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick for port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_source(name: str, relpath: str):
    """Import the Python file at ``relpath`` (relative to the repository) as module ``name``:
    the modules in library/, filter_plugins/, scripts/ and roles' files/ are files, not packages.
    Raises FileNotFoundError when it is not there."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, relpath))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def case():
    """Return a function that reads ../shared/cases/<relpath> (skips when shared/ is absent)."""

    def read(relpath: str) -> str:
        path = os.path.join(CASES, relpath)
        if not os.path.exists(path):
            pytest.skip(f"case file {path} not present")
        with open(path, encoding="utf-8") as fh:
            return fh.read()

    return read


@pytest.fixture(scope="session")
def timings():
    """Return a function that records how long one step took: ``timings(phase, name, seconds)``.

    Appends ``phase<TAB>name<TAB>seconds`` to the file named by $NCCLPREP_TIMINGS (scripts/test.sh
    prints them in its closing summary); does nothing when that variable is unset.
    """
    path = os.environ.get("NCCLPREP_TIMINGS")

    def record(phase: str, name: str, seconds: float) -> None:
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(f"{phase}\t{name}\t{seconds:.1f}\n")

    return record


@pytest.fixture(scope="session")
def cluster():
    """The 3-node local podman cluster (tests/localcluster.py) with Slurm (slurmctld on node1),
    up once for the session's slow tiers and torn down at its end unless NCCLPREP_KEEP_CLUSTER=1.
    Returns the node names."""
    from localcluster import NODES, run

    up = run([os.path.join(REPO, "scripts", "local_cluster.sh"), "up", str(len(NODES)), "--slurm"], timeout=1200)
    assert up.returncode == 0, "local cluster bring-up failed"
    yield NODES
    if os.environ.get("NCCLPREP_KEEP_CLUSTER") != "1":
        run([os.path.join(REPO, "scripts", "local_cluster.sh"), "down"], timeout=300)


@pytest.fixture(scope="session")
def provisioned(cluster):
    """The fault tier's cluster: the session's local cluster provisioned by site.yml once (a
    no-op when tests/integration already did) with a training dataset on every node. The tier's
    files run in name order: tests/faults/test_faults.py (one fault at a time, then the healthy
    runs in a row), test_join_and_partial_failure.py (a failure on one node while provisioning,
    then a fourth node joining), test_node_loss.py (node3 frozen, then stopped: last). (Here and
    not in a tests/faults/conftest.py: the unit tests import this module as ``conftest``.)"""
    from localcluster import DATASET_MAKE, NODES, on, provision

    provision()
    for node in NODES:  # a training dataset on every node (check dataset.path)
        assert on(node, DATASET_MAKE).returncode == 0
    return cluster


#: The slow tiers in the order they share the cluster: provisioning first, the faults after it.
TIER_ORDER = ("tests/integration/", "tests/faults/")


def pytest_collection_modifyitems(config, items):
    """Run tests/integration before tests/faults whatever order the paths were given in (the
    faults need the cluster the integration tier provisioned and leave node3 stopped)."""
    def rank(item):
        path = os.path.relpath(str(item.fspath), REPO)
        return next((i for i, prefix in enumerate(TIER_ORDER) if path.startswith(prefix)), -1)

    items.sort(key=rank)
