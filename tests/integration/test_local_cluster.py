"""End to end on a 3-node local podman cluster: site.yml, idempotence, validate.yml
all PASS, bad input refused before any change, an MTU that cuts nodes off rolled
back, then faults that validate.yml must catch and name.

Slow (minutes): brings the cluster up itself (scripts/local_cluster.sh), tears it
down afterwards unless NCCLPREP_KEEP_CLUSTER=1. Skipped where podman is missing.
Every test shares the one provisioned cluster; the bad-input runs (read-only, each
asserted to change nothing) run a few at a time. Each command's duration is
recorded (tests/conftest.py, NCCLPREP_TIMINGS).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import ncclprep
from ncclprep.runner import playbook_env

REPO = ncclprep.REPO_ROOT
BIN = os.path.dirname(sys.executable)
NODES = ["node1", "node2", "node3"]
# A training dataset of two shards on every node (check dataset.path).
DATASET = "/srv/ncclprep-dataset"
DATASET_MAKE = (f"mkdir -p {DATASET} && head -c 4096 /dev/zero > {DATASET}/shard-0 && "
                f"cp {DATASET}/shard-0 {DATASET}/shard-1")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman not installed"),
]


def env() -> dict:
    """The CLI's playbook environment (repository ansible.cfg, this venv first, podman settings), no colour."""
    return dict(os.environ, ANSIBLE_FORCE_COLOR="0", **playbook_env())


def record(name: str, seconds: float) -> None:
    """Append one command's duration to $NCCLPREP_TIMINGS (scripts/test.sh prints them)."""
    path = os.environ.get("NCCLPREP_TIMINGS")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"integration\t{name}\t{seconds:.1f}\n")


def run(cmd: list[str], timeout: int, input: str | None = None) -> subprocess.CompletedProcess:
    start = time.monotonic()
    out = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=timeout, input=input)
    sys.stdout.write(f"$ {' '.join(cmd)} -> {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-2000:]}\n")
    if cmd[0].endswith(("ansible-playbook", "local_cluster.sh", "ncclprep")):
        record(" ".join(os.path.basename(c) if os.path.isabs(c) else c for c in cmd)[:58], time.monotonic() - start)
    return out


def playbook(name: str, report_dir: str | None = None, timeout: int = 900,
             extra: tuple[str, ...] = (), cli: bool = False) -> subprocess.CompletedProcess:
    """ansible-playbook NAME.yml, or with ``cli`` the same run through ``ncclprep provision|validate``."""
    cmd = ([os.path.join(BIN, "ncclprep"), {"site": "provision"}.get(name, name), "-i", "inventory/local"] if cli
           else [os.path.join(BIN, "ansible-playbook"), f"{name}.yml", "-i", "inventory/local"])
    if report_dir:
        cmd += ["-e", f"preflight_report_dir={report_dir}"]
    return run(cmd + list(extra), timeout)


def recap(stdout: str) -> dict:
    """PLAY RECAP counters per host: {host: {"ok": n, "changed": n, ...}}."""
    out = {}
    for host, counters in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", stdout, re.M):
        out[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counters)}
    return out


@pytest.fixture(scope="module")
def cluster():
    up = run([os.path.join(REPO, "scripts", "local_cluster.sh"), "up", "3"], timeout=1200)
    assert up.returncode == 0, "local cluster bring-up failed"
    yield NODES
    if os.environ.get("NCCLPREP_KEEP_CLUSTER") != "1":
        run([os.path.join(REPO, "scripts", "local_cluster.sh"), "down"], timeout=300)


#: The healthy run's report folder (test_site_is_idempotent_and_validate_passes), for the tests after it.
HEALTHY: dict[str, str] = {}


def load(report_dir: str) -> dict:
    with open(os.path.join(report_dir, "latest", "cluster.json"), encoding="utf-8") as fh:
        return json.load(fh)


