"""torch's flight recorder dumps (module_utils/ncclprep/parsers/flight_recorder.py, issue 27 item 4):
read with an unpickler that refuses every class and function, and read across ranks as torch's own
analysis does. The dumps in tests/fixtures/flight_recorder were written by torch (Gloo, 3 ranks on
this machine; make_dumps.py there says how)."""

from __future__ import annotations

import io
import os
import pickle

import pytest
from ansible.module_utils.ncclprep.doctor import diagnose_dumps
from ansible.module_utils.ncclprep.parsers import flight_recorder as fr
from conftest import REPO

from ncclprep.doctor_cmd import doctor_main

HERE = os.path.join(REPO, "tests", "fixtures", "flight_recorder")


def dumps(scenario: str, ranks=(0, 1, 2)) -> list[tuple[str, bytes]]:
    out = []
    for r in ranks:
        path = os.path.join(HERE, scenario, f"nccl_trace_rank_{r}")
        with open(path, "rb") as fh:
            out.append((path, fh.read()))
    return out


class _Mkdir:
    """A pickle that, loaded by pickle.load, makes a directory (any call would do)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


def test_a_pickle_that_names_a_function_is_refused_and_nothing_runs(tmp_path):
    target = tmp_path / "made-by-the-pickle"
    evil = pickle.dumps({"version": "2.10", "entries": [_Mkdir(str(target))]}, protocol=4)
    pickle.loads(pickle.dumps(1))  # the plain pickle module is there
    with pytest.raises(fr.DumpRefused, match=r"names (posix|os)\.mkdir: .*refused unread \(nothing in it ran\)"):
        fr.load_dump(evil)
    assert not target.exists()
    # through the CLI: refused, named, exit 2, and still nothing made
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(evil)
    out = io.StringIO()
    assert doctor_main([str(path)], stdin=io.StringIO(""), stdout=out) == 2
    assert "refused unread" in out.getvalue() and not target.exists()


def test_a_dump_cut_short_or_not_a_dump_is_refused_with_the_reason():
    [(_, data)] = dumps("behind", ranks=(0,))
    with pytest.raises(fr.DumpRefused, match="not a readable pickle"):
        fr.load_dump(data[: len(data) // 2])
    with pytest.raises(fr.DumpRefused, match="not a flight recorder dump"):
        fr.load_dump(pickle.dumps({"a": 1}, protocol=4))
    assert fr.load_dump(data)["version"] and fr.dump_rank("/tmp/nccl_trace_rank_12") == 12


def test_the_rank_that_never_reached_the_collective_is_named_with_its_last_one():
    result = diagnose_dumps(dumps("behind"))
    [f] = result["findings"]
    assert (f["id"], f["seq"], f["op"], f["waiting"], f["suspects"]) == ("fr.stuck_collective", 3, "all_reduce",
                                                                         [0, 1], [2])
    assert f["subject"] == "rank 2"
    assert "rank 2 never reached it (its last collective: #2 all_reduce)" in f["message"]
    assert "input sizes [[4]]" in f["message"] and "default_pg" in f["message"]
    assert result["read"][0].startswith("dumps of ranks 0, 1, 2 (flight recorder version 2.")


def test_a_rank_without_a_dump_is_named_from_the_groups_members():
    """A stopped rank writes no dump: the group's member list (pg_config) names it."""
    [f] = diagnose_dumps(dumps("behind", ranks=(0, 1)))["findings"]
    assert f["suspects"] == [2] and f["no_dump"] == [2]
    assert "rank 2 left no dump (stopped, dead, or it could not write one)" in f["message"]


def test_ranks_in_one_collective_with_another_operation_are_a_mismatch():
    found = {f["id"]: f for f in diagnose_dumps(dumps("mismatch"))["findings"]}
    assert found["fr.stuck_collective"]["waiting"] == [0, 1, 2]
    assert "all_reduce [[4]] on rank 0, rank 1: broadcast [[4]]" in found["fr.mismatch"]["message"]
    assert found["fr.mismatch"]["subject"] == "rank 1"


def test_the_doctor_reads_dumps_beside_text_and_says_which_rank_to_look_at(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text("[rank0]:[E1206 18:44:12.715 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
                   "operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, "
                   "Timeout(ms)=600000) ran for 600100 milliseconds before timing out.\n")
    out = io.StringIO()
    paths = [p for p, _ in dumps("behind")]
    assert doctor_main([str(log), *paths], stdin=io.StringIO(""), stdout=out) == 1
    text = out.getvalue()
    assert "flight recorder (3 dumps): flight_recorder" in text
    assert "FAIL rank 2: collective #3 (all_reduce, input sizes [[4]])" in text
    assert "NCCL watchdog timeout: rank 0 waited in ALLREDUCE (work 3)" in text
