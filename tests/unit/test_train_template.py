"""The template training job (roles/nccl_env/files/ncclprep_train.py), run for real by torchrun
(gloo, 2 local workers): what each saving does to the all-reduce payload per optimizer step,
checkpoints saved by rank 0 and resumed on every rank, FSDP, and how validate.yml reads it."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pytest
from ansible.module_utils.ncclprep.checks.smoke import training_figures, training_summary
from ansible.module_utils.ncclprep.probes import smoke as ddp_smoke
from conftest import REPO, load_source

torch = pytest.importorskip("torch")
train = load_source("ncclprep_train", "roles/nccl_env/files/ncclprep_train.py")
SCRIPT = os.path.join(REPO, "roles", "nccl_env", "files", "ncclprep_train.py")
WIDTH = 256
# (out, in) of the three Linear layers of make_model(256): 64 -> 256 -> 256 -> 8
MATRICES = [(WIDTH, 64), (WIDTH, WIDTH), (8, WIDTH)]
BIASES = [WIDTH, WIDTH, 8]
PARAM_BYTES = 4 * (sum(n * m for n, m in MATRICES) + sum(BIASES))  # float32


def run_job(*args, cwd) -> list[dict]:
    """Every worker's result of one 2-worker torchrun of the template, rank order."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                          SCRIPT, *args], capture_output=True, text=True, env=env, timeout=240, cwd=cwd)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = ddp_smoke.read_result(out.stdout, out.returncode, 240, 1.0, "here")
    assert result["status"] == "PASS", (result, out.stderr[-2000:])
    return sorted(result["workers"], key=lambda w: w["rank"])


