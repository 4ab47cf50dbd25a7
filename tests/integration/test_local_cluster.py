"""End to end on a 3-node local podman cluster: site.yml, idempotence, validate.yml
all PASS (also through the ncclprep CLI, every report format read back), bad input
refused before any change, an MTU that cuts nodes off rolled back. The faults that
validate.yml must catch and name are the next tier, tests/faults.

Slow (minutes): the cluster is the session fixture ``cluster`` (tests/conftest.py),
brought up once and shared with tests/faults. Skipped where podman is missing. The
bad-input runs (read-only, each asserted to change nothing) run a few at a time. Each
command's duration is recorded (tests/localcluster.py, NCCLPREP_TIMINGS).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from ansible.module_utils.ncclprep.checks import NODE_MODULES, evaluate_node
from localcluster import (
    BIN,
    DATASET,
    DATASET_MAKE,
    NODES,
    REPO,
    STATE,
    close_control_connections,
    env,
    load,
    on,
    playbook,
    recap,
    record,
    run,
    slurm_nodes,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman not installed"),
]


def test_site_is_idempotent_and_validate_passes(cluster, tmp_path_factory):
    first = playbook("site")
    assert first.returncode == 0
    STATE["provisioned"] = True
    # the re-run is bench/provision.py's (issue 13): it fails on any change and prints where the time goes
    second = run([os.path.join(BIN, "python"), "bench/provision.py", "--no-cluster", "--reruns", "1"], timeout=900)
    assert second.returncode == 0, second.stderr
    assert re.search(rf"^run 1 re-run +[\d.]+ s  hosts {len(NODES)} changed 0 failed 0 ", second.stdout, re.M)
    by_role = second.stdout.split("re-run by role")[1].split("longest tasks")[0]
    assert {"nccl_env", "sysctl_tuning", "ssh_trust"} <= set(re.findall(r"^ +[\d.]+  (\w+)$", by_role, re.M))
    # check mode on the provisioned cluster: nothing would change
    checked = playbook("site", extra=("--check",))
    assert checked.returncode == 0
    assert {h: recap(checked.stdout)[h]["changed"] for h in NODES} == {h: 0 for h in NODES}

    for node in NODES:  # a training dataset on every node (check dataset.path)
        assert run(["podman", "exec", f"ncclprep-{node}", "sh", "-c", DATASET_MAKE], timeout=60).returncode == 0
    reports = str(tmp_path_factory.mktemp("reports"))
    val = playbook("validate", reports, extra=("-e", f"preflight_dataset_path={DATASET}"))
    assert val.returncode == 0
    data = load(reports)
    assert data["status"] == "PASS" and data["hosts"] == NODES
    STATE["healthy"] = reports
    statuses = {c["id"]: c["status"] for c in data["checks"]}
    assert set(statuses.values()) <= {"PASS", "SKIP"}
    for cid in ("host.reachable", "data_plane.interface", "data_plane.mtu", "names.resolve",
                "sysctl.net.core.somaxconn", "rps_rfs.queues", "versions.torch", "collective.all_reduce",
                "torchrun.smoke", "numa.binding", "sysctl.net.ipv4.conf.all.arp_ignore", "firewall.rules",
                "ssh.trust"):
        assert statuses[cid] == "PASS", cid
    by = {c["id"]: c for c in data["checks"]}
    # containers: eth0 is a veth (no IRQs) and there is no RDMA device: SKIP with the reason
    assert statuses["numa.irq_affinity"] == "SKIP" and "virtual interface" in by["numa.irq_affinity"]["message"]
    assert statuses["roce.qos"] == "SKIP" and "no RoCE port" in by["roce.qos"]["message"]
    ar = next(c for c in data["checks"] if c["id"] == "collective.all_reduce")
    assert ar["measured"]["world_size"] == 3 and ar["measured"]["busbw_gbps"] > 0
    rows = data["collectives"]["all_reduce"]
    assert all(r["wrong"] == 0 for r in rows)
    # busbw = algbw x 2(n-1)/n with n = 3
    assert rows[-1]["busbw_gbps"] == pytest.approx(rows[-1]["algbw_gbps"] * 4 / 3, rel=1e-3)
    for host in NODES:
        assert os.path.exists(os.path.join(reports, "latest", "hosts", f"{host}.json"))
    # the network between the nodes: every direction measured, matrices in the report
    for cid in ("net.run", "net.latency", "net.bandwidth", "net.path_mtu", "net.ports", "drift.files",
                "versions.kernel", "versions.python", "dataset.path", "links.counters"):
        assert statuses[cid] == "PASS", by[cid]
    assert by["dataset.path"]["measured"] == dict.fromkeys(NODES, 2)
    # eth0's carrier and error counters on every node, read when the run started and when it ended
    assert by["links.counters"]["measured"] == {"ports": len(NODES)}
    assert statuses["links.rdma"] == "SKIP"
    # Gloo bound eth0's address (GLOO_SOCKET_IFNAME from nccl_env) on every node
    assert statuses["collective.transport"] == "PASS", by["collective.transport"]
    assert sorted(by["collective.transport"]["measured"]) == NODES
    # every file site.yml wrote on each node, as it wrote them: nccl_env's six (nccl.conf, the env file, the
    # debug env file, the launcher, the rendezvous guard, the template job), the sysctl drop-in,
    # ssh_trust's ssh config and known_hosts lines, the hosts block, rps_rfs's script and unit,
    # numa_pinning's map, JSON map and wrapper, slurm_health's three wrappers (the cluster runs Slurm),
    # nic_mtu's netplan drop-in (the node's first boot wrote eth0's netplan file, as cloud-init does)
    # (no IRQ script or unit: a veth has no IRQs; no roce_qos files: no RoCE port; no nftables table: ufw)
    assert by["drift.files"]["measured"] == 19 * len(NODES)
    directions = {(a, b) for a in NODES for b in NODES if a != b}
    net = data["network"]
    for key in ("latency_p50_us", "latency_p99_us", "bandwidth_gbps", "path_mtu_largest", "ports"):
        assert {(a, b) for a, row in net[key].items() for b in row} == directions, key
    assert all(v == 4096 for row in net["path_mtu_largest"].values() for v in row.values())
    assert all(v > 0 for row in net["bandwidth_gbps"].values() for v in row.values())
    for row in net["ports"].values():
        for seen in row.values():
            assert {"29400", "29500", "29510"} <= set(seen) and set(seen.values()) == {"open"}
    # busbw of all five collectives (reduce_scatter natively on this torch's gloo)
    assert sorted(data["collectives"]) == ["all_gather", "all_reduce", "all_to_all", "broadcast", "reduce_scatter"]
    assert all(r["busbw_gbps"] > 0 for rows in data["collectives"].values() for r in rows)



def node_check(node: str, *args: str) -> tuple[int, dict]:
    """``ncclprep node check --json ARGS`` on ``node`` as site.yml installed it: (exit code, output)."""
    out = run(["podman", "exec", f"ncclprep-{node}", "ncclprep", "node", "check", "--json", *args], timeout=120)
    return out.returncode, json.loads(out.stdout) if out.stdout.strip() else {}


def test_node_check_gives_the_rows_validate_gives_each_node(cluster):
    """Issue 24 item 3: on every node, `ncclprep node check` (no Ansible, from what site.yml
    installed) reads the node as validate.yml did and gives the rows validate.yml's record of that
    host gives judged alone: same ids, statuses, hosts, messages, measured and expected values.
    dataset.path is left out: the healthy validate run set preflight_dataset_path with -e, which
    the node's intent (site.yml's variables) does not have. Then a sysctl changed on one node is
    a FAIL naming it, exit 1, and the record the command writes holds the same rows."""
    if not STATE.get("healthy"):
        pytest.skip("needs the healthy validate run of test_site_is_idempotent_and_validate_passes")
    only = [m for m in NODE_MODULES if m != "dataset"]
    for node in NODES:
        with open(os.path.join(STATE["healthy"], "latest", "hosts", f"{node}.json"), encoding="utf-8") as fh:
            rec = json.load(fh)
        want = evaluate_node(node, {"alive": True, "facts": rec["facts"], "intent": rec["intent"]}, only)
        code, got = node_check(node, "--only", *only)
        assert code == 0 and got["status"] == "PASS", got
        assert got["checks"] == want, node
        assert {"sysctl.net.core.somaxconn", "firewall.ports_free", "nccl_env.ifname"} <= {r["id"] for r in want}
    # root's, readable by a job's user: `ncclprep node preflight` reads it (issue 25)
    mode = on("node1", "stat -c %a:%U /etc/ncclprep/intent.json")
    assert mode.stdout.strip() == "644:root"
    before = on("node2", "sysctl -n net.core.somaxconn").stdout.strip()
    try:
        assert on("node2", "sysctl -qw net.core.somaxconn=128").returncode == 0
        code, got = node_check("node2", "--only", "sysctl_tuning")
        bad = [r for r in got["checks"] if r["status"] == "FAIL"]
        assert code == 1 and got["status"] == "FAIL"
        assert [(r["id"], r["hosts"], r["measured"]) for r in bad] == [
            ("sysctl.net.core.somaxconn", ["node2"], {"node2": "128"})]
        written = json.loads(on("node2", "cat /var/lib/ncclprep/node-check.json").stdout)
        assert written["host"] == "node2" and written["checks"] == got["checks"]
        assert written["facts"]["sysctl_tuning"]["net.core.somaxconn"]["value"] == "128"
    finally:
        on("node2", f"sysctl -qw net.core.somaxconn={before}")
    # the record is the health check's and the Prolog's verdict: leave a passing one behind
    assert node_check("node2", "--only", "sysctl_tuning")[0] == 0


def test_a_rebooted_node_comes_back_tuned_without_site_yml(cluster, tmp_path_factory):
    """Issue 41 item 2: node2, provisioned, reboots (`ncclprep cluster reboot`: systemd shuts down, a new
    network namespace, the veth back at the network's MTU 9000, sysctls, qdiscs and ufw's live rules
    fresh) and comes back with everything site.yml set: without site.yml, its node check gives the
    rows it gave before the reboot, and validate.yml the statuses and hosts of the healthy run. Slurm
    takes node2 back (ReturnToService=2) before the next test."""
    if not STATE.get("healthy"):
        pytest.skip("needs the healthy validate run of test_site_is_idempotent_and_validate_passes")
    only = [m for m in NODE_MODULES if m != "dataset"]
    code, before = node_check("node2", "--only", *only)
    assert code == 0, before
    # what a reboot must take away: a file in /run (tmpfs) and the live MTU podman's veth starts with
    assert on("node2", "touch /run/ncclprep-before-reboot && ip link show eth0 | grep -q 'mtu 4096 '").returncode == 0
    out = run([os.path.join(BIN, "ncclprep"), "cluster", "reboot", "node2"], timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "node2 booted and answer SSH" in out.stdout
    close_control_connections()
    assert on("node2", "test -e /run/ncclprep-before-reboot").returncode == 1
    # booted clean: no unit failed (ufw, systemd-sysctl, networkd, the roles' units, slurmd)
    state = on("node2", "systemctl is-system-running; systemctl list-units --failed --plain --no-legend")
    assert state.stdout.split() == ["running"], state.stdout
    code, after = node_check("node2", "--only", *only)
    assert code == 0, after
    assert after["checks"] == before["checks"]
    reports = str(tmp_path_factory.mktemp("reports"))
    val = playbook("validate", reports, extra=("-e", f"preflight_dataset_path={DATASET}"))
    assert val.returncode == 0, val.stdout[-3000:]
    rows = {(c["id"], c["status"], tuple(c.get("hosts") or [])) for c in load(reports)["checks"]}
    assert rows == {(c["id"], c["status"], tuple(c.get("hosts") or [])) for c in load(STATE["healthy"])["checks"]}
    assert all_idle() == dict.fromkeys(NODES, "idle")


@pytest.fixture
def slurm_left_idle():
    """Leaves Slurm as the Slurm tests found it even when one fails half-way: no job left in the
    queue (one left pending would start on a later test's cluster) and every node idle (a drained
    node is checked afresh, so its record passes, and resumed). The tests assert their own end
    states; this only keeps one failure from failing the tests after it."""
    yield
    on("node1", "scancel --full --user root; sleep 1")
    for node, state in slurm_nodes().items():
        if state.rstrip("*~#") not in ("idle", "mixed", "allocated"):
            on(node, "ncclprep node check >/dev/null", timeout=120)
            on("node1", f"scontrol update NodeName={node} State=RESUME")


@pytest.mark.usefixtures("slurm_left_idle")
def test_slurm_runs_a_job_on_every_node_site_yml_provisioned(cluster):
    """Issue 25 item 1: the session's cluster came up with --slurm (slurmctld on node1, slurmd on
    every node, each idle), and after site.yml (its firewall lets only the members in) a job
    still runs one task on every node."""
    assert STATE.get("provisioned"), "needs the provisioned cluster of the first test"
    assert slurm_nodes() == {n: "idle" for n in NODES}
    job = on("node1", f"timeout 60 srun --nodes {len(NODES)} --ntasks-per-node 1 hostname", timeout=90)
    assert job.returncode == 0, job.stderr
    assert sorted(job.stdout.split()) == NODES


def fresh_ledgers() -> None:
    """Every node's ledger emptied: each Slurm test starts without the verdicts and resumes of the
    tests before it (a node resumed for a check and failing it again within 24 h is a repeat,
    drained for a person: right on a cluster, a cross-talk between tests here)."""
    for node in NODES:
        on(node, "rm -f /var/lib/ncclprep/health-ledger.json")


def slurm_state(node: str) -> tuple[str, str]:
    """``(state, reason)`` of ``node`` as sinfo shows them (the reason ``none`` when it has none)."""
    out = on("node1", f"sinfo --noheader --Node --nodes {node} --format '%T|%E'")
    assert out.returncode == 0, out.stderr
    state, reason = out.stdout.splitlines()[0].split("|", 1)
    return state, reason


def settled(node: str, want: tuple[str, str], seconds: float = 20) -> tuple[str, str]:
    """slurm_state once it is ``want`` or ``seconds`` have passed (a resumed node shows ``idle*``, not
    responding, until slurmctld's next ping reaches it)."""
    deadline = time.monotonic() + seconds
    while (got := slurm_state(node)) != want and time.monotonic() < deadline:
        time.sleep(1)
    return got


def all_idle(seconds: float = 90) -> dict[str, str]:
    """slurm_nodes once every node is idle, or when ``seconds`` have passed: a job's nodes stay
    ``completing`` while its Epilogs run (a re-test among them takes a join deadline when one of
    them left no claim), after srun or sbatch --wait returned."""
    deadline = time.monotonic() + seconds
    while set((got := slurm_nodes()).values()) != {"idle"} and time.monotonic() < deadline:
        time.sleep(2)
    return got


def health(node: str, *args: str) -> subprocess.CompletedProcess:
    """``ncclprep node health --no-refresh ARGS`` on ``node``, timed into the closing table."""
    start = time.monotonic()
    out = on(node, "ncclprep node health --no-refresh " + " ".join(args), timeout=60)
    record("node health (HealthCheckProgram)", time.monotonic() - start)
    return out


@pytest.mark.usefixtures("slurm_left_idle")
def test_node_health_drains_a_failing_node_resumes_it_and_leaves_others_drains_alone(cluster):
    """Issue 25 item 2's rules on the Slurm cluster: ``ncclprep node health`` (Slurm's
    HealthCheckProgram) drains a node whose node check failed with an ``ncclprep:`` reason naming
    the check and the values, holds a second one back (the circuit breaker: 1 of 3 nodes), resumes
    its own drain once the node passes, leaves a human's drain alone, and without a verdict
    (UNKNOWN) exits 3 and changes nothing."""
    assert STATE.get("provisioned"), "needs the provisioned cluster of the first test"
    fresh_ledgers()
    sysctl = "net.core.somaxconn"
    before = on("node2", f"sysctl -n {sysctl}").stdout.strip()
    try:
        for node in ("node2", "node3"):
            assert on(node, f"sysctl -qw {sysctl}=128").returncode == 0
            assert on(node, "ncclprep node check --only sysctl_tuning >/dev/null", timeout=120).returncode == 1
        drained = health("node2")
        reason = f"ncclprep: sysctl.{sysctl}: measured 128, expected {before}"
        assert drained.returncode == 0 and drained.stdout.strip() == f"ncclprep health node2: drained: {reason}"
        assert slurm_state("node2") == ("drained", reason)
        held = health("node3")
        assert held.returncode == 0 and "the circuit breaker" in held.stdout, held.stdout
        assert slurm_state("node3") == ("idle", "none")
    finally:
        for node in ("node2", "node3"):
            on(node, f"sysctl -qw {sysctl}={before}")
    assert on("node2", "ncclprep node check --only sysctl_tuning >/dev/null", timeout=120).returncode == 0
    resumed = health("node2")
    assert resumed.returncode == 0 and "node2: passes now; resumed" in resumed.stdout, resumed.stdout
    assert settled("node2", ("idle", "none")) == ("idle", "none")
    # a human's drain: left alone, also when the node passes
    assert on("node1", "scontrol update NodeName=node3 State=DRAIN Reason=maintenance").returncode == 0
    try:
        assert on("node3", "ncclprep node check --only sysctl_tuning >/dev/null", timeout=120).returncode == 0
        kept = health("node3")
        assert kept.returncode == 0 and "a reason of someone else's ('maintenance'): left alone" in kept.stdout
        assert slurm_state("node3") == ("drained", "maintenance")
    finally:
        on("node1", "scontrol update NodeName=node3 State=RESUME")
    assert settled("node3", ("idle", "none")) == ("idle", "none")
    # no verdict: UNKNOWN, exit 3 (slurmd logs it), nothing changed
    unknown = health("node1", "--record", "/nonexistent/node-check.json")
    assert unknown.returncode == 3
    assert unknown.stdout.strip() == ("ncclprep health node1: UNKNOWN (no node check has run here yet): "
                                      "neither drained nor resumed")
    assert all_idle() == {n: "idle" for n in NODES}


@pytest.mark.usefixtures("slurm_left_idle")
def test_node_prolog_lets_a_jobs_listener_be_and_drains_a_failing_node_and_slurm_requeues(cluster):
    """Issue 40 item 6 (review N3): ``ncclprep node prolog`` passes a healthy node (exit 0) and one
    where a process holds a rendezvous port (a running job's own torchrun, or any user's): no
    drain, the job runs. A node whose last node check failed on the node itself is drained with its
    own reason through the breaker's mark (exit 1: Slurm requeues the job); once fixed, the next
    node check and ``node health`` resume it."""
    assert STATE.get("provisioned"), "needs the provisioned cluster of the first test"
    fresh_ledgers()
    start = time.monotonic()
    ok = on("node2", "ncclprep node prolog", timeout=60)
    record("node prolog (Prolog)", time.monotonic() - start)
    assert ok.returncode == 0 and ok.stdout.strip() == "ncclprep prolog node2: passes: the job runs", ok.stdout
    # SO_REUSEADDR: the earlier jobs' connections on the port may still be in TIME_WAIT
    holder = ("python3 -c 'import socket, time; s = socket.socket(); "
              "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"0.0.0.0\", 29400)); s.listen(); "
              "time.sleep(300)' >/dev/null 2>&1 & echo $! > /root/holder.pid; sleep 1")
    assert on("node2", holder).returncode == 0
    try:
        assert on("node2", "ncclprep node check >/dev/null", timeout=120).returncode == 1  # ports_free FAILs
        gate = on("node2", "ncclprep node prolog", timeout=60)
        assert gate.returncode == 0, gate.stdout
        assert gate.stdout.strip() == "ncclprep prolog node2: passes: the job runs", gate.stdout
        kept = health("node2")
        assert "fails only checks that do not judge it: firewall.ports_free" in kept.stdout, kept.stdout
        assert slurm_state("node2") == ("idle", "none")
    finally:
        on("node2", "kill $(cat /root/holder.pid); rm -f /root/holder.pid")
    sysctl = "net.core.somaxconn"
    before = on("node2", f"sysctl -n {sysctl}").stdout.strip()
    try:
        assert on("node2", f"sysctl -qw {sysctl}=128").returncode == 0
        assert on("node2", "ncclprep node check >/dev/null", timeout=120).returncode == 1
        start = time.monotonic()
        gate = on("node2", "ncclprep node prolog", timeout=60)
        record("node prolog, drained (Prolog)", time.monotonic() - start)
        assert gate.returncode == 10, gate.stdout + gate.stderr  # the wrapper turns it into Slurm's 1
        assert gate.stdout.strip() == (f"ncclprep prolog node2: drained: ncclprep: sysctl.{sysctl}: measured 128, "
                                       f"expected {before}; the job is requeued"), gate.stdout
        assert slurm_state("node2") == ("drained", f"ncclprep: sysctl.{sysctl}: measured 128, expected {before}")
        features = on("node1", "sinfo --noheader --Node --nodes node2 --format '%f'").stdout.strip()
        assert features == "(null)"  # the breaker's mark is gone again
    finally:
        on("node2", f"sysctl -qw {sysctl}={before}")
    assert on("node2", "sleep 1; ncclprep node check >/dev/null", timeout=120).returncode == 0
    assert "resumed" in health("node2").stdout
    assert settled("node2", ("idle", "none")) == ("idle", "none")
    assert all_idle() == {n: "idle" for n in NODES}


@pytest.mark.usefixtures("slurm_left_idle")
def test_every_node_failing_with_all_health_checks_at_once_drains_at_most_the_cap(cluster):
    """Issue 40 item 3 (review N2) on the Slurm cluster: every node fails its node check and their
    health checks start at the same moment, as Slurm starts them; ncclprep drains at most
    min(max(1, 10 %), slurm_health_max_drained) = 1 of the 3 nodes, and leaves no mark behind."""
    assert STATE.get("provisioned"), "needs the provisioned cluster of the first test"
    fresh_ledgers()
    sysctl = "net.core.somaxconn"
    before = on("node1", f"sysctl -n {sysctl}").stdout.strip()
    try:
        for node in NODES:
            assert on(node, f"sysctl -qw {sysctl}=128").returncode == 0
            assert on(node, "ncclprep node check --only sysctl_tuning >/dev/null", timeout=120).returncode == 1
        with ThreadPoolExecutor(len(NODES)) as pool:
            lines = list(pool.map(lambda n: health(n).stdout.strip(), NODES))
        states = {n: slurm_state(n) for n in NODES}
        drained = [n for n, (state, _) in states.items() if state == "drained"]
        assert len(drained) == 1, (lines, states)
        assert sum("the circuit breaker" in line for line in lines) == 2, lines
        features = on("node1", "sinfo --noheader --Node --format '%f'").stdout.split()
        assert features == ["(null)"] * len(NODES)
    finally:
        for node in NODES:
            on(node, f"sysctl -qw {sysctl}={before}")
    for node in NODES:
        assert on(node, "ncclprep node check --only sysctl_tuning >/dev/null", timeout=120).returncode == 0
        health(node)
    for node in NODES:
        assert settled(node, ("idle", "none")) == ("idle", "none")


@pytest.mark.usefixtures("slurm_left_idle")
def test_a_humans_down_with_its_reason_is_left_alone_by_a_failing_node(cluster):
    """Issue 40 item 7 (review N7): a person set node3 DOWN with a note; node3 then fails its own
    check, and its health check leaves the state and the note as they are (64ebd4f replaced the
    note with an ncclprep drain)."""
    assert STATE.get("provisioned"), "needs the provisioned cluster of the first test"
    fresh_ledgers()
    sysctl = "net.core.somaxconn"
    before = on("node3", f"sysctl -n {sysctl}").stdout.strip()
    note = "admin: bad GPU, RMA 1234"
    try:
        assert on("node1", f"scontrol update NodeName=node3 State=DOWN Reason='{note}'").returncode == 0
        assert on("node3", f"sysctl -qw {sysctl}=128").returncode == 0
        assert on("node3", "ncclprep node check --only sysctl_tuning >/dev/null", timeout=120).returncode == 1
        kept = health("node3")
        assert kept.returncode == 0 and f"with a reason of someone else's ('{note}'): left alone" in kept.stdout, \
            kept.stdout
        state, reason = slurm_state("node3")
        assert state.rstrip("*") == "down" and reason == note, (state, reason)
    finally:
        on("node3", f"sysctl -qw {sysctl}={before}")
        on("node1", "scontrol update NodeName=node3 State=RESUME")
    assert on("node3", "ncclprep node check --only sysctl_tuning >/dev/null", timeout=120).returncode == 0
    assert settled("node3", ("idle", "none"), 60) == ("idle", "none")


@pytest.mark.usefixtures("slurm_left_idle")
def test_a_node_in_a_maintenance_reservation_is_left_alone_by_a_failing_check(cluster):
    """Issue 40 item 7: node2 in a reservation with Flags=MAINT (sinfo shows it ``maint``) fails its
    own check; its health check leaves it alone, neither drained nor marked."""
    assert STATE.get("provisioned"), "needs the provisioned cluster of the first test"
    fresh_ledgers()
    sysctl = "net.core.somaxconn"
    before = on("node2", f"sysctl -n {sysctl}").stdout.strip()
    made = on("node1", "scontrol create reservation ReservationName=ncclprep_test_maint StartTime=now "
                       "Duration=10 Nodes=node2 Users=root Flags=MAINT")
    assert made.returncode == 0, made.stderr
    try:
        assert settled("node2", ("maint", "none")) == ("maint", "none")
        assert on("node2", f"sysctl -qw {sysctl}=128").returncode == 0
        assert on("node2", "ncclprep node check --only sysctl_tuning >/dev/null", timeout=120).returncode == 1
        kept = health("node2")
        assert kept.returncode == 0 and kept.stdout.strip() == (
            "ncclprep health node2: fails, but it is maint, a state ncclprep leaves to others: left alone"), kept.stdout
        assert slurm_state("node2") == ("maint", "none")
    finally:
        on("node2", f"sysctl -qw {sysctl}={before}")
        on("node1", "scontrol delete ReservationName=ncclprep_test_maint")
    assert on("node2", "ncclprep node check --only sysctl_tuning >/dev/null", timeout=120).returncode == 0
    assert settled("node2", ("idle", "none")) == ("idle", "none")


#: The WARN row links.rdma writes for a port that is down (module_utils/ncclprep/checks/links.py),
#: added to node2's record: this cluster has no RDMA port to take down.
DEGRADED_ROW = """import json
path = "/var/lib/ncclprep/node-check.json"
with open(path) as fh:
    doc = json.load(fh)
doc["checks"].append({"id": "links.rdma", "status": "WARN", "hosts": ["node2"],
                      "measured": {"node2": ["mlx5_1/1 is Down"]}, "message": "node2: mlx5_1/1 is Down"})
with open(path, "w") as fh:
    json.dump(doc, fh)
"""


def weight_and_features(node: str) -> tuple[str, str]:
    out = on("node1", f"sinfo --noheader --Node --nodes {node} --format '%w|%f'")
    assert out.returncode == 0, out.stderr
    weight, features = out.stdout.splitlines()[0].split("|")
    return weight, features


@pytest.mark.usefixtures("slurm_left_idle")
def test_a_degraded_node_is_avoided_by_weight_and_its_pass_puts_the_weight_back(cluster):
    """Issue 40 items 5 and 7: a node check with a degraded row (links.rdma WARN) makes node2's health
    check set Weight=1000000 and the feature that holds the old weight, without a drain: Slurm gives
    jobs the lowest weight first. ``scontrol reconfigure`` drops both (Slurm keeps scontrol's node
    updates until then) and the next health check, the WARN standing, sets them again. A node check
    that passes puts the old weight back and the feature away."""
    assert STATE.get("provisioned"), "needs the provisioned cluster of the first test"
    fresh_ledgers()
    assert weight_and_features("node2") == ("1", "(null)")
    try:
        assert on("node2", "ncclprep node check --only sysctl_tuning >/dev/null", timeout=120).returncode == 0
        assert on("node2", "python3 -", input=DEGRADED_ROW).returncode == 0
        avoided = health("node2")
        assert avoided.returncode == 0 and avoided.stdout.strip() == (
            "ncclprep health node2: degraded (links.rdma: measured mlx5_1/1 is Down): the scheduler avoids it "
            "(weight 1000000, was 1)"), avoided.stdout
        assert weight_and_features("node2") == ("1000000", "ncclprep_avoid_node_1")
        assert slurm_state("node2") == ("idle", "none")
        assert health("node2").stdout.strip() == "ncclprep health node2: degraded, already avoided (weight 1000000)"
        assert on("node1", "scontrol reconfigure").returncode == 0
        deadline = time.monotonic() + 20
        while weight_and_features("node2") != ("1", "(null)") and time.monotonic() < deadline:
            time.sleep(1)
        assert weight_and_features("node2") == ("1", "(null)")
        assert "the scheduler avoids it (weight 1000000, was 1)" in health("node2").stdout
        assert weight_and_features("node2") == ("1000000", "ncclprep_avoid_node_1")
    finally:
        # a fresh record without the row
        assert on("node2", "ncclprep node check --only sysctl_tuning >/dev/null", timeout=120).returncode == 0
    cleared = health("node2")
    assert cleared.stdout.strip() == "ncclprep health node2: passes; no longer avoided (weight 1)", cleared.stdout
    assert weight_and_features("node2") == ("1", "(null)")
    assert all_idle() == {n: "idle" for n in NODES}


#: A network strike on node3 two days old, as root's re-test writes one to the ledger (nodehealth.ledger_entry).
OLD_STRIKE = """import datetime, json
at = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=2)).isoformat()
entry = {"at": at, "run": "retest old-1", "scope": "network", "status": "FAIL", "network": True,
         "partners": [], "checks": ["net.bandwidth"]}
with open("/var/lib/ncclprep/health-ledger.json", "w") as fh:
    json.dump([entry], fh)
"""


@pytest.mark.usefixtures("slurm_left_idle")
def test_two_network_failures_two_days_apart_drain_nothing(cluster):
    """Issue 40 items 4 and 7: node3's ledger holds a network strike of two days ago; node3's link is
    throttled again now and root's re-test (by hand, on the three nodes) fails it: strike 1 of 2
    within 24 h, not drained (64ebd4f counted the whole ledger: drained)."""
    assert STATE.get("provisioned"), "needs the provisioned cluster of the first test"
    fresh_ledgers()
    for node in NODES:
        on(node, "rm -f /var/lib/ncclprep/retest-last")
    assert on("node3", "python3 -", input=OLD_STRIKE).returncode == 0
    assert on("node3", "tc qdisc add dev eth0 root tbf rate 200mbit burst 64kb latency 100ms").returncode == 0
    try:
        with ThreadPoolExecutor(len(NODES)) as pool:
            runs = dict(zip(NODES, pool.map(lambda n: on(n, "ncclprep node retest --id twodays-1 --nodes "
                                                           + ",".join(NODES), timeout=200), NODES), strict=True))
    finally:
        on("node3", "tc qdisc del dev eth0 root")
    line = runs["node3"].stdout.strip()
    assert line.startswith("ncclprep retest node3: re-test FAIL: node3: network strike 1 of 2 within 24 h "
                           "(run:retest twodays-1 "), runs["node3"].stdout + runs["node3"].stderr
    assert slurm_state("node3") == ("idle", "none")
    history = on("node3", "ncclprep report --history").stdout
    assert "network strikes now 1 (run:retest twodays-1 " in history, history
    fresh_ledgers()


@pytest.mark.usefixtures("slurm_left_idle")
def test_a_claim_forged_from_a_users_job_drains_no_node(cluster):
    """Issue 40 item 7: an ordinary user's job (nobody) claims a network fault on node3 without
    one. Its Epilogs re-test the network as root, find it healthy and drain nothing: a claim only
    starts root's own measurement, never a verdict."""
    assert STATE.get("provisioned"), "needs the provisioned cluster of the first test"
    for node in ("node2", "node3"):
        on(node, "rm -f /var/lib/ncclprep/health-ledger.json /var/lib/ncclprep/retest-last "
                 "/var/log/ncclprep-epilog.log")
    forge = ("import os, sys\n"
             "sys.path.insert(0, '/opt/ncclprep/lib/ncclprep-core.zip')\n"
             "from ansible.module_utils.ncclprep.slurm.claims import write_claim\n"
             "job = os.environ['SLURM_JOB_ID']\n"
             "print(job, write_claim(job, {'checks': ['net.bandwidth'], 'hosts': ['node3']}))\n")
    for node in ("node2", "node3"):
        assert on(node, "cat > /tmp/forge-claim.py && chmod 0644 /tmp/forge-claim.py", input=forge).returncode == 0
    job = on("node1", "cd /tmp && su -s /bin/sh nobody -c 'srun --nodes 2 --nodelist node2,node3 "
                      "--ntasks-per-node 1 python3 /tmp/forge-claim.py'", timeout=120)
    assert job.returncode == 0, job.stdout + job.stderr
    written = job.stdout.split()
    job_id = written[0]
    assert written.count(job_id) == 2 and all(w.endswith("/claim.json") for w in written[1::2]), job.stdout
    lines = {node: epilog_line(node, job_id, 90) for node in ("node2", "node3")}
    assert all(f"job {job_id} claims net.bandwidth" in line and "re-test PASS" in line for line in lines.values()), \
        lines
    assert all_idle() == {n: "idle" for n in NODES}


EXAMPLE = "/usr/local/share/ncclprep/slurm/preflight-train.sbatch"


def batch(folder: str, need: int, what: str, settings: dict | None = None) -> tuple[subprocess.CompletedProcess, str]:
    """The example batch job (site.yml installs it) on all nodes with NCCLPREP_NEED=``need`` (and
    NCCLPREP_PREFLIGHT_SETTINGS, the preflight's own settings for this job, from ``settings``),
    submitted from ``folder`` on node1 and waited for; returns the job's id (stdout) and exit code
    (returncode; 124 when it ran past 400 s) and the job's output. Waited for, through its Epilogs
    (COMPLETING), by a loop on node1 that reads the job's state every 0.5 s: sbatch --wait polls at
    growing intervals up to 10 s, which cost each job here a few seconds after its end."""
    start = time.monotonic()
    given = f"NCCLPREP_PREFLIGHT_SETTINGS={shlex.quote(json.dumps(settings))} " if settings else ""
    job = on("node1", f"rm -rf {folder} && mkdir -p {folder} && cd {folder} && id=$(NCCLPREP_NEED={need} {given}"
                      f"sbatch --parsable --nodes {len(NODES)} {EXAMPLE}) && echo $id && end=$(($(date +%s) + 400)) && "
                      "while scontrol -o show job $id | grep -qE 'JobState=(PENDING|CONFIGURING|RUNNING|COMPLETING) '"
                      "; do [ $(date +%s) -lt $end ] || { scancel --full $id; exit 124; }; sleep 0.5; done && "
                      "scontrol -o show job $id | grep -oE ' (JobState|ExitCode)=[^ ]+' >&2", timeout=420)
    record(what, time.monotonic() - start)
    ended = dict(kv.split("=", 1) for kv in job.stderr.split() if kv.startswith(("JobState=", "ExitCode=")))
    status, _, signal = ended.get("ExitCode", "3:0").partition(":")  # the script's exit status : its signal
    code = job.returncode or int(status) or (128 + int(signal) if int(signal or 0) else 0)
    output = on("node1", f"cat {folder}/ncclprep-*.out").stdout
    return subprocess.CompletedProcess(job.args, code, job.stdout, job.stderr), output


@pytest.mark.usefixtures("slurm_left_idle")
def test_the_example_batch_job_runs_the_preflight_then_trains_on_the_vetted_nodes(cluster):
    """Issue 25 item 3: the example batch job's first step, ``srun ncclprep node preflight --need 2``,
    runs the probe, the collectives and the smoke job on the job's 3 nodes without Ansible and
    writes validate.yml's reports (PASS, every check of validate.yml's run; ssh.trust and drift.files
    too, the job being root's here, who reads the cluster key and site.yml's record of the managed
    files); then
    the training job runs through the launcher on the 2 vetted nodes it wrote to the hostfile."""
    assert STATE.get("provisioned"), "needs the provisioned cluster of the first test"
    folder = "/tmp/ncclprep-example"
    job, output = batch(folder, 2, "srun preflight + training (example batch job)")
    assert job.returncode == 0, job.stdout + job.stderr + output
    job_id = job.stdout.strip()
    assert f"0: ncclprep node preflight: preflight PASS on 3 nodes, report {folder}/ncclprep-reports/" in output
    assert "vetted 3 of 3 (need 2): node1,node2,node3; excluded: none" in output
    assert on("node1", f"cat {folder}/ncclprep-hosts.{job_id}").stdout.split() == ["node1", "node2"]
    assert "training on 2 vetted node(s): node1,node2" in output
    results = [json.loads(line.split("NCCLPREP_RESULT ", 1)[1]) for line in output.splitlines()
               if "NCCLPREP_RESULT " in line]
    assert sorted(r["host"] for r in results) == ["node1", "node2"], output
    assert all(r["world_size"] == 2 and r["params_identical"] for r in results)
    cluster_json = json.loads(on("node1", f"cat {folder}/ncclprep-reports/latest/cluster.json").stdout)
    assert cluster_json["status"] == "PASS" and cluster_json["hosts"] == NODES
    assert cluster_json["launch"] == {"launcher": "slurm", "run_id": job_id, "nodes": NODES}
    ran = {c["id"]: c["status"] for c in cluster_json["checks"]}
    assert ran["torchrun.smoke"] == "PASS" and ran["net.bandwidth"] == "PASS" and ran["host.reachable"] == "PASS"
    assert ran["collective.all_reduce"] == "PASS" and ran["drift.files"] == "PASS" and ran["ssh.trust"] == "PASS"
    by = {c["id"]: c for c in cluster_json["checks"]}
    assert by["drift.files"]["measured"] == 19 * len(NODES)  # every managed file, as validate.yml counts them
    assert on("node1", f"test -s {folder}/ncclprep-reports/latest/report.html && "
                       f"test -s {folder}/ncclprep-reports/latest/junit.xml").returncode == 0
    STATE["srun_checks"] = ran


def test_the_preflight_started_on_every_node_from_a_member_list_gives_the_srun_runs_checks(cluster):
    """Issue 42 item 1: the same engine without Slurm, as pdsh or a Kubernetes indexed Job starts it:
    ``ncclprep node preflight --members FILE`` on every node at once (podman exec here, as root), each
    node's rank its place in the list, one on the rank Kubernetes would give. node1 writes the
    reports with the srun run's checks and statuses, ssh.trust read as well, the launch recorded as
    ``members``; but for drift.files: a hand edit on node2 (NCCL_DEBUG=TRACE appended to
    /etc/nccl.conf) is named as validate.yml's fault suite names it, from site.yml's record of
    the files (issue 42 item 1); every node exits 0 but for that FAIL (exit 1)."""
    assert STATE.get("provisioned"), "needs the provisioned cluster of the first test"
    folder = "/tmp/ncclprep-members"
    members = "".join(f"{n}\n" for n in NODES)
    token = secrets.token_hex(16)  # the run's secret, the same on every node, as srun hands it on
    for node in NODES:
        made = on(node, f"rm -rf {folder} && mkdir -p {folder} && cat > {folder}/members", input=members)
        assert made.returncode == 0, made.stderr

    def start(node):
        rank = f"JOB_COMPLETION_INDEX={NODES.index(node)} " if node == "node3" else ""
        return node, on(node, f"cd {folder} && {rank}NCCLPREP_PREFLIGHT_TOKEN={token} "
                              f"NCCLPREP_RUN_ID=it-members timeout 300 ncclprep node preflight --members members "
                              f"--report-dir {folder}/reports", timeout=320)

    assert on("node2", "echo NCCL_DEBUG=TRACE >> /etc/nccl.conf").returncode == 0
    begin = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=len(NODES)) as pool:
            runs = dict(pool.map(start, NODES))
    finally:
        on("node2", "sed -i '/^NCCL_DEBUG=TRACE$/d' /etc/nccl.conf")
    record("node preflight --members, 3 nodes at once", time.monotonic() - begin)
    shown = "\n".join(f"{n}: {r.returncode}\n{r.stdout[-1500:]}{r.stderr[-1500:]}" for n, r in runs.items())
    assert {n: r.returncode for n, r in runs.items()} == {n: 1 for n in NODES}, shown
    assert f"preflight FAIL on 3 nodes, report {folder}/reports/" in runs["node1"].stdout, shown
    cluster_json = json.loads(on("node1", f"cat {folder}/reports/latest/cluster.json").stdout)
    assert cluster_json["launch"] == {"launcher": "members", "run_id": "it-members", "nodes": NODES}
    drift = next(c for c in cluster_json["checks"] if c["id"] == "drift.files")
    # tests/faults/test_faults.py's hand-edits fault, as validate.yml names it
    assert (drift["status"], drift["hosts"], drift["message"]) == (
        "FAIL", ["node2"], "node2: /etc/nccl.conf differs: +NCCL_DEBUG=TRACE (nccl_env)")
    ran = {c["id"]: c["status"] for c in cluster_json["checks"] if c["id"] != "drift.files"}
    assert ran["torchrun.smoke"] == "PASS" and ran["collective.all_reduce"] == "PASS" and ran["net.latency"] == "PASS"
    # started as root, it logs in to the others with the cluster key as validate.yml does (a job's
    # user who cannot read that key leaves it a SKIP: tests/unit/test_node_preflight.py)
    assert ran["ssh.trust"] == "PASS"
    if "srun_checks" in STATE:  # the srun run's checks, statuses alike (the same healthy nodes; its job is root's)
        assert ran == {k: v for k, v in STATE["srun_checks"].items() if k != "drift.files"}