def test_site_is_idempotent_and_validate_passes(cluster, tmp_path_factory):
    first = playbook("site")
    assert first.returncode == 0
    second = playbook("site")
    assert second.returncode == 0
    counters = recap(second.stdout)
    assert set(NODES) <= set(counters)
    assert {h: counters[h]["changed"] for h in NODES} == {h: 0 for h in NODES}

    for node in NODES:  # a training dataset on every node (check dataset.path)
        assert run(["podman", "exec", f"ncclprep-{node}", "sh", "-c", DATASET_MAKE], timeout=60).returncode == 0
    reports = str(tmp_path_factory.mktemp("reports"))
    val = playbook("validate", reports, extra=("-e", f"preflight_dataset_path={DATASET}"))
    assert val.returncode == 0
    data = load(reports)
    assert data["status"] == "PASS" and data["hosts"] == NODES
    HEALTHY["reports"] = reports
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
    # every file site.yml wrote on each node, as it wrote them: nccl_env's three, the sysctl drop-in,
    # ssh_trust's ssh config and known_hosts lines, the hosts block, rps_rfs's script and unit,
    # numa_pinning's map, JSON map and wrapper (no IRQ script or unit: a veth has no IRQs; no
    # roce_qos files: no RoCE port; no nic_mtu file: nothing defines eth0 at boot; no nftables
    # table: ufw)
    assert by["drift.files"]["measured"] == 12 * len(NODES)
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

    assert HEALTHY, "runs after test_site_is_idempotent_and_validate_passes"
    reports = str(tmp_path_factory.mktemp("reports"))
    val = playbook("validate", reports, extra=("-e", f"preflight_dataset_path={DATASET}"), cli=True)
    assert val.returncode == 0
    assert "ncclprep validate: PASS" in val.stdout and "checks on 3 hosts" in val.stdout
    assert "TASK [" not in val.stdout + val.stderr  # a progress line, not Ansible's output
    assert re.search(r"^\[\d\d:\d\d\] validate \| Start the collectives on every node \|", val.stderr, re.M)
    mine, theirs = load(reports), load(HEALTHY["reports"])
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
    diff = run([os.path.join(BIN, "ncclprep"), "report", run_dir, "--compare", os.path.join(HEALTHY["reports"],
                                                                                            "latest")], timeout=60)
    assert diff.returncode == 0, diff.stdout


def test_validate_under_limit_and_check_mode_still_measures_and_reports(cluster, tmp_path_factory):
    limited = str(tmp_path_factory.mktemp("reports"))
    val = run([os.path.join(BIN, "ansible-playbook"), "validate.yml", "-i", "inventory/local", "-l", "node1,node2",
               "-e", f"preflight_report_dir={limited}"], timeout=600)
    assert val.returncode == 0
    data = load(limited)
    statuses = {c["id"]: c["status"] for c in data["checks"]}
    assert data["hosts"] == ["node1", "node2"]
    assert statuses["collective.all_reduce"] == "PASS" and statuses["torchrun.smoke"] == "SKIP"
    checked = str(tmp_path_factory.mktemp("reports"))
    val = run([os.path.join(BIN, "ansible-playbook"), "validate.yml", "-i", "inventory/local", "--check",
               "-e", f"preflight_report_dir={checked}"], timeout=600)
    assert val.returncode == 0
    ar = next(c for c in load(checked)["checks"] if c["id"] == "collective.all_reduce")
    assert ar["status"] == "PASS" and ar["measured"]["world_size"] == 3 and ar["measured"]["busbw_gbps"] > 0


