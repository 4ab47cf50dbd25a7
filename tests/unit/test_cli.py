"""The ncclprep CLI without a cluster: exit codes from ansible-runner events, the progress line, usage."""

from __future__ import annotations

import io
import json
import os
import sys

import pytest

from ncclprep import cli, runner
from ncclprep.runner import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_COULD_NOT_RUN, EXIT_PASS, Progress, RunResult


def ev(kind, **data):
    return {"event": kind, "event_data": data}


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def feed(events, tty=False):
    stream = io.StringIO()
    stream.isatty = lambda: tty
    clock = Clock()
    progress = Progress("validate", stream=stream, clock=clock)
    for e in events:
        clock.t += 5
        assert progress(e) is True
    progress.close()
    return progress, stream.getvalue()


REPORT_OK = ev("runner_on_ok", host="node1", task="Evaluate the checks and write the reports",
               task_action="cluster_report", res={"changed": True, "status": "FAIL", "report_dir": "/r/x",
                                                  "problems": ["FAIL sysctl [node2]: ..."]})
VERDICT = ev("runner_on_failed", host="node1", task=runner.VERDICT_TASK, task_action="ansible.builtin.fail",
             res={"msg": ["Preflight FAIL (report: /r/x)", "FAIL sysctl [node2]: somaxconn 128"]})
INPUT = ev("runner_on_failed", host="node2", task="preflight : Check the preflight's settings",
           task_action="ansible.builtin.assert",
           res={"msg": "node2: preflight_probe_local_ranks=0: valid: null or an integer >= 1"})


def result_of(events, rc):
    progress, _ = feed(events)
    return RunResult(rc=rc, failures=progress.failures, report=progress.report, recap=progress.recap,
                     no_hosts=progress.no_hosts, tasks=progress.tasks)


@pytest.mark.parametrize("events,rc,code", [
    ([ev("runner_on_ok", host="n1", task="t", task_action="x", res={})], 0, EXIT_PASS),
    ([dict(REPORT_OK, event_data=dict(REPORT_OK["event_data"], res=dict(REPORT_OK["event_data"]["res"],
                                                                         status="PASS")))], 0, EXIT_PASS),
    ([REPORT_OK, VERDICT], 2, EXIT_CHECK_FAILED),
    ([INPUT], 2, EXIT_BAD_INPUT),
    # an input refused on one host while the others ran on to a report: still bad input
    ([INPUT, REPORT_OK, VERDICT], 2, EXIT_BAD_INPUT),
    # any failure in site.yml's checking play is refused input (nic_mtu's persist check uses fail)
    ([ev("playbook_on_play_start", play="Check the inventory before any change"),
      ev("runner_on_failed", host="node1", task="Check nic_mtu_persist", task_action="ansible.builtin.fail",
         res={"msg": "node1: nic_mtu_persist=ifupdown but ifupdown does not define eth0"})], 2, EXIT_BAD_INPUT),
    # ... but an unreachable host there is not
    ([ev("playbook_on_play_start", play="Check the inventory before any change"),
      ev("runner_on_unreachable", host="node3", task="Gathering Facts", task_action="setup",
         res={"msg": "timeout"})], 4, EXIT_COULD_NOT_RUN),
    ([ev("playbook_on_play_start", play="Provision the nodes"),
      ev("runner_on_failed", host="node1", task="Roll back", task_action="ansible.builtin.fail",
         res={"msg": "cut off"})], 2, EXIT_COULD_NOT_RUN),
    ([ev("runner_on_unreachable", host="node3", task="Gather", task_action="setup",
         res={"msg": "ssh: connect to host node3 port 22: No route to host"})], 4, EXIT_COULD_NOT_RUN),
    ([ev("runner_on_failed", host="node1", task="Apply", task_action="ansible.builtin.template",
         res={"msg": "disk full"})], 2, EXIT_COULD_NOT_RUN),
    # a failure that the play ignores is no failure
    ([ev("runner_on_failed", host="node1", task="Try", task_action="command", ignore_errors=True,
         res={"msg": "x"})], 0, EXIT_PASS),
    # ansible-playbook refused its arguments (rc 5) or could not parse the inventory (4)
    ([], 5, EXIT_BAD_INPUT),
    ([], 4, EXIT_BAD_INPUT),
    ([], 250, EXIT_COULD_NOT_RUN),
])
def test_exit_code_from_events(events, rc, code):
    assert result_of(events, rc).exit_code == code


def test_exit_code_when_the_runner_itself_failed():
    assert RunResult(rc=0, error="ansible-playbook timeout").exit_code == EXIT_COULD_NOT_RUN


