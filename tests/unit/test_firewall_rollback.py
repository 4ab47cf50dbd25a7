"""The firewall role's dead-man switch, roles/firewall/files/ncclprep-firewall-rollback (review
F3), run as the role runs it: ``save``, then ``wait``; ``ufw`` and ``nft`` are stubs first on
PATH that log their arguments (and ``nft list table`` prints a saved table), the saved files
live under tmp_path. The molecule scenario of the firewall role locks a real node out and
sees it come back."""

from __future__ import annotations

import os
import subprocess

import pytest

import ncclprep

SCRIPT = os.path.join(ncclprep.REPO_ROOT, "roles", "firewall", "files", "ncclprep-firewall-rollback")

STUB = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
if [ "$(basename "$0") $1 $2" = "nft list table" ]; then
  [ -f "{table}" ] && cat "{table}" && exit 0
  exit 1
fi
exit 0
"""


@pytest.fixture()
def node(tmp_path):
    """(run, log, files): ``run(*args)`` runs the script with the stubs on PATH; ``log()`` the
    stubs' calls; ``files`` three paths, the first two existing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log, table = tmp_path / "calls.log", tmp_path / "live-table.nft"
    for tool in ("ufw", "nft", "logger"):
        (bin_dir / tool).write_text(STUB.format(log=log, table=table))
        (bin_dir / tool).chmod(0o755)
    files = [tmp_path / "user.rules", tmp_path / "ufw.conf", tmp_path / "absent.rules"]
    files[0].write_text("### RULES ###\n-A ufw-user-input -p tcp --dport 22 -j ACCEPT\n")
    files[1].write_text("ENABLED=yes\n")

    def run(*args, timeout=20):
        env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
        return subprocess.run([SCRIPT, *map(str, args)], env=env, capture_output=True, text=True, timeout=timeout)

    def calls():
        return log.read_text().splitlines() if log.exists() else []
    return run, calls, files, table


def test_unconfirmed_switch_puts_the_saved_files_back_and_reloads_ufw(node, tmp_path):
    run, calls, files, _ = node
    state = tmp_path / "state" / "run1"
    assert run("save", state, "ufw", *files).returncode == 0
    files[0].write_text("### RULES ###\n")  # the run's change: SSH's rule gone
    files[2].write_text("new\n")  # a file the run created
    out = run("wait", state, 0)
    assert out.returncode == 0, out.stderr
    assert "restored the rules saved in" in out.stdout
    assert files[0].read_text() == "### RULES ###\n-A ufw-user-input -p tcp --dport 22 -j ACCEPT\n"
    assert not files[2].exists()
    assert not state.exists()  # the switch's folder goes when it ends
    assert [c for c in calls() if c.startswith("ufw")] == ["ufw reload"]  # ufw.conf: ENABLED=yes


def test_ufw_off_before_the_run_is_turned_off_again(node, tmp_path):
    run, calls, files, _ = node
    files[1].write_text("ENABLED=no\n")
    state = tmp_path / "state" / "off"
    assert run("save", state, "ufw", *files).returncode == 0
    files[1].write_text("ENABLED=yes\n")  # the run enabled ufw
    assert run("wait", state, 0).returncode == 0
    assert files[1].read_text() == "ENABLED=no\n"
    assert [c for c in calls() if c.startswith("ufw")] == ["ufw --force disable"]


def test_confirmed_switch_changes_nothing(node, tmp_path):
    run, calls, files, _ = node
    state = tmp_path / "state" / "run2"
    assert run("save", state, "ufw", *files).returncode == 0
    files[0].write_text("new rules\n")
    (state / "confirmed").touch()
    out = run("wait", state, 0)
    assert out.returncode == 0 and "confirmed: the new rules stay" in out.stdout
    assert files[0].read_text() == "new rules\n"
    assert [c for c in calls() if not c.startswith("logger")] == []
    assert not state.exists()


def test_nftables_table_is_replaced_by_the_saved_one_or_deleted(node, tmp_path):
    run, calls, files, table = node
    table.write_text("table inet ncclprep {\n}\n")
    state = tmp_path / "state" / "run3"
    assert run("save", state, "nftables", files[0]).returncode == 0
    assert (state / "table.nft").read_text() == "table inet ncclprep {\n}\n"
    assert run("wait", state, 0).returncode == 0
    assert [c for c in calls() if c.startswith("nft")] == [
        "nft list table inet ncclprep", "nft delete table inet ncclprep", f"nft -f {state}/table.nft"]

    table.unlink()  # no ncclprep table before the run: the restore only deletes the new one
    state = tmp_path / "state" / "run4"
    assert run("save", state, "nftables", files[0]).returncode == 0
    before = len(calls())
    assert run("wait", state, 0).returncode == 0
    assert [c for c in calls()[before:] if c.startswith("nft")] == ["nft delete table inet ncclprep"]


def test_bad_arguments_are_refused_before_anything_is_saved(node, tmp_path):
    run, _, files, _ = node
    out = run("save", tmp_path / "s", "iptables", *files)
    assert out.returncode == 2 and "backend must be ufw or nftables, not 'iptables'" in out.stderr
    assert not (tmp_path / "s").exists()
    out = run("wait", tmp_path / "s", "3m")
    assert out.returncode == 2 and "SECONDS must be a whole number, not '3m'" in out.stderr
    out = run("restore", tmp_path / "nothing")
    assert out.returncode == 2 and "holds no saved state" in out.stderr


def test_the_switch_waits_its_delay_before_restoring(node, tmp_path):
    run, _, files, _ = node
    state = tmp_path / "state" / "run5"
    assert run("save", state, "ufw", *files).returncode == 0
    files[0].write_text("changed\n")
    proc = subprocess.Popen([SCRIPT, "wait", str(state), "3"], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}"))
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1)  # still waiting: nothing restored yet
        assert files[0].read_text() == "changed\n"
        (state / "confirmed").touch()
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
    assert files[0].read_text() == "changed\n"
