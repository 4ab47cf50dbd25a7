"""Blame rules (module_utils/ncclprep/probes/blame.py): slow by median and MAD, node or link."""

from __future__ import annotations

import random
import statistics

import pytest
from ansible.module_utils.ncclprep.probes.blame import (
    blame_round,
    classify,
    collective_plan,
    median_without,
    modified_z,
    slow_bandwidth,
    slow_outliers,
    slowest_per_direction,
)
from ansible.module_utils.ncclprep.probes.collectives import collective_trigger

# One TCP stream per direction (GB/s) measured on the 3-node local cluster of this machine:
# healthy, and with node2's eth0 throttled by `tc qdisc add dev eth0 root tbf rate 200mbit ...`.
HEALTHY = {("node1", "node2"): 1.34, ("node1", "node3"): 1.71, ("node2", "node1"): 2.27,
           ("node2", "node3"): 0.858, ("node3", "node1"): 1.66, ("node3", "node2"): 1.92}
THROTTLED = {("node1", "node2"): 1.58, ("node1", "node3"): 1.28, ("node2", "node1"): 0.0248,
             ("node2", "node3"): 0.0248, ("node3", "node1"): 1.39, ("node3", "node2"): 1.15}
# the same fault in another run: the healthy nodes 2x apart, which left MAD as large as node2's gap
THROTTLED_NOISY = {("node1", "node2"): 0.681, ("node1", "node3"): 1.08, ("node2", "node1"): 0.0248,
                   ("node2", "node3"): 0.0248, ("node3", "node1"): 2.1, ("node3", "node2"): 1.47}


def test_modified_z_is_iglewicz_hoaglin():
    # median 3, absolute deviations 2 1 0 1 7 -> MAD 1; z = 0.6745 (x - 3) / 1
    z = modified_z({"a": 1, "b": 2, "c": 3, "d": 4, "e": 10})
    assert z == pytest.approx({"a": -1.349, "b": -0.6745, "c": 0.0, "d": 0.6745, "e": 4.7215})
    assert modified_z({"a": 5, "b": 5, "c": 1}) == {"a": 0.0, "b": 0.0, "c": float("-inf")}
    assert modified_z({}) == {}


def test_median_without_one_value_equals_the_median_of_the_others():
    rng = random.Random(13)
    for n in range(1, 40):
        values = [rng.choice([0.5, 1.0, 1.0, 2.0, rng.random()]) for _ in range(n)]
        ordered = sorted(values)
        for i, v in enumerate(values):
            others = values[:i] + values[i + 1:]
            expected = statistics.median(others) if others else None
            assert median_without(ordered, v) == expected, (values, v)
    assert median_without([1.0, 2.0, 7.0], 7.0) == 1.5
    with pytest.raises(ValueError, match="3.0 is not among"):
        median_without([1.0, 2.0], 3.0)


def test_slow_needs_both_the_z_score_and_the_ratio_or_a_floor():
    values = {f"h{i}": 10.0 + 0.01 * i for i in range(9)} | {"slow": 9.0}
    # MAD is tiny: 9.0 has z far below -3.5, but it is 90 % of the median: not slow
    assert slow_outliers(values) == {}
    assert set(slow_outliers(values, ratio=0.95)) == {"slow"}
    found = slow_outliers(values | {"dead": 1.0})
    assert set(found) == {"dead"} and "against the median 10" in found["dead"]
    assert set(slow_outliers({"a": 3.0, "b": 2.0}, floor=2.5)) == {"b"}  # too few for the robust rule
    with pytest.raises(ValueError, match="z=1"):
        slow_outliers(values, z=1)
    with pytest.raises(ValueError, match="ratio=0"):
        slow_outliers(values, ratio=0)


def test_few_values_are_judged_by_the_ratio_to_the_others_median():
    # 3 node medians 0.0248, 0.88, 1.785: MAD = 0.855 gives node2 a z of only -0.67
    assert modified_z({"node1": 0.88, "node2": 0.0248, "node3": 1.785})["node2"] > -1
    for rates in (THROTTLED, THROTTLED_NOISY):
        slow = slow_bandwidth(rates, ratio=0.2)
        assert list(slow["nodes"]) == ["node2"] and slow["links"] == {}, slow
        assert slow["nodes"]["node2"].startswith("sends at a median 0.0248 against the median")
    assert slow_bandwidth(THROTTLED, ratio=0.2)["nodes"]["node2"] == (
        "sends at a median 0.0248 against the median 1.35 of the others (below 0.2 x)")


