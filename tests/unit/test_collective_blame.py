"""The collective blame as nccl_probe runs it (module_utils/ncclprep/probes/collective_blame.py): three
nodes as threads on loopback meeting at a real torch TCPStore, each round's collectives replaced
by a function of the group, so what is tested is the coordination: every node sees the same plan,
the first node's verdict and rounds are those collective_plan gives round by round, and a node
that never reports costs a deadline, not a hang."""

from __future__ import annotations

import socket
import threading
import time

import pytest

# isort: off
import ncclprep  # noqa: F401  (makes ansible.module_utils.ncclprep importable)
from ansible.module_utils.ncclprep.probes import collective_blame
from ansible.module_utils.ncclprep.probes.blame import blame_round, collective_plan
# isort: on

HOSTS = ["n1", "n2", "n3"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def result(status: str, busbw: float = 1.0) -> dict:
    return {"status": status, "stage": "done", "error": None, "missing_hosts": [],
            "results": [{"op": "all_reduce", "size_bytes": 16777216, "time_us": 10.0, "algbw_gbps": busbw,
                         "busbw_gbps": busbw, "wrong": 0}]}


def bad_node(name: str, absent: tuple = ()):
    """A round's collectives that fail in every group holding ``name`` and hang (its ranks never
    all arrive) in every group holding a node of ``absent``; the groups run, with their ports, are
    recorded."""
    ran = []

    def run_group(group, master_addr, master_port, ops):
        ran.append((tuple(group), master_addr, master_port, tuple(ops)))
        return result("HANG" if set(group) & set(absent) else "FAIL" if name in group else "PASS")
    return run_group, ran


def blame_on(nodes: list[str], probes: dict, run_group, join=3.0, round_timeout=10.0, token="t0ken",
             late: dict | None = None):
    """run_blame on each of ``nodes`` (threads), every one with its probe, each starting ``late[host]``
    seconds late (its collectives took that much longer); host -> its return."""
    torch = pytest.importorskip("torch")
    port = free_port()
    out: dict = {}

    def node(rank):
        time.sleep((late or {}).get(HOSTS[rank], 0))
        out[HOSTS[rank]] = collective_blame.run_blame(
            torch.distributed, rank, HOSTS, ["127.0.0.1"] * len(HOSTS), port, probes[HOSTS[rank]], run_group,
            token=token, round_timeout_s=round_timeout, gather_timeout_s=join)
    threads = [threading.Thread(target=node, args=(HOSTS.index(h),)) for h in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    return out, port


def test_a_node_bad_in_every_pairing_is_named_by_the_first_node_after_the_planned_rounds():
    run_group, ran = bad_node("n2")
    probes = {h: result("FAIL") for h in HOSTS}
    out, port = blame_on(HOSTS, probes, run_group)
    # the same rounds collective_plan gives with these outcomes, computed without any store
    history, plan = [], collective_plan(HOSTS, [])
    while plan["stage"] != "done":
        history.append(blame_round(plan, {g[0]: result("FAIL" if "n2" in g else "PASS") for g in plan["groups"]}))
        plan = collective_plan(HOSTS, history)
    first = out["n1"]
    assert first["error"] is None and first["verdict"] == plan and first["rounds"] == history
    assert first["verdict"]["nodes"] == ["n2"] and len(first["rounds"]) == 3
    assert first["trigger"]["run"] and first["trigger"]["ops"] == ["all_reduce"]
    assert out["n2"] is None and out["n3"] is None
    # each round's pair ran once per member, the group's store at port + 1 + its index, the op that went wrong
    pairs = sorted({g for g, _, _, _ in ran})
    assert pairs == sorted({tuple(g) for h in history for g in (x["hosts"] for x in h["groups"])})
    assert len(ran) == 2 * len(pairs) and {p for _, _, p, _ in ran} == {port + 1}
    assert {o for _, _, _, o in ran} == {("all_reduce",)}


def test_nodes_done_with_their_collectives_early_wait_for_the_first_node_and_take_part():
    """n2's collectives failed at once, n1 (the first node) waited out its deadline: n2 and n3 wait
    for n1's store (the gather deadline, not the join's), so every pairing runs and none hangs.
    nccl_probe handed them the join only, and the first node's rounds found n2 absent."""
    run_group, ran = bad_node("n2")
    out, _ = blame_on(HOSTS, {h: result("FAIL") for h in HOSTS}, run_group, join=4.0, late={"n1": 2.0})
    rounds = out["n1"]["rounds"]
    assert out["n1"]["verdict"]["nodes"] == ["n2"]
    assert sorted(g["status"] for r in rounds for g in r["groups"]) == ["FAIL", "FAIL", "PASS"]
    assert len(ran) == 6, out  # three pairs, each run by both of its nodes


def test_healthy_collectives_run_no_round_and_every_node_leaves():
    run_group, ran = bad_node("nobody")
    start = time.monotonic()
    out, _ = blame_on(HOSTS, {h: result("PASS") for h in HOSTS}, run_group)
    assert out == {"n1": None, "n2": None, "n3": None} and ran == []
    assert time.monotonic() - start < collective_blame.ACK_WAIT_S  # every node acknowledged, no deadline ran out


def test_a_node_that_never_reports_is_a_hang_in_its_pairings_inside_the_deadlines(monkeypatch):
    """n3 never runs its part (gone after the collectives): the first node waits the join for its
    result, then each round with n3 for the group's, and names n3 as the node bad in every pairing
    (its pairings HANG); the run stays inside the deadline the module's async is given."""
    monkeypatch.setattr(collective_blame, "ROUND_SLACK_S", 1)
    run_group, _ = bad_node("nobody", absent=("n3",))
    probes = {h: result("FAIL") for h in HOSTS}
    start = time.monotonic()
    out, _ = blame_on(["n1", "n2"], probes, run_group, join=1.0, round_timeout=1.0)
    elapsed = time.monotonic() - start
    first = out["n1"]
    assert first["verdict"]["stage"] == "done" and first["verdict"]["nodes"] == ["n3"], first["verdict"]
    hung = [g["hosts"] for r in first["rounds"] for g in r["groups"] if g["status"] == "HANG"]
    assert hung and all("n3" in g for g in hung)
    assert elapsed < collective_blame.deadline_s(3, 1.0, 1.0)


def test_a_follower_without_the_first_node_gives_up_with_an_error_naming_it():
    out, port = blame_on(["n2"], {"n2": result("FAIL")}, bad_node("n2")[0], join=1.0)
    assert out["n2"]["error"].startswith("n2: the blame's store at 127.0.0.1:"), out


def test_the_most_rounds_cover_every_plan_to_its_verdict():
    """max_rounds bounds the loop: ring pairs, confirm rounds and the bisection of n nodes all
    fit, for a bad node anywhere and for a fault only the whole group shows (every pair passes)."""
    for n in range(2, 17):
        hosts = [f"h{i}" for i in range(n)]
        for bad in [*hosts, "whole"]:
            history, plan = [], collective_plan(hosts, [])
            while plan["stage"] != "done":
                history.append(blame_round(plan, {g[0]: result(
                    "FAIL" if bad in g or (bad == "whole" and len(g) == n) else "PASS") for g in plan["groups"]}))
                plan = collective_plan(hosts, history)
            assert len(history) <= collective_blame.max_rounds(n), (n, bad, len(history))
