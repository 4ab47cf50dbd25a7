"""How validate.yml reads the template training job's output (the torchrun smoke job).

The job itself is roles/nccl_env/files/ncclprep_train.py, installed on every node by
nccl_env and started through the launcher by ``run_job`` (the preflight engine's, the torchrun_smoke module's and
``ncclprep node preflight``'s); each of its workers
prints one line ``NCCLPREP_RESULT {json}`` (its ``RESULT_MARKER``, repeated here as ``MARKER``:
a unit test holds the two equal).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

MARKER = "NCCLPREP_RESULT "


def read_result(output: str, rc: int | None, timeout_s: float, elapsed_s: float, host: str) -> dict:
    """What one node's torchrun job did, from its output: a record's ``smoke``.

    ``output``: everything the launcher printed; ``rc``: its exit code, None when it was killed
    at the deadline of ``timeout_s`` seconds. Returns ``{status: PASS|FAIL|HANG, rc, workers:
    [the NCCLPREP_RESULT dicts], elapsed_s, log_tail: last 15 lines (300 characters each), error,
    host}``. A job killed at the deadline after every local worker printed a correct result was
    waiting for the other nodes: torchrun's agent holds a finished node in its exit barrier
    until every node's agent is done (torch.distributed.elastic LocalElasticAgent,
    ``exit_barrier_timeout``), so the error says to look at the node that failed. A launch the
    launcher refused (its ``--check``, or the rendezvous port taken) is a FAIL whose error is
    the launcher's reason. Result lines are
    found anywhere in the output, also run together with other text on one line.
    """
    lines = output.splitlines()
    workers = []
    decoder = json.JSONDecoder()
    idx = output.find(MARKER)
    while idx >= 0:  # anywhere, not per line: the workers of a node share one pipe
        try:
            worker, _end = decoder.raw_decode(output, idx + len(MARKER))
        except ValueError:
            worker = None
        if isinstance(worker, dict):
            workers.append(worker)
        idx = output.find(MARKER, idx + len(MARKER))
    correct = bool(workers) and all(w.get("params_identical") for w in workers)
    # the launcher's --check, or the rendezvous host's port test, refused to start the job
    refusal = [ln.strip() for ln in lines if ln.strip().startswith("ncclprep-torchrun: refused on ")]
    out = {"rc": rc, "workers": workers, "elapsed_s": elapsed_s, "log_tail": [ln[-300:] for ln in lines[-15:]],
           "error": None, "host": host}
    if rc is None and correct:
        out.update(status="HANG", error=f"this node's {len(workers)} worker(s) finished with identical parameters, "
                                        f"then torchrun waited for the other nodes until the {timeout_s:g} s deadline "
                                        "(its exit barrier): the node that failed is to blame")
    elif rc is None:
        out.update(status="HANG", error=f"torchrun did not finish within {timeout_s:g} s")
    elif rc != 0 and refusal:
        out.update(status="FAIL", error=refusal[-1][len("ncclprep-torchrun: "):][:400])
    elif rc != 0:
        out.update(status="FAIL", error=f"torchrun exited with code {rc}")
    elif not correct:
        out.update(status="FAIL", error="workers ended with different parameters or printed no result")
    else:
        out["status"] = "PASS"
    return out


def run_job(launcher: str, script: str, rdzv_id: str, steps: int, accumulation: int, bucket_mb: float,
            timeout: int, check: bool, nonce: str | None, job_args: list[str], host: str,
            env: dict | None = None) -> dict:
    """Run this node's part of the template training job through ``launcher`` (ncclprep-torchrun) and
    read it (``read_result``): the job ``script`` for ``steps`` optimizer steps of ``accumulation``
    micro-batches, DDP buckets of ``bucket_mb`` MB, rendezvous id ``rdzv_id``, the launcher's
    ``--check`` first when ``check``; ``nonce`` is the rendezvous guard's secret (None: no guard).
    ``env``: more variables for the launcher (``NCCLPREP_HOSTFILE`` for a job's nodes). The whole
    job is killed at ``timeout`` seconds (status HANG). Raises nothing: a failure is a status."""
    workdir = tempfile.mkdtemp(prefix="ncclprep-smoke-")
    env = dict(os.environ, **(env or {}), NCCLPREP_RDZV_ID=rdzv_id, PYTHONUNBUFFERED="1")
    if nonce:
        # the proof is awaited for at most half the job's deadline: a refusal, not a hang, is reported
        env.update(NCCLPREP_RDZV_NONCE=nonce, NCCLPREP_RDZV_VERIFY_TIMEOUT=str(max(timeout // 2, 10)))
    cmd = [launcher, *(["--check"] if check else []), script, "--steps", str(steps), "--accumulation",
           str(accumulation), "--bucket-cap-mb", str(bucket_mb), "--timeout", str(max(timeout - 10, 10)), *job_args]
    start = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=workdir,
                                env=env, start_new_session=True, text=True)
    except OSError as exc:
        shutil.rmtree(workdir, ignore_errors=True)
        return {"status": "FAIL", "rc": None, "workers": [], "elapsed_s": 0, "log_tail": [], "host": host,
                "error": f"cannot start {launcher}: {exc}"}
    hung = False
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        hung = True
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate(timeout=10)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    elapsed = round(time.monotonic() - start, 3)
    return read_result(output, None if hung else proc.returncode, timeout, elapsed, host)
