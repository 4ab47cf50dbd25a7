"""A break-it review of the doctor's new readings (issue 27): each input below was wrong, hung, or
crashed before its fix. Inputs built here or in tests/fixtures/doctor_review (made by the reviewer)."""

from __future__ import annotations

import io
import os
import pickle
import resource
import struct

from ansible.module_utils.ncclprep.doctor import diagnose_dumps, diagnose_text
from ansible.module_utils.ncclprep.parsers import flight_recorder as fr
from conftest import REPO

from ncclprep.doctor_cmd import doctor_main

HERE = os.path.join(REPO, "tests", "fixtures", "doctor_review")


def text_of(name: str) -> str:
    with open(os.path.join(HERE, name), encoding="utf-8") as fh:
        return fh.read()


def ids(result: dict) -> set[str]:
    return {f["id"] for f in result["findings"]}


def entry(seq, op="all_reduce", sizes=None, done=False, pg=("0", "default_pg")):
    return {"collective_seq_id": seq, "profiling_name": f"nccl:{op}", "input_sizes": sizes or [[4]],
            "state": "completed" if done else "started", "retired": done, "process_group": pg, "is_p2p": False}


def dump(entries, ranks="[0, 1]") -> bytes:
    return pickle.dumps({"version": "2.10", "pg_config": {"0": {"ranks": ranks}}, "entries": entries}, protocol=4)


def deep_dump(depth: int) -> bytes:
    """A dump whose entry's input_sizes is a list nested ``depth`` deep (pickle.dumps cannot write one:
    its opcodes are spliced in where a placeholder string was)."""
    nested = b"]" * depth + b"a" * (depth - 1)  # EMPTY_LIST x depth, then APPEND each into the one below
    data = dump([entry(1, sizes="DEEP")])
    return data.replace(b"\x8c\x04DEEP", nested, 1)


def test_a_memo_index_in_a_tiny_pickle_does_not_allocate_its_size():
    """LONG_BINPUT 0x02000000: the C unpickler grew its memo to twice that (about 570 MB here)."""
    data = (b"\x80\x04N" + b"r" + struct.pack("<I", 0x02000000) + b"0}(\x8c\x07version\x8c\x042.10"
            b"\x8c\x07entries]u.")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert fr.load_dump(data) == {"version": "2.10", "entries": []}
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB


def test_shared_or_deep_fields_cost_their_file_an_error_odd_ones_read_as_absent_and_never_end_the_run():
    """Security review N8: a shared or deep field was read and shown as "?"; such a dump is now
    refused for its file when loaded (before any of it is shown), and the other ranks are read."""
    shared = [1]
    for _ in range(22):
        shared = [shared, shared]  # 2**22 leaves when walked, 400 bytes pickled
    for data, said in ((dump([entry(1, sizes=shared)]), "(a memo bomb)"),
                       (deep_dump(200_000), "nests deeper than 32 levels")):
        result = diagnose_dumps([("r/nccl_trace_rank_0", data),
                                 ("r/nccl_trace_rank_1", dump([entry(0, done=True)]))])
        assert result["error"].startswith("r/nccl_trace_rank_0: ") and said in result["error"], result["error"]
        assert result["read"][0].startswith("dumps of ranks 1 (flight recorder version 2.10)")
    odd_sizes = dump([entry(1, sizes=[[1, 2, [3]]]), entry(1, sizes=[[10**30]])])
    result = diagnose_dumps([("r/nccl_trace_rank_0", odd_sizes)])
    assert result["error"] is None and "input sizes ?" in result["findings"][0]["message"]
    odd = pickle.dumps({"version": "2.10", "pg_config": ["not", "a", "dict"], "entries": [
        dict(entry(1), collective_seq_id="1"), entry(2)]}, protocol=4)
    result = diagnose_dumps([("r/nccl_trace_rank_0", odd)])
    assert result["error"] is None and ids(result) == {"fr.stuck_collective"}


def test_a_coalesced_group_and_uneven_all_to_all_are_read_right():
    coalesced = [entry(5, "all_gather_into_tensor_coalesced", done=True), entry(5, "all_gather_into_tensor_coalesced")]
    result = diagnose_dumps([(f"r/nccl_trace_rank_{r}", dump(coalesced)) for r in (0, 1)])
    [f] = result["findings"]
    assert f["seq"] == 5 and f["waiting"] == [0, 1]
    uneven = [("r/nccl_trace_rank_0", dump([entry(7, "all_to_all", [[1021, 4096]])])),
              ("r/nccl_trace_rank_1", dump([entry(7, "all_to_all", [[997, 4096]])]))]
    assert ids(diagnose_dumps(uneven)) == {"fr.stuck_collective"}  # not a mismatch: sizes differ by design


def test_torch_1_8s_tensorshape_field_is_read():
    line = ("[E ProcessGroupNCCL.cpp:566] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5291, "
            "OpType=ALLREDUCE, TensorShape=[25557032], Timeout(ms)=1800000) ran for 1800468 milliseconds before timing "
            "out.\n")
    [f] = [f for f in diagnose_text(line, "x.log")["findings"] if f["id"] == "torch.collective_timeout"]
    assert f["seq"] == 5291 and f["waiting"] == [1]


def test_lines_of_one_width_are_not_joined_unless_torchs_and_a_cut_line_takes_no_other():
    """unwrap.txt: a script's 65-character lines (ranks 0-3) chained into one, so rank 3, the one
    without a timeout, was lost; join.txt: rank 0's cut line took rank 1's complete one."""
    def timeout(name):
        [f] = [f for f in diagnose_text(text_of(name), name)["findings"] if f["id"] == "torch.collective_timeout"]
        return f

    assert timeout("unwrap.txt")["suspects"] == [3]
    f = timeout("join.txt")
    assert 1 in f["suspects"] and 0 not in f["suspects"]


def test_a_connect_refused_on_the_data_path_is_not_the_bootstrap():
    result = diagnose_text(text_of("data_phase.txt"), "d.log")
    assert "nccl.bootstrap_connect" not in ids(result)
    assert any(f["id"] == "nccl.warn" and "Connection refused" in f["message"] for f in result["findings"])


def test_runs_of_a_two_host_job_pasted_in_a_row_are_not_independent_copies():
    assert "nccl_tests.independent_runs" not in ids(diagnose_text(text_of("seq.txt"), "s.txt"))


def test_shell_variables_and_big_numbers_are_not_read_as_addresses_or_ranks():
    script = "export MASTER_ADDR=$(scontrol show hostnames | head -n1)\ntorchrun --master_addr $MASTER_ADDR train.py\n"
    assert "torch.master_addr_invalid" not in ids(diagnose_text(script, "job.sh", kind="torch_dist"))
    text = ("Rank 20000000 | step 1\n[rank0]:[E1206 18:44:12.7 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=600000) ran for 600044 milliseconds before timing out.\n")
    [f] = [f for f in diagnose_text(text, "b.log")["findings"] if f["id"] == "torch.collective_timeout"]
    assert f["suspects"] == []


def test_a_crafted_dump_never_ends_the_cli_with_an_internal_error(tmp_path):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(deep_dump(200_000))
    out = io.StringIO()
    assert doctor_main([str(path)], stdin=io.StringIO(""), stdout=out) in (1, 2)
    assert "internal error" not in out.getvalue() and "Traceback" not in out.getvalue()
