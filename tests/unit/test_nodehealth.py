"""`ncclprep node health` (module_utils/ncclprep/slurm/health.py): the record's verdict, the ledger,
sinfo and scontrol through a fake runner, exit codes."""

from __future__ import annotations

import datetime
import json
import os
import threading
import time

from ansible.module_utils.ncclprep import cli
from ansible.module_utils.ncclprep.slurm import health as nodehealth
from ansible.module_utils.ncclprep.slurm.health import (
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
    """A fake slurmctld: ``sinfo`` prints its nodes (``%N|%T|%f|%E``), ``scontrol update`` changes
    them (State=DRAIN or RESUME with a reason, AvailableFeatures) one call at a time under a lock,
    as slurmctld serializes them, and ``peak`` keeps the most nodes ncclprep held drained at once.
    ``rows``: ``name|state|reason`` lines. ``scontrol_rc`` refuses the State= updates."""

    def __init__(self, rows: str, scontrol_rc: int = 0, sinfo_rc: int = 0, squeue: str = ""):
        self.nodes = {}
        for line in rows.splitlines():
            name, state, reason = line.split("|", 2)
            self.nodes[name] = {"state": state, "weight": 1, "features": [],
                                "reason": None if reason == "none" else reason}
        self.scontrol_rc, self.sinfo_rc, self.squeue, self.calls, self.peak = scontrol_rc, sinfo_rc, squeue, [], 0
        self.lock, self.delay = threading.Lock(), 0.0

    def held(self):
        return sorted(n for n, v in self.nodes.items() if (v["reason"] or "").startswith("ncclprep:"))

    def __call__(self, argv, timeout):
        assert timeout <= 10
        time.sleep(self.delay)  # a command's round trip: lets hooks that run at once interleave
        with self.lock:
            self.calls.append(argv)
            if argv[0] == "sinfo":
                assert argv[1:] == ["--noheader", "--Node", "--format", "%N|%T|%w|%f|%E"]
                if self.sinfo_rc:
                    return self.sinfo_rc, "", "slurm_load_node error: Unable to contact"
                return 0, "".join(f"{n}|{v['state']}|{v['weight']}|{','.join(v['features']) or '(null)'}|"
                                  f"{v['reason'] or 'none'}\n" for n, v in self.nodes.items()), ""
            if argv[0] == "squeue":
                return 0, self.squeue, ""
            assert argv[:2] == ["scontrol", "update"]
            args = dict(a.split("=", 1) for a in argv[2:])
            node = self.nodes[args["NodeName"]]
            if "AvailableFeatures" in args:
                assert args["ActiveFeatures"] == args["AvailableFeatures"]
                node["features"] = [f for f in args["AvailableFeatures"].split(",") if f]
                node["weight"] = int(args.get("Weight", node["weight"]))
                return 0, "", ""
            if self.scontrol_rc:
                return self.scontrol_rc, "", "Invalid node state specified"
            if args["State"] == "DRAIN":
                node.update(state="draining" if node["state"] in ("allocated", "mixed") else "drained",
                            reason=args["Reason"])
            elif args["State"] == "RESUME":
                node.update(state="allocated" if node["state"] == "draining" else "idle", reason=None)
            self.peak = max(self.peak, len(self.held()))
            return 0, "", ""

    def updates(self):
        """The State= updates, in order (the breaker's marks left out)."""
        return [c for c in self.calls if c[0] == "scontrol" and any(a.startswith("State=") for a in c)]


IDLE = "node1|idle|none\nnode2|idle|none\nnode3|idle|none\n"


def test_a_failed_check_drains_once_and_a_later_pass_resumes(tmp_path):
    ledger = str(tmp_path / "ledger.json")
    slurm = Slurm(IDLE)
    code, line, out = health("node2", record([SYSCTL, PASSING]), ledger, slurm, 900, now=NOW)
    reason = "ncclprep: sysctl.net.core.somaxconn: measured 128, expected 65535"
    assert code == 0 and line == f"ncclprep health node2: drained: {reason}"
    assert slurm.updates() == [["scontrol", "update", "NodeName=node2", "State=DRAIN", f"Reason={reason}"]]
    # the breaker's mark was set before the second reading and is gone again
    assert [c[0] for c in slurm.calls] == ["sinfo", "scontrol", "sinfo", "scontrol", "scontrol"]
    assert slurm.calls[1][3].startswith("AvailableFeatures=ncclprep_draining_")
    assert slurm.nodes["node2"]["features"] == []
    run = (NOW - datetime.timedelta(minutes=1)).isoformat()
    entries = json.loads(open(ledger).read())
    assert entries == [{"at": run, "run": run, "scope": "node", "status": "FAIL", "network": False, "partners": [],
                        "checks": ["sysctl.net.core.somaxconn"],
                        "decision": {"action": "drain", "why": f"node2: drained: {reason}"}}]
    assert oct(os.stat(ledger).st_mode & 0o777) == "0o600"
    # the same record again: no second ledger entry; Slurm shows the drain, nothing more to do
    slurm.calls.clear()
    code, line, _ = health("node2", record([SYSCTL, PASSING]), ledger, slurm, 900, now=NOW)
    assert code == 0 and "still drained" in line and len(json.loads(open(ledger).read())) == 1
    assert [c[0] for c in slurm.calls] == ["sinfo"]
    # fixed: a newer record that passes resumes it (Slurm read again just before)
    code, line, out = health("node2", record([PASSING], minutes_ago=0.5), ledger, slurm, 900, now=NOW)
    assert code == 0 and out["decision"]["action"] == "resume" and out["done"]
    assert slurm.calls[-1] == ["scontrol", "update", "NodeName=node2", "State=RESUME"]
    assert [e.get("status") or e["event"] for e in json.loads(open(ledger).read())] == ["FAIL", "PASS", "resumed"]


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
    assert code == 0 and "a reason of someone else's ('maintenance" in line and [c[0] for c in slurm.calls] == ["sinfo"]
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
    code = cli.main(["node", "health", "--record", str(tmp_path / "none.json"), "--ledger",
                           str(tmp_path / "l.json"), "--no-refresh", "--node", "node7"])
    assert code == 3
    assert capsys.readouterr().out.strip() == (
        "ncclprep health node7: UNKNOWN (no node check has run here yet): neither drained nor resumed")
    code = cli.main(["node", "prolog", "--intent", str(tmp_path / "none.json"), "--record",
                           str(tmp_path / "none.json"), "--node", "node7"])
    assert code == 0 and capsys.readouterr().out.startswith("ncclprep prolog node7: UNKNOWN (")
    assert cli.main(["node", "sideways"]) == 2
    err = capsys.readouterr().err
    assert "ncclprep node health [--dry-run]" in err and "ncclprep node prolog [--dry-run]" in err
    assert nodehealth.main(["--max-age", "soon"]) == 2


IFACE = {"id": "data_plane.interface", "status": "FAIL", "hosts": ["node2"], "measured": {"node2": "eth0 down"},
         "expected": "up", "message": "node2: eth0 is down"}
RESOLVES = {"id": "names.resolve", "status": "PASS", "hosts": [], "measured": None, "expected": None, "message": ""}


def test_the_prolog_drains_on_a_failure_read_now_and_exits_1_so_slurm_requeues():
    slurm = Slurm(IDLE)
    code, line, out = prolog("node2", [IFACE, RESOLVES], None, record([PASSING]), slurm, 900, now=NOW)
    assert code == 10 and line == ("ncclprep prolog node2: drained: ncclprep: data_plane.interface: measured eth0 "
                                   "down, expected up; the job is requeued")
    assert slurm.updates()[-1][:4] == ["scontrol", "update", "NodeName=node2", "State=DRAIN"]
    # the cached verdict fails (the last node check), the reading now passes: drained too
    slurm = Slurm(IDLE)
    code, line, _ = prolog("node2", [RESOLVES], None, record([SYSCTL]), slurm, 900, now=NOW)
    assert code == 10 and "sysctl.net.core.somaxconn" in slurm.updates()[-1][-1]
    # still failing on a node ncclprep drained already (a job slipped in while draining): requeued, no new drain
    ours = Slurm("node1|idle|none\nnode2|draining|ncclprep: x: measured 1, expected 2\n")
    code, line, _ = prolog("node2", [IFACE], None, None, ours, 900, now=NOW)
    assert code == 10 and [c[0] for c in ours.calls] == ["sinfo"] and line.endswith("the job is requeued")


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
    assert code == 0 and line == (
        "ncclprep prolog node2: fails (ncclprep: data_plane.interface: measured eth0 down, expected up), but UNKNOWN "
        "(Slurm's view unreadable: slurm_load_node error: Unable to contact): nothing done: the job runs")


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
    assert cli.main(["report", "--history", "--ledger", str(ledger)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5 and lines[0].split() == ["at", "scope", "verdict", "network", "partners", "checks",
                                                    "action:", "rule"]
    assert lines[1].split()[1:] == ["node", "FAIL", "yes", "node3", "net.bandwidth", "-:", "-"]
    assert lines[2].split()[1:] == ["node", "PASS", "no", "-", "-", "-:", "-"]
    assert lines[3].split()[1:] == ["node", "FAIL", "yes", "node1", "net.bandwidth", "-:", "-"]
    assert lines[4].startswith("node2: 3 entries; network strikes now ")
    assert cli.main(["report", "--history", "--ledger", str(tmp_path / "none")]) == 0
    assert "no verdicts in the ledger yet" in capsys.readouterr().out
    ledger.write_text("{not json")
    assert cli.main(["report", "--history", "--ledger", str(ledger)]) == 3
    assert f"cannot read {ledger}" in capsys.readouterr().out


# Issue 40 (../shared/reviews/security.md at 64ebd4f): each finding as a fault.

def many(n: int) -> Slurm:
    return Slurm("".join(f"node{i}|idle|none\n" for i in range(1, n + 1)))


def test_twenty_health_checks_at_once_drain_at_most_the_breakers_cap(tmp_path):
    """N2: Slurm runs HealthCheckProgram on every node at once; every record fails (a fabric-wide
    fault). 64ebd4f drained 20 of 20 against a cap of 2; the mark held before the second reading
    keeps ncclprep at 2 at every moment (the fake serializes scontrol as slurmctld does)."""
    for attempt in range(3):
        slurm = many(20)
        slurm.delay = 0.02
        barrier = threading.Barrier(20)
        results = {}

        def one(i, slurm=slurm, barrier=barrier, results=results, attempt=attempt):
            barrier.wait()
            results[i] = health(f"node{i}", record([dict(SYSCTL, hosts=[f"node{i}"])], host=f"node{i}"),
                                str(tmp_path / f"{attempt}-{i}.json"), slurm, 900, now=NOW)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(1, 21)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(results) == 20 and all(code in (0, 3) for code, _, _ in results.values())
        assert slurm.peak <= 2 and 1 <= len(slurm.held()) <= 2, (slurm.peak, slurm.held())
        # no mark is left behind
        assert all(not v["features"] for v in slurm.nodes.values())
        held_back = [line for _, line, _ in results.values() if "the circuit breaker" in line]
        assert len(held_back) + len(slurm.held()) <= 20 and held_back


def test_a_drain_is_held_back_by_another_hooks_live_mark_and_by_the_absolute_cap(tmp_path):
    slurm = many(40)  # 10 % is 4
    slurm.nodes["node9"]["features"] = [f"ncclprep_draining_{int(time.time())}"]
    for n in ("node5", "node6", "node7"):
        slurm.nodes[n].update(state="drained", reason="ncclprep: x: measured 1, expected 2")
    code, line, _ = health("node1", record([dict(SYSCTL, hosts=["node1"])], host="node1"), str(tmp_path / "l.json"),
                           slurm, 900, now=NOW)
    assert "holds or is draining 4 of 40 nodes (node5, node6, node7, node9) already (at most 4" in line
    assert not slurm.updates()
    slurm.nodes["node9"]["features"] = []
    code, line, _ = health("node1", record([dict(SYSCTL, hosts=["node1"])], host="node1"), str(tmp_path / "m.json"),
                           slurm, 900, now=NOW, max_drained=3)
    assert "(at most 3: the circuit breaker)" in line and not slurm.updates()


def test_a_member_down_or_a_jobs_listener_drains_neither_in_the_health_check_nor_the_prolog(tmp_path):
    """N1 and N3 through the hooks: node3 down fails names.reachable on node2; a job's torchrun on
    29400 fails firewall.ports_free on the allocated node2. Nothing is drained, the job runs."""
    reach = {"id": "names.reachable", "status": "FAIL", "hosts": ["node3"], "measured": {"node3": "unreachable"},
             "expected": "connects", "message": "node2 -> node3 unreachable"}
    ports = {"id": "firewall.ports_free", "status": "FAIL", "hosts": ["node2"],
             "measured": {"node2": {"29400": "torchrun (pid 77)"}}, "expected": "free", "message": "held"}
    slurm = Slurm("node1|idle|none\nnode2|allocated|none\nnode3|down*|Not responding\n")
    code, line, _ = health("node2", record([reach, ports]), str(tmp_path / "l.json"), slurm, 900, now=NOW)
    assert code == 0 and "fails only checks that do not judge it" in line and not slurm.updates()
    code, line, _ = prolog("node2", [RESOLVES], None, record([reach, ports]), slurm, 900, now=NOW,
                           ledger_path=str(tmp_path / "l.json"))
    assert code == 0 and line == "ncclprep prolog node2: passes: the job runs" and not slurm.updates()


def test_a_human_who_drains_between_the_reading_and_the_resume_keeps_the_drain(tmp_path):
    """N7's window: Slurm read, then a person drains with their own reason, then the resume would run."""
    reason = "ncclprep: sysctl.net.core.somaxconn: measured 128, expected 65535"
    slurm = Slurm(f"node1|idle|none\nnode2|drained|{reason}\n")
    first = []

    def runner(argv, timeout):
        out = slurm(argv, timeout)
        if argv[0] == "sinfo" and not first:
            first.append(1)
            slurm.nodes["node2"]["reason"] = "admin: reseating the NIC"
        return out

    code, line, out = health("node2", record([PASSING]), str(tmp_path / "l.json"), runner, 900, now=NOW)
    assert not out["done"] and "changed since it was read" in line and not slurm.updates()
    assert slurm.nodes["node2"]["reason"] == "admin: reseating the NIC"


def test_a_node_that_fails_again_after_ncclprep_resumed_it_is_left_drained_for_a_person(tmp_path):
    ledger = str(tmp_path / "l.json")
    slurm = Slurm(IDLE)
    health("node2", record([SYSCTL], minutes_ago=30), ledger, slurm, 3600, now=NOW)
    health("node2", record([PASSING], minutes_ago=20), ledger, slurm, 3600, now=NOW)
    assert slurm.nodes["node2"]["reason"] is None
    code, line, _ = health("node2", record([SYSCTL], minutes_ago=10), ledger, slurm, 3600, now=NOW)
    assert slurm.nodes["node2"]["reason"].startswith("ncclprep: repeat: sysctl.net.core.somaxconn")
    code, line, _ = health("node2", record([PASSING], minutes_ago=1), ledger, slurm, 3600, now=NOW)
    assert "left for a person" in line and slurm.nodes["node2"]["state"] == "drained"


def test_two_writers_of_the_ledger_at_once_keep_both_entries(tmp_path):
    """N12: the health check and the Epilog wrote the ledger at once and a strike was lost."""
    path = str(tmp_path / "ledger.json")
    for round_ in range(5):
        barrier = threading.Barrier(2)

        def write(k, barrier=barrier, round_=round_):
            barrier.wait()
            verdict = record_verdict(record([SYSCTL], minutes_ago=k + round_ * 2), 3600, NOW)
            update_ledger(path, "node2", verdict)

        threads = [threading.Thread(target=write, args=(k,)) for k in (0.1, 0.2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    assert len(json.loads(open(path).read())) == 10


def test_the_hooks_refuse_nan_seconds_and_the_history_skips_an_entry_of_another_shape(tmp_path, capsys):
    """N19: --max-age nan was accepted; an entry {"checks": [1]} ended report --history in a traceback."""
    for opt in ("--max-age", "--refresh-after", "--strike-window"):
        assert nodehealth.main([opt, "nan", "--node", "n", "--record", str(tmp_path / "r")]) == 2
    assert nodehealth.main(["--max-drained", "0"]) == 2
    ledger = tmp_path / "ledger.json"
    ledger.write_text('[{"checks": [1]}, {"at": "2026-12-05T18:00:00+00:00", "run": "r", "status": "PASS"}]')
    assert cli.main(["report", "--history", "--ledger", str(ledger)]) == 0
    assert "1 entry" in capsys.readouterr().out


def test_a_background_node_check_is_killed_before_the_next_may_start(tmp_path, monkeypatch):
    """N16: a hung node check got a new sibling every interval; each now runs under a deadline
    shorter than the lock's life."""
    started = []
    monkeypatch.setattr(nodehealth.subprocess, "Popen", lambda argv, **kw: started.append(argv))
    assert refresh(str(tmp_path / "rec.json"), 240, age_s=None, command=["sleep", "1000"]) is True
    argv = started[0]
    assert argv[argv.index("timeout"):] == ["timeout", "-k", "5", "235", "sleep", "1000"]


def test_the_hooks_import_without_jinja2_as_on_a_nodes_own_python():
    """The health check, Prolog and Epilog run under the node's system Python (``python3 -I``),
    which has no Jinja2: importing the report package from slurm.py broke every hook. The router
    (cli) and every module a hook runs import without Jinja2, torch or PyYAML."""
    import subprocess
    import sys

    code = ("import sys, importlib.abc\n"
            "class Block(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path, target=None):\n"
            "        if name.split('.')[0] in ('jinja2', 'torch', 'yaml'):\n"
            "            raise ImportError('blocked: ' + name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "import ncclprep\n"
            "from ansible.module_utils.ncclprep import cli\n"
            "from ansible.module_utils.ncclprep.node import check\n"
            "from ansible.module_utils.ncclprep.slurm import claims, health, retest, rules\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_a_degraded_node_check_sets_the_avoid_mark_and_a_pass_clears_it(tmp_path):
    """Issue 40 item 5 through the health check: links.rdma WARN (a port down beside the others)
    raises node2's Weight with its mark, drains nothing; the next passing check puts it back."""
    warn = {"id": "links.rdma", "status": "WARN", "hosts": ["node2"], "measured": {"node2": ["mlx5_1/1 down"]},
            "expected": None, "message": "node2: mlx5_1/1 down"}
    slurm = Slurm(IDLE)
    ledger = str(tmp_path / "l.json")
    code, line, out = health("node2", record([warn, PASSING], minutes_ago=2), ledger, slurm, 900, now=NOW)
    assert code == 0 and out["done"] and "the scheduler avoids it (weight 1000000, was 1)" in line
    assert slurm.nodes["node2"] == {"state": "idle", "weight": 1000000, "features": ["ncclprep_avoid_node_1"],
                                    "reason": None}
    assert not slurm.updates()
    code, line, out = health("node2", record([PASSING], minutes_ago=1), ledger, slurm, 900, now=NOW)
    assert out["done"] and "no longer avoided (weight 1)" in line
    assert slurm.nodes["node2"] == {"state": "idle", "weight": 1, "features": [], "reason": None}
    assert [e["status"] for e in json.loads(open(ledger).read())] == ["WARN", "PASS"]


def test_what_a_break_it_review_found_in_the_hooks(tmp_path, capsys, monkeypatch):
    """A crash in the Prolog exited 1, which Slurm turns into its own drain past the breaker; a
    record or mark dated in the future was trusted for as long as it stayed ahead; a ledger entry
    whose run is a list ended the health check in a traceback; rows of another shape raised in
    decide or, with hosts a string, read as a pass."""
    import pytest

    # a crash anywhere in the hook: UNKNOWN, the job runs (0), the health check exits 3
    monkeypatch.setattr(nodehealth, "quick_rows", lambda *a, **k: 1 / 0)
    assert nodehealth.main(["--node", "n", "--record", str(tmp_path / "r")], "prolog") == 0
    assert "UNKNOWN (crashed: ZeroDivisionError" in capsys.readouterr().out
    monkeypatch.setattr(nodehealth, "health", lambda *a, **k: 1 / 0)
    assert nodehealth.main(["--node", "n", "--record", str(tmp_path / "r"), "--no-refresh"]) == 3
    # a record from the future: UNKNOWN, and a fresh check is started
    ahead = record([SYSCTL], minutes_ago=-60 * 24)
    got = record_verdict(ahead, 900, NOW)
    assert got["status"] == "UNKNOWN" and "ahead of this clock" in got["why"]
    started = []
    monkeypatch.setattr(nodehealth.subprocess, "Popen", lambda argv, **kw: started.append(argv))
    assert refresh(str(tmp_path / "rec.json"), 240, age_s=got["age_s"], command=["true"]) and started
    # a mark dated far ahead is no mark (it would hold a slot until then)
    from ansible.module_utils.ncclprep.slurm.rules import decide, marked

    now = NOW.timestamp()
    assert not marked({"features": [f"ncclprep_draining_{int(now) + 9 * 86400}"]}, now)
    assert marked({"features": [f"ncclprep_draining_{int(now) + 100}"]}, now)
    # a ledger entry of another shape is left out, not a traceback
    ledger = tmp_path / "l.json"
    ledger.write_text('[{"run": ["x"], "status": "FAIL"}]')
    code, line, _ = health("node2", record([SYSCTL]), str(ledger), Slurm(IDLE), 900, now=NOW)
    assert code == 0 and "drained" in line
    # rows of another shape: UNKNOWN, never a pass
    idle = {"state": "idle", "weight": 1, "features": [], "reason": None, "drained": False, "busy": False}
    for rows in ([dict(SYSCTL, hosts="node2")], [dict(SYSCTL, hosts=3)], ["a row"], [dict(SYSCTL, id=["x"])]):
        got = decide("node2", idle, {"status": "FAIL", "failed": rows}, [], {"node2": idle}, NOW)
        assert got["action"] == "none" and "UNKNOWN (the verdict's rows cannot be read" in got["why"], rows
    with pytest.raises(ValueError):
        decide("node2", idle, {"status": "HANG"}, [], {"node2": idle}, NOW)


def test_booted_at_is_the_start_of_pid_1(tmp_path):
    """Issue 41 item 4: btime of /proc/stat plus PID 1's starttime (field 22, clock ticks)."""
    (tmp_path / "1").mkdir()
    (tmp_path / "stat").write_text("cpu  1 2 3\nbtime 1796670000\nprocesses 9\n")
    ticks = os.sysconf("SC_CLK_TCK")
    fields = ["S"] + ["0"] * 18 + [str(120 * ticks)] + ["0"] * 20
    (tmp_path / "1" / "stat").write_text("1 (systemd (x)) " + " ".join(fields) + "\n")
    assert nodehealth.booted_at(str(tmp_path)) == datetime.datetime.fromtimestamp(1796670120, datetime.timezone.utc)
    assert nodehealth.booted_at(str(tmp_path / "none")) is None
    real = nodehealth.booted_at()
    assert real is not None and real <= datetime.datetime.now(datetime.timezone.utc)


def test_a_record_from_before_the_boot_is_no_verdict(tmp_path):
    booted = NOW - datetime.timedelta(minutes=2)
    before = record([PASSING], minutes_ago=3)
    v = record_verdict(before, 900, NOW, booted)
    assert v["status"] == "UNKNOWN" and v["before_boot"] is True
    assert v["why"] == ("the last node check ran before this boot (2026-12-05T18:58:00+00:00): not a verdict on "
                        "the node as it is")
    assert record_verdict(record([PASSING], minutes_ago=1), 900, NOW, booted)["status"] == "PASS"
    slurm = Slurm(IDLE)
    code, line, _ = health("node2", before, str(tmp_path / "ledger"), slurm, 900, now=NOW, booted=booted)
    assert code == 3 and slurm.updates() == [] and "before this boot" in line


def test_the_first_health_check_after_a_boot_runs_the_node_check_and_drains_on_its_failure(tmp_path, monkeypatch):
    """Issue 41 item 4: slurmd runs HealthCheckProgram as it starts; the record of before the boot
    passed, the node came back without its sysctl drop-in: the health check runs the node check
    now (its --record the health check's) and drains the node on that record's FAIL."""
    path = tmp_path / "node-check.json"
    stale = record([PASSING], minutes_ago=30)
    stale["generated_at"] = (datetime.datetime.now(datetime.timezone.utc)
                             - datetime.timedelta(minutes=30)).isoformat()
    path.write_text(json.dumps(stale))
    fresh = dict(stale, generated_at=datetime.datetime.now(datetime.timezone.utc).isoformat(), checks=[SYSCTL])
    script = tmp_path / "check.sh"
    script.write_text(f"#!/bin/sh\n[ \"$1\" = --record ] && cat > \"$2\" <<'EOF'\n{json.dumps(fresh)}\nEOF\n")
    script.chmod(0o755)
    monkeypatch.setattr(nodehealth, "REFRESH", [str(script)])
    monkeypatch.setattr(nodehealth, "booted_at", lambda: datetime.datetime.now(datetime.timezone.utc)
                        - datetime.timedelta(minutes=5))
    slurm = Slurm(IDLE)
    monkeypatch.setattr(nodehealth, "subprocess_runner", slurm)
    monkeypatch.setattr(nodehealth, "refresh", lambda *a, **k: False)
    assert nodehealth.main(["--node", "node2", "--record", str(path), "--ledger", str(tmp_path / "ledger")]) == 0
    assert [c[2:4] for c in slurm.updates()] == [["NodeName=node2", "State=DRAIN"]]
    assert json.loads(path.read_text())["checks"] == [SYSCTL]
    # a node check that writes nothing leaves the verdict UNKNOWN, and nothing drained
    path.write_text(json.dumps(stale))
    script.write_text("#!/bin/sh\nexit 0\n")
    slurm = Slurm(IDLE)
    monkeypatch.setattr(nodehealth, "subprocess_runner", slurm)
    assert nodehealth.main(["--node", "node2", "--record", str(path), "--ledger", str(tmp_path / "ledger2")]) == 3
    assert slurm.updates() == []
    # no record at all (a node whose first check is the one at its boot): the same, a check run now
    path.unlink()
    script.write_text(f"#!/bin/sh\n[ \"$1\" = --record ] && cat > \"$2\" <<'EOF'\n{json.dumps(fresh)}\nEOF\n")
    slurm = Slurm(IDLE)
    monkeypatch.setattr(nodehealth, "subprocess_runner", slurm)
    assert nodehealth.main(["--node", "node2", "--record", str(path), "--ledger", str(tmp_path / "ledger3")]) == 0
    assert [c[2:4] for c in slurm.updates()] == [["NodeName=node2", "State=DRAIN"]]
