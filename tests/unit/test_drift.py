"""Drift of managed files (module_utils/ncclprep/drift.py, checks/drift.py) and the manifests
the roles render from (roles/<concern>/vars/main.yml <concern>_managed_files)."""

from __future__ import annotations

import glob
import os

import yaml
from ansible.module_utils.ncclprep.checks.drift import check_drift
from ansible.module_utils.ncclprep.checks.model import Context
from ansible.module_utils.ncclprep.drift import compare, summary

import ncclprep

REPO = ncclprep.REPO_ROOT
CONF = "# Ansible managed\nNCCL_SOCKET_IFNAME==eth0\nNCCL_DEBUG=WARN\n"


def test_same_file_is_ok_and_a_hand_edit_differs_with_its_diff(tmp_path):
    path = tmp_path / "nccl.conf"
    path.write_text(CONF)
    path.chmod(0o644)
    assert compare(str(path), CONF, "0644") == {"path": str(path), "state": "ok", "diff": [], "mode_expected": "0644",
                                                 "mode_found": "0644"}
    path.write_text(CONF.replace("NCCL_DEBUG=WARN", "NCCL_DEBUG=TRACE"))
    out = compare(str(path), CONF, "0644")
    assert out["state"] == "differs"
    assert out["diff"][:2] == ["--- expected", f"+++ {path}"]
    assert "-NCCL_DEBUG=WARN" in out["diff"] and "+NCCL_DEBUG=TRACE" in out["diff"]
    assert summary(out) == f"{path} differs: -NCCL_DEBUG=WARN +NCCL_DEBUG=TRACE"


def test_mode_missing_and_long_diffs(tmp_path):
    path = tmp_path / "launcher"
    path.write_text("x\n")
    path.chmod(0o644)
    assert compare(str(path), "x\n", "0755")["state"] == "mode"
    assert summary(compare(str(path), "x\n", "0755")) == f"{path} has mode 0644, expected 0755"
    assert compare(str(path), "x\n", None)["state"] == "ok"
    assert compare(str(tmp_path / "gone"), "x\n")["state"] == "missing"
    path.write_text("".join(f"{i}\n" for i in range(100)))
    out = compare(str(path), "", max_lines=10)
    assert len(out["diff"]) == 10 and out["diff"][-1].endswith("more diff lines")


def test_check_names_the_host_and_file_with_the_difference():
    ok = {"concern": "nccl_env", "path": "/etc/nccl.conf", "state": "ok", "diff": []}
    edited = dict(ok, state="differs", diff=["--- expected", "+++ /etc/nccl.conf", "@@ -1 +1 @@", "-A=1", "+A=2"])
    recs = {"node1": {"drift": [ok]}, "node2": {"drift": [edited]}, "node3": {"drift": [ok]}}
    (check,) = check_drift(recs, Context(all_hosts=("node1", "node2", "node3")))
    assert check["status"] == "FAIL" and check["hosts"] == ["node2"]
    assert check["measured"] == {"node2": {"/etc/nccl.conf": edited["diff"]}}
    assert check["message"] == "node2: /etc/nccl.conf differs: -A=1 +A=2 (nccl_env)"
    recs["node2"]["drift"] = [ok]
    assert check_drift(recs, Context(all_hosts=("node1",)))[0]["status"] == "PASS"
    assert check_drift({"node1": {}}, Context(all_hosts=("node1",)))[0]["status"] == "SKIP"


def test_every_manifest_names_templates_of_its_role_and_the_role_renders_from_it():
    manifests = glob.glob(os.path.join(REPO, "roles", "*", "vars", "main.yml"))
    found = {}
    for path in manifests:
        role = path.split(os.sep)[-3]
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        if f"{role}_managed_files" not in data:
            continue
        found[role] = data[f"{role}_managed_files"]
        for f in found[role]:
            assert set(f) == {"src", "dest", "mode"}, (role, f)
            assert os.path.exists(os.path.join(REPO, "roles", role, "templates", f["src"])), (role, f)
        tasks = "".join(open(p, encoding="utf-8").read() for p in glob.glob(os.path.join(REPO, "roles", role, "tasks",
                                                                                         "*.yml")))
        # one spelling: the role writes these files by looping over the same list
        assert f'loop: "{{{{ {role}_managed_files }}}}"' in tasks, role
    assert {"nccl_env", "sysctl_tuning", "ssh_trust"} <= set(found)
