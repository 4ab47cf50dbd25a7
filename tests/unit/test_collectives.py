"""The collective worker on real gloo process groups over loopback (needs torch)."""

from __future__ import annotations

import multiprocessing
import socket
import threading
import time

import pytest

pytest.importorskip("torch")

# Spawned ranks do not run conftest: import ncclprep first so module_utils is importable.
# isort: off
import ncclprep  # noqa: F401
from ansible.module_utils.ncclprep.probes.collectives import (
    element_count,
    expected_values,
    merge_local_ranks,
    rank_layout,
    run_local_ranks,
    run_rank,
)
from ansible.module_utils.ncclprep.deadline import run_with_deadline
# isort: on


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank, world, port, ops, sizes, timeout, queue, old_gloo=False, token=None):
    if old_gloo:  # the gloo of an older torch: no reduce_scatter
        import torch.distributed as dist

        def refuse(*_a, **_k):
            raise RuntimeError("ProcessGroupGloo does not support reduce_scatter")
        dist.reduce_scatter_tensor = refuse
    out = run_with_deadline(
        run_rank,
        dict(rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port,
             backend="gloo", ops=ops, sizes=sizes, warmup=1, iters=2,
             join_timeout_s=timeout / 2, op_timeout_s=timeout / 2, token=token),
        timeout_s=timeout,
    )
    queue.put((rank, out))


def _run(world, ranks, ops, sizes, timeout=40, old_gloo=False, tokens=None, port=None):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    port = port or _free_port()
    procs = [ctx.Process(target=_rank, args=(r, world, port, ops, sizes, timeout, queue, old_gloo,
                                             (tokens or {}).get(r)))
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


def _host(node, port, binding, queue):
    out = run_local_ranks(node, 2, [2, 2], binding, 60, master_addr="127.0.0.1", master_port=port,
                          backend="gloo", ops=["all_reduce", "all_to_all"], sizes=[4096, 65536], warmup=1,
                          iters=2, join_timeout_s=30, op_timeout_s=30)
    queue.put((node, out))


def test_two_hosts_of_two_local_ranks_make_a_world_of_four_bound_as_asked():
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_host, args=(n, port, ["0", None] if n == 0 else [], queue)) for n in (0, 1)]
    for p in procs:
        p.start()
    got = dict(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(10)
    for node in (0, 1):
        out = got[node]
        assert out["status"] == "PASS", out
        assert out["world_size"] == 4 and out["first_rank"] == 2 * node
        assert [r["rank"] for r in out["ranks"]] == [2 * node, 2 * node + 1]
        assert [r["status"] for r in out["ranks"]] == ["PASS", "PASS"]
        rows = [r for r in out["results"] if r["op"] == "all_to_all"]
        assert [r["size_bytes"] for r in rows] == [4096, 65536]
        for row in rows:
            assert row["wrong"] == 0 and set(row["rank_time_us"]) == {2 * node, 2 * node + 1}
            assert row["time_us"] == max(row["rank_time_us"].values())
    assert got[0]["ranks"][0]["cpus"] == [0] and got[0]["ranks"][1]["cpus"] is None


def test_rank_layout_numbers_ranks_host_by_host_and_refuses_bad_counts():
    assert rank_layout([8, 8, 4], 3) == [0, 8, 16, 20]
    assert rank_layout([], 3) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=r"local_ranks has 2 entries for 3 hosts"):
        rank_layout([8, 8], 3)
    with pytest.raises(ValueError, match=r"local_ranks \[0\]"):
        rank_layout([8, 0, 8], 3)


