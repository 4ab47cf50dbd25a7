"""`ncclprep node health` (module_utils/ncclprep/nodehealth.py): the record's verdict, the ledger,
sinfo and scontrol through a fake runner, exit codes."""

from __future__ import annotations

import datetime
import json
import os
import time

from ansible.module_utils.ncclprep import nodecheck, nodehealth
from ansible.module_utils.ncclprep.nodehealth import (
    health,
    prolog,
    quick_rows,
    record_verdict,
    refresh,
    update_ledger,
)

NOW = datetime.datetime(2026, 12, 5, 19, 0, tzinfo=datetime.timezone.utc)
SYSCTL = {"id": "sysctl.net.core.somaxconn", "status": "FAIL", "hosts": ["node2"],
          "measured": {"node2": "128"}, "expected": "65535", "message": "node2: 128, expected 65535"}
PASSING = {"id": "names.resolve", "status": "PASS", "hosts": [], "measured": None, "expected": None, "message": ""}


def record(rows, minutes_ago=1.0, host="node2"):
    made = NOW - datetime.timedelta(minutes=minutes_ago)
    return {"host": host, "generated_at": made.isoformat(), "alive": True, "facts": {}, "intent": {}, "checks": rows}


class Slurm:
    """A fake runner: sinfo prints ``rows``; scontrol is recorded and answers ``scontrol_rc``."""

    def __init__(self, rows: str, scontrol_rc: int = 0, sinfo_rc: int = 0):
        self.rows, self.scontrol_rc, self.sinfo_rc, self.calls = rows, scontrol_rc, sinfo_rc, []

    def __call__(self, argv, timeout):
        self.calls.append(argv)
        assert timeout <= 10
        if argv[0] == "sinfo":
            assert argv[1:] == ["--noheader", "--Node", "--format", "%N|%T|%E"]
            return (self.sinfo_rc, self.rows, "" if self.sinfo_rc == 0 else "slurm_load_node error: Unable to contact")
        return (self.scontrol_rc, "", "" if self.scontrol_rc == 0 else "Invalid node state specified")


IDLE = "node1|idle|none\nnode2|idle|none\nnode3|idle|none\n"


def test_a_failed_check_drains_once_and_a_later_pass_resumes(tmp_path):
    ledger = str(tmp_path / "ledger.json")
    slurm = Slurm(IDLE)
    code, line, out = health("node2", record([SYSCTL, PASSING]), ledger, slurm, 900, now=NOW)
    reason = "ncclprep: sysctl.net.core.somaxconn: measured 128, expected 65535"
    assert code == 0 and line == f"ncclprep health node2: drained: {reason}"
    assert slurm.calls[-1] == ["scontrol", "update", "NodeName=node2", "State=DRAIN", f"Reason={reason}"]
    entries = json.loads(open(ledger).read())
    assert entries == [{"run": (NOW - datetime.timedelta(minutes=1)).isoformat(), "scope": "node", "status": "FAIL",
                        "network": False, "partners": [], "checks": ["sysctl.net.core.somaxconn"]}]
    assert oct(os.stat(ledger).st_mode & 0o777) == "0o600"
    # the same record again: no second ledger entry; Slurm shows the drain, nothing more to do
    slurm = Slurm(f"node1|idle|none\nnode2|drained|{reason}\nnode3|idle|none\n")
    code, line, _ = health("node2", record([SYSCTL, PASSING]), ledger, slurm, 900, now=NOW)
    assert code == 0 and "still drained" in line and len(json.loads(open(ledger).read())) == 1
    assert [c[0] for c in slurm.calls] == ["sinfo"]
    # fixed: a newer record that passes resumes it
    code, line, out = health("node2", record([PASSING], minutes_ago=0.5), ledger, slurm, 900, now=NOW)
    assert code == 0 and out["decision"]["action"] == "resume"
    assert slurm.calls[-1] == ["scontrol", "update", "NodeName=node2", "State=RESUME"]
    assert [e["status"] for e in json.loads(open(ledger).read())] == ["FAIL", "PASS"]


