"""Bounds on what one input may cost the doctor (security review N8, N17 and N19's --cluster-cidr).

N8: a flight recorder dump is read with an unpickler that runs nothing, but a few hundred crafted
bytes took gigabytes and minutes (memo references repeating one part 10**30 times), colliding
numbers took quadratic time, deep nesting ended the whole run (and crashed the interpreter as a
dict key), and every dump was held in memory at once. Each crafted dump below, built here from
pickle opcodes, must now cost its file a clear error within 2 s of CPU and well under 100 MB more
than a plain run, while the other dumps of the same run are still read.

N17: ``doctor /dev/zero``, ``yes | doctor`` and a named pipe never ended; a link in a folder was
followed out of it; the whole tree was walked before the file cap applied.

N19: ``doctor --cluster-cidr 10.0.0.0/33`` was silently ignored.

The runs that never ended before the fix run in a child process with a timeout, so a regression
fails instead of hanging."""

from __future__ import annotations

import io
import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
import time

import pytest
from ansible.module_utils.ncclprep.doctor import diagnose_dumps
from ansible.module_utils.ncclprep.parsers import flight_recorder as fr
from conftest import REPO

from ncclprep.doctor_cmd import doctor_main

DUMPS = os.path.join(REPO, "tests", "fixtures", "flight_recorder", "behind")
#: Numbers that all hash alike (hash(k * (2**61 - 1)) == 0): a set or dict of them fills in quadratic time.
P61 = 2**61 - 1

# --- pickles built from opcodes (pickletools names them) ------------------------------------------------


def s(text: str) -> bytes:
    """SHORT_BINUNICODE."""
    b = text.encode()
    return b"\x8c" + bytes([len(b)]) + b


def long1(n: int) -> bytes:
    """LONG1: a signed little-endian number of up to 255 bytes."""
    b = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(b)]) + b


def get(i: int) -> bytes:
    """BINGET: push the memo's item i again (the same object, not a copy)."""
    return b"h" + bytes([i])


def dump_of(version: bytes = s("2.10"), entries: bytes = b"]", more: bytes = b"") -> bytes:
    """PROTO 4, then {"version": <version>, "entries": <entries>, <more: key/value opcodes>}."""
    return b"\x80\x04}(" + s("version") + version + s("entries") + entries + more + b"u."


def laughs(levels: int, leaf: bytes = s("x" * 16), width: int = 10) -> bytes:
    """A list whose level k holds ``width`` memo references to level k-1 (memo index k): walked as a
    tree it holds width**levels leaves, in 12 bytes a level."""
    out = b"](" + leaf * width + b"e\x94"  # EMPTY_LIST MARK ... APPENDS MEMOIZE
    for k in range(1, levels):
        out += b"0](" + get(k - 1) * width + b"e\x94"  # POP the level below, make the next
    return out


def entry_opcodes(fields: bytes) -> bytes:
    """A list holding one entry dict {collective_seq_id: 1, state: started, <fields>}."""
    return b"](}(" + s("collective_seq_id") + b"K\x01" + s("state") + s("started") + fields + b"ue"


CRAFTED = {
    # the review's fr_craft.py, and what else took a CPU or a crash to read
    "memo bomb in version": (dump_of(laughs(30)), "a memo bomb"),
    "memo bomb in a process group's ranks": (
        dump_of(more=s("pg_config") + b"}(" + s("0") + b"}(" + s("ranks") + b"}(" + s("k") + laughs(20) + b"uuu"),
        "a memo bomb"),
    "memo bomb in profiling_name": (dump_of(entries=entry_opcodes(s("profiling_name") + laughs(20))), "a memo bomb"),
    "colliding numbers as ranks (288 KB)": (
        pickle.dumps({"version": "2.10", "pg_config": {"0": {"ranks": [k * P61 for k in range(1, 26_000)]}},
                      "entries": []}, protocol=4),
        "process group 0: a rank outside 0 to 2147483647"),
    "colliding numbers as dict keys": (
        dump_of(more=s("pg_config") + b"}(" + b"".join(long1(k * P61) + b"N" for k in range(1, 26_000)) + b"u"),
        "the pickle has a dict key of type int"),
    "colliding numbers in a set": (
        dump_of(more=s("pg_status") + b"\x8f(" + b"".join(long1(k * P61) for k in range(1, 26_000)) + b"\x90"),
        "the pickle holds a set"),
    "a list nested 10**6 deep as the version (2 MB)": (dump_of(b"]" * 1_000_000 + b"a" * 999_999),
                                                       "more than 1000000 opcodes"),
    "a list nested 100,000 deep as the version": (dump_of(b"]" * 100_000 + b"a" * 99_999),
                                                  "nests deeper than 32 levels"),
    "a tuple nested 900,000 deep as a dict key (hashing it crashed the interpreter)": (
        dump_of(more=b")" + b"\x85" * 900_000 + b"N"), "the pickle has a dict key of type tuple"),
    "shared tuples as a dict key (hashed through 2**60 paths)": (
        dump_of(more=b"K\x01\x85\x94" + b"".join(b"0" + get(k - 1) * 2 + b"\x86\x94" for k in range(1, 60)) + b"N"),
        "the pickle has a dict key of type tuple"),
    "2 million empty lists in one (56 bytes each from 2 bytes)": (
        dump_of(more=s("pg_status") + b"]" + b"]a" * 2_000_000), "more than 1000000 opcodes"),
    "2 million empty dicts on the stack": (dump_of(more=s("pg_status") + b"]" + b"}" * 2_000_000),
                                           "more than 1000000 opcodes"),
    "a version of 10,000 characters": (dump_of(b"X\x10\x27\x00\x00" + b"9" * 10_000),
                                       "its version is of type str, length 10000"),
}

