"""The Slurm health rules (module_utils/ncclprep/slurm.py): sinfo read, verdicts, drain and resume."""

from __future__ import annotations

import pytest
from ansible.module_utils.ncclprep.slurm import (
    breaker_limit,
    decide,
    network_drain,
    node_verdict,
    parse_sinfo,
    partners,
    reason,
    scontrol,
    strikes,
)

# sinfo --noheader --Node --format '%N|%T|%E' on a cluster with two partitions (node1 listed twice),
# a human's drain, ncclprep's drain, a node draining under a job and one not responding.
SINFO = """node1|idle|none
node1|idle|none
node2|drained|maintenance: new PSU [root@2026-12-05T10:00:00]
node3|drained|ncclprep: sysctl.net.core.somaxconn: measured 128, expected 65535
node4|draining|ncclprep: net.bandwidth: measured 0.02, expected >= 0.1 of the median
node5|mixed|none
node6|idle*|Not responding
node7|allocated|none
"""

SYSCTL = {"id": "sysctl.net.core.somaxconn", "status": "FAIL", "hosts": ["node1"],
          "measured": {"node1": "128"}, "expected": "65535"}
BANDWIDTH = {"id": "net.bandwidth", "status": "FAIL", "hosts": ["node1 -> node5", "node7 -> node1"],
             "measured": 0.02, "expected": ">= 0.1 of the median"}


def cluster(**rows):
    """Ten nodes, all idle, with the given rows over them."""
    out = {f"node{i}": {"state": "idle", "responding": True, "drained": False, "busy": False, "reason": None}
           for i in range(1, 11)}
    out.update(rows)
    return out


def test_sinfo_rows_read_state_suffix_reason_and_a_node_listed_per_partition_once():
    nodes = parse_sinfo(SINFO)
    assert list(nodes) == [f"node{i}" for i in range(1, 8)]
    assert nodes["node1"] == {"state": "idle", "responding": True, "drained": False, "busy": False, "reason": None}
    assert nodes["node2"]["drained"] and nodes["node2"]["reason"] == "maintenance: new PSU [root@2026-12-05T10:00:00]"
    assert nodes["node4"]["drained"] and nodes["node4"]["busy"]
    assert nodes["node5"]["busy"] and not nodes["node5"]["drained"]
    assert nodes["node6"]["state"] == "idle" and nodes["node6"]["responding"] is False
    with pytest.raises(ValueError, match="sinfo line 1 is not '%N|%T|%E': 'node1 idle'"):
        parse_sinfo("node1 idle\n")


def test_node_checks_exit_code_and_output_give_the_verdict():
    assert node_verdict({"status": "PASS", "checks": []}, 0)["status"] == "PASS"
    fail = node_verdict({"status": "FAIL", "checks": [SYSCTL, dict(SYSCTL, id="x", status="PASS")]}, 1)
    assert fail == {"status": "FAIL", "failed": [SYSCTL], "why": None}
    assert node_verdict({"status": "ERROR", "error": "no intent file /etc/ncclprep/intent.json"}, 3) == {
        "status": "UNKNOWN", "failed": [], "why": "no intent file /etc/ncclprep/intent.json"}
    assert node_verdict(None, None)["why"] == "the node check did not end in time"
    assert node_verdict(None, 137)["why"] == "the node check ended with exit 137 and no verdict of its own"
    # exit 1 with no failed row is no verdict either
    assert node_verdict({"status": "FAIL", "checks": []}, 1)["status"] == "UNKNOWN"