def test_merge_takes_the_slowest_local_rank_sums_wrong_and_keeps_the_worst_status():
    def row(t, wrong=0):
        return {"op": "all_reduce", "size_bytes": 4096, "time_us": t, "busbw_gbps": 4096 / t / 1e3, "wrong": wrong}
    fast = {"status": "PASS", "stage": "done", "error": None, "results": [row(100.0), {"op": "x", "skipped": "no"}]}
    slow = {"status": "FAIL", "stage": "done", "error": None, "results": [row(400.0, wrong=3)]}
    hung = {"status": "HANG", "stage": "all_reduce 4096 B", "error": "no progress", "results": [],
            "missing_ranks": [5]}
    merged = merge_local_ranks([fast, slow], 8)
    assert merged["status"] == "FAIL"
    assert merged["results"][0]["time_us"] == 400.0 and merged["results"][0]["wrong"] == 3
    assert merged["results"][0]["rank_time_us"] == {8: 100.0, 9: 400.0}
    assert merged["results"][1] == {"op": "x", "skipped": "no"}
    worst = merge_local_ranks([fast, hung], 0)
    assert worst["status"] == "HANG" and worst["stage"] == "all_reduce 4096 B" and worst["missing_ranks"] == [5]
    assert [r["status"] for r in worst["ranks"]] == ["PASS", "HANG"]


def test_the_probe_store_listens_on_the_data_plane_address_only():
    """Review F9: nccl_probe's store (TCPStore with is_master) bound every address, so any host
    that reached the node could write the ranks' keys. Bound to 127.0.0.2 here, a connection to
    another address of this host (127.0.0.3) is refused while 127.0.0.2 serves."""
    import torch.distributed as dist
    from ansible.module_utils.ncclprep.netutil import bound_tcp_store

    port = _free_port()
    store, listener = bound_tcp_store(dist, 0, 1, "127.0.0.2", port, 5)
    try:
        store.set("k", "v")
        with socket.create_connection(("127.0.0.2", port), timeout=2):
            pass
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.3", port), timeout=2).close()
        other, none = bound_tcp_store(dist, 1, 1, "127.0.0.2", port, 5)
        assert none is None and other.get("k") == b"v"
    finally:
        listener.close()


def test_sealed_stores_carry_torchs_own_keys_and_a_rank_with_another_token_names_the_tampering():
    """Review F9, the rest: nccl_probe's store held torch's own keys (Gloo's addresses, the NCCL
    unique id) unsealed, so a host that reached it could point the ranks elsewhere. With the
    run's token every value is sealed, torch's too: the sweep passes, and a rank whose token
    differs (as a stranger's writes would) reads a value it cannot unseal and says so."""
    ok = _run(2, [0, 1], ["all_reduce"], [4096], timeout=40, tokens={0: "t" * 32, 1: "t" * 32})
    assert [ok[r]["value"]["status"] for r in (0, 1)] == ["PASS", "PASS"], ok
    assert ok[0]["value"]["results"][0]["wrong"] == 0
    bad = _run(2, [0, 1], ["all_reduce"], [4096], timeout=20, tokens={0: "t" * 32, 1: "u" * 32})
    errors = " ".join(str(bad[r].get("error") or bad[r].get("value")) for r in (0, 1))
    assert "a value not signed with this run's token" in errors, bad


def test_a_sealed_store_refuses_a_value_written_beside_it_and_passes_counters_through():
    import datetime

    import torch.distributed as dist
    from ansible.module_utils.ncclprep.netutil import StoreTampered, seal, signed_store

    raw = dist.TCPStore("127.0.0.1", _free_port(), 1, True, timeout=datetime.timedelta(seconds=5),
                        wait_for_workers=False)
    store = signed_store(dist, raw, "k" * 32)
    store.set("gloo/addr", b"10.0.0.1:1234")
    assert raw.get("gloo/addr") == seal("k" * 32, "gloo/addr", b"10.0.0.1:1234")
    assert store.get("gloo/addr") == b"10.0.0.1:1234"
    raw.set("gloo/addr", b"203.0.113.9:1234")  # a stranger's write
    with pytest.raises(StoreTampered, match="gloo/addr: a value not signed"):
        store.get("gloo/addr")
    assert store.add("count", 2) == 2 and store.check(["count"])