#: Runs doctor_main in a child process and reports its exit status, CPU seconds and peak memory
#: (VmHWM: the peak of this process's own memory; ru_maxrss keeps the forking pytest's across exec).
RUNNER = """
import json, sys, time
import ncclprep
from ncclprep.doctor_cmd import doctor_main
start = time.process_time()
rc = doctor_main(sys.argv[1:])
sys.stdout.flush()
with open("/proc/self/status") as fh:
    peak_kb = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
sys.stderr.write(json.dumps({"rc": rc, "cpu_s": time.process_time() - start, "peak_mb": peak_kb / 1024}))
"""


def child(argv: list[str], timeout: float = 30, stdin=subprocess.DEVNULL) -> tuple[dict, str]:
    """``({"rc", "cpu_s", "peak_mb"}, stdout)`` of ``ncclprep doctor argv`` in a child process capped
    at 2 GB of address space; pytest.fail when it runs past ``timeout`` seconds (it never ended)."""
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    try:
        proc = subprocess.run([sys.executable, "-c", RUNNER, *argv], stdin=stdin, capture_output=True,
                              timeout=timeout, preexec_fn=cap, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"ncclprep doctor {' '.join(argv)} still ran after {timeout} s")
    err = proc.stderr.decode(errors="replace")
    assert err.rstrip().endswith("}"), f"the child died (rc {proc.returncode}): {err[-2000:]}"
    return json.loads(err[err.rindex("{"):]), proc.stdout.decode(errors="replace")


@pytest.fixture(scope="module")
def plain_run() -> dict:
    """The cost of reading the three fixture dumps, the yardstick for the crafted ones."""
    stats, _ = child(["--json", DUMPS])
    return stats


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_crafted_dump_costs_its_file_an_error_and_the_other_ranks_are_still_read(case, tmp_path, plain_run):
    data, said = CRAFTED[case]
    for f in ("nccl_trace_rank_1", "nccl_trace_rank_2"):
        shutil.copy(os.path.join(DUMPS, f), tmp_path / f)
    crafted = tmp_path / "nccl_trace_rank_0"
    crafted.write_bytes(data)
    stats, out = child(["--json", str(crafted), str(tmp_path / "nccl_trace_rank_1"),
                        str(tmp_path / "nccl_trace_rank_2")])
    [doc] = [i for i in json.loads(out)["inputs"] if i["kind"] == "flight_recorder"]
    assert doc["error"].startswith(f"{crafted}: ") and said in doc["error"], doc["error"]
    assert doc["read"][0].startswith("dumps of ranks 1, 2 (flight recorder version 2.")
    [f] = doc["findings"]  # rank 0's dump refused: rank 0 left no dump, ranks 1 and 2 are read
    assert (f["id"], f["seq"], f["waiting"], f["no_dump"]) == ("fr.stuck_collective", 3, [1], [0])
    assert stats["rc"] == 2
    assert stats["cpu_s"] < 2.0, stats
    assert stats["peak_mb"] - plain_run["peak_mb"] < 100, (stats, plain_run)