def test_unknown_without_a_fresh_record_or_slurms_view_does_nothing_and_exits_3(tmp_path):
    ledger = str(tmp_path / "ledger.json")
    slurm = Slurm(IDLE)
    for rec, why in ((None, "no node check has run here yet"),
                     (record([SYSCTL], minutes_ago=20), "the last node check is 1200 s old (at most 900)"),
                     ({"unreadable": "bad json"}, "the record is not a node check's"),
                     (dict(record([SYSCTL]), generated_at="2026-12-05T18:59:00"), "the record is not a node check's")):
        code, line, _ = health("node2", rec, ledger, slurm, 900, now=NOW)
        assert code == 3 and why in line and line.endswith("neither drained nor resumed"), line
    assert slurm.calls == [] and not os.path.exists(ledger)
    down = Slurm("", sinfo_rc=1)
    code, line, _ = health("node2", record([SYSCTL]), ledger, down, 900, now=NOW)
    assert code == 3 and "Slurm's view unreadable: slurm_load_node error: Unable to contact" in line
    assert [c[0] for c in down.calls] == ["sinfo"]
    code, line, _ = health("node9", record([SYSCTL], host="node9"), ledger, Slurm(IDLE), 900, now=NOW)
    assert code == 3 and "sinfo does not list node9" in line


def test_a_human_drain_is_left_alone_and_a_refused_scontrol_exits_3(tmp_path):
    ledger = str(tmp_path / "ledger.json")
    slurm = Slurm("node1|idle|none\nnode2|drained|maintenance [root@2026-12-05T10:00:00]\n")
    code, line, _ = health("node2", record([PASSING]), ledger, slurm, 900, now=NOW)
    assert code == 0 and "drained by someone else" in line and [c[0] for c in slurm.calls] == ["sinfo"]
    refused = Slurm(IDLE, scontrol_rc=1)
    code, line, _ = health("node2", record([SYSCTL], minutes_ago=2), ledger, refused, 900, now=NOW)
    assert code == 3 and "drain failed (scontrol exit 1: Invalid node state specified)" in line


def test_dry_run_says_what_it_would_do_and_runs_no_scontrol(tmp_path):
    slurm = Slurm(IDLE)
    code, line, _ = health("node2", record([SYSCTL]), str(tmp_path / "l.json"), slurm, 900, dry_run=True, now=NOW)
    assert code == 0 and line.endswith("(dry run)") and [c[0] for c in slurm.calls] == ["sinfo"]


def test_the_ledger_keeps_the_last_entries_and_starts_afresh_when_unreadable(tmp_path):
    path = str(tmp_path / "ledger.json")
    open(path, "w").write("not json")
    for i in range(25):
        v = record_verdict(record([SYSCTL], minutes_ago=30 - i), 3600, NOW)
        entries = update_ledger(path, "node2", v, keep=20)
    assert len(entries) == 20 and entries[-1]["run"] == (NOW - datetime.timedelta(minutes=6)).isoformat()


