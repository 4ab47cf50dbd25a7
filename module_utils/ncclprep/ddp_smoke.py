"""How validate.yml reads the template training job's output (the torchrun smoke job).

The job itself is roles/nccl_env/files/ncclprep_train.py, installed on every node by
nccl_env and started by the torchrun_smoke module through the launcher; each of its workers
prints one line ``NCCLPREP_RESULT {json}`` (its ``RESULT_MARKER``, repeated here as ``MARKER``:
a unit test holds the two equal).
"""

import json

MARKER = "NCCLPREP_RESULT "


def read_result(output: str, rc: int | None, timeout_s: float, elapsed_s: float, host: str) -> dict:
    """What one node's torchrun job did, from its output: the torchrun_smoke module's ``smoke``.

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