def epilog_line(node: str, job_id: str, seconds: float = 120) -> str:
    """The line ``node``'s Epilog wrote for ``job_id`` (the wrapper's log), once written: sbatch --wait
    may return while the Epilogs still re-test."""
    deadline = time.monotonic() + seconds
    while True:
        lines = [line for line in on(node, "cat /var/log/ncclprep-epilog.log 2>/dev/null").stdout.splitlines()
                 if line.startswith(f"ncclprep epilog job {job_id}:") or line.startswith(f"ncclprep epilog {node}: "
                                                                                       f"job {job_id}:")]
        if lines or time.monotonic() > deadline:
            return lines[-1] if lines else ""
        time.sleep(2)


#: A job's own preflight settings (NCCLPREP_PREFLIGHT_SETTINGS): the collectives at two small sizes.
SMALL = {"probe": {"sizes": [4096, 65536]}}


@pytest.mark.usefixtures("slurm_left_idle")
def test_a_jobs_preflight_names_a_throttled_node_and_the_training_runs_on_the_others(cluster):
    """Issue 25 item 4: node3's link rate-limited (tc tbf 200 Mbit/s): the job's preflight names node3
    (net.bandwidth), excludes it and vets node1 and node2; with NCCLPREP_NEED=2 the training runs
    on those two and the job exits 0. Its claim makes the job's Epilogs re-test the network as root:
    node3 fails again, its first strike, not drained. Without enough vetted nodes (need 3) the job
    ends at the preflight with its exit code 1 and no training; its Epilogs' re-test is node3's
    second strike: drained with an ``ncclprep:`` reason naming net.bandwidth. A node check's pass
    leaves that drain; fixed, root's re-test by hand on the three nodes resumes it."""
    assert STATE.get("provisioned"), "needs the provisioned cluster of the first test"
    for node in NODES:
        on(node, "rm -f /var/lib/ncclprep/health-ledger.json /var/lib/ncclprep/retest-last "
                 "/var/log/ncclprep-epilog.log")
    assert on("node3", "tc qdisc add dev eth0 root tbf rate 200mbit burst 64kb latency 100ms").returncode == 0
    try:
        # the collectives at the small sizes only (the job's own settings): through node3's 200 Mbit/s
        # their 16 MiB took some 25 s of each job, and the verdict here is net.bandwidth's
        job, output = batch("/tmp/ncclprep-throttled", 2, "srun preflight + training, node3 throttled", SMALL)
        assert job.returncode == 0, job.stdout + job.stderr + output
        assert "0: ncclprep node preflight: FAIL net.bandwidth [node3]: " in output, output
        assert "vetted 2 of 3 (need 2): node1,node2; excluded: node3" in output
        assert "training on 2 vetted node(s): node1,node2" in output
        assert output.count('"params_identical": true') == 2, output
        first = job.stdout.strip()
        start = time.monotonic()
        line = epilog_line("node3", first)
        record("Epilog line, waited for after sbatch returned", time.monotonic() - start)
        assert line.startswith(f"ncclprep epilog job {first}: job {first} claims net.bandwidth; node3: re-test FAIL: "
                               f"node3: network strike 1 of 2 within 24 h (run:retest job-{first} "), line
        assert "re-test PASS: node1: passes" in epilog_line("node1", first)
        assert slurm_state("node3") == ("idle", "none")
        short, output = batch("/tmp/ncclprep-throttled-all", 3, "srun preflight, node3 throttled, need 3", SMALL)
        assert short.returncode != 0
        assert "vetted 2 of 3 (need 3): node1,node2; excluded: node3" in output
        assert "training on" not in output
        second = short.stdout.strip()
        line = epilog_line("node3", second)
        assert "node3: re-test FAIL: node3: drained: ncclprep: net.bandwidth: measured " in line, line
        state, reason = slurm_state("node3")
        assert state in ("drained", "draining"), (state, reason)
        assert reason.startswith("ncclprep: net.bandwidth: measured "), reason
        history = on("node3", "ncclprep report --history").stdout
        assert history.count(" network FAIL    yes ") == 2, history
        assert "network strikes now 2" in history, history
        # a node check's pass says nothing of the network: the drain stays
        assert on("node3", "ncclprep node check >/dev/null", timeout=120).returncode == 0
        kept = health("node3")
        assert "which only root's network re-test resumes: left drained" in kept.stdout, kept.stdout
        assert slurm_state("node3")[0] == "drained"
    finally:
        on("node3", "tc qdisc del dev eth0 root")
    # fixed: root re-tests by hand on the three nodes at once, and node3 is resumed
    start = time.monotonic()
    with ThreadPoolExecutor(len(NODES)) as pool:
        runs = dict(zip(NODES, pool.map(lambda n: on(n, "ncclprep node retest --id fixed-1 --nodes "
                                                       + ",".join(NODES), timeout=200), NODES), strict=True))
    record("ncclprep node retest by hand, 3 nodes", time.monotonic() - start)
    assert all(r.returncode == 0 for r in runs.values()), {n: r.stdout + r.stderr for n, r in runs.items()}
    assert runs["node3"].stdout.startswith("ncclprep retest node3: re-test PASS: node3: passes now; resumed from "
                                           "'ncclprep: net.bandwidth"), runs["node3"].stdout
    assert settled("node3", ("idle", "none")) == ("idle", "none")
    assert all_idle() == {n: "idle" for n in NODES}