def test_the_crafted_dumps_together_in_one_folder_leave_the_real_ones_read(tmp_path):
    """A job folder holding every crafted dump (ranks 10 and up) beside the fixture's three: in a
    folder a refused pickle is a note (a job's own pickle may lie there), each naming its reason."""
    for f in os.listdir(DUMPS):
        shutil.copy(os.path.join(DUMPS, f), tmp_path / f)
    cases = sorted(CRAFTED)
    for n, case in enumerate(cases):
        (tmp_path / f"nccl_trace_rank_{10 + n}").write_bytes(CRAFTED[case][0])
    stats, out = child(["--json", str(tmp_path)], timeout=120)
    [doc] = [i for i in json.loads(out)["inputs"] if i["kind"] == "flight_recorder"]
    assert doc["read"][0].startswith("dumps of ranks 0, 1, 2 (flight recorder")
    assert len(doc["notes"]) == len(cases)
    for n, case in enumerate(cases):
        [note] = [x for x in doc["notes"] if x.startswith(f"not read: {tmp_path}/nccl_trace_rank_{10 + n}: ")]
        assert CRAFTED[case][1] in note, (case, note)
    assert [f["suspects"] for f in doc["findings"]] == [[2]]
    assert stats["rc"] == 1 and stats["peak_mb"] < 150, stats


def test_dumps_are_read_one_at_a_time_not_all_held_at_once(tmp_path):
    """8 files of 16 MiB that start as a pickle were all read into memory before any was loaded
    (2,000 such files could ask for 64 GB). Each is now read when its turn comes."""
    for r in range(8):
        (tmp_path / f"nccl_trace_rank_{r}").write_bytes(b"\x80\x04" + b"\xff" * (16 << 20))
    stats, out = child(["--json", str(tmp_path)])
    [doc] = json.loads(out)["inputs"]
    assert doc["error"] is None and len(doc["notes"]) == 8  # in a folder: notes, not errors
    assert all(n.endswith("not a readable pickle (KeyError: 255)") for n in doc["notes"]), doc["notes"]
    assert stats["peak_mb"] < 110, stats  # one 16 MiB file at a time (all 8: 128 MB more)


class _Tracked(bytes):
    alive = 0

    def __del__(self):
        type(self).alive -= 1


def test_diagnose_dumps_calls_each_reader_after_the_last_dumps_bytes_were_dropped():
    seen = []

    def reader(path):
        def read():
            seen.append(_Tracked.alive)
            with open(path, "rb") as fh:
                _Tracked.alive += 1
                return _Tracked(fh.read())
        return read

    result = diagnose_dumps([(f"d/nccl_trace_rank_{r}", reader(os.path.join(DUMPS, f"nccl_trace_rank_{r}")))
                             for r in range(3)])
    assert seen == [0, 0, 0] and _Tracked.alive == 0
    assert [f["suspects"] for f in result["findings"]] == [[2]]


def test_past_the_bytes_one_run_reads_the_remaining_dumps_are_left_out_and_named(monkeypatch):
    monkeypatch.setattr(fr, "MAX_TOTAL_DUMP_BYTES", 3000)  # the fixture's dumps are 1,741 to 1,888 bytes
    dumps = []
    for r in range(3):
        with open(os.path.join(DUMPS, f"nccl_trace_rank_{r}"), "rb") as fh:
            dumps.append((f"d/nccl_trace_rank_{r}", fh.read()))
    result = diagnose_dumps(dumps)
    assert result["error"] == ("d/nccl_trace_rank_2: left out: the dumps before it came to 3776 bytes and 12 entries "
                               "and ranks, the most read in one run (3000 bytes, 1000000 entries and ranks); give the "
                               "dumps of fewer ranks")
    assert result["read"][0].startswith("dumps of ranks 0, 1 (flight recorder")


def test_the_rank_of_a_name_of_5000_digits_is_none_and_the_dump_an_error_not_an_exception():
    """int() refuses more than 4,300 digits: dump_rank raised out of diagnose_dumps."""
    assert fr.dump_rank("d/nccl_trace_rank_" + "7" * 5000) is None
    assert fr.dump_rank("d/" + "1" * 40 + ".tmp") is None
    assert fr.dump_rank("/tmp/nccl_trace_rank_12") == 12 and fr.dump_rank("rank_3.pkl") == 3
    with open(os.path.join(DUMPS, "nccl_trace_rank_0"), "rb") as fh:
        data = fh.read()
    result = diagnose_dumps([("d/nccl_trace_rank_" + "7" * 5000, data)])
    assert "no rank at the end of its name" in result["error"]