def test_progress_keeps_failures_report_and_recap():
    events = [ev("playbook_on_task_start", task="Read every node"), INPUT, REPORT_OK, VERDICT,
              ev("playbook_on_stats", ok={"node1": 7, "node2": 3}, changed={"node1": 1}, failures={"node2": 1},
                 dark={}, skipped={"node1": 2})]
    progress, _ = feed(events)
    assert [(f.host, f.action, f.kind) for f in progress.failures] == [
        ("node2", "ansible.builtin.assert", "failed"), ("node1", "ansible.builtin.fail", "failed")]
    assert progress.failures[1].message == "Preflight FAIL (report: /r/x); FAIL sysctl [node2]: somaxconn 128"
    assert progress.report == {"status": "FAIL", "report_dir": "/r/x", "problems": ["FAIL sysctl [node2]: ..."]}
    assert progress.recap["node1"] == {"ok": 7, "changed": 1, "failed": 0, "unreachable": 0, "skipped": 2}
    assert progress.recap["node2"]["failed"] == 1
    assert progress.counts == {"ok": 0, "changed": 1, "failed": 2, "unreachable": 0}


def test_progress_line_in_a_log_is_one_line_per_task_with_elapsed_time():
    events = [ev("playbook_on_task_start", task="Read every node"),
              ev("runner_on_ok", host="node1", task="Read every node", res={}),
              ev("playbook_on_task_start", task="Wait for the collectives"),
              ev("runner_retry", host="node2", res={"retries": 91, "attempts": 3}),
              ev("runner_on_failed", host="node2", task="Wait for the collectives", res={"msg": "HANG"})]
    _, text = feed(events)
    assert text.splitlines() == [
        "[00:05] validate | Read every node | ok 0 changed 0 failed 0",
        "[00:15] validate | Wait for the collectives | ok 1 changed 0 failed 0",
        "[00:25] validate | Wait for the collectives | node2 FAILED: HANG | ok 1 changed 0 failed 1"]


