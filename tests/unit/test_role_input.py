"""Roles refuse bad variables before any change: each role's validate.yml, run through
ansible-playbook on localhost (the checks that need no facts from a node)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from conftest import ANSIBLE_JSON_ENV as ENV
from conftest import BIN, REPO


def _validate(tmp_path, role: str, extra: dict, alone: bool = False):
    """Run ``role``'s validate.yml on localhost; ``alone``: the file by itself, without the role's
    defaults and dependencies (host_names depends on data_plane, which reads a real node)."""
    inventory = {"all": {"hosts": {"fake1": {"ansible_connection": "local"}}}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    task = {"ansible.builtin.include_tasks": os.path.join(REPO, "roles", role, "tasks", "validate.yml")} if alone \
        else {"ansible.builtin.include_role": {"name": role, "tasks_from": "validate.yml"}}
    play = [{"hosts": "all", "gather_facts": False, "tasks": [dict(name="Check the input", **task)]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    cmd = [os.path.join(BIN, "ansible-playbook"), "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"),
           "-e", f"ansible_python_interpreter={sys.executable}", "-e", json.dumps(extra)]
    out = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=180)
    tasks = json.loads(out.stdout[out.stdout.index("{"):])["plays"][0]["tasks"]
    failed = [t for t in tasks if t["hosts"]["fake1"].get("failed")]
    return out.returncode, failed


@pytest.mark.parametrize("extras, bad", [
    (["numpy", "--index-url=http://203.0.113.9/simple"], ["--index-url=http://203.0.113.9/simple"]),
    (["-e", "git+https://203.0.113.9/x.git"], ["-e", "git+https://203.0.113.9/x.git"]),
    (["evil @ https://203.0.113.9/evil.whl", "numpy>=1.26,<3"], ["evil @ https://203.0.113.9/evil.whl"]),
    (["./local/pkg", "pillow[avif]==11.0.0"], ["./local/pkg"]),
])
def test_torch_runtime_refuses_extra_packages_that_are_pip_options_paths_or_urls(tmp_path, extras, bad):
    """Review (low findings): torch_runtime_extra_packages went to pip as they were, so an entry
    could point pip at another index or a URL the operator never meant."""
    rc, failed = _validate(tmp_path, "torch_runtime", {"torch_runtime_extra_packages": extras})
    assert rc == 2 and len(failed) == 1, failed
    msg = " ".join(failed[0]["hosts"]["fake1"]["msg"].split())
    assert msg.startswith(f"fake1: torch_runtime_extra_packages has {json.dumps(bad)}: each entry must be"), msg


def test_torch_runtime_takes_plain_requirements(tmp_path):
    rc, failed = _validate(tmp_path, "torch_runtime",
                           {"torch_runtime_extra_packages": ["numpy", "numpy==2.1.0", "pillow[avif]>=11,<12"]})
    assert (rc, failed) == (0, [])


@pytest.mark.parametrize("domain", ["cluster.internal evil.example", "x\n10.0.0.9 node1", "a#b", "-lead.example"])
def test_host_names_refuses_a_domain_that_is_not_one(tmp_path, domain):
    """Review (low findings): host_names_domain was free text written into /etc/hosts."""
    rc, failed = _validate(tmp_path, "host_names", {"host_names_domain": domain}, alone=True)
    assert rc == 2 and len(failed) == 1, failed
    assert failed[0]["task"]["name"].endswith("Check host_names_domain before any change")
    assert " ".join(failed[0]["hosts"]["fake1"]["msg"].split()).startswith(
        f"fake1: host_names_domain={json.dumps(domain)}: must be a DNS domain")


@pytest.mark.parametrize("domain", ["cluster.internal", "c-1.example.org", None])
def test_host_names_takes_a_dns_domain_or_none(tmp_path, domain):
    rc, failed = _validate(tmp_path, "host_names", {"host_names_domain": domain}, alone=True)
    assert not [t for t in failed if t["task"]["name"].endswith("Check host_names_domain before any change")]


@pytest.mark.parametrize("role, extra, task, message", [
    ("nic_mtu", {"nic_mtu_probe_timeout": 0}, "Check nic_mtu_probe_timeout",
     "fake1: nic_mtu_probe_timeout=0: seconds one path-MTU probe waits for its answer, at least 1"),
    ("rps_rfs", {"rps_rfs_flow_cnt": -1}, "Check rps_rfs_flow_cnt",
     "fake1: rps_rfs_flow_cnt=-1: null (the RFS table size over the rx queues) or a count of flow entries per "
     "rx queue, 0 or more"),
])
def test_a_count_or_timeout_below_its_floor_is_refused_first(tmp_path, role, extra, task, message):
    """Review (low findings, section 7): these reached the nodes unchecked."""
    rc, failed = _validate(tmp_path, role, extra, alone=True)
    assert rc == 2 and len(failed) == 1 and failed[0]["task"]["name"].endswith(task), failed
    assert " ".join(failed[0]["hosts"]["fake1"]["msg"].split()) == message


@pytest.mark.parametrize("extra, shown", [
    ({"torch_runtime_index_url": "http://203.0.113.9/simple"}, '"http://203.0.113.9/simple"'),
    ({"torch_runtime_index_url": "https://203.0.113.9/simple --trusted-host 203.0.113.9"},
     '"https://203.0.113.9/simple --trusted-host 203.0.113.9"'),
    ({"torch_runtime_install_timeout": 0}, "null"),
])
def test_torch_runtime_refuses_a_plain_http_index_and_a_deadline_too_short(tmp_path, extra, shown):
    """Review (low findings): the index URL took http:// (root installs what any network in the
    path serves) and white space (more pip options); pip had no deadline."""
    rc, failed = _validate(tmp_path, "torch_runtime", extra)
    assert rc == 2 and len(failed) == 1, failed
    msg = " ".join(failed[0]["hosts"]["fake1"]["msg"].split())
    assert msg.startswith(f"fake1: torch_runtime_index_url={shown} must be null or an https:// or file:/// URL"), msg


def test_torch_runtime_takes_an_https_or_file_index(tmp_path):
    for url in ("https://pypi.internal.example/simple", "file:///srv/wheels/simple"):
        assert _validate(tmp_path, "torch_runtime", {"torch_runtime_index_url": url}) == (0, [])


@pytest.mark.parametrize("extra, shown", [
    ({"rps_rfs_interface": "eth1"}, "rps_rfs_interface=eth1"),
    ({"nic_mtu_interface": "eth1", "firewall_interface": "bond0"}, "firewall_interface=bond0, nic_mtu_interface=eth1"),
])
def test_a_removed_per_role_interface_variable_is_refused_not_ignored(tmp_path, extra, shown):
    """Issue 24: nic_mtu, rps_rfs, numa_pinning and firewall take the one data-plane interface (the
    review: the MTU could be set on one interface and checked on another). An inventory that still
    sets one of their old variables is told so before anything runs."""
    inventory = {"all": {"children": {"ncclprep_nodes": {"hosts": {"fake1": {"ansible_connection": "local"}}}}}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    play = [{"hosts": "all", "gather_facts": False,
             "tasks": [{"name": "Find the data plane", "ansible.builtin.include_role": {"name": "data_plane"}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    cmd = [os.path.join(BIN, "ansible-playbook"), "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"),
           "-e", f"ansible_python_interpreter={sys.executable}", "-e",
           json.dumps({"data_plane_cidr": "127.0.0.0/8", **extra})]
    out = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=180)
    tasks = json.loads(out.stdout[out.stdout.index("{"):])["plays"][0]["tasks"]
    failed = [t for t in tasks if t["hosts"]["fake1"].get("failed")]
    assert out.returncode == 2 and len(failed) == 1, failed
    assert " ".join(failed[0]["hosts"]["fake1"]["msg"].split()) == (
        f"fake1: {shown}: removed; every role uses the data-plane interface (data_plane_interface, or the "
        "interface holding an address in data_plane_cidr)")
