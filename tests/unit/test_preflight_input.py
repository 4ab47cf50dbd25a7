"""The preflight refuses its own bad variables before it reads or runs anything: the checks
at the top of roles/preflight/tasks/main.yml, run through ansible-playbook on localhost."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from conftest import ANSIBLE_JSON_ENV as ENV
from conftest import BIN, REPO


@pytest.mark.parametrize("extra,message", [
    ({"preflight_net_link_floor_ratio": 2.0},
     "fake1: preflight_net_link_floor_ratio=2.0: valid: null or a fraction of the link speed in (0, 1]"),
    ({"preflight_probe_blame_timeout": 5},
     "fake1: preflight_probe_blame_timeout=5: valid: an integer >= 10 (seconds of one blame round, half of them "
     "for the ranks to arrive)"),
    # 30 + 2 * (2 * 1 + 2 * (2 * 2 + 0.25)) + 3 + 10 s (nic_mtu off: no path-MTU search)
    ({"preflight_net_timeout": 60, "nic_mtu_enabled": False},
     "fake1: preflight_net_timeout=60: valid: at least 64 s, preflight_net_join_timeout (30 s) plus one round's "
     "deadline and 10 s; below it a node lost mid-run gets every node's probe killed instead of named"),
    # Issue 24: the search at nic_mtu's default MTU (4096) counts, though nic_mtu's intent is computed
    # later (the check read nic_mtu_intent, undefined there, and let 70 s through to every node's probe)
    ({"preflight_net_timeout": 70, "preflight_net_join_timeout": 20},
     "fake1: preflight_net_timeout=70: valid: at least 76 s, preflight_net_join_timeout (20 s) plus one round's "
     "deadline and 10 s; below it a node lost mid-run gets every node's probe killed instead of named"),
    ({"preflight_net_timeout": 70, "preflight_net_join_timeout": 20, "nic_mtu_value": 9000},
     "fake1: preflight_net_timeout=70: valid: at least 79 s, preflight_net_join_timeout (20 s) plus one round's "
     "deadline and 10 s; below it a node lost mid-run gets every node's probe killed instead of named"),
    ({"preflight_probe_local_ranks": 0}, "fake1: preflight_probe_local_ranks=0: valid: null or an integer >= 1"),
    ({"preflight_probe_expect_net": "roce"},
     "fake1: preflight_probe_expect_net=roce: valid: null or one of ib, socket"),
    # every problem at once, a string from -e converted first (Jinja2's int filter made "abc" 0)
    ({"preflight_net_slow_ratio": "1.5", "preflight_probe_join_timeout": 200},
     "fake1: preflight_net_slow_ratio=1.5: valid: a fraction in (0, 1]; fake1: preflight_probe_join_timeout=200: "
     "valid: below preflight_probe_timeout (120)"),
])
def test_bad_preflight_variable_is_refused_first_naming_host_variable_and_value(tmp_path, extra, message):
    inventory = {"all": {"hosts": {"fake1": {"ansible_connection": "local"}}}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    play = [{"hosts": "all", "gather_facts": False,
             "tasks": [{"name": "Run the preflight", "ansible.builtin.include_role": {"name": "preflight"}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    cmd = [os.path.join(BIN, "ansible-playbook"), "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"),
           "-e", f"ansible_python_interpreter={sys.executable}", "-e", json.dumps(extra)]
    out = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=180)
    assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-3000:]
    tasks = json.loads(out.stdout[out.stdout.index("{"):])["plays"][0]["tasks"]
    failed = [t for t in tasks if t["hosts"]["fake1"].get("failed")]
    assert len(failed) == 1, failed
    assert failed[0]["task"]["name"].startswith("preflight : Check the preflight's settings"), failed
    assert " ".join(failed[0]["hosts"]["fake1"]["msg"].split()) == message
