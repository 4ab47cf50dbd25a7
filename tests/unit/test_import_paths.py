"""The one import arrangement of module_utils, proved where it is used:
Ansible's module packaging, a controller-side filter plugin, and the installed CLI."""

import json
import os
import socket
import subprocess
import sys

import pytest
from conftest import ANSIBLE_JSON_ENV as ENV
from conftest import BIN, REPO


def adhoc(module, args, *extra, timeout=120):
    """Run one module on localhost through `ansible` and return its result dict."""
    cmd = [os.path.join(BIN, "ansible"), "localhost", "-c", "local", "-m", module, "-a", json.dumps(args),
           "-e", f"ansible_python_interpreter={sys.executable}", *extra]
    out = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=timeout)
    data = json.loads(out.stdout[out.stdout.index("{"):])
    return data["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_module_gets_module_utils_shipped_by_ansible():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        port = srv.getsockname()[1]
        res = adhoc("node_facts", {"node": {"cidr": "127.0.0.0/8", "sysctl_keys": ["net.core.somaxconn"],
                                            "names": [{"host": "me", "address": "127.0.0.1", "names": ["localhost"]}],
                                            "connect_port": port, "torch_python": sys.executable},
                                   "concerns": {"nccl_env": {"env_files": ["/nonexistent/nccl.env"]}}})
    facts = res["ansible_facts"]["ncclprep"]
    assert res["changed"] is False
    # the node and a concern's reader in the one run
    assert facts["nccl_env"]["files"] == [{"path": "/nonexistent/nccl.env", "values": None}]
    assert facts["data_plane"]["interface"] == "lo" and facts["data_plane"]["address"] == "127.0.0.1"
    with open("/proc/sys/net/core/somaxconn") as fh:
        assert facts["sysctl_tuning"]["net.core.somaxconn"]["value"] == fh.read().strip()
    row = facts["host_names"][0]
    assert row["name"] == "localhost" and "127.0.0.1" in row["addresses"] and row["reachable"] is True
    assert facts["versions"]["torch"].startswith("2.13.0")


def test_nccl_probe_module_names_a_rank_that_never_arrives():
    pytest.importorskip("torch")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = adhoc("nccl_probe", {"rank": 0, "hosts": ["node1", "ghost"], "master_addr": "127.0.0.1",
                               "master_port": port, "ops": ["all_reduce"], "sizes": [4096],
                               "timeout": 8, "join_timeout": 3})
    probe = res["probe"]
    assert probe["status"] == "HANG" and probe["stage"] == "rendezvous"
    assert probe["missing_hosts"] == ["ghost"] and probe["backend"] == "gloo"
    assert probe["elapsed_s"] < 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_nccl_probe_runs_the_network_probe_then_the_collectives_in_one_job():
    """Issue 24: one job per node for the network probe and the collectives (one process, one torch
    import). Two nodes on 127.0.0.1 and 127.0.0.2, each one `ansible` run at the same moment: both
    return the network probe's measured directions and the collectives' PASS; a third host without
    a data-plane address would run no net probe (wait_for_net: the others arrive that much later)."""
    pytest.importorskip("torch")
    from concurrent.futures import ThreadPoolExecutor

    hosts, addresses = ["node1", "node2"], ["127.0.0.1", "127.0.0.2"]
    store, listen, master = _free_port(), _free_port(), _free_port()

    def one(rank):
        net = {"rank": rank, "hosts": hosts, "addresses": addresses, "store_port": store, "listen_port": listen,
               "token": "t0k", "ephemeral_sample": 0, "latency_samples": 10, "bandwidth_seconds": 0.05,
               "matchings": 0, "repair": 0, "join_timeout": 15, "step_timeout": 1, "connect_timeout": 0.5,
               "timeout": 40}
        return adhoc("nccl_probe", {"rank": rank, "hosts": hosts, "master_addr": addresses[0], "master_port": master,
                                    "ops": ["all_reduce"], "sizes": [4096], "timeout": 40, "join_timeout": 20,
                                    "token": "t0k", "net": net}, timeout=150)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, [0, 1]))
    for rank, res in enumerate(results):
        assert res["net"]["status"] == "PASS", res["net"]
        assert res["net"]["host"] == hosts[rank]
        row = res["net"]["links"][0]
        assert (row["src"], row["dst"]) == (hosts[rank], hosts[1 - rank])
        assert row["latency_us"]["p50"] > 0 and row["bandwidth_gbps"] > 0
        assert res["probe"]["status"] == "PASS", res["probe"]
        assert res["probe"]["results"][0]["op"] == "all_reduce" and res["probe"]["world_size"] == 2