@pytest.mark.usefixtures("slurm_left_idle")
def test_without_its_intent_a_node_is_unknown_drains_nothing_and_a_jobs_preflight_says_so(cluster):
    """Issue 25 item 4: node2's intent file gone. Its node check cannot run (exit 3), so the
    HealthCheckProgram slurm.conf runs (the slurm_health wrapper) finds no fresh verdict: UNKNOWN,
    exit 3 (slurmd logs it), nothing drained; a job's preflight on node2 exits 3 naming the file and
    the fix, and the job's other nodes report node2 missing instead of hanging."""
    assert STATE.get("provisioned"), "needs the provisioned cluster of the first test"
    assert "HealthCheckProgram=/usr/local/sbin/ncclprep-health" in on("node1", "cat /etc/slurm/slurm.conf").stdout
    assert on("node2", "mv /etc/ncclprep/intent.json /etc/ncclprep/intent.json.off").returncode == 0
    try:
        assert on("node2", "ncclprep node check >/dev/null", timeout=120).returncode == 3
        start = time.monotonic()
        unknown = on("node2", "/usr/local/sbin/ncclprep-health --no-refresh --record /nonexistent", timeout=60)
        record("node health wrapper (HealthCheckProgram)", time.monotonic() - start)
        assert unknown.returncode == 3 and "UNKNOWN" in unknown.stdout, unknown.stdout
        assert slurm_nodes() == {n: "idle" for n in NODES}
        # the others wait for node2 the join deadline, here 10 s (--settings; the default is 30 s)
        start = time.monotonic()
        job = on("node1", "cd /tmp && timeout 300 srun --nodes 3 --ntasks-per-node=1 --label "
                          "ncclprep node preflight --report-dir /tmp/ncclprep-no-intent "
                          "--settings '{\"probe\": {\"join_timeout\": 10}}'", timeout=320)
        record("srun preflight, node2 without its intent (join 10 s)", time.monotonic() - start)
        assert job.returncode != 0
        assert "1: ncclprep node preflight: node2: /etc/ncclprep/intent.json does not exist: run site.yml" in job.stderr
        assert "0: ncclprep node preflight: preflight FAIL on 3 nodes" in job.stdout, job.stdout + job.stderr
        assert "FAIL host.reachable [node2]" in job.stderr, job.stderr
    finally:
        on("node2", "mv /etc/ncclprep/intent.json.off /etc/ncclprep/intent.json")
    assert all_idle() == {n: "idle" for n in NODES}


