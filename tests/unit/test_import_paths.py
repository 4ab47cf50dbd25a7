"""The one import arrangement of module_utils, proved where it is used:
Ansible's module packaging, a controller-side filter plugin, and the installed CLI."""

import json
import os
import socket
import subprocess
import sys

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
