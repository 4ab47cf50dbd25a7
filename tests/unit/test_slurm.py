"""The Slurm health rules (module_utils/ncclprep/slurm/rules.py): sinfo read, verdicts, drain and resume."""

from __future__ import annotations

import datetime

import pytest
from ansible.module_utils.ncclprep.slurm.rules import (
    avoided,
    decide,
    fabric,
    holding,
    judged,
    limit,
    mark_argv,
    marked,
    network_drain,
    node_verdict,
    parse_sinfo,
    partners,
    reason,
    scontrol,
    strikes,
)

# sinfo --noheader --Node --format '%N|%T|%w|%f|%E' on a cluster with two partitions (node1 listed twice),
# a human's drain, ncclprep's drain, a node draining under a job, one not responding, features.
SINFO = """node1|idle|1|(null)|none
node1|idle|1|(null)|none
node2|drained|10|gpu,a100|maintenance: new PSU [root@2026-12-05T10:00:00]
node3|drained|1|(null)|ncclprep: sysctl.net.core.somaxconn: measured 128, expected 65535
node4|draining|1|ncclprep_draining_1765000000|ncclprep: net.bandwidth: measured 0.02, expected >= 0.1 | median
node5|mixed|1|(null)|none
node6|idle*|1|(null)|Not responding
node7|allocated|1|(null)|none
"""

SYSCTL = {"id": "sysctl.net.core.somaxconn", "status": "FAIL", "hosts": ["node1"],
          "measured": {"node1": "128"}, "expected": "65535"}
BANDWIDTH = {"id": "net.bandwidth", "status": "FAIL", "hosts": ["node1 -> node5", "node7 -> node1"],
             "measured": 0.02, "expected": ">= 0.1 of the median"}


NOW = datetime.datetime(2026, 12, 6, 12, 0, tzinfo=datetime.timezone.utc)


def entry(run, hours_ago, partners, status="FAIL", scope="network"):
    """A ledger entry of a network verdict ``hours_ago`` before NOW."""
    at = (NOW - datetime.timedelta(hours=hours_ago)).isoformat()
    return {"at": at, "run": run, "scope": scope, "status": status, "network": True, "partners": partners}


def cluster(**rows):
    """Ten nodes, all idle, with the given rows over them."""
    out = {f"node{i}": {"state": "idle", "responding": True, "drained": False, "busy": False, "weight": 1,
                        "features": [], "reason": None} for i in range(1, 11)}
    out.update(rows)
    return out


def test_sinfo_rows_read_state_suffix_reason_and_a_node_listed_per_partition_once():
    nodes = parse_sinfo(SINFO)
    assert list(nodes) == [f"node{i}" for i in range(1, 8)]
    assert nodes["node1"] == {"state": "idle", "responding": True, "drained": False, "busy": False, "weight": 1,
                              "features": [], "reason": None}
    assert nodes["node2"]["drained"] and nodes["node2"]["reason"] == "maintenance: new PSU [root@2026-12-05T10:00:00]"
    assert nodes["node2"]["features"] == ["gpu", "a100"] and nodes["node2"]["weight"] == 10
    assert nodes["node4"]["drained"] and nodes["node4"]["busy"]
    assert nodes["node4"]["reason"] == "ncclprep: net.bandwidth: measured 0.02, expected >= 0.1 | median"
    assert nodes["node5"]["busy"] and not nodes["node5"]["drained"]
    assert nodes["node6"]["state"] == "idle" and nodes["node6"]["responding"] is False
    with pytest.raises(ValueError, match="sinfo line 1 is not '%N|%T|%w|%f|%E': 'node1 idle'"):
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
    # links.rdma's WARN carries no expected value (checks/links.py): no "expected None" in the reason,
    # and a row with neither value gives its message
    rdma = {"id": "links.rdma", "status": "WARN", "hosts": ["node1"], "measured": {"node1": ["mlx5_1/1 is Down"]},
            "message": "node1: mlx5_1/1 is Down"}
    assert reason([rdma], "node1") == "ncclprep: links.rdma: measured mlx5_1/1 is Down"
    assert reason([{"id": "links.rdma", "message": "node1: mlx5_1/1 is Down"}], "node1") == \
        "ncclprep: links.rdma: node1: mlx5_1/1 is Down"
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
        assert kept["action"] == "none" and "a reason of someone else's ('maintenance'): left alone" in kept["why"]
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
    first = [entry("a", 3, ["node5"])]
    got = decide("node1", nodes["node1"], verdict, first, nodes, NOW)
    assert got["action"] == "none" and "network strike 1 of 2 within 24 h (node5)" in got["why"]
    same = first + [entry("b", 2, ["node5"])]
    assert decide("node1", nodes["node1"], verdict, same, nodes, NOW)["action"] == "none"  # the same peer twice
    other = same + [entry("c", 1, ["node7"])]
    assert decide("node1", nodes["node1"], verdict, other, nodes, NOW)["action"] == "drain"
    busy = dict(nodes["node1"], state="allocated", busy=True)
    held = decide("node1", busy, verdict, other, nodes, NOW)
    assert held["action"] == "none" and "never drains a busy node" in held["why"]
    # a blame of the node itself (no link): one strike per run
    runs = [entry(r, 1, []) for r in ("a", "b")]
    assert strikes(runs[:1], NOW) == {"run:a"} and strikes(runs, NOW) == {"run:a", "run:b"}
    assert strikes([dict(entry("a", 1, ["node5"]), status="PASS")], NOW) == set()


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
    assert [limit(n, 1000) for n in (1, 9, 10, 19, 20, 1000)] == [1, 1, 1, 1, 2, 100]
    held = dict(state="drained", responding=True, drained=True, busy=False,
                reason="ncclprep: a: measured 1, expected 2")
    nodes = cluster(node2=held)
    got = decide("node1", nodes["node1"], {"status": "FAIL", "failed": [SYSCTL]}, [], nodes)
    assert got["action"] == "none"
    assert "ncclprep holds 1 of 10 nodes (node2) already (at most 1: the circuit breaker)" in got["why"]
    # a human's drain does not count against ncclprep's share
    nodes = cluster(node2=dict(held, reason="maintenance"))
    assert decide("node1", nodes["node1"], {"status": "FAIL", "failed": [SYSCTL]}, [], nodes)["action"] == "drain"
    with pytest.raises(ValueError, match="verdict status 'HANG'"):
        decide("node1", nodes["node1"], {"status": "HANG"}, [], nodes)