def test_accumulation_with_no_sync_all_reduces_once_per_optimizer_step_and_a_checkpoint_resumes(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    first = run_job("--steps", "3", "--accumulation", "4", "--checkpoint-dir", ckpt, cwd=tmp_path)
    assert [w["rank"] for w in first] == [0, 1]
    for w in first:
        assert w["params_identical"] is True and w["world_size"] == 2 and w["backend"] == "gloo"
        assert w["global_batch"] == 32 * 2 * 4 and w["lr"] == pytest.approx(0.05 * 256 / 64)
        assert w["parameters"] * 4 == PARAM_BYTES
        # the last micro-batch only: the gradients once
        assert w["allreduce_bytes_per_step"] == PARAM_BYTES and w["bytes_per_step"]["reduce_scatter"] == 0
        assert w["step_s"] > 0 and 0 <= w["comm_share"] <= 1
        assert w["compute_s"] + w["comm_s"] == pytest.approx(w["step_s"], abs=2e-6)
        assert w["resumed_from_step"] == 0 and w["measured_steps"] == 2
    assert os.path.exists(os.path.join(ckpt, "last.pt"))
    assert torch.load(os.path.join(ckpt, "last.pt"), weights_only=True)["step"] == 3

    # resumed at step 3 from rank 0's file, now all-reducing after every micro-batch: 4 times the payload
    second = run_job("--steps", "2", "--accumulation", "4", "--sync-every-micro-batch", "--checkpoint-dir", ckpt,
                     cwd=tmp_path)
    for w in second:
        assert w["resumed_from_step"] == 3 and w["params_identical"] is True
        assert w["allreduce_bytes_per_step"] == 4 * PARAM_BYTES
    assert torch.load(os.path.join(ckpt, "last.pt"), weights_only=True)["step"] == 5


def test_powersgd_all_reduces_the_rank_r_factors_and_the_biases(tmp_path):
    rank = 2
    workers = run_job("--steps", "4", "--accumulation", "1", "--powersgd-rank", str(rank), cwd=tmp_path)
    # PowerSGD (torch's powerSGD_hook): each matrix n x m as P (n x r) and Q (m x r); 1-D tensors as they are
    expected = 4 * (sum((n + m) * rank for n, m in MATRICES) + sum(BIASES))
    for w in workers:
        assert w["allreduce_bytes_per_step"] == expected and w["params_identical"] is True
        assert w["measured_steps"] == 1  # steps 1-2 ran plain all_reduce (start iter 2), step 3 warmed up
    assert expected < PARAM_BYTES / 10


def test_fsdp_reduce_scatters_the_gradients_and_keeps_ranks_identical(tmp_path):
    workers = run_job("--steps", "2", "--accumulation", "2", "--fsdp", cwd=tmp_path)
    for w in workers:
        assert w["mode"] == "fsdp" and w["params_identical"] is True
        # each rank contributes its full gradient once per step (the synchronising micro-batch)
        assert w["bytes_per_step"]["reduce_scatter"] == PARAM_BYTES and w["allreduce_bytes_per_step"] == 0
        # and gathers its half of the parameters before each forward and backward
        assert w["bytes_per_step"]["all_gather"] > 0 and w["comm_share"] is None


def test_learning_rate_rules_and_bad_arguments(capsys):
    assert train.scaled_lr(0.1, 512, 256, "linear") == pytest.approx(0.2)
    assert train.scaled_lr(0.1, 1024, 256, "sqrt") == pytest.approx(0.2)
    assert train.scaled_lr(0.1, 1024, 256, "none") == pytest.approx(0.1)
    for argv, words in ((["--accumulation", "0"], "--accumulation=0 must be >= 1"),
                        (["--powersgd-start-iter", "1"], "--powersgd-start-iter >= 2"),
                        (["--fsdp", "--powersgd-rank", "1"], "--fsdp takes neither"),
                        (["--lr-scaling", "cubic"], "invalid choice: 'cubic'")):
        with pytest.raises(SystemExit) as err:
            train.parse_args(argv)
        assert err.value.code == 2 and words in capsys.readouterr().err


def test_the_result_marker_is_the_one_validate_reads_and_a_line_is_one_write(capfd):
    assert train.RESULT_MARKER == ddp_smoke.MARKER
    train.result_line({"rank": 5})
    assert capfd.readouterr().out == ddp_smoke.MARKER + json.dumps({"rank": 5}) + "\n"


def test_the_report_figures_are_medians_over_workers_with_rank_0s_bytes():
    workers = [{"rank": r, "global_batch": 192, "step_s": s, "comm_share": c, "allreduce_bytes_per_step": 337952}
               for r, s, c in ((0, 0.010, 0.5), (1, 0.030, 0.2), (2, 0.020, 0.4))]
    figures = training_figures(workers)
    assert figures == {"global_batch": 192, "step_ms": 20.0, "comm_share": 0.4, "allreduce_bytes_per_step": 337952,
                       "slowest_rank": 1, "slowest_step_ms": 30.0}
    assert training_summary(figures) == "global batch 192, step 20.0 ms (40% communication), all-reduce 337952 B/step"
    assert training_figures([{"rank": 0, "params_identical": True}]) == {}


def test_the_check_and_the_summary_show_global_batch_step_time_and_communication_share():
    from ansible.module_utils.ncclprep.checks import evaluate
    from ansible.module_utils.ncclprep.report import render_markdown
    from test_checks import healthy  # the healthy records of the check tests (tests/unit on sys.path)

    rec = healthy()
    for i, host in enumerate(["node1", "node2", "node3"]):
        rec[host]["smoke"]["workers"] = [{"rank": i, "world_size": 3, "params_identical": True, "global_batch": 192,
                                          "step_s": 0.05 + 0.01 * i, "comm_share": 0.3,
                                          "allreduce_bytes_per_step": 337952}]
    checks = evaluate(rec, ["node1", "node2", "node3"])
    smoke = next(c for c in checks if c["id"] == "torchrun.smoke")
    assert smoke["status"] == "PASS" and smoke["measured"]["step_ms"] == 60.0
    assert smoke["message"].endswith("global batch 192, step 60.0 ms (30% communication), all-reduce 337952 B/step")
    md = render_markdown({"status": "PASS", "generated_at": "t", "hosts": ["node1", "node2", "node3"],
                          "checks": checks})
    at = md.index("## Training job")
    row = md[at:].splitlines()[4]
    assert [cell.strip() for cell in row.strip("|").split("|")] == ["3", "192", "60.0", "30%", "337952", "2 (70.0)"]


def test_a_checkpoint_is_not_written_through_a_link_planted_at_a_fixed_temporary_name(tmp_path):
    """Review, low findings: save_checkpoint wrote ``path + ".tmp"`` and renamed it, so a link
    planted at that name in a shared folder sent the job's (often root's) write to its target."""
    import torch

    target = tmp_path / "victim"
    target.write_text("keep")
    ckpt = tmp_path / "ckpt" / "model.pt"
    ckpt.parent.mkdir()
    os.symlink(target, str(ckpt) + ".tmp")
    model = torch.nn.Linear(2, 2)
    train.save_checkpoint(str(ckpt), model, torch.optim.SGD(model.parameters(), lr=0.1), 3)
    assert target.read_text() == "keep"
    assert torch.load(ckpt, weights_only=True)["step"] == 3
    assert sorted(p.name for p in ckpt.parent.iterdir()) == ["model.pt", "model.pt.tmp"]  # only the plant left


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def _rank_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = dict(kv.split(b"=", 1) for kv in fh.read().split(b"\0") if b"=" in kv)
    except OSError:
        return None
    return int(env[b"RANK"]) if b"RANK" in env else None


def test_a_rank_stopped_mid_training_is_named_by_the_doctor_from_the_others_flight_recorders(tmp_path):
    """Issue 27: 3 workers on Gloo with a 6 s timeout; rank 2 is stopped (SIGSTOP) while training.
    Ranks 0 and 1 time out in DDP's all_reduce, write their flight recorder (Gloo dumps nothing on
    its own) and fail; the doctor, given the folder, names rank 2 and the collective they wait in."""
    import signal
    import time

    from ncclprep.doctor_cmd import doctor_main

    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
               TORCH_FR_DUMP_TEMP_FILE=str(tmp_path / "nccl_trace_rank_"))
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3",
                             SCRIPT, "--steps", "100000", "--timeout", "6", "--width", "64"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    stopped = None
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "ncclprep-train: step 3/" in line:
                break
        workers = {_rank_of(p): p for p in _children(proc.pid)}
        stopped = workers[2]
        os.kill(stopped, signal.SIGSTOP)
        deadline = time.monotonic() + 60
        while not all(os.path.exists(tmp_path / f"nccl_trace_rank_{r}") for r in (0, 1)):
            assert time.monotonic() < deadline, "ranks 0 and 1 wrote no flight recorder"
            time.sleep(0.5)
        os.kill(stopped, signal.SIGKILL)  # torchrun's SIGTERM would wait on the stopped process
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    log = "".join(lines) + rest
    assert proc.returncode != 0, log[-2000:]
    assert "flight recorder written to" in log, log[-2000:]
    (tmp_path / "torchrun.log").write_text(log)
    out = io.StringIO()
    assert doctor_main([str(tmp_path)], stdin=io.StringIO(""), stdout=out) == 1
    text = out.getvalue()
    assert "flight recorder (2 dumps)" in text, text
    # which of ranks 0-1 still show the failed work pending depends on when each wrote its dump (Gloo
    # retires it once failed): the finding names the collective and rank 2, the one without a dump.
    # Under load rank 1 may dump one collective behind rank 0 (seen in a clean-clone CI run, issue 40's
    # stop): the headline then names rank 1 as behind, and rank 2 still as the one without a dump
    assert re.search(r"FAIL rank [12]: collective #\d+ \(all_?reduce, input sizes \[\[\d+\]\]\) of process group 0 "
                     r"\(default_pg\): [^\n]*rank 2 left no dump", text), text
