"""``ncclprep tune --nccl-tuner`` (module_utils/ncclprep/tune/tuner_csv.py): nccl-tests sweeps, one per
forced algorithm and protocol, into NCCL's example tuner CSV.

The reader runs on the shared recorded case (a real all_reduce_perf tail). No recorded set of sweeps
of one cluster by algorithm and protocol is at hand (public threads show one algorithm per system, and
no GPU was lent to this work), so the choice is tested on sweeps written in nccl-tests' own format with
figures set to make each rule show: a clear win, a win inside the 5 % margin, a change of winner
with size."""

from __future__ import annotations

import pytest
from ansible.module_utils.ncclprep.tune.tuner_csv import HEADER, choose, ranges, read_sweep, render

from ncclprep.tune_cmd import nccl_tuner_main

SIZES = (1024, 65536, 1048576, 16777216, 134217728)


def sweep(busbw: dict[int, float], env: tuple[str, ...] = ()) -> str:
    """all_reduce_perf's output for 4 ranks on 2 nodes (its header, NCCL INFO lines for ``env``, its rows:
    in-place 1 % above out-of-place)."""
    lines = ["# Collective test starting: all_reduce_perf",
             "# nThread 1 nGpus 1 minBytes 1024 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 "
             "agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    for rank in range(4):
        lines.append(f"#  Rank {rank:2d} Group  0 Pid  {4100 + rank} on {'gpu1' if rank < 2 else 'gpu2':>10s} "
                     f"device  {rank % 2} [0x{rank:02x}] NVIDIA H100 80GB HBM3")
    lines += [f"gpu1:4100:4100 [0] NCCL INFO NCCL_{k} set by environment to {v}" for k, v in
              (e.split("=") for e in env)]
    lines += ["#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw  "
              " busbw #wrong", "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)         "
              "   (us)  (GB/s)  (GB/s)"]
    for size in SIZES:
        b = busbw[size]
        alg = b / 1.5
        t = size / (alg * 1e9) * 1e6 if alg else 40.0  # nccl-tests prints 0.00 GB/s at a small size
        lines.append(f"{size:12d}  {size // 4:12d}     float     sum      -1  {t:7.2f} {alg:6.2f} {b:6.2f}      0  "
                     f"{t / 1.01:7.2f} {alg * 1.01:6.2f} {b * 1.01:6.2f}      0")
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {sum(busbw.values()) / len(busbw):.4f}"]
    return "\n".join(lines) + "\n"


NCCL_OWN = {1024: 0.05, 65536: 2.0, 1048576: 20.0, 16777216: 100.0, 134217728: 150.0}
RING_SIMPLE = {1024: 0.03, 65536: 1.5, 1048576: 20.4, 16777216: 110.0, 134217728: 165.0}
TREE_LL = {1024: 0.06, 65536: 2.4, 1048576: 12.0, 16777216: 40.0, 134217728: 50.0}


def test_the_reader_takes_the_label_from_nccls_lines_and_the_lower_half():
    s = read_sweep(sweep(RING_SIMPLE, ("ALGO=Ring", "PROTO=Simple")), source="ring.txt")
    assert (s["label"], s["collective"], s["nodes"], s["ranks"]) == ("ring,simple", "allreduce", 2, 4)
    assert s["busbw"][134217728] == 165.0  # out-of-place, below in-place here
    assert read_sweep(sweep(NCCL_OWN), source="own.txt")["label"] == "default"
    assert read_sweep(sweep(TREE_LL), "Tree,LL", source="t.txt")["label"] == "tree,ll"


def test_the_reader_reads_the_recorded_case(case):
    """The shared case (a real 3-node all_reduce_perf tail: rows and the average, no header)."""
    s = read_sweep(case("nccl_tests/allreduce-3node-healthy-tail.txt"), "ring,simple", source="tail")
    assert s["busbw"][133169160] == 95.74  # min(95.74 out-of-place, 95.94 in-place)
    assert s["nodes"] is None and s["collective"] is None


@pytest.mark.parametrize("text, label, message", [
    (sweep(RING_SIMPLE, ("ALGO=Ring",)), None, r"s.txt: forces only NCCL_ALGO: give both"),
    (sweep(RING_SIMPLE), "ring,fast", r"s.txt: algorithm 'ring', protocol 'fast': valid: "),
    (sweep(RING_SIMPLE), "ring", r"s.txt: label 'ring': valid: ALGO,PROTO"),
    ("# nThread 1\n", "ring,simple", r"s.txt: no nccl-tests data row"),
])
def test_the_reader_refuses_what_it_cannot_label_or_read(text, label, message):
    with pytest.raises(ValueError, match=message):
        read_sweep(text, label, source="s.txt")


def test_a_forced_choice_is_kept_only_where_it_beats_nccls_own_by_five_percent():
    sweeps = [read_sweep(sweep(NCCL_OWN), source="own"),
              read_sweep(sweep(RING_SIMPLE, ("ALGO=Ring", "PROTO=Simple")), source="ring"),
              read_sweep(sweep(TREE_LL), "tree,ll", source="tree")]
    chosen = choose(sweeps)
    assert [c["choice"] for c in chosen] == [("tree", "ll"), ("tree", "ll"), None, ("ring", "simple"),
                                             ("ring", "simple")]
    assert chosen[2]["gain"] == pytest.approx(0.02)  # ring 2 % ahead at 1 MiB: inside the margin, left to NCCL
    rows = ranges(chosen)
    assert rows == [{"min_bytes": 1024, "max_bytes": 65536, "algorithm": "tree", "protocol": "ll"},
                    {"min_bytes": 1048577, "max_bytes": 134217728, "algorithm": "ring", "protocol": "simple"}]
    text = render("allreduce", rows, chosen, 2, 4, ["own", "ring", "tree"], "2026-12-06T05:30:00Z")
    csv = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert csv == ["allreduce,1024,65536,tree,ll,-1,2,4", "allreduce,1048577,134217728,ring,simple,-1,2,4"]
    assert f"# {HEADER}" in text and "#   1048576: ring,simple 20.4 against 20 (+2.0 %): left to NCCL" in text


def test_without_nccls_own_sweep_the_best_is_written_and_two_of_a_label_are_refused():
    sweeps = [read_sweep(sweep(RING_SIMPLE), "ring,simple", source="r"), read_sweep(sweep(TREE_LL), "tree,ll",
                                                                                     source="t")]
    assert [c["choice"][0] for c in choose(sweeps)] == ["tree", "tree", "ring", "ring", "ring"]
    with pytest.raises(ValueError, match=r"two sweeps of one label \(ring,simple: r, r\): valid: one sweep per"):
        choose(sweeps + [sweeps[0]])
    with pytest.raises(ValueError, match="no sweep forces an algorithm"):
        choose([read_sweep(sweep(NCCL_OWN), source="own")])


def test_the_command_writes_the_csv_and_refuses_an_unreadable_sweep(tmp_path, capsys):
    files = {}
    for name, figures, env in (("own", NCCL_OWN, ()), ("ring", RING_SIMPLE, ("ALGO=RING", "PROTO=SIMPLE")),
                               ("tree", TREE_LL, ())):
        files[name] = tmp_path / f"{name}.txt"
        files[name].write_text(sweep(figures, env))
    out = tmp_path / "tuner.csv"
    assert nccl_tuner_main([str(files["own"]), str(files["ring"]), f"tree,ll={files['tree']}"], None, str(out)) == 0
    assert [ln for ln in out.read_text().splitlines() if not ln.startswith("#")] == [
        "allreduce,1024,65536,tree,ll,-1,2,4", "allreduce,1048577,134217728,ring,simple,-1,2,4"]
    assert "NCCL_TUNER_CONFIG_FILE=" in capsys.readouterr().out
    assert nccl_tuner_main([str(files["ring"]), str(tmp_path / "missing.txt")], None, None) == 2
    assert "missing.txt" in capsys.readouterr().err
    assert nccl_tuner_main([str(files["ring"])], "allgather", None) == 2
    assert "ring.txt (allreduce): not allgather: one collective per CSV" in capsys.readouterr().err


def test_ncclprep_tune_routes_nccl_tuner_and_asks_for_the_inventory_otherwise(tmp_path, capsys):
    from ncclprep import cli

    (tmp_path / "ring.txt").write_text(sweep(RING_SIMPLE, ("ALGO=Ring", "PROTO=Simple")))
    assert cli.main(["tune", "--nccl-tuner", str(tmp_path / "ring.txt"), "-o", str(tmp_path / "t.csv")]) == 0
    assert "allreduce,1024,134217728,ring,simple,-1,2,4" in (tmp_path / "t.csv").read_text()
    assert cli.main(["tune"]) == 2
    assert "ncclprep tune: give the inventory, e.g. -i inventory/local" in capsys.readouterr().err


def test_what_a_first_user_gets_wrong_is_refused_naming_the_file(tmp_path, capsys):
    """Found trying the command as a new user would (review of issue 26): each exits 2 with the file
    or value named, none with a traceback."""
    from ncclprep import cli

    eq = tmp_path / "a=b"
    eq.mkdir()
    (eq / "ring.txt").write_text(sweep(RING_SIMPLE, ("ALGO=Ring", "PROTO=Simple")))
    # a path holding "=", with and without a label
    assert nccl_tuner_main([str(eq / "ring.txt")], None, str(tmp_path / "1.csv")) == 0
    assert nccl_tuner_main([f"ring,simple={eq / 'ring.txt'}"], None, str(tmp_path / "2.csv")) == 0
    capsys.readouterr()
    # NCCL's own sweep at 0.00 at the smallest size: left to NCCL, no crash
    zero = {**NCCL_OWN, 1024: 0.0}
    (tmp_path / "own0.txt").write_text(sweep(zero))
    assert nccl_tuner_main([str(tmp_path / "own0.txt"), str(eq / "ring.txt")], None, None) == 0
    assert "#   1024: ring,simple 0.03 against 0: left to NCCL" in capsys.readouterr().out
    # an output that cannot be written
    assert nccl_tuner_main([str(eq / "ring.txt")], None, str(tmp_path / "no" / "x.csv")) == 2
    assert "-o " in capsys.readouterr().err
    # a collective the tuner CSV does not take
    (tmp_path / "a2a.txt").write_text(sweep(RING_SIMPLE).replace("all_reduce_perf", "alltoall_perf"))
    assert nccl_tuner_main([f"ring,simple={tmp_path / 'a2a.txt'}"], None, None) == 2
    assert "a2a.txt: alltoall_perf: the tuner CSV takes" in capsys.readouterr().err
    # two unlabelled sweeps (NCCL_DEBUG=INFO forgotten): both files named
    (tmp_path / "x.txt").write_text(sweep(TREE_LL))
    assert nccl_tuner_main([str(tmp_path / "own0.txt"), str(tmp_path / "x.txt")], None, None) == 2
    err = capsys.readouterr().err
    assert "two sweeps of one label (default: " in err and "own0.txt" in err and "x.txt" in err
    # options that go with --nccl-tuner only, and the cluster's options with it
    assert cli.main(["tune", "-i", str(tmp_path), "-o", "x.csv"]) == 2
    assert "--collective and -o go with --nccl-tuner" in capsys.readouterr().err
    assert cli.main(["tune", "--nccl-tuner", str(eq / "ring.txt"), "--colective", "allgather"]) == 2
    assert "--colective allgather: not taken with --nccl-tuner" in capsys.readouterr().err


def test_sweeps_without_a_common_size_are_refused():
    a = read_sweep(sweep(RING_SIMPLE), "ring,simple", source="a")
    b = read_sweep(sweep(TREE_LL), "tree,ll", source="b")
    b["busbw"] = {s * 3: v for s, v in b["busbw"].items()}
    with pytest.raises(ValueError, match=r"the sweeps share no size: a: 1024-134217728; b: 3072-402653184"):
        choose([a, b])
