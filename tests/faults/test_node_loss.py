"""Nodes lost during the preflight, on the local cluster the fault tier leaves (four nodes
once test_join_and_partial_failure.py has grown it): node3 frozen mid-probe (podman pause),
then stopped, then site.yml with it left out. Runs last: it leaves node3 stopped (the session
fixture tears the cluster down).
Every bad check must name node3 alone, and the run must end inside its deadline."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from localcluster import BIN, NO_SMOKE, REPO, bad_checks, env, load, on, recap, record, run, validate

pytestmark = [
    pytest.mark.integration,
    pytest.mark.faults,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman not installed"),
]


def test_node3_paused_mid_probe_is_named_within_the_deadline(provisioned, tmp_path_factory):
    """node3 frozen (podman pause) once its network probe listens: the run ends by its deadlines
    and every bad check names node3 alone."""
    reports = str(tmp_path_factory.mktemp("reports"))
    cmd = [os.path.join(BIN, "ansible-playbook"), "validate.yml", "-i", "inventory/local",
           "-e", f"preflight_report_dir={reports}"]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    paused = False
    try:
        while proc.poll() is None and time.monotonic() - start < 300:
            ss = subprocess.run(["podman", "exec", "ncclprep-node3", "ss", "-Hltn", "sport = :29521"], env=env(),
                                capture_output=True, text=True, timeout=30)
            if "LISTEN" in ss.stdout:
                time.sleep(0.5)
                paused = run(["podman", "pause", "ncclprep-node3"], timeout=60).returncode == 0
                break
            time.sleep(0.2)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        run(["podman", "unpause", "ncclprep-node3"], timeout=60)
    elapsed = time.monotonic() - start
    record("fault node3 paused mid-probe", elapsed, phase="faults")
    sys.stdout.write(out[-3000:])
    assert paused, "node3's probe never started listening"
    assert proc.returncode != 0
    bad = bad_checks(load(reports))
    assert "host.reachable" in bad and bad["host.reachable"]["hosts"] == ["node3"]
    assert all(c["hosts"] == ["node3"] for c in bad.values()), bad
    assert set(bad) <= {"host.reachable", "net.run", "collective.run"}, bad
    assert elapsed < 300


def test_stopped_node3_is_named_without_a_hang(provisioned, tmp_path_factory):
    """Runs last: it stops node3 (the session fixture tears the cluster down afterwards)."""
    stop = run(["podman", "stop", "--time", "2", "ncclprep-node3"], timeout=120)
    assert stop.returncode == 0
    reports = str(tmp_path_factory.mktemp("reports"))
    val, seconds = validate(reports, NO_SMOKE)
    record("fault node3 stopped", seconds, phase="faults")
    assert val.returncode == 1
    data = load(reports)
    bad = bad_checks(data)
    assert bad["host.reachable"]["hosts"] == ["node3"]
    # the collectives ran on the two remaining ranks: no made-up HANG
    assert "collective.run" not in bad
    statuses = {c["id"]: c["status"] for c in data["checks"]}
    assert statuses["collective.all_reduce"] == "PASS"
    assert all(c["hosts"] == ["node3"] for c in bad.values()), bad


def test_with_node3_stopped_the_others_health_checks_leave_them_in_service(provisioned):
    """Issue 40 (review N1): node3 down made every other node's check fail names.reachable naming
    node3, and each health check then drained its own node. Now the check still says so, and the
    health check judges only what names the node itself: no drain for node3's absence."""
    from ansible.module_utils.ncclprep.slurm.rules import judged

    for node in ("node1", "node2"):
        check = on(node, "ncclprep node check --json", timeout=120)
        rows = json.loads(check.stdout)["checks"]
        reach = next(r for r in rows if r["id"] == "names.reachable")
        assert check.returncode == 1 and reach["status"] == "FAIL" and "node3" in reach["hosts"], check.stdout[-2000:]
        health = on(node, "ncclprep node health --no-refresh", timeout=60)
        assert health.returncode == 0, health.stdout + health.stderr
        assert "names.reachable" not in health.stdout.split("drained:", 1)[-1] or "drained:" not in health.stdout
        if not judged(rows, node):  # nothing else failed on the node itself: it stays in service
            assert "fails only checks that do not judge it" in health.stdout, health.stdout
    reasons = on("node1", "sinfo --noheader --Node --format '%N|%E'").stdout
    assert "names.reachable" not in reasons, reasons


def test_the_stopped_node_left_out_with_limit_lets_the_others_be_provisioned(provisioned):
    """Review F13: with a member stopped, site.yml --limit '!node3' failed on every node (play 1
    gathered node3's facts delegated, any_errors_fatal). Now node3 is named unreachable with a
    warning and keeps its place under the address the cluster resolves it to: the others still
    let it in, so it can come back through site.yml. (After the stop above: node3 stays down.)"""
    res = run([os.path.join(BIN, "ansible-playbook"), "site.yml", "-i", "inventory/local", "--limit", "!node3",
               "--tags", "ssh_trust,firewall"], timeout=600)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "WARNING: node3 (outside --limit) cannot be reached. It stays in the cluster-wide files at " \
           "10.77.29.13" in re.sub(r"\s+", " ", res.stdout), res.stdout[-3000:]
    assert "node3" not in recap(res.stdout)
    rules = run(["podman", "exec", "ncclprep-node1", "ufw", "status"], timeout=60).stdout
    assert re.search(r"29400/tcp +ALLOW +10\.77\.29\.13 ", rules), rules
    login = run(["podman", "exec", "ncclprep-node1", "ssh", "-o", "BatchMode=yes", "-i",
                 "/root/.ssh/id_ed25519_ncclprep", "node2", "hostname"], timeout=60)
    assert login.returncode == 0 and login.stdout.strip() == "node2", login.stderr
