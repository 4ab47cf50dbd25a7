"""``ncclprep doctor DIR``: a job's debug folder read at once (issue 27 item 3): per-rank logs in
torchrun's layout, a rank whose log holds no error, the flight recorder's dumps; the answer names
the collective the ranks wait in and the rank to look at."""

from __future__ import annotations

import io
import json
import os
import shutil

from conftest import REPO

from ncclprep.doctor_cmd import doctor_main

DUMPS = os.path.join(REPO, "tests", "fixtures", "flight_recorder", "behind")
# torch 2.4's watchdog lines, as the public cases print them (tests/fixtures/doctor/torch_watchdog)
TIMEOUT = ("[rank{r}]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective "
           "operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=600000) ran "
           "for 600061 milliseconds before timing out.\n"
           "[rank{r}]:[E1206 18:44:12.715588844 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank {r}] Exception "
           "(either an error or timeout) detected by watchdog at work: 3, last enqueued NCCL work: 3, last completed "
           "NCCL work: 2.\n")


def job_folder(tmp_path, dumps: bool = True) -> str:
    """torchrun's --log-dir layout for 3 local ranks (attempt_0/<rank>/stderr.log): ranks 0 and 1 time
    out in work 3; rank 2's log has only its training lines."""
    root = tmp_path / "debug"
    for r in range(3):
        d = root / "torchrun" / "job-1_abc" / "attempt_0" / str(r)
        d.mkdir(parents=True)
        (d / "stderr.log").write_text(TIMEOUT.format(r=r) if r < 2 else "epoch 0 step 2 loss 0.51\n")
    if dumps:
        for f in sorted(os.listdir(DUMPS)):
            shutil.copy(os.path.join(DUMPS, f), root / f)
    return str(root)


def run(argv) -> tuple[int, str]:
    out = io.StringIO()
    return doctor_main(argv, stdin=io.StringIO(""), stdout=out), out.getvalue()


def test_a_debug_folder_names_the_collective_and_the_rank_that_never_reached_it(tmp_path):
    code, text = run([job_folder(tmp_path)])
    assert code == 1, text
    # the logs read together: ranks 0 and 1 wait in work 3, rank 2 printed nothing of it
    assert "FAIL rank 2: across 2 inputs: NCCL watchdog timeout: ranks 0-1 waited in ALLREDUCE (work 3" in text
    assert "rank 2 (" in text and "attempt_0/2/stderr.log): to look at first" in text
    # the dumps agree: rank 2's last collective is #2
    assert "rank 2 never reached it (its last collective: #2 all_reduce)" in text
    # rank 2's own log is not an error of its own
    assert "unreadable" not in text


def test_the_folder_as_json_carries_the_same_findings(tmp_path):
    code, text = run(["--json", job_folder(tmp_path, dumps=False)])
    data = json.loads(text)
    assert code == 1 and data["status"] == "fail"
    [job] = [c for c in data["comparisons"] if c["id"] == "compare.collective_timeout"]
    assert (job["seq"], job["waiting"], job["suspects"]) == (3, [0, 1], [2])


def test_the_json_keys_are_the_ones_docs_reports_md_lists(tmp_path):
    """docs/reports.md documents the doctor's JSON: the keys a script reads are there."""
    code, text = run(["--json", job_folder(tmp_path)])
    data = json.loads(text)
    assert set(data) == {"schema_version", "status", "summary", "inputs", "comparisons"}
    assert set(data["summary"]) == {"inputs", "FAIL", "WARN", "INFO", "errors"}
    assert set(data["inputs"][0]) == {"source", "kind", "kind_description", "host", "also", "read", "findings",
                                      "unparsed_count", "notes", "error"}
    [fr] = [i for i in data["inputs"] if i["kind"] == "flight_recorder"]
    [f] = fr["findings"]
    assert {"id", "severity", "subject", "host", "message", "remediation", "evidence", "pg", "seq", "op", "waiting",
            "suspects", "no_dump"} <= set(f)
    with open(os.path.join(REPO, "docs", "reports.md"), encoding="utf-8") as fh:
        doc = fh.read()
    for key in ("schema_version", "comparisons", "unparsed_count", "no_dump", "suspects", "waiting"):
        assert key in doc, key


def test_empty_and_binary_files_in_a_folder_are_notes_not_errors(tmp_path):
    """A debug folder holds NCCL's empty per-process logs (Gloo never writes them) and core files."""
    root = job_folder(tmp_path, dumps=False)
    open(os.path.join(root, "nccl.node1.4242.log"), "w").close()
    with open(os.path.join(root, "core.4242"), "wb") as fh:
        fh.write(bytes(range(256)) * 4)
    code, text = run([root])
    assert code == 1 and "unreadable" not in text, text
    assert "not read (empty input: nothing to read)" in text and "not read: binary input" in text


def test_a_folder_skips_pipes_half_written_dumps_and_other_pickles(tmp_path):
    """Review: a named pipe in a folder blocked the doctor for good; the template's <prefix><rank>.tmp
    read as a second dump; a job's own pickle beside the dumps failed the run. Files sort by number
    (rank2 before rank10)."""
    root = job_folder(tmp_path)
    os.mkfifo(os.path.join(root, "pipe"))
    shutil.copy(os.path.join(DUMPS, "nccl_trace_rank_0"), os.path.join(root, "nccl_trace_rank_0.tmp"))
    import pickle

    with open(os.path.join(root, "metrics.pkl"), "wb") as fh:
        pickle.dump({"loss": [0.5, 0.4]}, fh, protocol=4)
    for r in (2, 10):
        with open(os.path.join(root, f"rank{r}.log"), "w") as fh:
            fh.write(f"epoch 0 step 1 rank {r}\n")
    code, text = run([root])
    assert code == 1 and "unreadable" not in text, text
    assert "not read: " in text and "metrics.pkl" in text and "second dump" not in text
    assert text.index("rank2.log") < text.index("rank10.log")
