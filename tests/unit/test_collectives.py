"""The collective worker on real gloo process groups over loopback (needs torch)."""

from __future__ import annotations

import multiprocessing
import socket

import pytest

pytest.importorskip("torch")

# Spawned ranks do not run conftest: import ncclprep first so module_utils is importable.
# isort: off
import ncclprep  # noqa: F401
from ansible.module_utils.ncclprep.collectives import element_count, expected_values, run_rank
from ansible.module_utils.ncclprep.deadline import run_with_deadline
# isort: on


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank, world, port, ops, sizes, timeout, queue):
    out = run_with_deadline(
        run_rank,
        dict(rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port,
             backend="gloo", ops=ops, sizes=sizes, warmup=1, iters=2,
             join_timeout_s=timeout / 2, op_timeout_s=timeout / 2),
        timeout_s=timeout,
    )
    queue.put((rank, out))


def _run(world, ranks, ops, sizes, timeout=40):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, world, port, ops, sizes, timeout, queue))
             for r in ranks]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=timeout + 30) for _ in procs)
    for p in procs:
        p.join(10)
    return results


def test_element_count_is_multiple_of_world_size():
    assert element_count(4096, 3) == 1023
    assert element_count(4, 8) == 8


def test_expected_values_all_to_all_chunk_layout():
    # rank 1 of 3 receives chunk 1 of every sender s: s*3 + 1 + 1
    assert expected_values("all_to_all", 1, 3, 9) == [2.0, 5.0, 8.0]
    assert expected_values("all_reduce", 0, 4, 8) == 10.0


def test_three_ranks_gloo_sweep_correct_and_busbw_uses_nccl_tests_factor():
    res = _run(3, [0, 1, 2], ["all_reduce", "all_gather", "all_to_all", "broadcast",
                              "reduce_scatter"], [4096, 262144])
    for rank in range(3):
        out = res[rank]
        assert out["outcome"] == "result", out
        value = out["value"]
        assert value["status"] == "PASS"
        rows = [r for r in value["results"] if "skipped" not in r]
        assert {r["op"] for r in rows} == {"all_reduce", "all_gather", "all_to_all", "broadcast"}
        skipped = [r for r in value["results"] if "skipped" in r]
        assert [r["op"] for r in skipped] == ["reduce_scatter"]
        for row in rows:
            assert row["wrong"] == 0
            assert row["size_bytes"] % (4 * 3) == 0
            factor = {"all_reduce": 4 / 3, "broadcast": 1.0}.get(row["op"], 2 / 3)
            assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * factor, rel=1e-3)
            assert row["time_us"] > 0


def test_missing_rank_is_reported_as_hang_naming_it():
    res = _run(3, [0, 1], ["all_reduce"], [4096], timeout=6)
    for rank in (0, 1):
        out = res[rank]
        assert out["outcome"] == "result", out
        assert out["value"]["status"] == "HANG"
        assert out["value"]["stage"] == "rendezvous"
        assert out["value"]["missing_ranks"] == [2]