BAD_INPUT = [
    ('{"sysctl_tuning_overrides": {"net.ipv4.tcp_congestion_control": "brr"}}',
     "node1: net.ipv4.tcp_congestion_control='brr': congestion control 'brr' is not offered"),
    ("data_plane_cidr=10.99.0.0/24", "node2: no interface has an address in data_plane_cidr='10.99.0.0/24'"),
    ("nic_mtu_value=70000",
     "node1: nic_mtu_value=70000 on nic_mtu_interface=eth0: outside the range the interface accepts, 68..65535"),
    ('{"nccl_env_overrides": {"NCCL_SOCKET_IFNAM": "=eth0"}}',
     "node3: NCCL_SOCKET_IFNAM==eth0: unknown NCCL variable; did you mean NCCL_SOCKET_IFNAME?"),
    ("nic_mtu_interface=eth9", "node2: nic_mtu_value=4096 on nic_mtu_interface=eth9: the interface does not exist"),
    ('{"firewall_admin_cidrs": ["0.0.0.0/0"]}',
     "node1: firewall_admin_cidrs opens SSH from the admin network to the whole Internet (0.0.0.0/0)"),
    ("roce_qos_pfc_priority=9", "value of roce_qos_pfc_priority must be one of: 0, 1, 2, 3, 4, 5, 6, 7, got: 9"),
    # found by a break-it round: these three used to pass the checking play
    ("nic_mtu_persist=ifupdown", "node1: nic_mtu_persist=ifupdown but ifupdown does not define eth0"),
    ('{"roce_qos_interfaces": ["eth0"]}', "interfaces: 'eth0' named, but this host has no RoCE port"),
    ("firewall_cluster_cidr=10.77.29.128/25",
     "node1: firewall_cluster_cidr=10.77.29.128/25 does not hold the data-plane address of node1 (10.77.29.11)"),
]
# site.yml runs at once for the bad-input cases: they change nothing (each asserts it)
BAD_INPUT_WORKERS = 3


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


def test_somaxconn_fault_on_node2_is_caught_and_named(cluster, tmp_path_factory):
    fault = run(["podman", "exec", "ncclprep-node2", "sysctl", "-w", "net.core.somaxconn=128"], timeout=60)
    assert fault.returncode == 0
    try:
        reports = str(tmp_path_factory.mktemp("reports"))
        val = playbook("validate", reports)
        assert val.returncode != 0
        data = load(reports)
        assert data["status"] == "FAIL"
        bad = [c for c in data["checks"] if c["status"] in ("FAIL", "HANG")]
        assert [c["id"] for c in bad] == ["sysctl.net.core.somaxconn"]
        assert bad[0]["hosts"] == ["node2"] and bad[0]["measured"] == {"node2": "128"}
        assert "FAIL sysctl.net.core.somaxconn [node2]" in val.stdout
    finally:
        run(["podman", "exec", "ncclprep-node2", "sysctl", "-w", "net.core.somaxconn=65535"], timeout=60)


def test_firewall_off_on_node1_and_key_refused_by_node3_are_named(cluster, tmp_path_factory):
    """ufw disabled on node1, the cluster key dropped from node3's authorized_keys: exactly
    firewall.rules [node1] and ssh.trust [node1 -> node3, node2 -> node3] FAIL."""
    keys = run(["podman", "exec", "ncclprep-node3", "cat", "/root/.ssh/authorized_keys"], timeout=60)
    assert keys.returncode == 0 and "ncclprep cluster key" in keys.stdout
    assert run(["podman", "exec", "ncclprep-node1", "ufw", "disable"], timeout=60).returncode == 0
    assert run(["podman", "exec", "ncclprep-node3", "sed", "-i", "/ncclprep cluster key/d",
                "/root/.ssh/authorized_keys"], timeout=60).returncode == 0
    try:
        reports = str(tmp_path_factory.mktemp("reports"))
        val = playbook("validate", reports)
        assert val.returncode != 0
        bad = {c["id"]: c for c in load(reports)["checks"] if c["status"] in ("FAIL", "HANG")}
        assert sorted(bad) == ["firewall.rules", "ssh.trust"]
        assert bad["firewall.rules"]["hosts"] == ["node1"]
        assert bad["firewall.rules"]["measured"] == {"node1": "ufw is inactive"}
        assert bad["ssh.trust"]["hosts"] == ["node1 -> node3", "node2 -> node3"]
        assert all("auth_denied" in v for links in bad["ssh.trust"]["measured"].values() for v in links)
    finally:
        run(["podman", "exec", "ncclprep-node1", "ufw", "--force", "enable"], timeout=60)
        run(["podman", "exec", "-i", "ncclprep-node3", "sh", "-c", "cat > /root/.ssh/authorized_keys"],
            timeout=60, input=keys.stdout)