def test_nccl_probe_refuses_a_bad_net_option_before_running():
    res = adhoc("nccl_probe", {"rank": 0, "hosts": ["node1"], "master_addr": "127.0.0.1",
                               "net": {"rank": 0, "hosts": ["node1"], "addresses": ["127.0.0.1"], "token": "x",
                                       "store_port": 70000}})
    assert res["failed"] and "net: node1: store_port=70000 is not a TCP port (1..65535)" in res["msg"]
    res = adhoc("nccl_probe", {"rank": 0, "hosts": ["node1"], "master_addr": "127.0.0.1", "wait_for_net": -1})
    assert res["failed"] and "wait_for_net=-1" in res["msg"]


def test_nccl_probe_module_rejects_bad_arguments_naming_them():
    res = adhoc("nccl_probe", {"rank": 5, "hosts": ["node1"], "master_addr": "127.0.0.1"})
    assert res["failed"] and "rank=5 is outside 0..0" in res["msg"]
    res = adhoc("nccl_probe", {"rank": 0, "hosts": ["node1"], "master_addr": "127.0.0.1", "ops": ["allreduce"]})
    assert res["failed"] and "unknown collective(s) in ops: ['allreduce']" in res["msg"]


def test_filter_plugin_imports_module_utils_on_the_controller(tmp_path):
    play = tmp_path / "p.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - debug:\n        msg: \"{{ {'interfaces': ['eth0'],"
        " 'eth0': {'ipv4': {'address': '10.0.0.2'}, 'mtu': 9000}}"
        " | ncclprep_data_plane(cidr, none, 'node9') }}\"\n")
    cmd = [os.path.join(BIN, "ansible-playbook"), str(play), "-e", "cidr=10.0.0.0/24"]
    out = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:]
    msg = json.loads(out.stdout[out.stdout.index("{"):])["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"]
    assert msg == {"interface": "eth0", "address": "10.0.0.2", "cidr": "10.0.0.0/24", "prefix": 24, "mtu": 9000}
    bad = subprocess.run(cmd[:-1] + ["cidr=10.9.0.0/24"], cwd=REPO, env=ENV, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode != 0
    assert "node9: no interface has an address in data_plane_cidr='10.9.0.0/24'" in bad.stdout


def test_installed_cli_imports_module_utils(tmp_path):
    from ansible.module_utils.ncclprep.checks import make_check
    from ansible.module_utils.ncclprep.report import write_reports

    cluster = {"schema_version": 1, "status": "FAIL", "generated_at": "x", "hosts": ["n1"],
               "checks": [make_check("host.reachable", "FAIL", ["n1"], message="n1 did not answer")]}
    run = write_reports(str(tmp_path), cluster, {}, "20260101T000000Z")
    out = subprocess.run([os.path.join(BIN, "ncclprep"), "report", run], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1  # cli.py: 1 when a check failed or hung
    assert "### FAIL host.reachable: n1" in out.stdout


def test_cli_runs_a_playbook_through_ansible_runner():
    out = subprocess.run([os.path.join(BIN, "ncclprep"), "provision", "-i", os.path.join(REPO, "inventory", "example"),
                          "--", "--list-hosts"], capture_output=True, text=True, timeout=120, env=ENV)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "gpu-node-01" in out.stdout and "gpu-node-02" in out.stdout


def test_roce_qos_facts_step_on_a_host_without_roce_sets_the_facts_and_is_not_a_skipped_task(tmp_path):
    """A result with skipped=true is a skipped task to Ansible, which then drops its ansible_facts:
    the facts step must report the skip inside ansible_facts.ncclprep.roce_qos only."""
    res = adhoc("roce_qos", {"into": {"kept": 1}, "sysfs_root": str(tmp_path)}, "--check")
    assert not res.get("skipped") and not res.get("failed"), res
    facts = res["ansible_facts"]["ncclprep"]
    assert facts["kept"] == 1
    assert facts["roce_qos"]["skipped"] is True and facts["roce_qos"]["ports"] == []
    assert facts["roce_qos"]["skip_reason"].startswith("no RoCE port: ")
