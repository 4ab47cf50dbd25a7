"""Drift of managed files (module_utils/ncclprep/drift.py, checks/drift.py, library/managed_files.py)
and the manifests the roles write from (roles/<concern>/vars/main.yml <concern>_managed_files): every
kind of entry compared for real, the manifests held against the roles' tasks, and validate.yml's
the record site.yml writes (managed.yml, run through ansible-playbook on localhost) held by the
engine's check_record against files the roles' own tasks wrote."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from ansible.module_utils.ncclprep import concerns
from ansible.module_utils.ncclprep.checks.drift import check_drift
from ansible.module_utils.ncclprep.drift import (
    FIELDS,
    KINDS,
    check,
    check_record,
    compare,
    compare_block,
    compare_lines,
    ensure,
    managed_entries,
    summary,
)
from ansible.module_utils.ncclprep.model import Context

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



# --- block (ansible.builtin.blockinfile: only the lines between the markers are site.yml's) ---

MARKER = "# {mark} ncclprep host_names (managed by Ansible)"
BLOCK = "10.0.0.1 node1.lan node1\n10.0.0.2 node2.lan node2\n"
HOSTS = ("127.0.0.1 localhost\n::1 localhost ip6-localhost\n"
         "# BEGIN ncclprep host_names (managed by Ansible)\n10.0.0.1 node1.lan node1\n10.0.0.2 node2.lan node2\n"
         "# END ncclprep host_names (managed by Ansible)\n")


def test_hosts_block_as_written_is_ok_and_an_edited_line_inside_it_is_drift_with_the_line(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text(HOSTS)
    ok = compare_block(str(hosts), BLOCK, MARKER)
    assert ok == {"path": str(hosts), "state": "ok", "diff": [], "mode_expected": None, "mode_found": "0644",
                  "block": "# BEGIN ncclprep host_names (managed by Ansible)"}
    hosts.write_text(HOSTS.replace("10.0.0.2 node2.lan node2", "10.0.0.9 node2.lan node2"))
    out = compare_block(str(hosts), BLOCK, MARKER)
    assert out["state"] == "differs"
    assert out["diff"][:2] == ["--- expected", f"+++ {hosts}"]
    assert [ln for ln in out["diff"][3:] if ln[:1] in "+-"] == ["-10.0.0.2 node2.lan node2",
                                                                 "+10.0.0.9 node2.lan node2"]
    assert summary(out) == (f'{hosts} block "# BEGIN ncclprep host_names (managed by Ansible)" differs: '
                            "-10.0.0.2 node2.lan node2 +10.0.0.9 node2.lan node2")


def test_a_line_added_inside_the_block_is_drift_but_lines_other_people_keep_outside_it_are_not(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("192.168.1.5 printer\n" + HOSTS.replace("::1 localhost ip6-localhost", "::1 localhost") +
                     "10.9.9.9 someone-elses\n")
    assert compare_block(str(hosts), BLOCK, MARKER)["state"] == "ok"
    hosts.write_text(HOSTS.replace("10.0.0.2 node2.lan node2\n", "10.0.0.2 node2.lan node2\n10.0.0.99 intruder\n"))
    out = compare_block(str(hosts), BLOCK, MARKER)
    assert out["state"] == "differs" and "+10.0.0.99 intruder" in out["diff"]
    assert not [ln for ln in out["diff"] if ln.startswith("-") and not ln.startswith("---")]


def test_a_removed_block_or_a_lost_end_marker_is_absent_and_a_missing_file_is_missing(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    out = compare_block(str(hosts), BLOCK, MARKER)
    assert out["state"] == "absent"
    assert out["diff"] == ["--- expected", f"+++ {hosts}", "-# BEGIN ncclprep host_names (managed by Ansible)",
                           "-10.0.0.1 node1.lan node1", "-10.0.0.2 node2.lan node2",
                           "-# END ncclprep host_names (managed by Ansible)"]
    assert summary(out) == f'{hosts} block "# BEGIN ncclprep host_names (managed by Ansible)" is not there'
    hosts.write_text(HOSTS.replace("# END ncclprep host_names (managed by Ansible)\n", ""))
    assert compare_block(str(hosts), BLOCK, MARKER)["state"] == "absent"
    assert compare_block(str(tmp_path / "gone"), BLOCK, MARKER)["state"] == "missing"
    # an empty block: blockinfile removes the markers, so none is right and a left-over block is drift
    hosts.write_text("127.0.0.1 localhost\n")
    assert compare_block(str(hosts), "", MARKER)["state"] == "ok"
    hosts.write_text(HOSTS)
    assert compare_block(str(hosts), "", MARKER)["state"] == "differs"


# --- lines (known_hosts, lineinfile: each line must be there; other lines are other people's) ---

ED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKxulkEfovnGyAAneOt8Z/7XR7ws22inGYvUujwDbrGX"
EC = ("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBCRqMFHmTZayDcCRjdRLviqeHQEmjCkX6Lq2"
      "JaUsC3I5gtRZYfrMqFaWF55b8uPh7YDzf8MJS1FOhd54Ng3kMqA=")
OTHER = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHtOs2wDJVXp8TnqeUfWBbQ3UdCbIWpM9FrBWGoY0u6U"
KNOWN = [f"node1 {ED}", f"10.0.0.1 {ED}", f"node1 {EC}", f"10.0.0.1 {EC}"]


def test_known_hosts_with_every_key_is_ok_and_a_removed_key_is_drift_naming_the_line(tmp_path):
    kh = tmp_path / "ssh_known_hosts"
    kh.write_text("".join(f"{ln}\n" for ln in KNOWN))
    assert compare_lines(str(kh), KNOWN) == {"path": str(kh), "state": "ok", "diff": [], "mode_expected": None,
                                             "mode_found": "0644", "lines": 4, "missing": 0}
    kh.write_text("".join(f"{ln}\n" for ln in KNOWN if ln != f"node1 {EC}"))
    out = compare_lines(str(kh), KNOWN)
    assert out["state"] == "differs" and out["missing"] == 1
    assert out["diff"] == ["--- expected", f"+++ {kh}", f"-node1 {EC}"]
    assert summary(out) == f"{kh} lacks 1 of 4 lines: -node1 {EC}"


def test_a_changed_known_hosts_key_is_drift_and_shows_the_key_that_replaced_it(tmp_path):
    kh = tmp_path / "ssh_known_hosts"
    kh.write_text("".join(f"{ln}\n" for ln in KNOWN).replace(f"node1 {ED}", f"node1 {OTHER}"))
    out = compare_lines(str(kh), KNOWN)
    assert out["state"] == "differs" and out["missing"] == 1
    # the replacement shares the host name; node1's ecdsa line (expected, present) is not shown
    assert out["diff"] == ["--- expected", f"+++ {kh}", f"-node1 {ED}", f"+node1 {OTHER}"]


def test_lines_other_people_added_to_known_hosts_are_not_drift(tmp_path):
    kh = tmp_path / "ssh_known_hosts"
    kh.write_text(f"github.com {OTHER}\n" + "".join(f"{ln}\n" for ln in KNOWN) + f"node9 {OTHER}\n# a comment\n"
                  f"node1  {ED.replace(' ', chr(9))}\n")
    assert compare_lines(str(kh), KNOWN)["state"] == "ok"
    kh.write_text(f"github.com {OTHER}\n" + "".join(f"{ln}\n" for ln in KNOWN[1:]) + f"node9 {OTHER}\n")
    out = compare_lines(str(kh), KNOWN)
    # a foreign line of another host is never shown as the replacement of node1's key
    assert out["diff"] == ["--- expected", f"+++ {kh}", f"-node1 {ED}"]


def test_a_lines_file_mode_is_compared_only_where_the_role_sets_one(tmp_path):
    conf = tmp_path / "nftables.conf"
    conf.write_text('#!/usr/sbin/nft -f\ninclude "/etc/nftables.d/ncclprep.nft"\n')
    conf.chmod(0o644)
    line = ['include "/etc/nftables.d/ncclprep.nft"']
    assert compare_lines(str(conf), line, "0755")["state"] == "mode"
    assert compare_lines(str(conf), line, None)["state"] == "ok"
    assert compare_lines(str(tmp_path / "none"), line, "0755")["state"] == "missing"


# --- copy (ansible.builtin.copy: the file from files/ or the content, byte for byte) ---

def test_a_changed_copied_file_is_drift_even_where_only_its_bytes_differ(tmp_path):
    src = os.path.join(REPO, "roles", "numa_pinning", "files", "ncclprep-irq-affinity")
    with open(src, encoding="utf-8") as fh:
        script = fh.read()
    dest = tmp_path / "ncclprep-irq-affinity"
    dest.write_text(script)
    dest.chmod(0o755)
    assert check({"path": str(dest), "kind": "copy", "content": script, "mode": "0755"})["state"] == "ok"
    dest.write_text(script.replace("rc=1\n", "rc=0\n"))
    out = check({"path": str(dest), "kind": "copy", "content": script, "mode": "0755"})
    assert out["kind"] == "copy" and out["state"] == "differs"
    assert "-    rc=1" in out["diff"] and "+    rc=0" in out["diff"]
    # CRLF line ends: the same lines, other bytes
    dest.write_bytes(script.replace("\n", "\r\n").encode())
    out = compare(str(dest), script, "0755")
    assert out["state"] == "differs" and out["diff"][2:] == ["-(line ends or the final newline)", "+(as found)"]
    dest.write_text(script)
    dest.chmod(0o644)
    assert compare(str(dest), script, "0755")["state"] == "mode"


def test_check_takes_each_kind_and_refuses_an_entry_without_its_field(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text(HOSTS)
    block = check({"path": str(hosts), "kind": "block", "content": BLOCK, "marker": MARKER, "mode": None})
    assert block["kind"] == "block" and block["state"] == "ok"
    assert check({"path": str(hosts), "kind": "lines", "lines": ["127.0.0.1 localhost"], "mode": None})["state"] == "ok"
    assert check({"path": str(hosts), "content": HOSTS, "mode": None}) == {
        "path": str(hosts), "state": "ok", "diff": [], "mode_expected": None, "mode_found": "0644", "kind": "file"}
    with pytest.raises(ValueError, match="kind block needs content and marker"):
        check({"path": str(hosts), "kind": "block", "content": BLOCK})
    with pytest.raises(ValueError, match="kind='link'; valid: file, copy, block, lines"):
        check({"path": str(hosts), "kind": "link"})


def test_the_engine_reads_site_ymls_record_and_says_why_when_it_cannot(tmp_path, monkeypatch):
    """check_record (``ncclprep node preflight``'s drift.files): the entries site.yml recorded,
    each compared as library/managed_files.py compares it; a record that is missing, not JSON, not
    such a document, too large or holding a bad entry is no verdict but a reason."""
    from ansible.module_utils.ncclprep import drift

    conf = tmp_path / "nccl.conf"
    conf.write_text(CONF + "NCCL_DEBUG=TRACE\n")
    conf.chmod(0o644)
    record = tmp_path / "managed.json"
    entry = {"concern": "nccl_env", "path": str(conf), "kind": "file", "mode": "0644", "content": CONF}
    record.write_text(json.dumps({"version": 1, "files": [entry]}))
    rows, why = check_record(str(record))
    assert why is None
    assert [(r["concern"], r["kind"], r["state"]) for r in rows] == [("nccl_env", "file", "differs")]
    assert summary(rows[0]) == f"{conf} differs: +NCCL_DEBUG=TRACE"
    assert check_record(str(tmp_path / "absent.json")) == (
        None, f"no record of the managed files at {tmp_path / 'absent.json'}: run site.yml with this ncclprep")
    for text, reason in (("{not json", "Expecting property name"), ('{"files": {}}', "files is dict, not a list"),
                         ('{"version": 1}', "'files'"),
                         (json.dumps({"files": [{"path": str(conf)}]}), "files[0] lacks ['concern']"),
                         (json.dumps({"files": [dict(entry, kind="sym")]}), "files[0] (nccl_env): ")):
        record.write_text(text)
        rows, why = check_record(str(record))
        assert rows is None and why.startswith(f"{record} is not a record of managed files: ") and reason in why, why
    monkeypatch.setattr(drift, "RECORD_MAX", 10)
    record.write_text(json.dumps({"version": 1, "files": []}))
    assert check_record(str(record)) == (None, f"{record} is over 10 bytes: not a record of managed files")


def test_the_inventory_digest_follows_the_inventorys_files_not_where_they_live(tmp_path):
    """lookup ncclprep_inventory_digest: the same files in two places give one digest; a changed
    group_vars file another; hidden files and a source that is no path are handled."""
    from conftest import load_source

    digest = load_source("ncclprep_inventory_digest", "lookup_plugins/ncclprep_inventory_digest.py").inventory_digest
    for where in ("a", "b"):
        (tmp_path / where / "group_vars" / "all").mkdir(parents=True)
        (tmp_path / where / "hosts.yml").write_text("all: {hosts: {node1: {}}}\n")
        (tmp_path / where / "group_vars" / "all" / "ncclprep.yml").write_text("nic_mtu_value: 4096\n")
    (tmp_path / "b" / ".git").mkdir()
    (tmp_path / "b" / ".git" / "HEAD").write_text("ref: x\n")
    one = digest([str(tmp_path / "a")])
    assert len(one) == 16 and one == digest([str(tmp_path / "b")])
    (tmp_path / "b" / "group_vars" / "all" / "ncclprep.yml").write_text("nic_mtu_value: 1500\n")
    assert digest([str(tmp_path / "b")]) != one
    assert digest([str(tmp_path / "a" / "hosts.yml")]) != one
    assert digest(["node1,node2,"]) == digest(["node1,node2,"]) != digest(["node1,"])


# --- site.yml's side: library/managed_files.py state present ---

def test_ensure_writes_a_missing_file_and_its_folder_then_leaves_it_alone(tmp_path):
    dest = tmp_path / "etc" / "ncclprep" / "nccl.conf"
    entry = {"path": str(dest), "content": CONF, "mode": "0640"}
    first = ensure(entry)
    assert (first["state"], first["changed"], first["owner_found"]) == ("missing", True, None)
    assert dest.read_text() == CONF and f"{dest.stat().st_mode & 0o7777:04o}" == "0640"
    assert (dest.stat().st_uid, dest.stat().st_gid) == (0, 0)
    assert f"{dest.parent.stat().st_mode & 0o7777:04o}" == "0755"
    mtime = dest.stat().st_mtime_ns
    again = ensure(entry)
    assert (again["state"], again["changed"], again["owner_found"]) == ("ok", False, "0:0")
    assert dest.stat().st_mtime_ns == mtime  # not rewritten
    assert not [p.name for p in dest.parent.iterdir() if p.name != "nccl.conf"]  # no temp file left


def test_ensure_rewrites_a_hand_edit_and_sets_a_wrong_mode_or_owner_without_touching_the_text(tmp_path):
    dest = tmp_path / "nccl.conf"
    entry = {"path": str(dest), "kind": "copy", "content": CONF, "mode": "0644"}
    dest.write_text(CONF.replace("WARN", "TRACE"))
    out = ensure(entry)
    assert out["state"] == "differs" and out["changed"] and "-NCCL_DEBUG=WARN" in out["diff"]
    assert dest.read_text() == CONF
    dest.chmod(0o666)
    os.chown(dest, 1234, 1234)
    inode = dest.stat().st_ino
    out = ensure(entry)
    assert (out["state"], out["changed"], out["owner_found"]) == ("mode", True, "1234:1234")
    st = dest.stat()
    assert (st.st_ino, st.st_mode & 0o7777, st.st_uid, st.st_gid) == (inode, 0o644, 0, 0)
    os.chown(dest, 0, 1234)
    assert ensure(entry)["changed"] and dest.stat().st_gid == 0


def test_ensure_in_check_mode_touches_nothing_and_refuses_what_it_does_not_write_whole(tmp_path):
    dest = tmp_path / "missing" / "nccl.conf"
    out = ensure({"path": str(dest), "content": CONF, "mode": "0644"}, check_mode=True)
    assert out["changed"] and out["state"] == "missing" and not dest.parent.exists()
    hosts = tmp_path / "hosts"
    hosts.write_text(HOSTS)
    with pytest.raises(ValueError, match="only whole files .* got kind 'block'"):
        ensure({"path": str(hosts), "kind": "block", "content": BLOCK, "marker": MARKER, "mode": "0644"})
    with pytest.raises(ValueError, match="mode None"):
        ensure({"path": str(hosts), "content": HOSTS, "mode": None})
    assert hosts.read_text() == HOSTS


# --- the manifests: which entries apply on a host, and what a role's task loops over ---

UNIT = {"src": "boot-unit.service.j2", "role": "boot_unit", "vars": {"boot_unit_name": "x.service"},
        "dest": "/etc/systemd/system/x.service", "mode": "0644"}


def test_entries_the_role_does_not_write_on_this_host_are_left_out():
    entries = [{"src": "netplan-mtu.yaml.j2", "dest": "/etc/netplan/60-ncclprep-mtu.yaml", "mode": "0600",
                "when": False},
               {"src": "ifupdown-mtu.sh.j2", "dest": "/etc/network/if-up.d/ncclprep-mtu", "mode": "0755",
                "when": True},
               dict(UNIT, when="False")]
    out = managed_entries(entries, concern="nic_mtu")
    assert [e["dest"] for e in out] == ["/etc/network/if-up.d/ncclprep-mtu"]
    assert out[0] == {"kind": "file", "src": "ifupdown-mtu.sh.j2", "dest": "/etc/network/if-up.d/ncclprep-mtu",
                      "mode": "0755", "role": None, "vars": {}, "when": True, "content": None, "block": None,
                      "marker": None, "lines": None, "concern": "nic_mtu"}


def test_a_kind_selects_the_entries_the_role_writes_with_its_own_task():
    entries = [{"src": "ncclprep-rps-rfs.sh.j2", "dest": "/usr/local/sbin/ncclprep-rps-rfs", "mode": "0755"}, UNIT,
               {"kind": "copy", "content": "{}\n", "dest": "/etc/ncclprep/numa-binding.json", "mode": "0644"},
               {"kind": "lines", "lines": ["a b"], "dest": "/etc/ssh/ssh_known_hosts", "mode": None}]
    assert [e["dest"] for e in managed_entries(entries, "file")] == ["/usr/local/sbin/ncclprep-rps-rfs"]
    assert [e["dest"] for e in managed_entries(entries, "copy")] == ["/etc/ncclprep/numa-binding.json"]
    assert [e["lines"] for e in managed_entries(entries, "lines")] == [["a b"]]
    # the drift check takes them all, boot_unit's unit with its caller's vars
    assert [(e["kind"], e["role"]) for e in managed_entries(entries)] == [
        ("file", None), ("file", "boot_unit"), ("copy", None), ("lines", None)]
    assert managed_entries(entries)[1]["vars"] == {"boot_unit_name": "x.service"}


@pytest.mark.parametrize("entry,error", [
    ({"src": "a.j2", "dest": "/a", "mode": "0644", "kind": "symlink"},
     r"kind='symlink'; valid: file, copy, block, lines"),
    ({"src": "a.j2", "dest": "/a"}, "needs dest and mode"),
    ({"dest": "/a", "mode": "0644"}, "kind file needs src"),
    ({"kind": "copy", "dest": "/a", "mode": "0644"}, "exactly one of src and content"),
    ({"kind": "copy", "src": "f", "content": "x", "dest": "/a", "mode": "0644"}, "exactly one of src and content"),
    ({"kind": "block", "block": "x", "marker": "# ncclprep", "dest": "/a", "mode": None}, "lacks {mark}"),
    ({"kind": "lines", "lines": "a b", "dest": "/a", "mode": None}, "not a list"),
    ({"src": "a.j2", "dest": "/a", "mode": "0644", "when": "{{ x }}"}, "is not a boolean"),
    ({"src": "a.j2", "dest": "/a", "mode": "0644", "owner": "root"}, r"unknown keys \['owner'\]"),
])
def test_a_bad_manifest_entry_is_refused_naming_it(entry, error):
    with pytest.raises(ValueError, match=error) as exc:
        managed_entries([entry])
    assert "entry 0 (" in str(exc.value)


def test_the_check_names_the_host_the_block_and_the_missing_key():
    block = {"concern": "host_names", "kind": "block", "path": "/etc/hosts", "state": "differs",
             "block": "# BEGIN ncclprep host_names (managed by Ansible)",
             "diff": ["--- expected", "+++ /etc/hosts", "@@ -2 +2 @@", "-10.0.0.2 node2", "+10.0.0.9 node2"]}
    keys = {"concern": "ssh_trust", "kind": "lines", "path": "/etc/ssh/ssh_known_hosts", "state": "differs",
            "lines": 6, "missing": 1,
            "diff": ["--- expected", "+++ /etc/ssh/ssh_known_hosts", "-node1 ssh-ed25519 AAAA"]}
    ok = {"concern": "nccl_env", "kind": "file", "path": "/etc/nccl.conf", "state": "ok", "diff": []}
    recs = {"node1": {"drift": [ok, block]}, "node2": {"drift": [ok]}, "node3": {"drift": [ok, keys]}}
    (c,) = check_drift(recs, Context(all_hosts=("node1", "node2", "node3")))
    assert c["status"] == "FAIL" and c["hosts"] == ["node1", "node3"]
    assert c["measured"] == {"node1": {"/etc/hosts": block["diff"]},
                             "node3": {"/etc/ssh/ssh_known_hosts": keys["diff"]}}
    assert c["message"] == ('node1: /etc/hosts block "# BEGIN ncclprep host_names (managed by Ansible)" differs: '
                            "-10.0.0.2 node2 +10.0.0.9 node2 (host_names); node3: /etc/ssh/ssh_known_hosts lacks 1 "
                            "of 6 lines: -node1 ssh-ed25519 AAAA (ssh_trust)")


def _load(path: str):
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _tasks(tasks):
    for task in tasks or []:
        yield task
        yield from _tasks(task.get("block"))


def manifests() -> dict[str, list]:
    out = {}
    for path in sorted(glob.glob(os.path.join(REPO, "roles", "*", "vars", "main.yml"))):
        role = path.split(os.sep)[-3]
        data = _load(path) or {}
        if f"{role}_managed_files" in data:
            out[role] = data[f"{role}_managed_files"]
    return out


def role_tasks(role: str) -> str:
    return "".join(open(p, encoding="utf-8").read()
                   for p in sorted(glob.glob(os.path.join(REPO, "roles", role, "tasks", "*.yml"))))


def test_every_file_site_yml_writes_is_in_a_manifest():
    assert set(manifests()) == {"nccl_env", "sysctl_tuning", "ssh_trust", "rps_rfs", "numa_pinning", "roce_qos",
                                "nic_mtu", "firewall", "host_names", "slurm_health"}
    dests = {role: [(e.get("kind", "file"), e["dest"]) for e in entries] for role, entries in manifests().items()}
    assert dests["host_names"] == [("block", "{{ host_names_file }}")]
    assert dests["ssh_trust"] == [("file", "{{ ssh_trust_client_config }}"), ("lines", "{{ ssh_trust_known_hosts }}")]
    assert dests["nic_mtu"] == [("file", "{{ nic_mtu_netplan_file }}"), ("file", "{{ nic_mtu_ifupdown_hook }}")]
    assert dests["firewall"] == [("file", "{{ firewall_nftables_file }}"), ("lines", "{{ firewall_nftables_conf }}")]
    assert [d for _, d in dests["numa_pinning"]] == [
        "{{ numa_pinning_map_file }}", "{{ numa_pinning_map_json }}", "{{ numa_pinning_bind_command }}",
        "{{ numa_pinning_irqbalance_policy }}", "{{ numa_pinning_irq_script }}",
        "{{ boot_unit_systemd_dir | default('/etc/systemd/system') }}/{{ numa_pinning_irq_unit }}"]
    # Every task of a role that writes a file loops over its manifest; these write what no
    # manifest can render on the controller, each for its reason.
    unlisted = {
        ("boot_unit", "Ensure the boot-time unit is installed"),  # listed by each caller (role: boot_unit)
        # (the key pair, made on the first node, is written by a command as the account; its private
        # half is a secret never rendered on the controller)
        ("ssh_trust", "Remove the cluster keys of earlier pairs"),  # removes lines, writes none
        ("numa_pinning", "Ensure irqbalance leaves the NIC's IRQs alone"),  # only where irqbalance is installed
        # takes the published names off other people's lines of /etc/hosts (issue 41: one name, one
        # address); its result is what check names.resolve reads on every node
        ("host_names", "Take the published names off the other lines"),
        ("torch_runtime", "Copy the wheelhouse to the node"),  # the wheels: versions.torch checks what they install
        ("firewall", "Install the dead-man switch"),  # a tool, not configuration: installed by every run that uses it
        # the node check (`ncclprep node check`): a tool and the intent it judges by, not configuration a job
        # reads; every full site.yml run writes them (tests/integration holds its rows to validate.yml's)
        ("preflight", "Install the node-side core"),
        ("preflight", "Install the ncclprep command and this node's intent"),
        # lines of a file Slurm's admin owns: check slurm.health compares them (concerns/slurm_health.py)
        ("slurm_health", "Set ncclprep's lines in slurm.conf"),
        # on the controller (delegate_to localhost): a tune step's result for the CLI, nothing on a node
        ("tune", "Write the space and every node's settings for the CLI"),
        ("tune", "Write the nodes' results for the CLI"),
    }
    writers = ("ansible.builtin.template", "ansible.builtin.copy", "ansible.builtin.blockinfile",
               "ansible.builtin.lineinfile", "ansible.builtin.known_hosts", "managed_files")  # not its state check
    found = set()
    for path in sorted(glob.glob(os.path.join(REPO, "roles", "*", "tasks", "*.yml"))):
        role = path.split(os.sep)[-3]
        for task in _tasks(_load(path)):
            if not any(w in task for w in writers) or (task.get("managed_files") or {}).get("state") == "check":
                continue
            if re.search(rf"{role}_managed_files \| ncclprep_managed\('(\w+)'\)", str(task.get("loop", ""))):
                continue
            if WRITE.format(role=role) == str((task.get("managed_files") or {}).get("files")):
                continue
            found.add((role, task["name"]))
    assert found == unlisted


#: How a role writes its whole files (kinds file and copy): one managed_files task (state present).
WRITE = "{{{{ query('ncclprep_managed_files', '{role}', write=true) }}}}"
#: The roles that write them with a template task instead, for its `validate` (the file is checked by
#: the tool that reads it before it replaces the old one): netplan's drop-in, the nftables table.
VALIDATED = {"nic_mtu": "__nic_mtu_netplan_validate", "firewall": "nft -c -f %s"}


@pytest.mark.parametrize("role", sorted(manifests()))
def test_every_manifest_entry_names_what_exists_and_the_role_loops_over_its_own_kinds(role):
    entries = manifests()[role]
    tasks = role_tasks(role)
    for e in entries:
        assert set(e) <= set(FIELDS) and {"dest", "mode"} <= set(e), (role, e)
        kind = e.get("kind", "file")
        assert kind in KINDS, (role, e)
        owner = e.get("role") or role
        if kind == "file":
            assert os.path.exists(os.path.join(REPO, "roles", owner, "templates", e["src"])), (role, e)
        if kind == "copy" and "src" in e:
            assert os.path.exists(os.path.join(REPO, "roles", owner, "files", e["src"])), (role, e)
        if kind == "block":
            assert "{mark}" in e["marker"], (role, e)
        if "when" in e:
            assert re.fullmatch(r"\{\{ .+ \}\}", e["when"]), (role, e)
        if e.get("role"):
            continue
        if kind in ("file", "copy") and role not in VALIDATED:
            # one spelling: every whole file of the role in one managed_files run over the same list
            assert f"files: \"{WRITE.format(role=role)}\"" in tasks, (role, kind)
            assert f"{role}_managed_files | ncclprep_managed('{kind}')" not in tasks, role
        else:
            # blocks and lines, and the files a validate guards: a loop over the same list
            assert f"{role}_managed_files | ncclprep_managed('{kind}')" in tasks, (role, kind)
            if kind == "file":
                assert VALIDATED[role] in tasks, role


@pytest.mark.parametrize("role", ["rps_rfs", "numa_pinning", "roce_qos"])
def test_a_boot_unit_entry_renders_boot_units_template_with_the_vars_its_role_imports_boot_unit_with(role):
    (unit,) = [e for e in manifests()[role] if e.get("role")]
    assert unit["role"] == "boot_unit" and unit["src"] == "boot-unit.service.j2"
    name = f"__{role}_boot_unit"
    assert unit["vars"] == f"{{{{ {name} }}}}"
    imported = [t for p in glob.glob(os.path.join(REPO, "roles", role, "tasks", "*.yml")) for t in _tasks(_load(p))
                if (t.get("ansible.builtin.import_role") or {}).get("name") == "boot_unit"]
    assert len(imported) == 1
    unit_vars = _load(os.path.join(REPO, "roles", role, "vars", "main.yml"))[name]
    assert imported[0]["vars"] == {k: f"{{{{ {name}.{k} }}}}" for k in unit_vars}
    # where and how boot_unit writes it: its own default folder and mode
    boot_tasks = _load(os.path.join(REPO, "roles", "boot_unit", "tasks", "main.yml"))
    (written,) = boot_tasks[0]["managed_files"]["files"]
    assert written["mode"] == unit["mode"] and f"'{unit['src']}'" in written["content"]
    systemd_dir = _load(os.path.join(REPO, "roles", "boot_unit", "defaults", "main.yml"))["boot_unit_systemd_dir"]
    unit_name = {"rps_rfs": "rps_rfs_unit", "numa_pinning": "numa_pinning_irq_unit", "roce_qos": "roce_qos_unit"}[role]
    assert unit["dest"] == f"{{{{ boot_unit_systemd_dir | default('{systemd_dir}') }}}}/{{{{ {unit_name} }}}}"
    assert unit_vars["boot_unit_name"] == f"{{{{ {unit_name} }}}}"


# --- site.yml's record of the managed files on localhost, against files the roles' own tasks wrote ---

PLAY = """
- name: Drift harness
  hosts: ncclprep_nodes
  gather_facts: false
  tasks:
    - name: Find the data plane (lo) and publish the members
      ansible.builtin.include_role: {name: data_plane, public: true}
    - name: Give the node the facts the roles decide on (concern_facts keeps what it is given in into)
      concern_facts: {concerns: {nccl_env: {}}, into: "{{ fake_facts }}"}
    - name: Load each concern's defaults and manifest, as the preflight's include_role does
      ansible.builtin.include_vars: "{{ roles_dir }}/{{ item }}"
      loop: "{{ concerns | product(['defaults/main.yml', 'vars/main.yml']) | map('join', '/') }}"
    - name: Write the files as the roles do, with their own tasks
      when: provision | bool
      block:
        - {name: host_names, ansible.builtin.include_role: {name: host_names}}
        - {name: ssh_trust, ansible.builtin.include_role: {name: ssh_trust, tasks_from: known_hosts.yml}}
        - {name: nic_mtu, ansible.builtin.include_role: {name: nic_mtu, tasks_from: persist.yml}}
        - {name: numa_pinning map, ansible.builtin.include_role: {name: numa_pinning, tasks_from: binding.yml}}
        - {name: numa_pinning IRQs, ansible.builtin.include_role: {name: numa_pinning, tasks_from: irq.yml}}
    - name: Render them as site.yml's install.yml does
      ansible.builtin.include_role: {name: preflight, tasks_from: managed.yml, public: true}
    - name: Keep the record of the managed files as install.yml writes it
      ansible.builtin.copy: {content: "{{ __preflight_managed_record }}", dest: "{{ record_file }}", mode: "0600"}
"""
CONCERNS = ["host_names", "nic_mtu", "rps_rfs", "numa_pinning", "roce_qos", "ssh_trust", "firewall"]


def facts(nic_manager="ifupdown", roce=False, backend="ufw"):
    """What each concern's facts.yml would read: the fields the roles' conditions and templates use."""
    return {
        "ssh_trust": {"user": "root", "home": "/root", "host_keys": [ED, EC]},
        "nic_mtu": {"interface": "eth-0", "mtu": 1500, "min_mtu": 68, "max_mtu": 9000, "roce": False, "error": None,
                    "persist": {"manager": nic_manager, "netplan": [], "ifupdown": [], "nm_connection": ""}},
        "roce_qos": {"skipped": not roce, "skip_reason": None if roce else "no RoCE port", "tool": "dcb",
                     "unsupported": {}, "ports": [{"device": "mlx5_0", "port": 1, "netdev": "eth-0"}] if roce else []},
        "numa_pinning": {"topology": {}, "installed_text": None, "irq_affinity": {"40": "0-3", "41": "0-3"}},
        "firewall": {"backend": backend, "tools": {"ufw": backend == "ufw", "nft": True}, "rc": 0, "stdout": ""},
    }


def harness(tmp_path, provision: bool, **fact_args) -> dict:
    """Run PLAY on localhost (the only member, data plane on lo); returns {path: row}."""
    out = tmp_path / "node"
    intents = {
        "host_names_intent": [{"host": "localhost", "address": "127.0.0.1", "names": ["localhost.lan", "localhost"]},
                              {"host": "node2", "address": "127.0.0.2", "names": ["node2.lan", "node2"]}],
        "ssh_trust_intent": {"user": "root", "home": "/root", "key": "/root/.ssh/id_ed25519_ncclprep",
                             "from": "127.0.0.0/8", "names": {"localhost": ["localhost", "127.0.0.1"]}},
        "nic_mtu_intent": {"interface": "eth-0", "mtu": 9000},
        "rps_rfs_intent": {"interface": "eth-0", "queues": ["rx-0"], "cpus": "0-3", "mask": "f", "flow_cnt": 4096},
        "numa_pinning_intent": {"binding": [{"local_rank": 0, "numa_node": 0, "cpus": "0-3", "gpu": "-"}],
                                "binding_text": "0 0 0-3 -", "nproc": 1, "numa_nodes": 1, "gpus": 0,
                                "irq": {"interface": "eth-0", "cpus": "0-3", "irqs": ["40", "41"], "reason": None}},
        "roce_qos_intent": {"interfaces": [], "priority": 3, "trust": "dscp", "ecn": True, "tool": "auto"},
        "firewall_intent": {"backend": fact_args.get("backend", "ufw"), "cluster_cidr": "127.0.0.0/8", "rules": []},
    }
    paths = {
        "host_names_file": out / "hosts", "ssh_trust_known_hosts": out / "ssh_known_hosts",
        "ssh_trust_client_config": out / "60-ncclprep.conf", "nic_mtu_netplan_file": out / "60-ncclprep-mtu.yaml",
        "nic_mtu_ifupdown_hook": out / "if-up.d-ncclprep-mtu", "rps_rfs_script": out / "ncclprep-rps-rfs",
        "numa_pinning_map_file": out / "numa-binding", "numa_pinning_map_json": out / "numa-binding.json",
        "numa_pinning_bind_command": out / "ncclprep-numa-bind",
        "numa_pinning_irq_script": out / "ncclprep-irq-affinity",
        "numa_pinning_irqbalance_policy": out / "ncclprep-irqbalance-policy",
        "numa_pinning_irqbalance_defaults": out / "irqbalance", "roce_qos_script": out / "ncclprep-roce-qos",
        "firewall_nftables_file": out / "ncclprep.nft", "firewall_nftables_conf": out / "nftables.conf",
        "boot_unit_systemd_dir": out / "systemd",
    }
    (out / "systemd" / "multi-user.target.wants").mkdir(parents=True, exist_ok=True)
    if not (out / "hosts").exists():
        (out / "hosts").write_text("127.0.0.1 localhost\n")
    extra = dict(intents, **{k: str(v) for k, v in paths.items()}, fake_facts=facts(**fact_args), provision=provision,
                 concerns=CONCERNS, roles_dir=os.path.join(REPO, "roles"),
                 record_file=str(tmp_path / "record.json"),
                 data_plane_cidr="127.0.0.0/8", ansible_python_interpreter=sys.executable,
                 # torch_runtime: a concern with an intent and no manifest (its venv is no file of drift's)
                 torch_runtime_intent={"version": "2.13.0"},
                 ncclprep_concerns=[c for c in concerns.rows() if c["name"] in CONCERNS + ["torch_runtime"]])
    (tmp_path / "extra.json").write_text(json.dumps(extra))
    (tmp_path / "hosts.ini").write_text("[ncclprep_nodes]\nlocalhost ansible_connection=local\n")
    (tmp_path / "play.yml").write_text(PLAY)
    env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
           "ANSIBLE_ROLES_PATH": os.path.join(REPO, "roles")}
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
                           "-i", str(tmp_path / "hosts.ini"), str(tmp_path / "play.yml"),
                           "-e", f"@{tmp_path / 'extra.json'}"],
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    # the engine's drift.files (ncclprep node preflight, which validate.yml starts) reads the record,
    # with no Ansible, and compares every file with it (check_all), hand edits included
    rows, why = check_record(str(tmp_path / "record.json"))
    assert why is None and [r["concern"] for r in rows] and len(rows) == len({r["path"] for r in rows})
    return {os.path.relpath(r["path"], out): r for r in rows}


RPS_SCRIPT = ("#!/bin/sh\n#\n# Ansible managed\n#\n# RPS/RFS on eth-0: CPUs 0-3, 4096 flows per rx queue.\nset -eu\n"
              "dev=/sys/class/net/eth-0/queues\nfor q in \"$dev\"/rx-*; do\n  echo f > \"$q/rps_cpus\"\n"
              "  echo 4096 > \"$q/rps_flow_cnt\"\ndone\n")


def rps_unit(script: str) -> str:
    """rps_rfs's unit as boot_unit writes it (tests/unit/test_boot_unit.py holds it byte for byte)."""
    return ("#\n# Ansible managed\n#\n[Unit]\nDescription=ncclprep: RPS/RFS on eth-0\n"
            "After=network-online.target sys-subsystem-net-devices-eth\\x2d0.device\nWants=network-online.target\n\n"
            f"[Service]\nType=oneshot\nExecStart={script}\nRemainAfterExit=yes\n\n[Install]\nWantedBy=multi-user.target\n")


@pytest.fixture(scope="module")
def provisioned(tmp_path_factory):
    """The roles' own tasks wrote their files (rps_rfs's as its tested template and unit give them);
    the engine then compared every one against site.yml's record."""
    tmp = tmp_path_factory.mktemp("drift")
    node = tmp / "node"
    node.mkdir()
    (node / "ncclprep-rps-rfs").write_text(RPS_SCRIPT)
    (node / "ncclprep-rps-rfs").chmod(0o755)
    (node / "systemd").mkdir()
    (node / "systemd" / "ncclprep-rps-rfs.service").write_text(rps_unit(str(node / "ncclprep-rps-rfs")))
    (node / "systemd" / "ncclprep-rps-rfs.service").chmod(0o644)
    return tmp, harness(tmp, provision=True)


def test_every_file_the_roles_wrote_is_as_site_yml_records_it(provisioned):
    _, rows = provisioned
    assert {p: (r["concern"], r["kind"], r["state"]) for p, r in rows.items()} == {
        "hosts": ("host_names", "block", "ok"),
        "if-up.d-ncclprep-mtu": ("nic_mtu", "file", "ok"),
        "ncclprep-rps-rfs": ("rps_rfs", "file", "ok"),
        "systemd/ncclprep-rps-rfs.service": ("rps_rfs", "file", "ok"),
        "numa-binding": ("numa_pinning", "file", "ok"),
        "numa-binding.json": ("numa_pinning", "copy", "ok"),
        "ncclprep-numa-bind": ("numa_pinning", "file", "ok"),
        "ncclprep-irq-affinity": ("numa_pinning", "copy", "ok"),
        "ncclprep-irqbalance-policy": ("numa_pinning", "file", "ok"),
        "systemd/ncclprep-irq-affinity.service": ("numa_pinning", "file", "ok"),
        "60-ncclprep.conf": ("ssh_trust", "file", "ok"),
        "ssh_known_hosts": ("ssh_trust", "lines", "ok"),
    }
    # not written on this host, so not reported: the netplan drop-in (ifupdown defines the
    # interface), roce_qos's script and unit (no RoCE port), the nftables table (ufw)
    assert rows["ssh_known_hosts"]["lines"] == 4
    assert rows["hosts"]["block"] == "# BEGIN ncclprep host_names (managed by Ansible)"
    assert rows["ncclprep-irq-affinity"]["mode_found"] == "0755"


def test_hand_edits_are_named_and_files_the_role_does_not_write_here_are_not(provisioned):
    tmp, _ = provisioned
    node = tmp / "node"
    hosts = (node / "hosts").read_text()
    (node / "hosts").write_text("10.9.9.9 printer\n" + hosts.replace("127.0.0.2 node2.lan node2", "127.0.0.9 node2"))
    kh = (node / "ssh_known_hosts").read_text()
    (node / "ssh_known_hosts").write_text(kh.replace(f"127.0.0.1 {EC}\n", "") + f"github.com {OTHER}\n")
    irq = node / "ncclprep-irq-affinity"
    irq.write_text(irq.read_text().replace("exit $rc", "exit 0"))
    unit = node / "systemd" / "ncclprep-rps-rfs.service"
    unit.write_text(unit.read_text().replace("RemainAfterExit=yes\n", ""))
    (node / "60-ncclprep-mtu.yaml").write_text("network: {version: 2}\n")  # by hand: nic_mtu writes none here
    # this time the interface is netplan's, the host has a RoCE port and the firewall is nftables
    rows = harness(tmp, provision=False, nic_manager="netplan", roce=True, backend="nftables")
    bad = {p: r["state"] for p, r in rows.items() if r["state"] != "ok"}
    assert bad == {"hosts": "differs", "ssh_known_hosts": "differs", "ncclprep-irq-affinity": "differs",
                   "systemd/ncclprep-rps-rfs.service": "differs", "60-ncclprep-mtu.yaml": "differs",
                   "ncclprep-roce-qos": "missing", "systemd/ncclprep-roce-qos.service": "missing",
                   "ncclprep.nft": "missing", "nftables.conf": "missing"}
    assert "if-up.d-ncclprep-mtu" not in rows  # the ifupdown hook is still there, but no longer nic_mtu's
    assert [ln for ln in rows["hosts"]["diff"] if ln[:1] in "+-" and ln[:3] not in ("---", "+++")] == [
        "-127.0.0.2 node2.lan node2", "+127.0.0.9 node2"]
    assert rows["ssh_known_hosts"]["diff"][2:] == [f"-127.0.0.1 {EC}"]
    assert "-exit $rc" in rows["ncclprep-irq-affinity"]["diff"] and "+exit 0" in rows["ncclprep-irq-affinity"]["diff"]
    assert "-RemainAfterExit=yes" in rows["systemd/ncclprep-rps-rfs.service"]["diff"]
    assert "+network: {version: 2}" in rows["60-ncclprep-mtu.yaml"]["diff"]
    assert "-      mtu: 9000" in rows["60-ncclprep-mtu.yaml"]["diff"]
    (check,) = check_drift({"localhost": {"drift": list(rows.values())}}, Context(all_hosts=("localhost",)))
    assert check["status"] == "FAIL" and check["hosts"] == ["localhost"]
    assert f'localhost: {node}/hosts block "# BEGIN ncclprep host_names (managed by Ansible)" differs: ' \
           "-127.0.0.2 node2.lan node2 +127.0.0.9 node2 (host_names)" in check["message"]