def test_a_stale_record_starts_one_background_check_at_a_time(tmp_path):
    rec = str(tmp_path / "node-check.json")
    marker = tmp_path / "ran"
    command = ["sh", "-c", f"sleep 0.3; touch {marker}"]
    assert refresh(rec, 240, age_s=10, command=command) is False  # fresh enough
    assert refresh(rec, 240, age_s=None, command=command) is True
    assert refresh(rec, 240, age_s=None, command=command) is False  # one already runs (its lock)
    deadline = time.monotonic() + 10
    while not (marker.exists() and not os.path.exists(rec + ".refreshing")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists() and not os.path.exists(rec + ".refreshing")


def test_the_node_command_dispatches_health_and_its_usage_names_both(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    code = nodecheck.main(["node", "health", "--record", str(tmp_path / "none.json"), "--ledger",
                           str(tmp_path / "l.json"), "--no-refresh", "--node", "node7"])
    assert code == 3
    assert capsys.readouterr().out.strip() == (
        "ncclprep health node7: UNKNOWN (no node check has run here yet): neither drained nor resumed")
    code = nodecheck.main(["node", "prolog", "--intent", str(tmp_path / "none.json"), "--record",
                           str(tmp_path / "none.json"), "--node", "node7"])
    assert code == 0 and capsys.readouterr().out.startswith("ncclprep prolog node7: UNKNOWN (")
    assert nodecheck.main(["node", "sideways"]) == 2
    err = capsys.readouterr().err
    assert "ncclprep node health [--dry-run]" in err and "ncclprep node prolog [--dry-run]" in err
    assert nodehealth.main(["--max-age", "soon"]) == 2


IFACE = {"id": "data_plane.interface", "status": "FAIL", "hosts": ["node2"], "measured": {"node2": "eth0 down"},
         "expected": "up", "message": "node2: eth0 is down"}
RESOLVES = {"id": "names.resolve", "status": "PASS", "hosts": [], "measured": None, "expected": None, "message": ""}


def test_the_prolog_drains_on_a_failure_read_now_and_exits_1_so_slurm_requeues():
    slurm = Slurm(IDLE)
    code, line, out = prolog("node2", [IFACE, RESOLVES], None, record([PASSING]), slurm, 900, now=NOW)
    assert code == 1 and line == ("ncclprep prolog node2: drained: ncclprep: data_plane.interface: measured eth0 down, "
                                  "expected up; the job is requeued")
    assert slurm.calls[-1][:4] == ["scontrol", "update", "NodeName=node2", "State=DRAIN"]
    # the cached verdict fails (the last node check), the reading now passes: drained too
    slurm = Slurm(IDLE)
    code, line, _ = prolog("node2", [RESOLVES], None, record([SYSCTL]), slurm, 900, now=NOW)
    assert code == 1 and "sysctl.net.core.somaxconn" in slurm.calls[-1][-1]
    # still failing on a node ncclprep drained already (a job slipped in while draining): requeued, no new drain
    ours = Slurm("node1|idle|none\nnode2|draining|ncclprep: x: measured 1, expected 2\n")
    code, line, _ = prolog("node2", [IFACE], None, None, ours, 900, now=NOW)
    assert code == 1 and [c[0] for c in ours.calls] == ["sinfo"] and line.endswith("the job is requeued")


def test_the_prolog_lets_the_job_run_when_it_passes_cannot_tell_or_may_not_drain():
    for rows, why, rec in (([RESOLVES], None, record([PASSING])),  # passes
                           ([RESOLVES], None, None),  # no node check yet, the reading passes
                           (None, "reading the node took more than 6 s", record([PASSING]))):
        slurm = Slurm(IDLE)
        code, line, _ = prolog("node2", rows, why, rec, slurm, 900, now=NOW)
        assert code == 0 and line.endswith("the job runs") and slurm.calls == [], line
    code, line, _ = prolog("node2", None, "reading the node took more than 6 s", None, Slurm(IDLE), 900, now=NOW)
    assert line == "ncclprep prolog node2: UNKNOWN (reading the node took more than 6 s): the job runs"
    # a human's drain and the circuit breaker: exit 0, or Slurm would drain past the rules
    human = Slurm("node1|idle|none\nnode2|draining|maintenance\n")
    assert prolog("node2", [IFACE], None, None, human, 900, now=NOW)[0] == 0
    full = Slurm("node1|drained|ncclprep: x: measured 1, expected 2\nnode2|idle|none\nnode3|idle|none\n")
    code, line, _ = prolog("node2", [IFACE], None, None, full, 900, now=NOW)
    assert code == 0 and "the circuit breaker" in line and [c[0] for c in full.calls] == ["sinfo"]
    # Slurm's view unreadable: UNKNOWN, the job runs
    code, line, _ = prolog("node2", [IFACE], None, None, Slurm("", sinfo_rc=1), 900, now=NOW)
    assert code == 0 and ("Slurm's view is unreadable (slurm_load_node error: Unable to contact): UNKNOWN, "
                          "the job runs") in line


def test_the_prologs_reading_without_an_intent_is_unknown_in_time(tmp_path):
    rows, why = quick_rows(str(tmp_path / "intent.json"), deadline=5)
    assert rows is None and "intent.json does not exist: run site.yml on this node first" in why


def test_report_history_prints_the_ledger_and_the_strikes_that_count(tmp_path, capsys, monkeypatch):
    """``ncclprep report --history`` on a node: one line per verdict, the network strikes with their
    partners; an empty ledger says so; an unreadable one exits 3."""
    monkeypatch.setenv("SLURMD_NODENAME", "node2")
    ledger = tmp_path / "ledger.json"
    bw = {"id": "net.bandwidth", "status": "FAIL", "hosts": ["node2 -> node3"], "message": "slow"}
    for minutes, rows in ((3, [bw]), (2, [PASSING]), (1, [dict(bw, hosts=["node1 -> node2"])])):
        update_ledger(str(ledger), "node2", record_verdict(record(rows, minutes), 900, NOW))
    assert nodecheck.main(["report", "--history", "--ledger", str(ledger)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5 and lines[0].split() == ["run", "scope", "verdict", "network", "partners", "checks"]
    assert lines[1].split()[1:] == ["node", "FAIL", "yes", "node3", "net.bandwidth"]
    assert lines[2].split()[1:] == ["node", "PASS", "no", "-", "-"]
    assert lines[3].split()[1:] == ["node", "FAIL", "yes", "node1", "net.bandwidth"]
    assert lines[4] == ("node2: 3 verdicts; network strikes 2 (node1, node3): a drain needs 2 with different "
                        "partners")
    assert nodecheck.main(["report", "--history", "--ledger", str(tmp_path / "none")]) == 0
    assert "no verdicts in the ledger yet" in capsys.readouterr().out
    ledger.write_text("{not json")
    assert nodecheck.main(["report", "--history", "--ledger", str(ledger)]) == 3
    assert f"cannot read {ledger}" in capsys.readouterr().out
