"""Two runs compared (report/compare.py): a new failure, a fixed check, busbw and latency moves
beyond their tolerances, hosts that came and went; also against a schema version 1 run."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.ncclprep.checks import make_check
from ansible.module_utils.ncclprep.report import compare_runs, render_compare_json, render_compare_markdown, upgrade
from report_cases import make_cluster

OLD = make_cluster(somaxconn_node2="128")


def test_a_new_failure_a_fixed_check_and_a_30_percent_busbw_drop_are_found():
    new = make_cluster(kernel_node3="6.5.0", busbw_scale={"all_reduce": 0.7}, stamp="20261201T080000Z")
    diff = compare_runs(OLD, new)
    assert [(f["id"], f["status"], f["old_status"], f["hosts"]) for f in diff["new_failures"]] == [
        ("versions.kernel", "FAIL", "PASS", ["node3"])]
    assert [(f["id"], f["old_status"], f["status"], f["hosts"]) for f in diff["fixed"]] == [
        ("sysctl.net.core.somaxconn", "FAIL", "PASS", ["node2"])]
    assert {c["id"]: (c["old"], c["new"]) for c in diff["status_changes"]} == {
        "sysctl.net.core.somaxconn": ("FAIL", "PASS"), "versions.kernel": ("PASS", "FAIL")}
    (drop,) = diff["busbw_changes"]
    assert drop["op"] == "all_reduce" and drop["size_bytes"] == 16777216
    assert drop["old_gbps"] == pytest.approx(0.74) and drop["new_gbps"] == pytest.approx(0.518)
    assert drop["change"] == pytest.approx(-0.30)
    assert diff["regressed"] is True and diff["new"]["generated_at"] == "20261201T080000Z"


def test_a_5_percent_busbw_drop_is_within_the_tolerance():
    diff = compare_runs(OLD, make_cluster(somaxconn_node2="128", busbw_scale={"all_reduce": 0.95}))
    assert diff["busbw_changes"] == [] and diff["new_failures"] == [] and diff["fixed"] == []
    assert diff["regressed"] is False
    # the same drop counts under a tighter tolerance
    assert [c["op"] for c in compare_runs(OLD, make_cluster(busbw_scale={"all_reduce": 0.95}),
                                          busbw_tol=0.04)["busbw_changes"]] == ["all_reduce"]


def test_latency_change_per_direction_beyond_its_tolerance():
    base = make_cluster(latency={("node1", "node2"): 40.0})
    new = make_cluster(latency={("node1", "node2"): 48.0, ("node2", "node3"): 60.0})  # +20 %, +50 %
    (change,) = compare_runs(base, new)["latency_changes"]
    assert (change["link"], change["old_us"], change["new_us"]) == ("node2 -> node3", 40.0, 60.0)
    assert change["change"] == pytest.approx(0.5)
    assert len(compare_runs(base, new, latency_tol=0.1)["latency_changes"]) == 2


def test_a_still_failing_check_naming_another_host_is_a_new_failure_and_a_fix():
    old = {"status": "FAIL", "hosts": ["n1", "n2", "n3"], "generated_at": "a",
           "checks": [make_check("sysctl.x", "FAIL", ["n1"], message="n1 off")]}
    new = {"status": "FAIL", "hosts": ["n1", "n2", "n4"], "generated_at": "b",
           "checks": [make_check("sysctl.x", "FAIL", ["n2"], message="n2 off"), make_check("net.run", "HANG", [])]}
    diff = compare_runs(old, new)
    assert [(f["id"], f["hosts"]) for f in diff["new_failures"]] == [("sysctl.x", ["n2"]), ("net.run", [])]
    assert diff["new_failures"][1]["old_status"] is None  # a check the old run did not have
    assert [(f["id"], f["status"], f["hosts"]) for f in diff["fixed"]] == [("sysctl.x", "FAIL", ["n1"])]
    assert diff["hosts_added"] == ["n4"] and diff["hosts_removed"] == ["n3"]


def test_compare_reads_a_schema_version_1_run():
    v1 = {k: v for k, v in OLD.items() if k not in ("versions", "run")} | {"schema_version": 1}
    diff = compare_runs(upgrade(v1), make_cluster())
    assert diff["old"]["schema_version"] == 2 and [f["id"] for f in diff["fixed"]] == ["sysctl.net.core.somaxconn"]
    assert compare_runs(v1, make_cluster())["fixed"] == diff["fixed"]  # the keys it reads are in both versions


def test_compare_renders_as_markdown_and_json():
    diff = compare_runs(OLD, make_cluster(kernel_node3="6.5.0", busbw_scale={"all_reduce": 0.7},
                                          latency={("node1", "node3"): 90.0}))
    md = render_compare_markdown(diff)
    lines = md.splitlines()
    assert lines[0] == "# ncclprep: 20261130T221500Z (FAIL) -> 20261130T221500Z (FAIL)"
    assert lines[2].startswith("regressed: 1 new failures, 1 fixed, 1 busbw and 1 latency changes beyond 10% / 25%")
    assert "- FAIL versions.kernel (PASS before): node3: Linux kernel differs from the majority " \
           "(6.8.0-45-generic) on node3 (6.5.0)" in lines
    assert "- sysctl.net.core.somaxconn (FAIL -> PASS): node2" in lines
    assert "| all_reduce | 16 MiB | 0.74 | 0.518 | -30.0% |" in lines
    assert "| node1 -> node3 | 40 | 90 | +125.0% |" in lines
    assert json.loads(render_compare_json(diff)) == json.loads(json.dumps(diff))


def test_compare_refuses_a_negative_tolerance():
    with pytest.raises(ValueError, match="busbw_tol=-0.1"):
        compare_runs(OLD, OLD, busbw_tol=-0.1)