def _stranger(port: int, act) -> threading.Thread:
    """A process on a member node that reaches the probe's store (review N4): ``act(store)`` on a
    TCPStore client of its own once rank 0's store is up, in a thread of this process."""
    import datetime

    import torch.distributed as dist

    def run():
        while True:  # connect once the store listens (torch's client backs off for seconds when refused)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.01)
        act(dist.TCPStore("127.0.0.1", port, 2, False, timeout=datetime.timedelta(seconds=60)))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _deleting(key: str, deleted: list, times: int = 3):
    """A stranger's act for _stranger: wait for ``key`` and delete it as it appears, ``times`` times
    (each delete_key's result appended to ``deleted``), or until the store goes."""
    import datetime

    def act(store):
        for _ in range(times):
            try:
                store.wait([key], datetime.timedelta(seconds=30))
            except RuntimeError:
                return
            deleted.append(store.delete_key(key))
    return act


def test_a_word_deleted_during_the_join_delays_its_rank_and_never_names_it_missing():
    """Review N4: a stranger that deleted ``arrived/1`` as it appeared made the ranks, which looked
    for the key, name rank 1 missing (HANG). Rank 1 now posts its word again and rank 0, which
    decides for all, counts it once read: the sweep passes on both ranks."""
    deleted = []
    port = _free_port()
    stranger = _stranger(port, _deleting("arrived/1", deleted))
    res = _run(2, [0, 1], ["all_reduce"], [4096], timeout=40, tokens={0: "t" * 32, 1: "t" * 32}, port=port)
    stranger.join(5)
    assert any(deleted)  # the stranger deleted a word of rank 1 at least once
    for rank in (0, 1):
        value = res[rank]["value"]
        assert (value["status"], value["missing_ranks"]) == ("PASS", []), value
        assert value["results"][0]["wrong"] == 0


def test_a_value_a_stranger_wrote_in_the_join_blames_no_rank():
    """Review N4: an unsealed ``arrived/2`` for a rank that never came counted it present (the
    ranks looked for the key), and the run hung on it. Rank 0 now reads the word, finds it not
    this run's and says the store was tampered with; rank 1, left without rank 0's decision,
    says the store was lost; both are SKIP naming no rank missing (check_collectives blames none)."""
    port = _free_port()
    stranger = _stranger(port, lambda store: store.set("arrived/2", b"stranger"))
    res = _run(3, [0, 1], ["all_reduce"], [4096], timeout=20, tokens={0: "t" * 32, 1: "t" * 32}, port=port)
    stranger.join(5)
    assert (res[0]["outcome"], res[1]["outcome"]) == ("result", "result"), res
    first, second = res[0]["value"], res[1]["value"]
    assert (first["status"], first["store_state"], first["missing_ranks"]) == ("SKIP", "tampered", []), first
    assert first["store_error"] == (f"the store on rank 0 (127.0.0.1:{port}) was tampered with: arrived/2: a value not "
                                    "signed with this run's token (a host other than this run's ranks wrote to it "
                                    "or deleted from it): no rank is blamed")
    assert (second["status"], second["missing_ranks"]) == ("SKIP", []), second
    assert second["store_state"] in ("lost", "tampered")


def test_the_engines_collectives_name_a_rank_that_never_arrives_within_the_join_deadline():
    """probes/job.py host_collectives as the engine runs it: a host of the list that never comes
    (ghost) is a HANG at the rendezvous naming it, within the run's deadline."""
    pytest.importorskip("torch")
    from ansible.module_utils.ncclprep.probes.collectives import rank_layout
    from ansible.module_utils.ncclprep.probes.job import host_collectives

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = {"rank": 0, "hosts": ["node1", "ghost"], "master_addr": "127.0.0.1", "master_port": port, "backend": "auto",
         "ops": ["all_reduce"], "sizes": [4096], "warmup": 1, "iters": 2, "timeout": 8, "join_timeout": 3,
         "token": "t0k", "local_ranks": [1, 1], "cpu_binding": [], "blame": False, "blame_timeout": 30,
         "blame_floor": None, "slow_z": -3.5, "slow_ratio": 0.5, "addresses": ["127.0.0.1", "127.0.0.2"]}
    probe = host_collectives(p, "node1", rank_layout([1, 1], 2), None)
    assert probe["status"] == "HANG" and probe["stage"] == "rendezvous"
    assert probe["missing_hosts"] == ["ghost"] and probe["backend"] == "gloo"
    assert probe["elapsed_s"] < 8