# One fault at a time on node2 (inject, undo) -> the one check that must go bad, whom it names,
# and what it measured there.
FAULTS = [
    pytest.param("tc qdisc add dev eth0 root tbf rate 200mbit burst 64kb latency 100ms", "tc qdisc del dev eth0 root",
                 "net.bandwidth", ["node2"], "node2 sends at a median 0.02", id="throttled-link"),
    pytest.param("ufw insert 1 deny 29500/tcp", "ufw delete deny 29500/tcp",
                 "net.ports", ["node2"], "node2:29500 filtered from node1, filtered from node3", id="port-dropped"),
    pytest.param("ufw insert 1 reject 29500/tcp", "ufw delete reject 29500/tcp",
                 "net.ports", ["node2"], "node2:29500 refused from node1, refused from node3", id="port-rejected"),
    pytest.param("echo NCCL_DEBUG=TRACE >> /etc/nccl.conf", "sed -i '/^NCCL_DEBUG=TRACE$/d' /etc/nccl.conf",
                 "drift.files", ["node2"], "node2: /etc/nccl.conf differs: +NCCL_DEBUG=TRACE (nccl_env)",
                 id="hand-edit"),
    # /etc/hosts is a bind mount in the containers: rewritten in place, not renamed over
    pytest.param("cp /etc/hosts /root/hosts.bak && sed '/^# BEGIN ncclprep host_names/a 10.77.29.99 intruder' "
                 "/root/hosts.bak > /etc/hosts", "cat /root/hosts.bak > /etc/hosts",
                 "drift.files", ["node2"], 'node2: /etc/hosts block "# BEGIN ncclprep host_names (managed by Ansible)" '
                 "differs: +10.77.29.99 intruder (host_names)", id="hosts-block-edit"),
    # node1's ed25519 key stays, so ssh from node2 still checks node1's host key (ssh.trust passes)
    pytest.param("cp /etc/ssh/ssh_known_hosts /root/kh.bak && sed -i '/^node1 ecdsa-sha2-nistp256 /d' "
                 "/etc/ssh/ssh_known_hosts && echo 'github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6"
                 "UOoqKLsabgH5C9okWi0dh2l9GKJl' >> /etc/ssh/ssh_known_hosts",
                 "cp /root/kh.bak /etc/ssh/ssh_known_hosts", "drift.files", ["node2"],
                 "node2: /etc/ssh/ssh_known_hosts lacks 1 of", id="known-hosts-key-removed"),
]


@pytest.mark.parametrize("inject,undo,cid,hosts,detail", FAULTS)
def test_fault_on_node2_turns_exactly_its_check_bad(cluster, tmp_path_factory, inject, undo, cid, hosts,
                                                             detail):
    assert run(["podman", "exec", "ncclprep-node2", "sh", "-c", inject], timeout=60).returncode == 0
    try:
        reports = str(tmp_path_factory.mktemp("reports"))
        # Without the torchrun job: its worker's intermittent SIGABRT at exit (an open finding of
        # its own, seen in 1 of 4 runs of these faults) is no part of these checks; the healthy
        # run above proves the job.
        val = playbook("validate", reports, timeout=600, extra=("-e", "preflight_smoke_enabled=false"), cli=True)
        assert val.returncode == 1  # ncclprep: a check failed
        bad = {c["id"]: c for c in load(reports)["checks"] if c["status"] in ("FAIL", "HANG")}
        assert list(bad) == [cid], bad
        assert f"| FAIL | {cid} | {', '.join(hosts)} |" in val.stdout
        assert bad[cid]["hosts"] == hosts and detail in bad[cid]["message"], bad[cid]
    finally:
        run(["podman", "exec", "ncclprep-node2", "sh", "-c", undo], timeout=60)