def test_the_preflight_and_probe_benchmarks_run_on_the_cluster():
    """A short run of bench/preflight.py and bench/fidelity.py (issue 13) on the provisioned cluster."""
    assert STATE.get("provisioned"), "needs the provisioned cluster of the test before"
    bench = run([os.path.join(BIN, "python"), "bench/preflight.py", "--no-cluster", "--sizes", str(len(NODES)),
                 "--runs", "1"], timeout=600)
    assert bench.returncode == 0, bench.stderr
    header, row = [line.split() for line in bench.stdout.splitlines() if re.match(r"^(nodes| +\d+ )", line)][-2:]
    cells = dict(zip(header[:2] + header[3:11], [row[0], row[1]] + row[2:10], strict=True))
    assert cells["nodes"] == str(len(NODES))
    stages = {k: float(v) for k, v in cells.items() if k not in ("nodes", "wall")}
    # every stage of validate.yml on the engine ran (the input checks, the engine, the reports), and
    # they add up to the wall time
    assert all(stages[s] > 0 for s in ("facts", "engine", "report"))
    assert sum(stages.values()) == pytest.approx(float(cells["wall"]), abs=0.6)
    fid = run([os.path.join(BIN, "python"), "bench/fidelity.py", "--runs", "1", "--variants", "preflight",
               "--tcp-seconds", "0.5"], timeout=600)
    assert fid.returncode == 0, fid.stderr
    m = re.search(r"^preflight +([\d.]+) +([\d.]+) +([\d.]+)$", fid.stdout, re.M)
    busbw, tcp, ratio = (float(x) for x in m.groups())
    assert busbw > 0 and tcp > 0 and ratio == pytest.approx(busbw / tcp, abs=0.02)


