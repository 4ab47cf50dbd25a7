import time

import pytest
from ansible.module_utils.ncclprep.deadline import outcome_fields, run_with_deadline


def _sleeper(progress, seconds):
    progress.stage("sleeping")
    time.sleep(seconds)
    progress.result("woke")


def _boom(progress):
    progress.stage("about to fail")
    raise RuntimeError("connection refused by node3")


def test_result_comes_back():
    out = run_with_deadline(_sleeper, {"seconds": 0}, timeout_s=10)
    assert out["outcome"] == "result" and out["value"] == "woke"
    assert [s["stage"] for s in out["stages"]] == ["sleeping"]


def test_hang_is_killed_at_the_deadline_and_names_the_stage():
    start = time.monotonic()
    out = run_with_deadline(_sleeper, {"seconds": 60}, timeout_s=1.5)
    assert out["outcome"] == "hang"
    assert out["stages"][-1]["stage"] == "sleeping"
    assert time.monotonic() - start < 10


def test_error_is_reported_with_its_text():
    out = run_with_deadline(_boom, {}, timeout_s=10)
    assert out["outcome"] == "error"
    assert out["value"] == "RuntimeError: connection refused by node3"


def test_timeout_must_be_positive():
    with pytest.raises(ValueError, match="timeout_s"):
        run_with_deadline(_boom, {}, timeout_s=0)


def _dies(progress):
    import os

    progress.stage("loading")
    os._exit(134)


def _value(progress):
    progress.result({"status": "PASS", "links": [1]})


def test_outcome_fields_give_the_probe_result_keys():
    assert outcome_fields(run_with_deadline(_value, {}, timeout_s=10), 10) == {"status": "PASS", "links": [1]}
    hung = outcome_fields(run_with_deadline(_sleeper, {"seconds": 60}, timeout_s=1), 1)
    assert hung == {"status": "HANG", "stage": "sleeping", "error": "no progress past 'sleeping' within 1 s"}
    failed = outcome_fields(run_with_deadline(_boom, {}, timeout_s=10), 10)
    assert failed == {"status": "FAIL", "stage": "about to fail", "error": "RuntimeError: connection refused by node3"}
    died = outcome_fields(run_with_deadline(_dies, {}, timeout_s=10), 10)
    assert died == {"status": "FAIL", "stage": "loading", "error": "worker exited with code 134 without a result"}
    assert outcome_fields({"outcome": "hang", "stages": [], "value": None}, 5)["stage"] == "start"