def test_progress_line_on_a_terminal_is_redrawn_in_place(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    events = [ev("playbook_on_task_start", task="Wait for the collectives"),
              ev("runner_retry", host="node2", res={"retries": 91, "attempts": 3}),
              ev("runner_on_unreachable", host="node3", task="Wait for the collectives", res={"msg": "gone"})]
    progress, text = feed(events, tty=True)
    assert "\r[00:10] validate | Wait for the collectives | node2 waiting (88 tries left) | ok 0" in text
    assert "node3 UNREACHABLE: gone | ok 0 changed 0 failed 1" in text
    # one live line, redrawn; the failure stays on a line of its own
    assert text.count("\r") == 3 and text.endswith("\n") and text.count("\n") == 1
    assert progress.failures[0].kind == "unreachable"


def test_progress_line_is_cut_to_the_terminal_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    _, text = feed([ev("playbook_on_task_start", task="Wait for the collectives, deadline in seconds 120")], tty=True)
    assert text == "\r" + "[00:05] validate | Wait for the collectives, deadline in seconds 120"[:39] + "\n"


def test_verbose_progress_draws_nothing():
    stream = io.StringIO()
    progress = Progress("validate", stream=stream, verbose=True)
    progress(ev("playbook_on_task_start", task="x"))
    progress.close()
    assert stream.getvalue() == ""


def test_validate_without_inventory_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.delenv("ANSIBLE_INVENTORY", raising=False)
    assert cli.main(["validate"]) == EXIT_BAD_INPUT
    assert "give the inventory, e.g. -i inventory/local" in capsys.readouterr().err


def test_missing_inventory_is_bad_input_before_anything_runs(capsys, monkeypatch):
    monkeypatch.setattr(runner, "Progress", None)  # nothing may start
    assert cli.main(["provision", "-i", "inventory/nowhere"]) == EXIT_BAD_INPUT
    assert "inventory 'inventory/nowhere' does not exist" in capsys.readouterr().err


def test_arguments_go_to_ansible_playbook_as_given(monkeypatch, capsys):
    seen = {}

    def fake(playbook, inventory, extra, label, verbose=False, stream=None):
        seen.update(playbook=playbook, inventory=inventory, extra=extra, verbose=verbose)
        return RunResult(rc=0, recap={"node1": {"ok": 3, "changed": 1, "failed": 0, "unreachable": 0}})

    monkeypatch.setattr(cli, "run_playbook", fake)
    assert cli.main(["provision", "-i", "inventory/local", "-l", "node1", "-e", "x=1", "--check", "-vv"]) == 0
    assert seen == {"playbook": "site.yml", "inventory": "inventory/local", "extra": ["-v", "-l", "node1", "-e",
                                                                                       "x=1", "--check"],
                    "verbose": True}
    out = capsys.readouterr().out
    assert "ncclprep provision: PASS" in out and "| node1 | 3 | 1 | 0 | 0 |" in out


def test_validate_prints_the_check_table_and_the_report(monkeypatch, capsys, tmp_path):
    cluster = {"status": "FAIL", "hosts": ["node1", "node2"], "checks": [
        {"id": "sysctl.net.core.somaxconn", "status": "FAIL", "hosts": ["node2"], "message": "node2: 128 < 4096"},
        {"id": "net.latency", "status": "PASS", "hosts": [], "message": "ok"},
        {"id": "torchrun.smoke", "status": "SKIP", "hosts": [], "message": "off"}]}
    (tmp_path / "cluster.json").write_text(json.dumps(cluster))

    def fake(*a, **k):
        return RunResult(rc=2, report={"status": "FAIL", "report_dir": str(tmp_path), "problems": []})

    monkeypatch.setattr(cli, "run_playbook", fake)
    assert cli.main(["validate", "-i", "inventory/local"]) == EXIT_CHECK_FAILED
    out = capsys.readouterr().out
    assert "3 checks on 2 hosts: FAIL 1, SKIP 1, PASS 1" in out
    assert "| FAIL | sysctl.net.core.somaxconn | node2 | node2: 128 < 4096 |" in out
    assert "net.latency" not in out and f"report: {tmp_path}/summary.md" in out


def test_failed_provisioning_names_host_and_task(monkeypatch, capsys):
    def fake(*a, **k):
        return RunResult(rc=4, failures=[runner.Failure("node3", "Gathering Facts", "setup", "No route to host",
                                                        kind="unreachable")])

    monkeypatch.setattr(cli, "run_playbook", fake)
    assert cli.main(["provision", "-i", "inventory/local"]) == EXIT_COULD_NOT_RUN
    assert "ncclprep: provision: node3 unreachable at 'Gathering Facts': No route to host" in capsys.readouterr().err


@pytest.mark.parametrize("argv,codes,passes_on", [
    (["--help"], "exit codes: 0 all passed; 1 a check failed", True),
    (["validate", "--help"], "exit codes: 0 all passed; 1 a check failed", True),
    (["provision", "--help"], "exit codes: 0 all passed; 1 a check failed", True),
    (["cluster", "--help"], "exit codes: 0 all passed; 1 a check failed", True),
    (["report", "--help"], "exit codes: 0 the run passed; 1 it failed (with --compare: a check failed", False)])
def test_every_command_has_help(argv, codes, passes_on, capsys):
    assert cli.main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: ncclprep") and codes in out
    # only the playbook commands hand unknown arguments to ansible-playbook
    assert ("Other arguments go to ansible-playbook as given" in out) is passes_on


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["cluster"], ["cluster", "sideways"], ["report", "--format",
                                                                                             "pdf"]])
def test_usage_errors_exit_2(argv, capsys):
    assert cli.main(argv) == EXIT_BAD_INPUT
    assert "usage: ncclprep" in capsys.readouterr().err


def test_cluster_up_refuses_one_node(capsys):
    assert cli.main(["cluster", "up", "--nodes", "1"]) == EXIT_BAD_INPUT
    assert "--nodes 1: valid: 2 or more nodes" in capsys.readouterr().err


def test_cluster_grow_and_slurm_are_checked_before_any_playbook_runs(capsys, monkeypatch):
    monkeypatch.setattr(cli, "run_playbook", lambda *a, **k: pytest.fail("no playbook may run"))
    assert cli.main(["cluster", "grow", "--nodes", "1"]) == EXIT_BAD_INPUT
    assert "ncclprep cluster grow: --nodes 1: valid: 2 or more nodes" in capsys.readouterr().err
    assert cli.main(["cluster", "grow", "--nodes", "5", "--slurm"]) == EXIT_BAD_INPUT
    assert "--slurm goes with up" in capsys.readouterr().err