def browser() -> str:
    path = shutil.which("chromium-headless-shell") or shutil.which("chromium")
    assert path, "no chromium-headless-shell: scripts/bootstrap.sh --test installs it"
    return path


def test_ncclprep_validate_gives_the_same_report_and_every_format_reads_back(cluster, tmp_path_factory):
    """`ncclprep validate` (ansible-runner) on the healthy cluster: exit 0, a progress line instead of
    Ansible's output, the same checks and statuses as the ansible-playbook run; its JUnit file read
    back by a JUnit parser, its metrics by Prometheus' parser, its HTML page opened in headless
    Chromium (screenshot and DOM)."""
    from html.parser import HTMLParser

    from junitparser import JUnitXml, TestSuite
    from PIL import Image
    from prometheus_client.parser import text_string_to_metric_families

    assert STATE.get("healthy"), "runs after test_site_is_idempotent_and_validate_passes"
    reports = str(tmp_path_factory.mktemp("reports"))
    val = playbook("validate", reports, extra=("-e", f"preflight_dataset_path={DATASET}"), cli=True)
    assert val.returncode == 0
    assert "ncclprep validate: PASS" in val.stdout and "checks on 3 hosts" in val.stdout
    assert "TASK [" not in val.stdout + val.stderr  # a progress line, not Ansible's output
    assert re.search(r"^\[\d\d:\d\d\] validate \| Start the preflight engine on every node \|", val.stderr, re.M)
    mine, theirs = load(reports), load(STATE["healthy"])
    assert mine["status"] == "PASS" and mine["hosts"] == theirs["hosts"] == NODES
    assert mine["schema_version"] == theirs["schema_version"]
    assert {c["id"]: c["status"] for c in mine["checks"]} == {c["id"]: c["status"] for c in theirs["checks"]}
    run_dir = os.path.realpath(os.path.join(reports, "latest"))
    assert f"report: {run_dir}/summary.md" in val.stdout

    # JUnit: one testcase per check and host, none failed (SKIP checks are skipped testcases)
    xml = JUnitXml.fromfile(os.path.join(run_dir, "junit.xml"))
    suites = [xml] if isinstance(xml, TestSuite) else list(xml)
    cases = [case for suite in suites for case in suite]
    assert len(cases) == len(mine["checks"]) * len(NODES)
    assert {(case.classname, case.name) for case in cases} == {(c["id"], h) for c in mine["checks"] for h in NODES}
    skipped = {c["id"] for c in mine["checks"] if c["status"] == "SKIP"}
    for case in cases:
        kinds = {type(r).__name__ for r in case.result}
        assert kinds == ({"Skipped"} if case.classname in skipped else set()), (case.classname, case.name, kinds)

    # node_exporter textfile: check status gauges and the busbw of the largest all_reduce
    families = {f.name: f for f in text_string_to_metric_families(open(os.path.join(run_dir, "metrics.prom")).read())}
    ok = [s for s in families["ncclprep_check_status"].samples if s.labels.get("status") == "PASS" and s.value == 1]
    assert {(s.labels["check"], s.labels["host"]) for s in ok} >= {("collective.all_reduce", h) for h in NODES}
    largest = mine["collectives"]["all_reduce"][-1]
    samples = families["ncclprep_collective_busbw_bytes_per_second"].samples
    busbw = {int(s.labels["size_bytes"]): s.value for s in samples if s.labels["op"] == "all_reduce"}
    assert busbw[largest["size_bytes"]] == pytest.approx(largest["busbw_gbps"] * 1e9, rel=1e-3)

    # the HTML page in headless Chromium: a screenshot that is not blank, and the DOM it rendered
    html = "file://" + os.path.join(run_dir, "report.html")
    png = str(tmp_path_factory.mktemp("shot") / "report.png")
    shot = subprocess.run([browser(), "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--screenshot={png}",
                           "--window-size=1280,1600", html], capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0, shot.stderr[-2000:]
    image = Image.open(png).convert("RGB")
    assert image.size == (1280, 1600)
    assert len(image.getcolors(1 << 24)) > 50  # text, heat-map cells and plot lines, not a blank page
    dom = subprocess.run([browser(), "--no-sandbox", "--disable-gpu", "--dump-dom", html], capture_output=True,
                         text=True, timeout=120).stdout

    class Page(HTMLParser):
        """Ids, the text under each id'd element, the classes seen and the polylines' point counts."""

        def __init__(self):
            super().__init__()
            self.stack, self.text, self.classes, self.polylines = [], {}, [], {}

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            self.classes += (a.get("class") or "").split()
            ids = [i for i in self.stack if i]
            if tag == "polyline" and ids:
                self.polylines.setdefault(ids[-1], []).append(len((a.get("points") or "").split()))
            if tag not in ("br", "img", "meta", "link", "input", "polyline", "circle", "line", "rect", "path"):
                self.stack.append(a.get("id"))

        def handle_endtag(self, tag):
            if tag not in ("br", "img", "meta", "link", "input", "polyline", "circle", "line", "rect", "path") \
                    and self.stack:
                self.stack.pop()

        def handle_data(self, data):
            for i in self.stack:
                if i:
                    self.text[i] = self.text.get(i, "") + data

    page = Page()
    page.feed(dom)
    assert "http://" not in dom.replace("http://www.w3.org", "") and "https://" not in dom  # nothing fetched
    for key in ("checks", "matrix-latency_p50_us", "plot-all_reduce", "versions"):
        assert key in page.text, key
    for c in mine["checks"]:
        assert c["id"] in page.text["checks"]
    assert page.classes.count("status-PASS") >= len(NODES) and "status-FAIL" not in page.classes
    for host in NODES:
        assert host in page.text["matrix-latency_p50_us"]
    p50 = mine["network"]["latency_p50_us"]
    assert f"{p50['node1']['node2']:.0f}" in page.text["matrix-latency_p50_us"]
    assert max(page.polylines["plot-all_reduce"]) == len(mine["collectives"]["all_reduce"])

    # the same report from the CLI: JUnit as written, and no change against the healthy run
    junit = run([os.path.join(BIN, "ncclprep"), "report", run_dir, "--format", "junit"], timeout=60)
    assert junit.returncode == 0 and junit.stdout == open(os.path.join(run_dir, "junit.xml")).read()
    diff = run([os.path.join(BIN, "ncclprep"), "report", run_dir, "--compare", os.path.join(STATE["healthy"],
                                                                                            "latest")], timeout=60)
    assert diff.returncode == 0, diff.stdout


def test_validate_under_limit_in_check_mode_still_measures_and_reports(cluster, tmp_path_factory):
    """--limit and --check in one run (each was a run of its own: one saves a validate run): the
    two hosts are read, measured and reported, the collectives run at world size 2 (check mode
    does not stop a read-only preflight), the torchrun job, which needs every node, is SKIP."""
    limited = str(tmp_path_factory.mktemp("reports"))
    val = run([os.path.join(BIN, "ansible-playbook"), "validate.yml", "-i", "inventory/local", "-l", "node1,node2",
               "--check", "-e", f"preflight_report_dir={limited}"], timeout=600)
    assert val.returncode == 0, val.stdout[-2000:]
    data = load(limited)
    statuses = {c["id"]: c["status"] for c in data["checks"]}
    assert data["hosts"] == ["node1", "node2"]
    assert statuses["torchrun.smoke"] == "SKIP"
    ar = next(c for c in data["checks"] if c["id"] == "collective.all_reduce")
    assert ar["status"] == "PASS" and ar["measured"]["world_size"] == 2 and ar["measured"]["busbw_gbps"] > 0
    assert statuses["net.bandwidth"] == "PASS"
    assert {(a, b) for a, row in data["network"]["bandwidth_gbps"].items() for b in row} == {
        ("node1", "node2"), ("node2", "node1")}


BAD_INPUT = [
    ('{"sysctl_tuning_overrides": {"net.ipv4.tcp_congestion_control": "brr"}}',
     "node1: net.ipv4.tcp_congestion_control='brr': congestion control 'brr' is not offered"),
    ("data_plane_cidr=10.99.0.0/24", "node2: no interface has an address in data_plane_cidr='10.99.0.0/24'"),
    ("nic_mtu_value=70000",
     "node1: nic_mtu_value=70000 on the data-plane interface eth0: outside the range the interface accepts, "
     "68..65535"),
    ('{"nccl_env_overrides": {"NCCL_SOCKET_IFNAM": "=eth0"}}',
     "node3: NCCL_SOCKET_IFNAM==eth0: unknown NCCL variable; did you mean NCCL_SOCKET_IFNAME?"),
    ("data_plane_interface=eth9", "node2: data_plane_interface='eth9' does not exist"),
    ('{"firewall_admin_cidrs": ["0.0.0.0/0"]}',
     "node1: firewall_admin_cidrs opens SSH from the admin network to the whole Internet (0.0.0.0/0)"),
    ("roce_qos_pfc_priority=9", "value of roce_qos_pfc_priority must be one of: 0, 1, 2, 3, 4, 5, 6, 7, got: 9"),
    # found by a break-it round: these three used to pass the checking play
    ("nic_mtu_persist=ifupdown", "node1: nic_mtu_persist=ifupdown but ifupdown does not define eth0"),
    ('{"roce_qos_interfaces": ["eth0"]}', "interfaces: 'eth0' named, but this host has no RoCE port"),
    ("firewall_cluster_cidr=10.77.29.128/25",
     "node1: firewall_cluster_cidr=10.77.29.128/25 does not hold the data-plane address of node1 (10.77.29.11)"),
    # issue 11: wrong types, unknown names, malformed or out-of-range values. One value per gate:
    # the rules behind a gate (every NCCL variable's type, a sysctl's form) are unit-tested on
    # their module (tests/unit/test_nccl_vars.py, test_sysctl.py); each run here costs ~7 s
    ("nic_mtu_value=abc", "argument 'nic_mtu_value' is of type str and we were unable to convert to int"),
    ('{"sysctl_tuning_overrides": {"net.core.no_such_knob": 1}}',
     "node1: net.core.no_such_knob=1: no such sysctl on this kernel"),
    ("data_plane_cidr=10.77.29.0/33", "node3: data_plane_cidr='10.77.29.0/33' is invalid: not a CIDR"),
    ('{"firewall_rendezvous_ports": [29400, 70000]}',
     "node1: firewall_rendezvous_sources port=70000 is not a TCP/UDP port (valid: 1..65535)"),
    ("nccl_env_rendezvous_host=10.99.0.1",
     "node2: nccl_env_rendezvous_host=10.99.0.1, nccl_env_rendezvous_port=29400, nccl_env_nproc_per_node=: the "
     "rendezvous host must be a member of the cluster (one of node1, node2, node3; null: the first)"),
    ("torch_runtime_version=latest", "node3: torch_runtime_version=latest must be a version like 2.13.0"),
    # issue 23 (review F2): a value a shell would run, a name outside NCCL's, Gloo's, torch's
    ('{"nccl_env_overrides": {"NCCL_IB_HCA": "mlx5_0;touch /tmp/pwned"}}',
     "node1: NCCL_IB_HCA='mlx5_0;touch /tmp/pwned': ' ' ';' not allowed in a launch value"),
    ('{"nccl_env_overrides": {"LD_PRELOAD": "/tmp/x.so"}}',
     "node2: LD_PRELOAD=/tmp/x.so: not a variable of NCCL, Gloo, PyTorch, OpenMP, CUDA or UCX"),
    ("nccl_env_rendezvous_port_span=0",
     "node1: nccl_env_rendezvous_port_span=0 with nccl_env_rendezvous_port=29400: the span must be >= 1"),
    # values the kernel refuses or keeps otherwise, tried in a throw-away network namespace
    ('{"sysctl_tuning_overrides": {"net.core.somaxconn": -1, "net.ipv4.tcp_rmem": "4096 87380"}}',
     "node2: net.core.somaxconn=-1: the kernel refuses it"),
    # issue 42: the preflight's settings, recorded in every node's intent, are checked before any change
    ("preflight_probe_blame_timeout=5",
     "node1: preflight_probe_blame_timeout=5: valid: an integer >= 10 (seconds of one blame round"),
    # the controller (10.77.29.1) outside both the cluster rule and the admin networks
    ('{"firewall_cluster_cidr": "10.77.29.8/29", "firewall_admin_cidrs": ["192.0.2.0/24"]}',
     "node1: the rules would lock the controller out: its SSH connection from 10.77.29.1 to 10.77.29.11:22"),
]
# site.yml runs at once for the bad-input cases: they change nothing (each asserts it)
BAD_INPUT_WORKERS = 4


@pytest.fixture(scope="module")
def bad_input_runs(cluster):
    """site.yml with each bad input, a few at a time: {extra: CompletedProcess}."""
    def site(extra):  # through the CLI, with Ansible's output shown (-v)
        return extra, run([os.path.join(BIN, "ncclprep"), "provision", "-i", "inventory/local", "-v", "-e", extra],
                          timeout=600)

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=BAD_INPUT_WORKERS) as pool:
        runs = dict(pool.map(site, [extra for extra, _ in BAD_INPUT]))
    record(f"site.yml with the {len(BAD_INPUT)} bad inputs, {BAD_INPUT_WORKERS} at once", time.monotonic() - start)
    return runs