def test_dataset_missing_on_node2_is_named(cluster, tmp_path_factory):
    """The dataset folder unmounted on node2 (moved away): dataset.path names node2 alone."""
    for node in NODES:
        assert run(["podman", "exec", f"ncclprep-{node}", "sh", "-c", DATASET_MAKE], timeout=60).returncode == 0
    assert run(["podman", "exec", "ncclprep-node2", "mv", DATASET, DATASET + ".off"], timeout=60).returncode == 0
    try:
        reports = str(tmp_path_factory.mktemp("reports"))
        val = playbook("validate", reports, timeout=600,
                       extra=("-e", f"preflight_dataset_path={DATASET}", "-e", "preflight_net_enabled=false",
                              "-e", "preflight_probe_enabled=false", "-e", "preflight_smoke_enabled=false"))
        assert val.returncode != 0
        bad = {c["id"]: c for c in load(reports)["checks"] if c["status"] in ("FAIL", "HANG")}
        assert list(bad) == ["dataset.path"], bad
        assert bad["dataset.path"]["hosts"] == ["node2"]
        assert bad["dataset.path"]["measured"] == {"node2": "does not exist"}
    finally:
        run(["podman", "exec", "ncclprep-node2", "mv", DATASET + ".off", DATASET], timeout=60)


def test_collectives_below_the_floor_are_blamed_on_the_throttled_node(cluster, tmp_path_factory):
    """node2's link under tbf and a busbw floor the healthy pairs clear: the collectives fail,
    the blame's ring-neighbour pairs find node2 slow in both of its pairings and name it."""
    assert run(["podman", "exec", "ncclprep-node2", "sh", "-c", FAULTS[0].values[0]], timeout=60).returncode == 0
    try:
        reports = str(tmp_path_factory.mktemp("reports"))
        val = playbook("validate", reports, timeout=900,
                       extra=("-e", "preflight_min_busbw_gbps=0.1", "-e", "preflight_smoke_enabled=false"))
        assert val.returncode != 0
        bad = {c["id"]: c for c in load(reports)["checks"] if c["status"] in ("FAIL", "HANG")}
        assert bad["collective.blame"]["hosts"] == ["node2"], bad["collective.blame"]
        assert "node2 bad in every pairing" in bad["collective.blame"]["message"]
        assert bad["collective.blame"]["measured"]["rounds"] == 3
        assert bad["net.bandwidth"]["hosts"] == ["node2"]
        assert {c for c in bad if not c.startswith("collective.")} == {"net.bandwidth"}, bad
    finally:
        run(["podman", "exec", "ncclprep-node2", "sh", "-c", FAULTS[0].values[1]], timeout=60)


def test_node3_paused_mid_probe_is_named_within_the_deadline(cluster, tmp_path_factory):
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
    record("validate.yml with node3 paused mid-probe", elapsed)
    sys.stdout.write(out[-3000:])
    assert paused, "node3's probe never started listening"
    assert proc.returncode != 0
    bad = {c["id"]: c for c in load(reports)["checks"] if c["status"] in ("FAIL", "HANG")}
    assert "host.reachable" in bad and bad["host.reachable"]["hosts"] == ["node3"]
    assert all(c["hosts"] == ["node3"] for c in bad.values()), bad
    assert set(bad) <= {"host.reachable", "net.run", "collective.run"}, bad
    assert elapsed < 300


def test_stopped_node3_is_named_without_a_hang(cluster, tmp_path_factory):
    """Runs last: it stops node3 (the fixture tears the cluster down afterwards)."""
    stop = run(["podman", "stop", "--time", "2", "ncclprep-node3"], timeout=120)
    assert stop.returncode == 0
    reports = str(tmp_path_factory.mktemp("reports"))
    val = playbook("validate", reports, timeout=600)
    assert val.returncode != 0
    data = load(reports)
    bad = {c["id"]: c for c in data["checks"] if c["status"] in ("FAIL", "HANG")}
    assert bad["host.reachable"]["hosts"] == ["node3"]
    # the collectives ran on the two remaining ranks: no made-up HANG
    assert "collective.run" not in bad
    statuses = {c["id"]: c["status"] for c in data["checks"]}
    assert statuses["collective.all_reduce"] == "PASS"
    assert statuses["torchrun.smoke"] == "SKIP"
    assert all(c["hosts"] == ["node3"] for c in bad.values()), bad