def test_cluster_up_with_slurm_and_grow_ask_the_playbook_for_them(monkeypatch):
    seen = []

    class Done:
        rc, failures, elapsed_s = 0, [], 1.0

    monkeypatch.setattr(cli, "run_playbook", lambda playbook, inv, extra, *a, **k: seen.append(extra) or Done())
    assert cli.main(["cluster", "up", "--nodes", "3", "--slurm"]) == 0
    assert cli.main(["cluster", "grow", "--nodes", "4"]) == 0
    assert cli.main(["cluster", "up"]) == 0
    assert seen == [
        ["-e", "local_cluster_state=present", "-e", "local_cluster_nodes=3", "-e", "local_cluster_slurm=true"],
        ["-e", "local_cluster_state=grow", "-e", "local_cluster_nodes=4"],
        ["-e", "local_cluster_state=present", "-e", "local_cluster_nodes=3", "-e", "local_cluster_slurm=false"]]


def test_report_of_a_missing_run_is_bad_input(capsys, tmp_path):
    assert cli.main(["report", str(tmp_path / "nothing")]) == EXIT_BAD_INPUT
    assert "no report at" in capsys.readouterr().err


def test_playbook_env_uses_the_repo_config_and_this_python():
    env = runner.playbook_env()
    assert env["ANSIBLE_CONFIG"] == os.path.join(runner.REPO_ROOT, "ansible.cfg")
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(os.sys.executable)


# --- an inventory that gives no host (empty, unparsable, without the group) -----------------------------

NO_HOSTS = [ev("playbook_on_play_start", play="Check and measure the nodes", pattern="ncclprep_nodes"),
            ev("playbook_on_no_hosts_matched", play="Check and measure the nodes"),
            ev("playbook_on_stats", ok={}, changed={}, failures={}, dark={}, skipped={}, processed={})]


def test_a_run_on_no_host_is_bad_input_not_a_pass():
    result = result_of(NO_HOSTS, 0)
    assert result.no_hosts == ["ncclprep_nodes"] and result.exit_code == EXIT_BAD_INPUT


def test_a_limit_that_leaves_no_host_is_bad_input():
    # ansible-playbook: "Specified inventory, host pattern and/or --limit leaves us with no hosts to target" (rc 1,
    # before any play or task)
    assert result_of([], 1).exit_code == EXIT_BAD_INPUT
    started = [ev("playbook_on_task_start", task="t")]
    assert result_of(started, 1).exit_code == EXIT_COULD_NOT_RUN