# Issue 40: the review of 64ebd4f (../shared/reviews/security.md N1-N7), each rule as a fault.

REACHABLE = {"id": "names.reachable", "status": "FAIL", "hosts": ["node3"],
             "measured": {"node2 -> node3": "unreachable"}, "expected": "connects"}
PORTS = {"id": "firewall.ports_free", "status": "FAIL", "hosts": ["node2"],
         "measured": {"node2": {"29500": "python3 (pid 4242) on 0.0.0.0"}}, "expected": "TCP 29400, 29500 free"}


def test_a_member_down_or_a_listener_on_a_job_port_never_drains_the_node_that_reports_it():
    """N1: node3 down makes node2's check fail names.reachable naming node3; N3: any listener on a
    job port (a running job's own torchrun) fails firewall.ports_free. Neither judges node2."""
    nodes = cluster()
    for rows in ([REACHABLE], [PORTS], [REACHABLE, PORTS], [dict(SYSCTL, hosts=["node7"])]):
        got = decide("node2", nodes["node2"], {"status": "FAIL", "failed": rows}, [], nodes, NOW)
        assert got["action"] == "none" and "fails only checks that do not judge it" in got["why"], rows
    assert judged([REACHABLE, PORTS, dict(SYSCTL, hosts=["node2"])], "node2") == [dict(SYSCTL, hosts=["node2"])]
    # a row of the node's own, beside them, still drains it, with its own reason
    got = decide("node2", nodes["node2"], {"status": "FAIL", "failed": [REACHABLE, dict(SYSCTL, hosts=["node2"])]},
                 [], nodes, NOW)
    assert got["action"] == "drain" and got["reason"].startswith("ncclprep: sysctl.net.core.somaxconn")


@pytest.mark.parametrize("state", ["down", "fail", "failing", "maint", "reserved", "future", "powered_down"])
def test_a_state_or_reason_of_someone_elses_is_left_alone(state):
    """N7: an admin's DOWN, FAIL, MAINT ... with a note is not replaced by an ncclprep drain."""
    nodes = cluster(node2={"state": state, "responding": state != "down", "drained": False, "busy": False,
                           "features": [], "reason": "admin: bad GPU, RMA 1234"})
    got = decide("node2", nodes["node2"], {"status": "FAIL", "failed": [dict(SYSCTL, hosts=["node2"])]}, [], nodes,
                 NOW)
    assert got["action"] == "none" and "someone else's ('admin: bad GPU, RMA 1234')" in got["why"]
    bare = dict(nodes["node2"], reason=None)
    got = decide("node2", bare, {"status": "FAIL", "failed": [dict(SYSCTL, hosts=["node2"])]}, [], nodes, NOW)
    assert got["action"] == "none" and f"{state}, a state ncclprep leaves to others" in got["why"]