def test_a_sequence_number_of_5000_digits_does_not_raise_out_of_diagnose_dumps():
    """str() refuses more than 4,300 digits: the summary line raised after the analysis."""
    seq = 10**5000
    entries = [{"collective_seq_id": seq, "profiling_name": "nccl:all_reduce", "state": "started",
                "process_group": ("0", "default_pg"), "input_sizes": [[10**5000]]},
               {"collective_seq_id": 7, "profiling_name": "nccl:all_reduce", "state": "started",
                "process_group": ("0", "default_pg"), "input_sizes": [[10**5000]]}]
    data = pickle.dumps({"version": "2.10", "entries": entries}, protocol=4)
    result = diagnose_dumps([("d/nccl_trace_rank_0", data)])
    assert result["error"] is None
    [f] = result["findings"]
    assert f["seq"] == 7 and "input sizes ?" in f["message"]


def test_a_reader_that_raises_costs_its_file_an_error_and_diagnose_dumps_never_raises():
    def broken():
        raise RuntimeError("disk on fire")

    def gone():
        raise FileNotFoundError(2, "No such file or directory")

    with open(os.path.join(DUMPS, "nccl_trace_rank_1"), "rb") as fh:
        good = fh.read()
    result = diagnose_dumps([("d/nccl_trace_rank_0", broken), ("d/nccl_trace_rank_2", gone),
                             ("d/nccl_trace_rank_1", good)])
    assert result["error"] == ("d/nccl_trace_rank_0: could not be read (RuntimeError: disk on fire); "
                               "d/nccl_trace_rank_2: cannot be read (No such file or directory)")
    assert result["read"][0].startswith("dumps of ranks 1 (flight recorder")


def test_real_dumps_that_share_stack_frames_are_still_read():
    """torch's pickler writes each stack frame once and refers to it from every entry with it (a
    memo reference to a dict): sharing is weighed, not refused."""
    frames = [{"name": f"f{i}", "filename": "/opt/venv/lib/python3.11/site-packages/torch/x.py", "line": i}
              for i in range(40)]
    entries = [{"collective_seq_id": i, "profiling_name": "nccl:all_reduce", "state": "completed", "retired": True,
                "process_group": ("0", "default_pg"), "input_sizes": [[4]], "frames": frames, "is_p2p": False}
               for i in range(1, 2001)]
    entries[-1]["state"], entries[-1]["retired"] = "started", False
    ranks = "[" + ", ".join(map(str, range(4096))) + "]"
    data = pickle.dumps({"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}},
                         "entries": entries}, protocol=4)
    start = time.process_time()
    dump = fr.load_dump(data)
    assert time.process_time() - start < 2.0
    assert len(dump["entries"]) == 2000 and dump["pg_config"]["0"]["ranks"] == list(range(4096))
    assert set(dump["entries"][0]) == {"collective_seq_id", "retired", "process_group", "profiling_name", "state",
                                       "input_sizes"}


# --- N17: inputs that never ended, links out of a folder, the walk ----------------------------------------


def test_a_device_as_an_argument_ends_at_once_with_exit_2():
    stats, out = child(["/dev/zero"], timeout=20)
    assert stats["rc"] == 2 and stats["cpu_s"] < 2.0
    assert "/dev/zero: a device or socket, not a file (give a file, or '-' for standard input)" in out


def test_an_endless_pipe_on_standard_input_ends_with_exit_2():
    yes = subprocess.Popen(["yes"], stdout=subprocess.PIPE)
    try:
        stats, out = child([], timeout=30, stdin=yes.stdout)
    finally:
        yes.kill()
        yes.wait()
    assert stats["rc"] == 2 and stats["cpu_s"] < 2.0, stats
    assert "<stdin>: went on past 64 MiB, the most read from a pipe or device; save it to a file" in out


def test_dev_zero_as_standard_input_ends_with_exit_2():
    with open("/dev/zero", "rb") as zero:
        stats, out = child(["-"], timeout=30, stdin=zero)
    assert stats["rc"] == 2 and "went on past 64 MiB" in out


