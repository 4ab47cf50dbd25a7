"""Blame rules (module_utils/ncclprep/blame.py): slow by median and MAD, node or link."""

from __future__ import annotations

import pytest
from ansible.module_utils.ncclprep.blame import (
    classify,
    modified_z,
    slow_bandwidth,
    slow_outliers,
    slowest_per_direction,
)

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
    assert slow_bandwidth(HEALTHY, ratio=0.2) == {"nodes": {}, "links": {}}
    assert slow_bandwidth(HEALTHY, ratio=0.5) == {"nodes": {}, "links": {}}


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
