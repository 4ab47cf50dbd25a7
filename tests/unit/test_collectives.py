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


def _rank(rank, world, port, ops, sizes, timeout, queue, old_gloo=False):
    if old_gloo:  # the gloo of an older torch: no reduce_scatter
        import torch.distributed as dist

        def refuse(*_a, **_k):
            raise RuntimeError("ProcessGroupGloo does not support reduce_scatter")
        dist.reduce_scatter_tensor = refuse
    out = run_with_deadline(
        run_rank,
        dict(rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port,
             backend="gloo", ops=ops, sizes=sizes, warmup=1, iters=2,
             join_timeout_s=timeout / 2, op_timeout_s=timeout / 2),
        timeout_s=timeout,
    )
    queue.put((rank, out))


def _run(world, ranks, ops, sizes, timeout=40, old_gloo=False):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, world, port, ops, sizes, timeout, queue, old_gloo))
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
        rows = value["results"]
        assert {r["op"] for r in rows} == {"all_reduce", "all_gather", "all_to_all", "broadcast", "reduce_scatter"}
        assert {r["measured_as"] for r in rows} == {"native"}  # torch 2.13's gloo has reduce_scatter
        for row in rows:
            assert row["wrong"] == 0
            assert row["size_bytes"] % (4 * 3) == 0
            factor = {"all_reduce": 4 / 3, "broadcast": 1.0}.get(row["op"], 2 / 3)
            assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * factor, rel=1e-3)
            assert row["time_us"] > 0


def test_reduce_scatter_without_backend_support_is_measured_through_all_reduce_and_says_so():
    res = _run(2, [0, 1], ["reduce_scatter"], [4096, 65536], old_gloo=True)
    for rank in (0, 1):
        value = res[rank]["value"]
        assert value["status"] == "PASS", value
        assert [(r["op"], r["wrong"]) for r in value["results"]] == [("reduce_scatter", 0)] * 2
        assert all(r["measured_as"].startswith("all_reduce of the whole input") for r in value["results"])


def test_missing_rank_is_reported_as_hang_naming_it():
    res = _run(3, [0, 1], ["all_reduce"], [4096], timeout=6)
    for rank in (0, 1):
        out = res[rank]
        assert out["outcome"] == "result", out
        assert out["value"]["status"] == "HANG"
        assert out["value"]["stage"] == "rendezvous"
        assert out["value"]["missing_ranks"] == [2]
