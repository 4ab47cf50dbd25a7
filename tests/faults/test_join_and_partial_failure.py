"""Safe provisioning on the local cluster the fault suite leaves healthy: a failure on one
node while site.yml runs leaves the others provisioned and a rerun finishes the job; a node
added to the inventory later joins with one run of site.yml (host names, known hosts and the
firewall of the others updated), and validate.yml passes on the grown cluster.

Runs after test_faults.py (its healthy runs need three nodes) and before test_node_loss.py,
which then runs on four nodes. The join's site.yml also takes back the partial failure's
changed settings on node1..node3 (a run without them restores the inventory's intent).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from localcluster import DATASET, DATASET_MAKE, NODES, REPO, load, on, playbook, recap, run, slurm_nodes, validate

pytestmark = [
    pytest.mark.integration,
    pytest.mark.faults,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman not installed"),
]

#: A change that site.yml applies early (sysctl_tuning, the third concern) and one it
#: applies last (nccl_env): a node that fails at the first never gets the second.
CHANGE = ("-e", json.dumps({"sysctl_tuning_overrides": {"net.core.somaxconn": 32768},
                            "nccl_env_overrides": {"NCCL_DEBUG": "INFO"}}))
#: Read on a node: the live somaxconn and the NCCL_DEBUG line of the launch env file.
STATE = "sysctl -n net.core.somaxconn && grep '^NCCL_DEBUG=' /etc/ncclprep/nccl.env"
#: /etc/sysctl.d made read-only on node3 (a bind mount of itself, remounted read-only):
#: sysctl_tuning's drop-in cannot be written there, as on a node whose disk went read-only.
LOCK = "mount --bind /etc/sysctl.d /etc/sysctl.d && mount -o remount,ro,bind /etc/sysctl.d"
UNLOCK = "umount /etc/sysctl.d"


def state(node: str) -> list[str]:
    out = on(node, STATE)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_failure_on_one_node_leaves_the_others_provisioned_and_a_rerun_finishes(provisioned):
    before = state("node3")
    assert before == ["65535", "NCCL_DEBUG=WARN"], before
    assert on("node3", LOCK).returncode == 0
    try:
        first = playbook("site", extra=CHANGE)
        assert first.returncode == 2, first.stdout[-3000:]  # ansible-playbook: a host failed
        counters = recap(first.stdout)
        assert {h: (counters[h]["failed"], counters[h]["unreachable"]) for h in NODES} == {
            "node1": (0, 0), "node2": (0, 0), "node3": (1, 0)}, counters
        assert "/etc/sysctl.d" in first.stdout  # the failed task names what it could not write
        # node1 and node2 went on to the last concern; node3 stopped at its failure
        assert state("node1") == state("node2") == ["32768", "NCCL_DEBUG=INFO"]
        assert state("node3") == before
    finally:
        on("node3", UNLOCK)
    rerun = playbook("site", extra=CHANGE)
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    changed = {h: recap(rerun.stdout)[h]["changed"] for h in NODES}
    assert changed["node1"] == changed["node2"] == 0 and changed["node3"] > 0, changed
    assert state("node3") == ["32768", "NCCL_DEBUG=INFO"]


def test_a_node_added_to_the_inventory_joins_with_one_run(provisioned, tmp_path_factory):
    grow = run([os.path.join(REPO, "scripts", "local_cluster.sh"), "grow", "4"], timeout=600)
    assert grow.returncode == 0, grow.stdout[-3000:]
    # the nodes that ran were kept as they were: node1 still holds what site.yml put there
    assert on("node1", "grep -c '^10.77.29.1[1-3] node[1-3]$' /etc/hosts").stdout.strip() == "3"
    # the cluster runs Slurm (tests/conftest.py): grow started slurmd on node4 and slurmctld took it
    assert slurm_nodes() == {n: "idle" for n in [*NODES, "node4"]}
    site = playbook("site")
    assert site.returncode == 0, site.stdout[-3000:]
    counters = recap(site.stdout)
    assert counters["node4"]["changed"] > 0 and counters["node4"]["failed"] == 0
    nodes = [*NODES, "node4"]
    for node in NODES:  # the others know the newcomer: its name and its host key
        assert on(node, "getent hosts node4").stdout.split() == ["10.77.29.14", "node4"], node
        assert on(node, "grep -c '^node4 ' /etc/ssh/ssh_known_hosts").stdout.strip() != "0", node
    # ...and the previous test's changed settings are back to the inventory's
    assert [state(n) for n in NODES] == [["65535", "NCCL_DEBUG=WARN"]] * 3
    assert on("node4", DATASET_MAKE).returncode == 0
    reports = str(tmp_path_factory.mktemp("reports"))
    val, _ = validate(reports, ("-e", f"preflight_dataset_path={DATASET}"))
    data = load(reports)
    bad = {c["id"]: (c["hosts"], c["message"]) for c in data["checks"] if c["status"] not in ("PASS", "SKIP")}
    assert val.returncode == 0 and data["status"] == "PASS", bad
    assert data["hosts"] == nodes
    statuses = {c["id"]: c["status"] for c in data["checks"]}
    for cid in ("ssh.trust", "names.resolve", "firewall.rules", "net.ports", "collective.all_reduce",
                "torchrun.smoke"):
        assert statuses[cid] == "PASS", cid
    # node4 measured both ways with the peers the pair schedule gave it (at 4 nodes a ring and a
    # random matching, not every pair), the firewall of the others letting it in
    ports = data["network"]["ports"]
    to_node4 = [a for a in NODES if "node4" in ports.get(a, {})]
    assert to_node4 and set(ports["node4"]) & set(NODES), ports
    assert all(set(ports[a]["node4"].values()) == {"open"} for a in to_node4), ports
    assert next(c for c in data["checks"] if c["id"] == "collective.all_reduce")["measured"]["world_size"] == 4
    # a member now, node4 runs Slurm jobs too (its slurmd reaches node1 through the firewall)
    job = on("node1", "timeout 60 srun --nodes 4 --ntasks-per-node 1 hostname", timeout=90)
    assert job.returncode == 0 and sorted(job.stdout.split()) == nodes, job.stderr