@pytest.mark.parametrize("extra,message", BAD_INPUT)
def test_bad_input_fails_before_any_change(bad_input_runs, extra, message):
    bad = bad_input_runs[extra]
    assert bad.returncode == 2  # ncclprep: bad input, refused before any change
    assert message in bad.stdout
    # the CLI names host, task and the input check's own message
    assert re.search(rf"^ncclprep: provision: node\d failed at '.+?': .*{re.escape(message[:40])}", bad.stderr, re.M)
    # refused by the checking play: the provisioning play never started
    assert "PLAY [Provision the nodes]" not in bad.stdout
    counters = recap(bad.stdout)
    assert {h: counters[h]["changed"] for h in NODES} == {h: 0 for h in NODES}


@pytest.mark.parametrize("args,message", [
    pytest.param(["-l", "nosuchhost"], "leaves us with no hosts to target", id="empty-host-list"),
    pytest.param(["-i", "{twice}"], "node2, node4 share the data-plane address 10.77.29.12: one machine listed "
                                    "twice in the inventory", id="same-host-twice"),
])
def test_an_inventory_without_hosts_or_with_one_machine_twice_is_refused(cluster, tmp_path, args, message):
    """No host left by --limit; node2's machine listed a second time as node4 (a copy of the
    local inventory): both refused (exit 2) before any change."""
    with open(os.path.join(REPO, "inventory", "local", "hosts.yml"), encoding="utf-8") as fh:
        inventory = yaml.safe_load(fh)
    inventory["all"]["children"]["ncclprep_nodes"]["hosts"]["node4"] = {"ansible_host": "10.77.29.12"}
    twice = tmp_path / "twice.yml"
    twice.write_text(yaml.safe_dump(inventory))
    chosen = [a.format(twice=twice) for a in args]
    bad = run([os.path.join(BIN, "ncclprep"), "provision", "-v",
               *(chosen if "-i" in chosen else ["-i", "inventory/local", *chosen])], timeout=600)
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert message in bad.stdout + bad.stderr
    assert "PLAY [Provision the nodes]" not in bad.stdout
    counters = recap(bad.stdout)
    assert all(c["changed"] == 0 for c in counters.values())


