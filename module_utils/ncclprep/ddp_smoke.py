"""A few steps of real DDP training, run by torchrun on every node (the torchrun smoke job).

This file is executed as a script on the nodes (torchrun_smoke writes it out),
so it imports only torch and the standard library. Each worker reads RANK,
LOCAL_RANK, WORLD_SIZE, MASTER_ADDR from torchrun, trains a small model with
gradient accumulation (``no_sync`` on all but the last micro-batch), then
checks that every rank ended with bit-identical parameters, as DDP guarantees.
It prints one line ``NCCLPREP_SMOKE {json}`` per worker and exits non-zero when
the parameters differ; it tears the process group down itself and leaves with
``os._exit`` (see ``run_and_exit``).
"""

import contextlib
import datetime
import gc
import json
import os
import socket
import sys
import time

MARKER = "NCCLPREP_SMOKE "


def main(argv=None) -> int:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    args = dict(a.split("=", 1) for a in (argv if argv is not None else sys.argv[1:]))
    steps = int(args.get("steps", 5))
    accumulation = int(args.get("accumulation", 2))
    bucket_mb = float(args.get("bucket_mb", 25))
    timeout = float(args.get("timeout", 60))

    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    start = time.perf_counter()
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts them)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    model = DistributedDataParallel(model.to(device), bucket_cap_mb=bucket_mb,
                                    device_ids=[local_rank] if use_cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1000 + rank)  # different data on every rank
    losses = []
    for _ in range(steps):
        for micro in range(accumulation):
            x = torch.randn(32, 64, generator=gen).to(device)
            y = torch.randn(32, 8, generator=gen).to(device)
            sync = micro == accumulation - 1
            with contextlib.nullcontext() if sync else model.no_sync():
                loss = torch.nn.functional.mse_loss(model(x), y) / accumulation
                loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()) * accumulation)

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    identical = all(torch.equal(gathered[0], g) for g in gathered)
    # Tear down before the interpreter does: DDP's reducer holds the process group and its
    # pending work; left to interpreter finalization, Gloo's threads can free tensors after
    # Python is gone and the worker dies with SIGABRT after a correct job (pytorch/pytorch#179291
    # describes that crash). Every rank drops the model, meets the others, then destroys the group.
    del model, opt, gathered
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    report(MARKER + json.dumps({
        "rank": rank,
        "local_rank": local_rank,
        "world_size": world,
        "host": socket.gethostname(),
        "backend": backend,
        "master_addr": os.environ.get("MASTER_ADDR"),
        "steps": steps,
        "accumulation": accumulation,
        "final_loss": losses[-1] if losses else None,
        "params_identical": identical,
        "seconds": round(time.perf_counter() - start, 3),
    }))
    return 0 if identical else 3


def report(line: str) -> None:
    """Write one result line to standard output in a single write(2).

    The workers of a node share torchrun's standard output: print() in an unbuffered
    interpreter writes the text and its newline separately, so two workers' lines can run
    into each other. One write of under PIPE_BUF (4096) bytes to a pipe is atomic (POSIX
    write(2), pipe(7)), so the line arrives whole.
    """
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (line + "\n").encode())


def read_result(output: str, rc: int | None, timeout_s: float, elapsed_s: float, host: str) -> dict:
    """What one node's torchrun job did, from its output: the torchrun_smoke module's ``smoke``.

    ``output``: everything the launcher printed; ``rc``: its exit code, None when it was killed
    at the deadline of ``timeout_s`` seconds. Returns ``{status: PASS|FAIL|HANG, rc, workers:
    [the NCCLPREP_SMOKE dicts], elapsed_s, log_tail: last 15 lines (300 characters each), error,
    host}``. A job killed at the deadline after every local worker printed a correct result was
    waiting for the other nodes: torchrun's agent holds a finished node in its exit barrier
    until every node's agent is done (torch.distributed.elastic LocalElasticAgent,
    ``exit_barrier_timeout``), so the error says to look at the node that failed. Result lines are
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
    out = {"rc": rc, "workers": workers, "elapsed_s": elapsed_s, "log_tail": [ln[-300:] for ln in lines[-15:]],
           "error": None, "host": host}
    if rc is None and correct:
        out.update(status="HANG", error=f"this node's {len(workers)} worker(s) finished with identical parameters, "
                                        f"then torchrun waited for the other nodes until the {timeout_s:g} s deadline "
                                        "(its exit barrier): the node that failed is to blame")
    elif rc is None:
        out.update(status="HANG", error=f"torchrun did not finish within {timeout_s:g} s")
    elif rc != 0:
        out.update(status="FAIL", error=f"torchrun exited with code {rc}")
    elif not correct:
        out.update(status="FAIL", error="workers ended with different parameters or printed no result")
    else:
        out["status"] = "PASS"
    return out


def run_and_exit(argv=None) -> None:
    """Run ``main`` and leave at once with its exit code, skipping interpreter finalization.

    The result line is already printed and flushed, the process group destroyed; what is left
    to finalize is torch's own state, whose teardown at exit is where the SIGABRT above happens.
    """
    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run_and_exit()