def test_healthy_noise_is_not_slow():
    assert slow_bandwidth(HEALTHY, ratio=0.2) == {"nodes": {}, "links": {}, "explained": {}}
    assert slow_bandwidth(HEALTHY, ratio=0.5) == {"nodes": {}, "links": {}, "explained": {}}


def test_one_bad_link_among_healthy_nodes_is_a_link():
    nodes = [f"n{i}" for i in range(6)]
    rates = {(a, b): 10.0 + ((7 * i + 3 * j) % 7) * 0.1
             for i, a in enumerate(nodes) for j, b in enumerate(nodes) if a != b}
    rates[("n1", "n4")] = 0.5
    slow = slow_bandwidth(rates)
    assert slow["nodes"] == {} and list(slow["links"]) == [("n1", "n4")]


def test_a_slow_receiver_is_named_as_receiving():
    nodes = [f"n{i}" for i in range(5)]
    rates = {(a, b): (0.1 if b == "n3" else 10.0) for a in nodes for b in nodes if a != b}
    slow = slow_bandwidth(rates)
    assert list(slow["nodes"]) == ["n3"] and slow["nodes"]["n3"].startswith("receives")
    assert slow["links"] == {}


def test_nodes_slow_both_ways_explain_the_directions_into_them_too():
    """Found by bench/scale.py: at 8 slow nodes of 64, healthy nodes were named in most trials. A
    node slow both ways (a NIC at a lower speed) was labelled only "sends", so the directions
    *into* it counted as slow links, naming their healthy senders."""
    nodes = [f"n{i}" for i in range(10)]
    slow_nodes = {"n2", "n7"}
    rates = {(a, b): (0.1 if {a, b} & slow_nodes else 10.0 + 0.01 * i)
             for i, a in enumerate(nodes) for b in nodes if a != b}
    slow = slow_bandwidth(rates)
    assert set(slow["nodes"]) == slow_nodes and slow["links"] == {}, slow["links"]
    assert slow["explained"][("n4", "n2")] == "n2" and slow["explained"][("n2", "n4")] == "n2"
    assert len(slow["explained"]) == 2 * 2 * 9 - 2  # every direction to or from n2 or n7, once each


def test_a_healthy_node_with_most_partners_slow_is_judged_again_without_them():
    # 20 nodes in a ring plus the pair n4-n14; n3 and n5 are slow both ways (a NIC at a tenth of
    # the speed). Two of n4's three partners are slow, so its median is theirs: before the
    # second pass (issue 13) n4 was named too.
    speed = {f"n{i}": 0.1 if i in (3, 5) else 1.0 + i / 100 for i in range(20)}
    pairs = [(f"n{i}", f"n{(i + 1) % 20}") for i in range(20)] + [("n4", "n14")]
    rates = {(s, d): min(speed[s], speed[d]) for a, b in pairs for s, d in ((a, b), (b, a))}
    slow = slow_bandwidth(rates)
    assert set(slow["nodes"]) == {"n3", "n5"}, slow["nodes"]
    assert slow["links"] == {}
    # n4's directions to and from n3 and n5 are the slow nodes' doing
    assert slow["explained"][("n4", "n3")] == "n3" and slow["explained"][("n5", "n4")] == "n5"