def test_a_named_pipe_without_a_writer_does_not_block_in_open(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    stats, out = child([str(fifo)], timeout=20)
    assert stats["rc"] == 2 and f"{fifo}: empty input" in out, out


def test_a_named_pipe_with_a_writer_is_read(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    log = ("node1:12:34 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
           "node1:12:34 [0] NCCL WARN the job ended here\n")
    writer = subprocess.Popen(["sh", "-c", f"printf '%s' \"$1\" > {fifo}", "sh", log])
    try:
        time.sleep(0.2)  # the writer is in open, waiting for a reader
        stats, out = child(["--json", str(fifo)], timeout=20)
    finally:
        writer.kill()
        writer.wait()
    [doc] = json.loads(out)["inputs"]
    assert [f["message"] for f in doc["findings"] if f["id"] == "nccl.warn"] == ["the job ended here"]


def test_a_link_in_a_folder_is_not_followed_out_of_it(tmp_path):
    secret = tmp_path / "secret.log"
    secret.write_text("node1:12:34 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
                      "node1:12:34 [0] NCCL WARN a secret outside the folder\n")
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank1.log").write_text("node1:12:34 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n")
    os.symlink(secret, job / "rank0.log")
    os.symlink(tmp_path, job / "up")  # a link to a folder above: not walked either
    out = io.StringIO()
    doctor_main(["--json", str(job)], stdin=io.StringIO(""), stdout=out)
    doc = json.loads(out.getvalue())
    assert "a secret outside the folder" not in out.getvalue()
    assert [i["source"] for i in doc["inputs"]] == [str(job / "rank1.log"), "(folders)"]
    assert doc["inputs"][1]["notes"] == ["2 symbolic link(s) in the folders were not followed (a link may lead out "
                                         "of the folder; give its target itself to read it)"]


def test_a_link_given_by_name_is_followed(tmp_path):
    """The user named it: the link is read (only links found inside a folder are not)."""
    target = tmp_path / "t.log"
    target.write_text("node1:12:34 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\nnode1:12:34 [0] NCCL WARN here\n")
    os.symlink(target, tmp_path / "link.log")
    out = io.StringIO()
    doctor_main(["--json", str(tmp_path / "link.log")], stdin=io.StringIO(""), stdout=out)
    [doc] = json.loads(out.getvalue())["inputs"]
    assert [f["message"] for f in doc["findings"] if f["id"] == "nccl.warn"] == ["here"]


def test_the_walk_stops_at_the_file_cap_instead_of_listing_the_whole_tree(tmp_path, monkeypatch):
    import ncclprep.doctor_cmd as cmd

    monkeypatch.setattr(cmd, "MAX_DIR_FILES", 3)
    for d in range(10):
        (tmp_path / f"d{d}").mkdir()
        (tmp_path / f"d{d}" / "rank.log").write_text("epoch 0\n")
    listed = []
    real = os.scandir

    def scandir(path="."):
        listed.append(os.path.basename(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    out = io.StringIO()
    doctor_main(["--json", str(tmp_path)], stdin=io.StringIO(""), stdout=out)
    doc = json.loads(out.getvalue())
    assert [i["source"] for i in doc["inputs"]] == [str(tmp_path / f"d{d}" / "rank.log") for d in range(3)] + [
        "(folders)"]
    assert doc["inputs"][-1]["notes"] == ["the folders hold more than 3 files: the first 3 in name order were read, "
                                          "the walk stopped there"]
    assert listed == [tmp_path.name, "d0", "d1", "d2", "d3"]  # d4 to d9 never listed


# --- N19: --cluster-cidr ---------------------------------------------------------------------------------


UFW = ("Status: active\n\nTo                         Action      From\n--                         ------      ----\n"
       "Anywhere                   ALLOW       10.0.0.0/16\n")


@pytest.mark.parametrize("bad", ["10.0.0.0/33", "10.0.0.300/16", "cluster", ""])
def test_a_cluster_cidr_that_is_no_subnet_is_a_usage_error_naming_it(bad, tmp_path):
    path = tmp_path / "ufw.txt"
    path.write_text(UFW)
    out = io.StringIO()
    assert doctor_main(["--cluster-cidr", bad, str(path)], stdin=io.StringIO(""), stdout=out) == 2
    assert f"argument --cluster-cidr: {bad!r} is not a subnet" in out.getvalue(), out.getvalue()
    assert "give one such as 10.0.0.0/16" in out.getvalue()


def test_a_cluster_cidr_with_host_bits_or_ipv6_is_accepted(tmp_path):
    path = tmp_path / "ufw.txt"
    path.write_text(UFW)
    out = io.StringIO()
    assert doctor_main(["--json", "--cluster-cidr", "10.0.3.7/16", "--cluster-cidr", "fd00::/64", str(path)],
                       stdin=io.StringIO(""), stdout=out) in (0, 1)
    [doc] = json.loads(out.getvalue())["inputs"]
    assert {f["subject"] for f in doc["findings"] if f["id"].startswith("ufw.cluster")} == {"10.0.3.7/16",
                                                                                             "fd00::/64"}