def test_mtu_that_cuts_nodes_off_is_rolled_back(cluster):
    """The cluster network carries 9000 bytes: 9600 cannot pass, so every node must go back to 4096."""
    res = run([os.path.join(BIN, "ansible-playbook"), "site.yml", "-i", "inventory/local", "--tags", "nic_mtu",
               "-e", "nic_mtu_value=9600"], timeout=600)
    assert res.returncode != 0
    assert "nic_mtu_value=9600 cut off data-plane paths" in res.stdout
    assert "node1 -> node2" in res.stdout and "Every node was rolled back" in res.stdout
    for n in NODES:
        mtu = run(["podman", "exec", f"ncclprep-{n}", "cat",
                   "/sys/class/net/eth0/mtu"], timeout=60)
        assert mtu.stdout.strip() == "4096", n



# -- ncclprep tune (issue 26) ----------------------------------------------------------------------
#: A two-value MTU space, the collective only (the training job's step time is the unit tests' and the
#: benchmark's: 15 s more a run here), two sizes.
TUNE_SPACE = json.dumps({"tune_space": [{"name": "mtu", "values": [{"nic_mtu_value": 1500}, {"nic_mtu_value": 4096}]}],
                         "tune_training": False, "tune_sizes": [1048576, 16777216]})
TUNED = os.path.join(REPO, "inventory", "local", "group_vars", "all", "ncclprep_tuned.yml")