def test_classify_node_bad_in_every_pairing_link_bad_in_one():
    tested = [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d"), ("a", "d")]
    assert classify(tested, [("a", "b"), ("b", "c")]) == {"nodes": ["b"], "links": [], "suspects": []}
    assert classify(tested, [("c", "d")]) == {"nodes": [], "links": [("c", "d")], "suspects": []}
    # two nodes, one pair: the link is bad, both nodes stay suspects
    assert classify([("x", "y")], [("y", "x")]) == {"nodes": [], "links": [("x", "y")], "suspects": ["x", "y"]}
    assert classify(tested, []) == {"nodes": [], "links": [], "suspects": []}


def test_slowest_per_direction_keeps_the_worse_of_two_phases():
    rows = [{"src": "a", "dst": "b", "bandwidth_gbps": 1.5}, {"src": "a", "dst": "b", "bandwidth_gbps": 0.02},
            {"src": "b", "dst": "a", "bandwidth_gbps": 1.4}, {"src": "b", "dst": "c", "bandwidth_gbps": None}]
    assert slowest_per_direction(rows) == {("a", "b"): 0.02, ("b", "a"): 1.4}
    assert slowest_per_direction([]) == {}


# ---- the collective's blame: pairs, then bisect, as validate.yml drives it round by round

def drive(hosts, outcome, **kw):
    """Run collective_plan to its verdict; ``outcome(group) -> (status, busbw)`` plays the
    cluster. Returns (verdict, the rounds run)."""
    history = []
    for _ in range(40):
        plan = collective_plan(hosts, history, **kw)
        if plan["stage"] == "done":
            return plan, history
        groups = [dict(zip(("status", "busbw_gbps"), outcome(g), strict=True), hosts=g) for g in plan["groups"]]
        for g in plan["groups"]:  # the groups of one round are disjoint
            assert not set(g) & {h for o in plan["groups"] if o is not g for h in o}
        history.append({"stage": plan["stage"], "groups": groups})
    raise AssertionError("no verdict in 40 rounds")


def test_throttled_node_is_named_from_its_two_slow_pairings():
    hosts = ["node1", "node2", "node3"]
    verdict, history = drive(hosts, lambda g: ("PASS", 0.0186 if "node2" in g else 0.452))
    assert [h["stage"] for h in history] == ["pairs", "pairs", "pairs"]
    assert verdict["nodes"] == ["node2"] and verdict["links"] == []
    assert "node2 bad in every pairing" in verdict["message"]
    assert sorted(o["outcome"] for o in verdict["outcomes"]) == ["PASS", "SLOW", "SLOW"]


def test_a_bad_link_fails_one_pairing_only():
    hosts = [f"n{i}" for i in range(6)]
    verdict, _ = drive(hosts, lambda g: ("HANG", None) if set(g) == {"n2", "n3"} else ("PASS", 1.0))
    assert verdict["nodes"] == [] and verdict["links"] == [["n2", "n3"]]


def test_a_healthy_node_between_two_bad_ones_is_re_paired_and_cleared():
    # ring n0..n7: n3 and n5 are dead, n4 between them is healthy but bad in both ring pairings
    hosts = [f"n{i}" for i in range(8)]
    dead = {"n3", "n5"}
    verdict, history = drive(hosts, lambda g: ("HANG", None) if dead & set(g) else ("PASS", 1.0))
    assert [h["stage"] for h in history] == ["pairs", "pairs", "confirm"]
    # the three in doubt (each beside another named node), each with its own node that passed
    confirm = history[-1]["groups"]
    assert [g["hosts"][0] for g in confirm] == ["n3", "n4", "n5"]
    assert all(g["hosts"][1] in {"n0", "n1", "n2", "n6", "n7"} for g in confirm)  # each passed a pairing
    assert len({g["hosts"][1] for g in confirm}) == 3
    assert verdict["nodes"] == ["n3", "n5"] and verdict["links"] == []
    assert "n4 passed when paired with a node that passed" in verdict["message"]


def test_a_single_bad_node_needs_no_confirm_round():
    hosts = [f"n{i}" for i in range(8)]
    verdict, history = drive(hosts, lambda g: ("PASS", 0.02 if "n3" in g else 1.0))
    assert [h["stage"] for h in history] == ["pairs", "pairs"] and verdict["nodes"] == ["n3"]


def test_when_every_pair_passes_bisect_narrows_to_the_failing_small_group():
    hosts = [f"n{i:02d}" for i in range(16)]
    # fails whenever n05 and n06 are in one group of 2 nodes or more... but pairs of them pass:
    # the fault needs three of n04-n06 at once (a switch port limit, say)
    bad = {"n04", "n05", "n06"}
    verdict, history = drive(hosts, lambda g: ("FAIL", None) if len(bad & set(g)) >= 2 and len(g) > 2
                             else ("PASS", 1.0))
    assert {h["stage"] for h in history} == {"pairs", "bisect"}
    assert verdict["nodes"] == [] and verdict["links"] == []
    assert verdict["groups"] == [["n04", "n05", "n06", "n07"]]
    assert "smallest failing groups n04, n05, n06, n07" in verdict["message"]


def test_small_group_without_a_bad_pair_says_so_and_one_host_is_refused():
    verdict, _ = drive(["a", "b", "c"], lambda g: ("PASS", 1.0))
    assert verdict["message"] == "every pair passes; only the group of 3 fails"
    with pytest.raises(ValueError, match="2 hosts or more"):
        collective_plan(["a"], [])


def row(op, size, busbw, wrong=0):
    """An nccl_probe result row (3 ranks: busbw = algbw x 4/3; time_us from algbw)."""
    algbw = busbw * 3 / 4
    return {"op": op, "size_bytes": size, "count": size // 4, "time_us": size / (algbw * 1e3),
            "algbw_gbps": algbw, "busbw_gbps": busbw, "wrong": wrong}


def probe(status="PASS", busbw=0.45, wrong=0, missing=(), error=None):
    return {"status": status, "missing_hosts": list(missing), "error": error, "stage": "done",
            "results": [row("all_reduce", 4096, 9.9),
                        row("all_reduce", 16777216, busbw, wrong),
                        {"op": "broadcast", "skipped": "no"}]}


def test_trigger_runs_on_a_failure_a_hang_with_everyone_present_or_below_the_floor_only():
    healthy = {h: probe() for h in ("n1", "n2", "n3")}
    assert collective_trigger(healthy, floor=0.1) == {"run": False, "ops": ["all_reduce"], "reason": ""}
    slow = dict(healthy, n2=probe(busbw=0.0186))
    got = collective_trigger(slow, floor=0.1)
    assert got["run"] and got["ops"] == ["all_reduce"] and got["reason"] == "all_reduce busbw 0.0186 GB/s below 0.1"
    assert not collective_trigger(slow)["run"]  # no floor: the slow one is net.bandwidth's to name
    wrong = dict(healthy, n3=probe(status="FAIL", wrong=12))
    assert collective_trigger(wrong)["run"] and collective_trigger(wrong)["ops"] == ["all_reduce"]
    missing = {h: probe(status="HANG", missing=["n3"]) for h in ("n1", "n2")}
    assert not collective_trigger(missing)["run"]
    stuck = {h: probe(status="HANG", error="no progress past 'all_reduce 16777216 B'") for h in ("n1", "n2")}
    assert collective_trigger(stuck)["run"]


def test_blame_round_reads_each_groups_first_host():
    plan = {"stage": "pairs", "groups": [["n1", "n2"], ["n3", "n4"]]}
    got = blame_round(plan, {"n1": probe(busbw=0.02), "n3": None})
    assert got == {"stage": "pairs", "groups": [{"hosts": ["n1", "n2"], "status": "PASS", "busbw_gbps": 0.02},
                                                {"hosts": ["n3", "n4"], "status": "HANG", "busbw_gbps": None}]}


def test_check_blame_names_the_node_the_pairs_found():
    from ansible.module_utils.ncclprep.checks.collectives import check_blame
    from ansible.module_utils.ncclprep.model import Context

    hosts = ["node1", "node2", "node3"]
    verdict, history = drive(hosts, lambda g: ("PASS", 0.0186 if "node2" in g else 0.452))
    blame = {"trigger": {"run": True, "reason": "all_reduce busbw 0.0186 GB/s below 0.1"}, "verdict": verdict,
             "rounds": history}
    (c,) = check_blame({h: {"blame": blame} for h in hosts}, Context(all_hosts=tuple(hosts)))
    assert c["status"] == "FAIL" and c["hosts"] == ["node2"] and c["measured"]["rounds"] == 3
    assert c["message"] == "pairs: node2 bad in every pairing (after all_reduce busbw 0.0186 GB/s below 0.1)"
    assert check_blame({h: {"blame": None} for h in hosts}, Context(all_hosts=tuple(hosts))) == []
    unfinished = dict(blame, verdict={"stage": "pairs", "groups": [["node1", "node2"]]})
    (w,) = check_blame({"node1": {"blame": unfinished}}, Context(all_hosts=("node1",)))
    assert w["status"] == "WARN" and "ran out of rounds" in w["message"]


def test_trigger_pairs_one_op_all_reduce_first():
    rows = [row("all_gather", 16, 0.01, wrong=3), row("broadcast", 16, 0.01)]
    got = collective_trigger({"n1": {"status": "FAIL", "results": rows}}, floor=0.1)
    assert got["ops"] == ["all_gather"] and "broadcast busbw 0.01 GB/s below 0.1" in got["reason"]
    rows.append(row("all_reduce", 16, 0.01))
    assert collective_trigger({"n1": {"status": "FAIL", "results": rows}}, floor=0.1)["ops"] == ["all_reduce"]
