"""How one node's output of the torchrun smoke job is read (ddp_smoke.read_result) and judged (checks
torchrun.smoke); the job itself (the template) runs for real in test_train_template.py."""

from __future__ import annotations

import json

from ansible.module_utils.ncclprep.checks import evaluate
from ansible.module_utils.ncclprep.probes import smoke as ddp_smoke

HOSTS = ["node1", "node2", "node3"]


def line(rank, identical=True, world=3):
    return ddp_smoke.MARKER + json.dumps({"rank": rank, "world_size": world, "params_identical": identical})


def test_result_pass_fail_and_bad_parameters():
    ok = ddp_smoke.read_result("noise\n" + line(0) + "\n", 0, 120, 3.5, "node1")
    assert ok["status"] == "PASS" and ok["rc"] == 0 and ok["workers"][0]["rank"] == 0 and ok["elapsed_s"] == 3.5
    crashed = ddp_smoke.read_result(line(2) + "\ntraceback : Signal 6 (SIGABRT) received by PID 77\n", 1, 120, 4,
                                    "node3")
    assert crashed["status"] == "FAIL" and crashed["error"] == "torchrun exited with code 1"
    assert crashed["log_tail"][-1] == "traceback : Signal 6 (SIGABRT) received by PID 77"
    differ = ddp_smoke.read_result(line(0, identical=False), 0, 120, 4, "node1")
    assert differ["status"] == "FAIL" and "different parameters" in differ["error"]
    silent = ddp_smoke.read_result(ddp_smoke.MARKER + "{not json\n", 0, 120, 4, "node1")
    assert silent["status"] == "FAIL" and silent["workers"] == []


def test_results_of_workers_that_wrote_at_once_are_all_read():
    """Two workers' unbuffered print()s interleaved on one pipe (seen in the unit suite): text, text, newlines."""
    joined = "warn: x" + line(0) + line(1) + "\n\n" + ddp_smoke.MARKER + "{broken\n" + "[rank2]: " + line(2) + "\n"
    result = ddp_smoke.read_result(joined, 0, 120, 1, "node1")
    assert [w["rank"] for w in result["workers"]] == [0, 1, 2] and result["status"] == "PASS"


def test_a_node_killed_at_the_deadline_after_a_correct_job_was_waiting_for_the_others():
    waited = ddp_smoke.read_result(line(0) + "\n", None, 120, 120.2, "node1")
    assert waited["status"] == "HANG" and waited["rc"] is None
    assert "finished with identical parameters, then torchrun waited for the other nodes" in waited["error"]
    stuck = ddp_smoke.read_result("[W socket.cpp:1] The client socket has timed out\n", None, 120, 120.2, "node1")
    assert stuck["status"] == "HANG" and stuck["error"] == "torchrun did not finish within 120 s"
    assert ddp_smoke.read_result("x\n" * 40, 1, 120, 1, "n")["log_tail"] == ["x"] * 15


def test_the_check_blames_the_node_that_crashed_not_those_that_waited_and_quotes_its_last_line():
    """CI saw this: node3's torchrun exited 1 while node1 and node2, done, waited in the exit barrier."""
    from test_checks import healthy  # the healthy records of the check tests (tests/unit on sys.path)

    rec = healthy()
    waited = ddp_smoke.read_result(line(0) + "\n", None, 120, 120, "node1")
    rec["node1"]["smoke"] = waited
    rec["node2"]["smoke"] = dict(waited, host="node2")
    rec["node3"]["smoke"] = ddp_smoke.read_result(
        line(2) + "\nexitcode  : -6 (pid: 77)\ntraceback : Signal 6 (SIGABRT) received by PID 77\n", 1, 120, 4,
        "node3")
    smoke = next(c for c in evaluate(rec, HOSTS) if c["id"] == "torchrun.smoke")
    assert smoke["status"] == "FAIL" and smoke["hosts"] == ["node3"]
    assert smoke["measured"] == {"node1": "HANG", "node2": "HANG", "node3": "FAIL"}
    assert smoke["message"].startswith("node3: torchrun exited with code 1; node1: this node's 1 worker(s) finished")
    assert smoke["message"].endswith("last line on node3: traceback : Signal 6 (SIGABRT) received by PID 77")


def test_a_launch_the_launcher_refused_fails_with_its_reason():
    out = ("ncclprep-torchrun: refused on node2: 1 node name(s) resolve wrong: node3 -> nothing (expected "
           "10.77.29.13) (role host_names, /etc/hosts)\n")
    refused = ddp_smoke.read_result(out, 2, 120, 0.2, "node2")
    assert refused["status"] == "FAIL" and refused["workers"] == []
    assert refused["error"] == ("refused on node2: 1 node name(s) resolve wrong: node3 -> nothing (expected "
                                "10.77.29.13) (role host_names, /etc/hosts)")
    # the same words from a job that ran and then failed are not a refusal
    assert ddp_smoke.read_result("x\n", 1, 120, 3, "node2")["error"] == "torchrun exited with code 1"