def node_mtus() -> dict[str, str]:
    return {n: on(n, "cat /sys/class/net/eth0/mtu").stdout.strip() for n in NODES}


def tune_record(stdout: str) -> dict:
    path = re.search(r"^ncclprep tune: the run's record: (\S+)$", stdout, re.M).group(1)
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def test_tune_decides_mtu_1500_against_4096_on_its_numbers_and_validate_passes_after(cluster, tmp_path_factory):
    """`ncclprep tune` over MTU 1500 and 4096 (the inventory's): the variants alternate, five runs each; the
    decision printed is the one the runs' medians give; the cluster ends with the inventory's MTU (or the
    winner, written to group_vars/all/ncclprep_tuned.yml) and validate.yml, run by tune, passes with the
    Tuning section in its report."""
    from ansible.module_utils.ncclprep.tune.decide import decide

    assert STATE.get("provisioned"), "runs after test_site_is_idempotent_and_validate_passes"
    reports = str(tmp_path_factory.mktemp("reports"))
    try:
        # the closing validate.yml without its training job, which this space did not measure (15 s)
        res = run([os.path.join(BIN, "ncclprep"), "tune", "-i", "inventory/local", "-e", TUNE_SPACE,
                   "-e", f"preflight_report_dir={reports}", "-e", f"preflight_dataset_path={DATASET}",
                   "-e", "preflight_smoke_enabled=false"], timeout=900)
        assert res.returncode == 0, res.stderr[-3000:]
        rec = tune_record(res.stdout)
        assert [v["name"] for v in rec["variants"]] == ["baseline", "mtu-0"]
        assert [r["variant"] for r in rec["runs"]] == ["baseline", "mtu-0", "mtu-0", "baseline"] * 2 + ["baseline",
                                                                                                      "mtu-0"]
        assert re.search(r"^ncclprep tune: run 10/10 \(round 5/5\): mtu: nic_mtu_value=1500, about [\d.]+ min left$",
                         res.stdout, re.M)
        # the decision is the rule's on the recorded runs, and says so with its figures
        series = {n: {s: [r["busbw"][str(s)] for r in rec["runs"] if r["variant"] == n] for s in (1048572, 16777212)}
                  for n in ("baseline", "mtu-0")}
        want = decide(series["baseline"], series["mtu-0"])
        got = rec["result"]["decisions"]["mtu-0"]
        assert got["verdict"] == want["verdict"] and got["keep"] == want["keep"]
        assert f"  mtu: nic_mtu_value=1500: {want['verdict'].upper() if want['keep'] else want['verdict']}: " \
               f"all_reduce busbw at 16777212 bytes {want['sizes'][16777212]['base_median']:.4g} -> " \
               f"{want['sizes'][16777212]['variant_median']:.4g} GB/s" in res.stdout
        assert node_mtus() == {n: "1500" if want["keep"] else "4096" for n in NODES}
        assert os.path.exists(TUNED) == want["keep"]
        # validate.yml after it: PASS, the Tuning section in every report
        assert rec["verify"]["status"] == "PASS" and rec["verify"]["report_dir"].startswith(reports)
        data = load(reports)
        assert data["status"] == "PASS" and data["tuning"]["variants"][1]["verdict"] == want["verdict"]
        with open(os.path.join(rec["verify"]["report_dir"], "summary.md"), encoding="utf-8") as fh:
            assert "## Tuning: " in fh.read()
    finally:
        if os.path.exists(TUNED):  # a win here would leave MTU 1500 for the tests after this one
            os.remove(TUNED)
            run([os.path.join(BIN, "ansible-playbook"), "site.yml", "-i", "inventory/local"], timeout=900)


def test_an_interrupted_tune_restores_the_inventorys_settings(cluster):
    """Ctrl-C (SIGINT to the command's process group, as a terminal sends it) in run 2, once it has put
    the nodes at MTU 1500: exit 3, "interrupted", the nodes back at 4096, nothing written."""
    import signal

    cmd = [os.path.join(BIN, "ncclprep"), "tune", "-i", "inventory/local", "-e", TUNE_SPACE]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    out = []
    for line in proc.stdout:
        out.append(line)
        if line.startswith("ncclprep tune: run 2/10"):  # run 2 applies MTU 1500, then measures it
            deadline = time.monotonic() + 120
            while node_mtus() != {n: "1500" for n in NODES}:
                assert time.monotonic() < deadline, "run 2 did not put the nodes at MTU 1500"
                time.sleep(1)
            os.killpg(proc.pid, signal.SIGINT)
            break
    rest, err = proc.communicate(timeout=600)
    stdout = "".join(out) + rest
    shown = f"$ {' '.join(cmd)} -> {proc.returncode}\n{stdout[-3000:]}\n{err[-2000:]}\n"
    assert proc.returncode == 3, shown
    assert "ncclprep tune: interrupted" in err, shown
    assert "nothing was kept; the inventory's settings are back in force" in stdout, shown
    rec = tune_record(stdout)
    assert rec["status"] == "interrupted" and rec["restored"]["ok"] and len(rec["runs"]) == 1
    assert node_mtus() == {n: "4096" for n in NODES}
    assert not os.path.exists(TUNED)