def test_strikes_count_within_the_window_and_from_the_last_pass_of_roots_retest():
    verdict = {"status": "FAIL", "scope": "network", "failed": [dict(BANDWIDTH, hosts=["node1 -> node7"])]}
    nodes = cluster()
    # two failures two days apart: the older is out of the 24 h window, no drain
    apart = [entry("a", 49, ["node5"]), entry("b", 1, ["node7"])]
    assert strikes(apart, NOW) == {"node7"}
    assert decide("node1", nodes["node1"], verdict, apart, nodes, NOW)["action"] == "none"
    # a wider window (slurm_health_strike_window) counts both
    assert decide("node1", nodes["node1"], verdict, apart, nodes, NOW, window=72 * 3600)["action"] == "drain"
    # a recorded pass of root's re-test between them resets the count; a node check's pass does not
    reset = [entry("a", 5, ["node5"]), entry("p", 3, [], status="PASS"), entry("b", 1, ["node7"])]
    assert strikes(reset, NOW) == {"node7"}
    kept = [entry("a", 5, ["node5"]), entry("p", 3, [], status="PASS", scope="node"), entry("b", 1, ["node7"])]
    assert strikes(kept, NOW) == {"node5", "node7"}
    # an entry without a time (a ledger from before issue 40) counts as outside the window
    assert strikes([{"run": "x", "status": "FAIL", "network": True, "partners": ["node5"]}], NOW) == set()


def test_a_node_that_fails_again_after_a_resume_is_drained_as_a_repeat_and_left_for_a_person():
    nodes = cluster()
    resumed = {"at": (NOW - datetime.timedelta(hours=2)).isoformat(), "event": "resumed", "why": "passes now",
               "scope": "node", "checks": ["sysctl.net.core.somaxconn"]}
    got = decide("node1", nodes["node1"], {"status": "FAIL", "failed": [SYSCTL]}, [resumed], nodes, NOW)
    assert got["action"] == "drain" and got["reason"].startswith("ncclprep: repeat: sysctl.net.core.somaxconn")
    assert len(got["reason"]) <= 200
    # another fault after the resume is no repeat: another check, or the other scope (a break-it review)
    other = dict(SYSCTL, id="sysctl.net.core.netdev_max_backlog")
    assert decide("node1", nodes["node1"], {"status": "FAIL", "failed": [other]}, [resumed], nodes, NOW)[
        "reason"].startswith("ncclprep: sysctl.net.core.netdev_max_backlog")
    net = [entry("a", 3, ["node5"]), entry("b", 1, ["node7"])]
    again = decide("node1", nodes["node1"], {"status": "FAIL", "scope": "network", "failed": [BANDWIDTH]},
                   [resumed, *net], nodes, NOW)
    assert again["reason"].startswith("ncclprep: net.bandwidth")
    # a resume older than the window is no repeat
    old = dict(resumed, at=(NOW - datetime.timedelta(hours=30)).isoformat())
    assert decide("node1", nodes["node1"], {"status": "FAIL", "failed": [SYSCTL]}, [old], nodes, NOW)[
        "reason"].startswith("ncclprep: sysctl")
    # a repeat drain is never resumed by ncclprep, whatever passes
    info = dict(nodes["node1"], state="drained", drained=True, reason=got["reason"])
    for scope in ("node", "network"):
        kept = decide("node1", info, {"status": "PASS", "scope": scope}, [], nodes, NOW)
        assert kept["action"] == "none" and "left for a person" in kept["why"]


def test_one_run_that_blames_several_nodes_is_a_fabric_fault_not_a_node_fault():
    def row(*hosts):
        return dict(BANDWIDTH, hosts=list(hosts))
    assert fabric([row("node3")]) is None
    assert fabric([row("node1 -> node3"), row("node3 -> node2")]) is None  # node3's links: node3
    assert fabric([row("node1 -> node2"), row("node2 -> node1")]) is None  # one link, both ways
    assert fabric([row("node3", "node1 -> node3")]) is None
    assert fabric([row("node2", "node3")]) == "one run blames 2 nodes at once (node2, node3)"
    assert fabric([row("node1 -> node2"), row("node3 -> node4")]).startswith("one run blames links and nodes with no")
    assert fabric([row()]) == "a network check failed naming no host (the whole run)"
    # net.run (a node that never arrived) is no verdict
    assert fabric([dict(BANDWIDTH, id="net.run", hosts=["node2"]), row("node3")]) is None