def test_the_reason_names_the_check_and_this_hosts_values_and_fits_sinfo():
    assert reason([SYSCTL], "node1") == "ncclprep: sysctl.net.core.somaxconn: measured 128, expected 65535"
    assert reason([SYSCTL, BANDWIDTH], "node1").endswith("expected 65535 (+1 more)")
    ports = {"id": "firewall.ports_free", "measured": {"node1": {"29500": "python3 (pid 2045) on 0.0.0.0"}},
             "expected": "TCP 29400, 29500, 29510 free"}
    assert reason([ports], "node1") == ("ncclprep: firewall.ports_free: measured 29500: python3 (pid 2045) on "
                                        "0.0.0.0, expected TCP 29400, 29500, 29510 free")
    assert reason([dict(ports, measured=["eth0", "eth1"])], "node1").startswith(
        "ncclprep: firewall.ports_free: measured eth0, eth1,")
    long = dict(SYSCTL, measured="x" * 500)
    assert len(reason([long], "node1")) == 200
    assert partners(BANDWIDTH, "node1") == ["node5", "node7"] and partners(SYSCTL, "node1") == []


def test_a_node_check_failure_drains_with_its_reason_and_a_pass_resumes_only_ours():
    nodes = cluster()
    got = decide("node1", nodes["node1"], {"status": "FAIL", "failed": [SYSCTL]}, [], nodes)
    assert got["action"] == "drain" and got["reason"].startswith("ncclprep: sysctl.net.core.somaxconn")
    assert scontrol("node1", got) == ["scontrol", "update", "NodeName=node1", "State=DRAIN",
                                      f"Reason={got['reason']}"]
    ncclprep_drained = dict(nodes["node1"], state="drained", drained=True, reason=got["reason"])
    resumed = decide("node1", ncclprep_drained, {"status": "PASS"}, [], nodes)
    assert resumed["action"] == "resume" and scontrol("node1", resumed)[-1] == "State=RESUME"
    human = dict(nodes["node1"], state="drained", drained=True, reason="maintenance")
    for verdict in ({"status": "PASS"}, {"status": "FAIL", "failed": [SYSCTL]}):
        kept = decide("node1", human, verdict, [], nodes)
        assert kept["action"] == "none" and "someone else ('maintenance'): left alone" in kept["why"]
    # a node-local failure drains a busy node too (Slurm lets its job finish: draining)
    busy = dict(nodes["node1"], state="mixed", busy=True)
    assert decide("node1", busy, {"status": "FAIL", "failed": [SYSCTL]}, [], nodes)["action"] == "drain"


def test_unknown_neither_drains_nor_resumes():
    nodes = cluster()
    drained = dict(nodes["node1"], state="drained", drained=True, reason="ncclprep: x: measured 1, expected 2")
    for info in (nodes["node1"], drained):
        got = decide("node1", info, {"status": "UNKNOWN", "why": "a reader crashed"}, [], nodes)
        assert got == {"action": "none", "reason": None,
                       "why": "node1: UNKNOWN (a reader crashed): ncclprep neither drains nor resumes"}
        assert scontrol("node1", got) is None


def test_a_network_verdict_drains_on_a_second_strike_with_another_partner_and_never_a_busy_node():
    nodes = cluster()
    verdict = {"status": "FAIL", "failed": [dict(BANDWIDTH, hosts=["node1 -> node5"])]}
    first = [{"run": "a", "status": "FAIL", "network": True, "partners": ["node5"]}]
    got = decide("node1", nodes["node1"], verdict, first, nodes)
    assert got["action"] == "none" and "network strike 1 of 2 (node5)" in got["why"]
    same = first + [{"run": "b", "status": "FAIL", "network": True, "partners": ["node5"]}]
    assert decide("node1", nodes["node1"], verdict, same, nodes)["action"] == "none"  # the same peer twice
    other = same + [{"run": "c", "status": "FAIL", "network": True, "partners": ["node7"]}]
    assert decide("node1", nodes["node1"], verdict, other, nodes)["action"] == "drain"
    busy = dict(nodes["node1"], state="allocated", busy=True)
    held = decide("node1", busy, verdict, other, nodes)
    assert held["action"] == "none" and "never drains a busy node" in held["why"]
    # a blame of the node itself (no link): one strike per run
    runs = [{"run": r, "status": "FAIL", "network": True, "partners": []} for r in ("a", "b")]
    assert strikes(runs[:1]) == {"run:a"} and strikes(runs) == {"run:a", "run:b"}
    assert strikes([{"run": "a", "status": "PASS", "network": True, "partners": ["node5"]}]) == set()


