"""The fault tier's cluster: the session's local cluster (tests/conftest.py), provisioned by
site.yml once (a no-op when tests/integration already did) with a training dataset on every
node. Its files run in name order: test_faults.py (one fault at a time, then the healthy runs
in a row), test_join_and_partial_failure.py (a failure on one node while provisioning, then a
fourth node joining), test_node_loss.py (node3 frozen, then stopped: last)."""

from __future__ import annotations

import pytest
from localcluster import DATASET_MAKE, NODES, on, provision


@pytest.fixture(scope="session")
def provisioned(cluster):
    provision()
    for node in NODES:  # a training dataset on every node (check dataset.path)
        assert on(node, DATASET_MAKE).returncode == 0
    return cluster
