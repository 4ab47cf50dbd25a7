"""`ncclprep node check` without Ansible (module_utils/ncclprep/node/check.py): the intent document,
the exit codes, the ss parser, and the core zip site.yml installs, run by a python that has no
Ansible. The rows against validate.yml's on the local cluster: tests/integration."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from ansible.module_utils.ncclprep import cli
from ansible.module_utils.ncclprep.checks import NODE_MODULES, evaluate_node
from ansible.module_utils.ncclprep.parsers.ss import parse_ss_listen
from conftest import load_source

core = load_source("ncclprep_core", "lookup_plugins/ncclprep_core.py")

SS = """LISTEN 0      4096         0.0.0.0:22        0.0.0.0:*    users:(("sshd",pid=812,fd=3))
LISTEN 0      4096            [::]:29500        [::]:*    users:(("python3",pid=9,fd=3),("python3",pid=10,fd=5))
LISTEN 0      128    127.0.0.53%lo:53         0.0.0.0:*
ESTAB  0      0          10.0.0.1:22       10.0.0.2:5555 users:(("sshd",pid=900,fd=4))
tcp    LISTEN 0      5             *:80             *:*
"""


def test_ss_listeners_are_read_as_listen_ports_facts_reads_them():
    assert parse_ss_listen(SS) == [
        {"port": 22, "address": "0.0.0.0", "pid": 812, "name": "sshd"},
        {"port": 29500, "address": "::", "pid": 9, "name": "python3"},
        {"port": 29500, "address": "::", "pid": 10, "name": "python3"},
        {"port": 53, "address": "127.0.0.53%lo", "pid": None, "name": None},
        {"port": 80, "address": "*", "pid": None, "name": None},
    ]


def intent(tmp_path, torch_version: str, **extra) -> str:
    """An intent document for this machine: loopback as the data plane, the test's python as the
    torch runtime pinned at ``torch_version``, nccl_env reading an env file under tmp_path."""
    env = tmp_path / "nccl.env"
    env.write_text("NCCL_SOCKET_IFNAME==lo\nGLOO_SOCKET_IFNAME=lo\n")
    doc = {"version": 1, "host": "me",
           "node": {"cidr": "127.0.0.0/8", "torch_python": sys.executable, "timeout": 2.0},
           "readers": {"nccl_env": {"env_files": [str(env)]}}, "roce_qos": None,
           "intent": {"torch_runtime": {"version": torch_version, "python": sys.executable},
                      "nccl_env": {"NCCL_SOCKET_IFNAME": "=lo", "GLOO_SOCKET_IFNAME": "lo"}}}
    doc.update(extra)
    path = tmp_path / "intent.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_pinned_torch_that_is_here_passes_and_the_record_is_written(tmp_path, capsys):
    record = tmp_path / "state" / "node-check.json"
    code = cli.main(["node", "check", "--json", "--only", "torch_runtime", "nccl_env",
                           "--intent", intent(tmp_path, torch.__version__), "--record", str(record)])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["status"] == "PASS"
    assert [(r["id"], r["status"]) for r in out["checks"]] == [("versions.torch", "PASS"), ("nccl_env.ifname", "PASS"),
                                                                  ("nccl_env.debug_class", "PASS")]
    written = json.loads(record.read_text())
    assert written["host"] == "me" and written["checks"] == out["checks"]
    assert written["facts"]["versions"]["torch"] == torch.__version__
    assert oct(record.stat().st_mode & 0o777) == "0o600"


def test_another_torch_fails_naming_the_host_and_exit_1(tmp_path, capsys):
    code = cli.main(["node", "check", "--only", "torch_runtime", "--record", "-",
                           "--intent", intent(tmp_path, "2.0.0")])
    out = capsys.readouterr().out
    assert code == 1
    assert out.splitlines()[0].startswith("FAIL  versions.torch  ")
    assert out.splitlines()[-1] == "me: FAIL, 1 checks, 1 failed or hung"


@pytest.mark.parametrize("content,says", [
    (None, "does not exist: run site.yml on this node first"),
    ("{not json", "cannot be read"),
    (json.dumps({"version": 0}), "version 0, this command reads version 1"),
    (json.dumps({"version": 1, "host": "me"}), "no node, readers, intent"),
])
def test_without_a_readable_intent_it_cannot_run_exit_3(tmp_path, capsys, content, says):
    path = tmp_path / "intent.json"
    if content is not None:
        path.write_text(content)
    assert cli.main(["node", "check", "--intent", str(path), "--record", "-"]) == 3
    err = capsys.readouterr().err
    assert f"{path}" in err and says in err


def test_a_reader_refusing_its_options_is_exit_3_naming_the_concern(tmp_path, capsys):
    path = intent(tmp_path, "2.0.0", readers={"nccl_env": {"bogus": 1}})
    assert cli.main(["node", "check", "--intent", path, "--record", "-", "--only", "nccl_env"]) == 3
    err = capsys.readouterr().err
    assert "nccl_env: nccl_env: unknown option(s) ['bogus']" in err
    assert err.rstrip().endswith(f"(from {path})")  # the --intent given, not the default path


def test_usage_errors_are_exit_2(capsys):
    assert cli.main(["node", "check", "--only", "collectives"]) == 2
    assert cli.main(["node"]) == 2
    with pytest.raises(ValueError, match="versions: not a check of one node"):
        evaluate_node("h", {"facts": {"x": 1}}, ["versions"])
    assert "reachable" not in NODE_MODULES and "nccl_env" in NODE_MODULES


def test_the_core_zip_is_the_same_bytes_every_build_and_runs_without_ansible(tmp_path):
    """The zip site.yml copies to every node: built twice, the same bytes (a re-run copies
    nothing); run by a python without site-packages (-I -S: no Ansible importable), the node
    command starts from it and names the missing intent, exit 3."""
    first, second = core.build(), core.build()
    assert first == second
    dest = tmp_path / "core.zip"
    core.write(str(dest), first)
    stamp = os.stat(dest).st_mtime_ns
    core.write(str(dest), second)
    assert os.stat(dest).st_mtime_ns == stamp  # unchanged bytes are not written again
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import ansible.module_utils.ncclprep.cli as n; "
            "print(n.__file__); sys.exit(n.main(['node', 'check', '--intent', sys.argv[2], '--record', '-']))")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(dest), str(tmp_path / "none.json")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 3, out.stderr
    assert out.stdout.strip() == f"{dest}/ansible/module_utils/ncclprep/cli.py"
    assert "none.json does not exist" in out.stderr


def test_one_reading_gives_each_concern_and_refusals_name_the_role_variables(tmp_path):
    """node.read_node, what node_facts (validate.yml, site.yml's checking play) and the node
    command read through: the node part only when asked, each reader's options checked, a
    roce_qos refusal naming the role variables its options come from."""
    from ansible.module_utils.ncclprep.node import read as node

    env = tmp_path / "nccl.env"
    env.write_text("NCCL_DEBUG=WARN\n")
    got = node.read_node({"node": None, "readers": {"nccl_env": {"env_files": [str(env)]}}, "roce_qos": None})
    assert list(got) == ["nccl_env"]
    assert got["nccl_env"]["files"] == [{"path": str(env), "values": {"NCCL_DEBUG": "WARN"}}]
    with pytest.raises(node.ReadError, match=r"^rps_rfs: rps_rfs: unknown option\(s\) \['queues'\]"):
        node.read_node({"readers": {"rps_rfs": {"queues": 4}}})
    with pytest.raises(node.ReadError) as refused:
        node.read_node({"roce_qos": {"interfaces": ["eth9"], "pfc_priority": 3, "tool": "auto"}})
    assert "interfaces: 'eth9' named, but this host has no RoCE port" in str(refused.value)
    assert str(refused.value).endswith("(from roce_qos_interfaces=['eth9'], roce_qos_pfc_priority=3, "
                                       "roce_qos_tool=auto)")
    with pytest.raises(node.ReadError, match="^node: cidr: "):
        node.read_node({"node": {"cidr": "10.0.0.300/24"}})


def test_only_one_concern_still_reads_the_node_its_check_needs(tmp_path, capsys):
    """nccl_env.ifname judges the env file against the node's data-plane interface (node facts):
    `--only nccl_env` must read those too, or the row would judge without them."""
    code = cli.main(["node", "check", "--json", "--only", "nccl_env", "--record", "-",
                           "--intent", intent(tmp_path, "2.0.0")])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [(r["id"], r["status"], r["message"]) for r in out["checks"]] == [
        ("nccl_env.ifname", "PASS", "NCCL and Gloo sockets on the data-plane interface on 1 hosts"),
        ("nccl_env.debug_class", "PASS", "no debugging-class NCCL variable in the launch environment of 1 hosts")]


def test_options_from_the_inventory_are_converted_as_an_argument_spec_converts_them():
    """Review of this change: node_facts took the readers' and roce_qos's options as plain dicts,
    so `-e roce_qos_ecn=false` reached roce_qos.survey as the text "false" (bool: True) and
    `-e ssh_trust_host_key_types=ed25519` as a text the reader walked letter by letter."""
    from ansible.module_utils.ncclprep import concerns
    from ansible.module_utils.ncclprep.concerns.roce_qos import SURVEY_SPEC
    from ansible.module_utils.ncclprep.node import read as node
    from ansible.module_utils.ncclprep.options import coerce

    assert coerce(SURVEY_SPEC, {"ecn": "false", "pfc_priority": "3", "interfaces": "eth0,eth1"}, "h") == {
        "interfaces": ["eth0", "eth1"], "pfc_priority": 3, "trust": "dscp", "ecn": False, "tool": "auto",
        "timeout": 10.0}
    assert concerns.reader_options("ssh_trust", {"host_key_types": "ed25519"})["host_key_types"] == ["ed25519"]
    with pytest.raises(node.ReadError, match=r"roce_qos: \S+: pfc_priority='high': not an integer"):
        node.read_node({"roce_qos": {"pfc_priority": "high"}})
    with pytest.raises(ValueError, match=r"firewall: backend=\['ufw'\]: not a text"):
        concerns.reader_options("firewall", {"backend": ["ufw"]})
    with pytest.raises(ValueError, match=r"nic_mtu: persist='netctl'; valid: auto, netplan"):
        concerns.reader_options("nic_mtu", {"persist": "netctl"})


def test_a_process_name_with_a_blank_is_kept_whole():
    line = 'LISTEN 0 5 0.0.0.0:29500 0.0.0.0:* users:(("tmux: server",pid=77,fd=6))'
    assert parse_ss_listen(line) == [{"port": 29500, "address": "0.0.0.0", "pid": 77, "name": "tmux: server"}]