def test_a_network_reason_shows_this_hosts_part_of_a_nested_measurement():
    """net.bandwidth measures ``{median_gbps, nodes: {host: why}, node_directions, links}``: the
    reason shows the host's own line, or the links that end at it, not the whole mapping."""
    measured = {"median_gbps": 1.56, "nodes": {"node3": "sends at a median 0.0248 against the median 1.85"},
                "node_directions": {"node1 -> node3": 2.0, "node3 -> node1": 0.02}, "links": {}}
    row = {"id": "net.bandwidth", "measured": measured, "expected": "not far below the median"}
    assert reason([row], "node3") == ("ncclprep: net.bandwidth: measured sends at a median 0.0248 against the median "
                                      "1.85, expected not far below the median")
    slow = {"node1 -> node2": 0.1, "node2 -> node3": 0.2}
    links = dict(row, measured={"median_gbps": 1.5, "nodes": {}, "links": slow})
    assert reason([links], "node2") == ("ncclprep: net.bandwidth: measured node1 -> node2: 0.1, node2 -> node3: 0.2, "
                                        "expected not far below the median")


def test_a_pass_resumes_only_a_drain_of_its_own_scope():
    """A network drain is resumed only by root's network re-test (scope network), a drain for the
    node's own checks only by a node check (scope node, the default)."""
    nodes = cluster()
    net = dict(nodes["node1"], state="drained", drained=True,
               reason="ncclprep: net.bandwidth: measured 0.02, expected >= 0.1 of the median")
    local = dict(nodes["node1"], state="drained", drained=True,
                 reason="ncclprep: sysctl.net.core.somaxconn: measured 128, expected 65535")
    assert network_drain(net) and not network_drain(local) and not network_drain({"reason": "net.bandwidth: x"})
    kept = decide("node1", net, {"status": "PASS"}, [], nodes)
    assert kept["action"] == "none" and kept["why"] == (
        "node1: passes the node check, but drained for 'ncclprep: net.bandwidth: measured 0.02, expected >= 0.1 of "
        "the median', which only root's network re-test resumes: left drained")
    assert decide("node1", net, {"status": "PASS", "scope": "network"}, [], nodes)["action"] == "resume"
    other = decide("node1", local, {"status": "PASS", "scope": "network"}, [], nodes)
    assert other["action"] == "none" and "which the node check resumes" in other["why"]
    assert decide("node1", local, {"status": "PASS", "scope": "node"}, [], nodes)["action"] == "resume"


def test_the_circuit_breaker_stops_draining_at_ten_percent():
    assert [breaker_limit(n) for n in (1, 9, 10, 19, 20, 1000)] == [1, 1, 1, 1, 2, 100]
    held = dict(state="drained", responding=True, drained=True, busy=False,
                reason="ncclprep: a: measured 1, expected 2")
    nodes = cluster(node2=held)
    got = decide("node1", nodes["node1"], {"status": "FAIL", "failed": [SYSCTL]}, [], nodes)
    assert got["action"] == "none"
    assert "ncclprep holds 1 of 10 nodes drained already (at most 1: the circuit breaker)" in got["why"]
    # a human's drain does not count against ncclprep's share
    nodes = cluster(node2=dict(held, reason="maintenance"))
    assert decide("node1", nodes["node1"], {"status": "FAIL", "failed": [SYSCTL]}, [], nodes)["action"] == "drain"
    with pytest.raises(ValueError, match="verdict status 'HANG'"):
        decide("node1", nodes["node1"], {"status": "HANG"}, [], nodes)