def test_the_breaker_counts_other_hooks_marks_and_an_absolute_cap():
    now = NOW.timestamp()
    live = {"state": "idle", "responding": True, "drained": False, "busy": False,
            "features": ["gpu", f"ncclprep_draining_{int(now) - 10}"], "reason": None}
    stale = dict(live, features=[f"ncclprep_draining_{int(now) - 400}"])
    nodes = cluster(node2=live)
    assert marked(live, now) and not marked(stale, now) and not marked(nodes["node3"], now)
    got = decide("node1", nodes["node1"], {"status": "FAIL", "failed": [SYSCTL]}, [], nodes, NOW)
    assert got["action"] == "none" and "(node2) already (at most 1" in got["why"]
    assert decide("node1", nodes["node1"], {"status": "FAIL", "failed": [SYSCTL]}, [], cluster(node2=stale),
                  NOW)["action"] == "drain"
    # a node gone down since ncclprep drained it still counts; 10 % of 1000 capped at max_drained
    assert holding(cluster(node4={"state": "down", "reason": "ncclprep: x: measured 1, expected 2"}), "node1", now) \
        == ["node4"]
    assert [limit(n, 8) for n in (10, 100, 1000)] == [1, 8, 8] and limit(1000, 0) == 1
    assert mark_argv("node1", ["gpu", "ncclprep_draining_5"], "ncclprep_draining_9") == [
        "scontrol", "update", "NodeName=node1", "AvailableFeatures=gpu,ncclprep_draining_9",
        "ActiveFeatures=gpu,ncclprep_draining_9"]


RDMA_WARN = {"id": "links.rdma", "status": "WARN", "hosts": ["node1"], "measured": {"node1": ["mlx5_1/1 down"]},
             "expected": None, "message": "node1: mlx5_1/1 down"}


def test_a_degraded_node_is_avoided_not_drained_and_the_mark_clears_when_it_passes():
    """Issue 40 item 5: WARN (degraded but working) raises the node's Weight so that Slurm gives
    jobs the other nodes first, with a feature that remembers the old weight; a pass of the same
    scope puts it back; advice-only WARNs (sysctl.untuned) mark nothing."""
    nodes = cluster()
    got = decide("node1", nodes["node1"], {"status": "WARN", "warned": [RDMA_WARN]}, [], nodes, NOW)
    assert got["action"] == "avoid" and got["weight"] == 1000000 and got["features"] == ["ncclprep_avoid_node_1"]
    assert scontrol("node1", got) == ["scontrol", "update", "NodeName=node1", "Weight=1000000",
                                      "AvailableFeatures=ncclprep_avoid_node_1", "ActiveFeatures=ncclprep_avoid_node_1"]
    marked_node = dict(nodes["node1"], weight=1000000, features=["gpu", "ncclprep_avoid_node_1"])
    assert avoided(marked_node) == {"scope": "node", "weight": 1}
    assert decide("node1", marked_node, {"status": "WARN", "warned": [RDMA_WARN]}, [], nodes, NOW)["action"] == "none"
    cleared = decide("node1", marked_node, {"status": "PASS"}, [], nodes, NOW)
    assert cleared["action"] == "clear" and cleared["weight"] == 1 and cleared["features"] == ["gpu"]
    # a person changed the weight since: the mark goes, their weight stays
    assert decide("node1", dict(marked_node, weight=50), {"status": "PASS"}, [], nodes, NOW)["weight"] == 50
    # the network re-test's pass does not clear a mark the node check set
    assert decide("node1", marked_node, {"status": "PASS", "scope": "network"}, [], nodes, NOW)["action"] == "none"
    # advice is no degradation; a failure that does not judge the node leaves its WARN
    untuned = dict(RDMA_WARN, id="sysctl.untuned")
    assert decide("node1", nodes["node1"], {"status": "WARN", "warned": [untuned]}, [], nodes, NOW)["action"] == "none"
    reach = {"id": "names.reachable", "status": "FAIL", "hosts": ["node3"]}
    got = decide("node1", nodes["node1"], {"status": "FAIL", "failed": [reach], "warned": [RDMA_WARN]}, [], nodes, NOW)
    assert got["action"] == "avoid" and "fails only checks that do not judge it: names.reachable" in got["why"]
    # review F8: the feature stripped by someone, the weight left: no second mark on top, which would
    # remember 1000000 as the weight to put back and keep the node avoided for good
    stripped = dict(nodes["node1"], weight=1000000, features=["gpu"])
    got = decide("node1", stripped, {"status": "WARN", "warned": [RDMA_WARN]}, [], nodes, NOW)
    assert got["action"] == "none" and "its weight 1000000 keeps jobs away already" in got["why"], got
    # FAIL still drains a degraded node
    got = decide("node1", marked_node, {"status": "FAIL", "failed": [SYSCTL], "warned": [RDMA_WARN]}, [], nodes, NOW)
    assert got["action"] == "drain"