def test_validate_on_an_empty_inventory_says_so(monkeypatch, capsys):
    def fake(*a, **k):
        progress, _ = feed(NO_HOSTS)
        return RunResult(rc=0, recap=progress.recap, no_hosts=progress.no_hosts,
                         output_tail=["[WARNING]: Unable to parse /tmp/empty.yml as an inventory source"])

    monkeypatch.setattr(cli, "run_playbook", fake)
    assert cli.main(["validate", "-i", "/tmp/empty.yml"]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert "ncclprep validate: FAIL" in captured.out and "PASS" not in captured.out
    assert "no host in the inventory matched ncclprep_nodes" in captured.err
    assert "Unable to parse /tmp/empty.yml" in captured.err


def test_output_tail_has_no_colour_codes():
    class Fake:
        stdout = io.StringIO("\x1b[0;31m[ERROR]: Specified inventory leaves us with no hosts to target.\x1b[0m\n")

    assert runner._tail(runner._stdout(Fake())) == ["[ERROR]: Specified inventory leaves us with no hosts to target."]


def test_an_option_ansible_playbook_does_not_know_is_a_usage_error():
    # argparse in ansible-playbook: "error: unrecognized arguments" and exit status 2, before any play
    assert result_of([], 2).exit_code == EXIT_BAD_INPUT
    assert result_of([ev("playbook_on_task_start", task="t")], 2).exit_code == EXIT_COULD_NOT_RUN


def test_output_tail_of_a_usage_error_is_the_error_not_the_help():
    class Fake:
        stdout = io.StringIO("usage: ansible-playbook [-h] [--version]\nansible-playbook: error: unrecognized "
                             "arguments: --frobnicate\n \nusage: ansible-playbook [-h]\n" + "  -b  become\n" * 40)

    assert runner._tail(runner._stdout(Fake())) == ["ansible-playbook: error: unrecognized arguments: --frobnicate"]


def test_report_usage_error_shows_the_report_usage(capsys):
    assert cli.main(["report", "--bogus"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "usage: ncclprep report" in err and "unrecognized arguments: --bogus" in err


def test_report_of_an_absolute_path_that_is_no_run_names_it_once(capsys, tmp_path):
    assert cli.main(["report", str(tmp_path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"no report at {tmp_path} (run ncclprep validate first)" in err


def test_verbose_shows_each_events_output_without_pty_returns_or_colour_off_a_terminal():
    out, err = io.StringIO(), io.StringIO()
    progress = Progress("provision", stream=err, verbose=True, echo=out)
    progress(ev("playbook_on_play_start", play="Check the inventory before any change"))
    progress({"event": "playbook_on_stats", "event_data": {"ok": {"node1": 3}},
              "stdout": "\r\nPLAY RECAP ****\r\n\x1b[0;31mnode1\x1b[0m      : \x1b[0;32mok=3   \x1b[0m failed=1"})
    assert out.getvalue() == "\nPLAY RECAP ****\nnode1      : ok=3    failed=1\n" and err.getvalue() == ""
    tty = io.StringIO()
    tty.isatty = lambda: True
    shown = Progress("provision", stream=err, verbose=True, echo=tty)
    shown({"event": "verbose", "stdout": "\x1b[0;31mERROR\x1b[0m"})
    assert tty.getvalue() == "\x1b[0;31mERROR\x1b[0m\n"


def test_a_failed_loop_is_named_by_its_failed_items_messages():
    res = {"msg": "One or more items failed", "results": [
        {"failed": False, "msg": "ok"},
        {"failed": True, "msg": "value of roce_qos_pfc_priority must be one of: 0, 1, 2, 3, 4, 5, 6, 7, got: 9"},
        {"failed": True, "msg": "value of roce_qos_pfc_priority must be one of: 0, 1, 2, 3, 4, 5, 6, 7, got: 9"}]}
    progress, _ = feed([ev("runner_on_failed", host="node1", task="Check every role's variables against its "
                           "argument spec", task_action="ansible.builtin.validate_argument_spec", res=res)])
    assert progress.failures[0].message == res["results"][1]["msg"]  # each message once


def test_ctrl_c_cancels_the_playbook_and_the_handlers_are_given_back(tmp_path):
    """SIGINT during run_playbook: ansible-playbook is stopped, the result says "interrupted" and
    SIGINT is Python's own handler again (ansible-runner, left to itself, installs one of its own for
    good: a later Ctrl-C, between ncclprep tune's runs, would then stop nothing)."""
    import os
    import signal
    import threading
    import time

    from ncclprep.runner import run_playbook

    book = tmp_path / "sleep.yml"
    book.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                    "    - ansible.builtin.pause:\n        seconds: 60\n")
    before = signal.getsignal(signal.SIGINT)
    timer = threading.Timer(6, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    started = time.monotonic()
    try:
        result = run_playbook(str(book), None, ["-i", "localhost,", "-c", "local"], "sleep", stream=io.StringIO())
    finally:
        timer.cancel()
    assert result.error == "interrupted" and result.exit_code == 3
    assert time.monotonic() - started < 40
    assert signal.getsignal(signal.SIGINT) is before
    # nothing of that ansible-playbook is left: its workers run in sessions of their own, out of reach of
    # ansible-runner's kill of its process group (one was left sleeping for good before)
    time.sleep(1)
    left = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if str(book).encode() in fh.read():
                    left.append(pid)
        except OSError:
            pass
    assert left == []


def test_ncclprep_log_keeps_ansible_playbooks_whole_output_of_each_run(tmp_path, monkeypatch):
    """Issue 41 item 5: scripts/demo.sh shows the progress line and keeps Ansible's output in the
    file NCCLPREP_LOG names, run after run, without colour codes."""
    from ncclprep.runner import run_playbook

    book = tmp_path / "hello.yml"
    book.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                    "    - name: Say hello\n      ansible.builtin.debug:\n        msg: hello from the play\n")
    log = tmp_path / "demo.log"
    monkeypatch.setenv("NCCLPREP_LOG", str(log))
    for label in ("first", "second"):
        out = io.StringIO()
        result = run_playbook(str(book), None, ["-i", "localhost,", "-c", "local"], label, stream=out)
        assert result.rc == 0
        assert "hello from the play" not in out.getvalue()  # the screen has the progress line only
    text = log.read_text()
    assert text.count("hello from the play") == 2 and "\x1b[" not in text
    assert text.startswith(f"== ncclprep first: ansible-playbook {book} -i localhost, -c local\n")
    assert f"== ncclprep second: ansible-playbook {book}" in text and "PLAY RECAP" in text
    monkeypatch.setenv("NCCLPREP_LOG", str(tmp_path / "no" / "such" / "folder.log"))
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    assert run_playbook(str(book), None, ["-i", "localhost,", "-c", "local"], "third", stream=io.StringIO()).rc == 0
    assert "cannot write Ansible's output there" in err.getvalue()
