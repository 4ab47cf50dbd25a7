"""What a reboot takes away when a piece of site.yml's persistence is gone (issue 41 items 3 and 4).

On the provisioned cluster, before the fault runs of test_faults.py (files run in name order): node2
loses its sysctl drop-in, node3 the netplan drop-in that carries its MTU and the enabling link of
the RPS/RFS boot unit; each node is rebooted (``ncclprep cluster reboot``: the live settings die
with the network namespace, the node boots from its files). Then:

- Slurm: slurmd runs HealthCheckProgram as it starts; that run judges the node as it came back
  (the node check's record of before the boot is no verdict) and drains node2 with an ``ncclprep:``
  reason naming the check. node3 fails too, but the circuit breaker holds one node of three
  drained at most (slurm.rules.limit), so node3 is left in service and says so.
- validate.yml names each lost piece by its check and host, and nothing else.
- site.yml (the three roles' tags, the two nodes) puts the pieces back; the next node check and
  health check pass and ncclprep resumes node2.

The healthy reboot (no false alarm) is tests/integration's test_a_rebooted_node_comes_back_tuned_...
"""

from __future__ import annotations

import os
import shutil
import time

import pytest
from localcluster import BIN, NO_SMOKE, bad_checks, close_control_connections, load, on, playbook, run, validate

pytestmark = [
    pytest.mark.integration,
    pytest.mark.faults,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman not installed"),
]

#: The pieces taken away, per node, and what must come back from them.
LOSE = {
    "node2": "rm /etc/sysctl.d/90-ncclprep.conf",
    "node3": "rm /etc/netplan/60-ncclprep-mtu.yaml && systemctl disable --quiet ncclprep-rps-rfs.service",
}
#: The per-network-namespace sysctls site.yml's drop-in sets away from a fresh namespace's defaults
#: (the host-global ones are SKIP in a container).
SYSCTLS = ("net.core.somaxconn", "net.ipv4.conf.all.arp_announce", "net.ipv4.conf.all.arp_ignore",
           "net.ipv4.tcp_mtu_probing", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem")
BAD = {**{f"sysctl.{k}": ["node2"] for k in SYSCTLS}, "data_plane.mtu": ["node3"], "rps_rfs.queues": ["node3"],
       "drift.files": ["node2", "node3"]}


def reboot(*nodes: str) -> None:
    out = run([os.path.join(BIN, "ncclprep"), "cluster", "reboot", *nodes], timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    close_control_connections()


def slurm_row(node: str) -> tuple[str, str]:
    """(state, reason) of ``node`` in sinfo."""
    out = on("node1", f"sinfo --noheader --Node --nodes {node} --format '%T|%E'")
    state, _, reason = out.stdout.strip().partition("|")
    return state, reason


def wait_for(node: str, done, seconds: float = 60) -> tuple[str, str]:
    deadline = time.monotonic() + seconds
    while not done(got := slurm_row(node)) and time.monotonic() < deadline:
        time.sleep(1)
    return got


def test_a_piece_of_persistence_lost_is_named_after_the_reboot_and_slurm_drains_until_site_yml(
        provisioned, tmp_path_factory):
    try:
        for node, script in LOSE.items():
            assert on(node, script).returncode == 0, node
        reboot("node2")
        state, reason = wait_for("node2", lambda r: r[0].startswith("drain"))
        assert state.startswith("drain") and reason.startswith("ncclprep: sysctl.net."), (state, reason)
        reboot("node3")
        log = on("node3", "sleep 2; ncclprep report --history").stdout
        assert slurm_row("node3")[0].startswith("idle"), log
        assert "FAIL" in log or "held" in log or "breaker" in log, log

        reports = str(tmp_path_factory.mktemp("reports"))
        val, _ = validate(reports, NO_SMOKE)
        assert val.returncode == 1, val.stdout[-2000:]
        bad = bad_checks(load(reports))
        assert {c: b["hosts"] for c, b in bad.items()} == BAD, {c: (b["hosts"], b["message"]) for c, b in bad.items()}
        assert "node3=9000; expected 4096" in bad["data_plane.mtu"]["message"]
        assert "/etc/netplan/60-ncclprep-mtu.yaml missing" in bad["drift.files"]["message"]
    finally:
        put_back = playbook("site", extra=("--tags", "sysctl_tuning,nic_mtu,rps_rfs", "--limit", "node2,node3"))
        for node in ("node2", "node3"):  # what HealthCheckInterval's next runs do
            on(node, "ncclprep node check >/dev/null; /usr/local/sbin/ncclprep-health", timeout=120)
    assert put_back.returncode == 0, put_back.stdout[-3000:]
    assert on("node3", "systemctl is-enabled ncclprep-rps-rfs.service").stdout.strip() == "enabled"
    for node in ("node2", "node3"):
        state, reason = wait_for(node, lambda r: r == ("idle", "none"))
        assert (state, reason) == ("idle", "none"), node
