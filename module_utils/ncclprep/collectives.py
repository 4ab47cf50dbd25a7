"""torch.distributed collectives over a size sweep: correctness, algbw and busbw.

``run_rank`` is what one rank executes (inside a deadline child, see
``deadline.run_with_deadline``). It needs torch; the import happens inside so
that this file can be shipped to hosts and imported by tests without torch.

Sizes follow nccl-tests: ``size`` is the total buffer in bytes (for all_gather
the gathered output, for reduce_scatter the input, for all_to_all the whole
send buffer); float32 elements, rounded down to a multiple of 4 * world_size.
Time per operation is the mean over ``iters`` after ``warmup`` runs, measured
on this rank between barriers. algbw = size / time; busbw = algbw x factor
(see busbw.py). All bandwidths in GB/s (1e9 bytes/s), times in microseconds.
"""

from __future__ import annotations

import datetime
import socket
import time

from ansible.module_utils.ncclprep.busbw import algbw_gbps, bus_factor
from ansible.module_utils.ncclprep.parsers.nccl_log import nccl_path, parse_nccl_log

# Collectives each backend runs. Gloo gained reduce_scatter_tensor in recent torch; where the
# installed torch's gloo lacks it, reduce_scatter is measured as an all_reduce of the whole
# input followed by a copy of this rank's chunk (the row says so in ``measured_as``; its busbw
# is then a lower bound: all_reduce moves twice the data of a reduce_scatter).
SUPPORTED = {
    "gloo": ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"),
    "nccl": ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"),
}
NATIVE = "native"
EMULATED_REDUCE_SCATTER = "all_reduce of the whole input, then this rank's chunk (the backend has no reduce_scatter)"
ELEMENT_BYTES = 4  # float32


def nccl_log_summary(texts: list[str]) -> dict:
    """What NCCL's INFO logs of this host's ranks say it used: ``parsers.nccl_log.nccl_path``
    plus ``warnings`` (the first 5 WARN messages) and ``unparsed`` (the count of lines not read)."""
    parsed = parse_nccl_log("\n".join(texts))
    return dict(nccl_path(parsed), warnings=[w["message"] for w in parsed["warnings"][:5]],
                unparsed=len(parsed["unparsed"]))


def element_count(size_bytes: int, world_size: int) -> int:
    """Elements of float32 for a ``size_bytes`` buffer, a multiple of ``world_size`` (>= world_size)."""
    count = size_bytes // ELEMENT_BYTES
    count -= count % world_size
    return max(count, world_size)


def expected_values(op: str, rank: int, world_size: int, count: int) -> list[float] | float:
    """Value every element of this rank's output must hold after the correctness pass.

    Inputs: every rank fills its input with ``rank + 1`` (all_to_all: chunk j of
    rank r holds ``r * world_size + j + 1``); broadcast sends from rank 0.
    Returns a scalar when the whole output holds one value, else the per-chunk values.
    """
    n = world_size
    if op == "all_reduce" or op == "reduce_scatter":
        return float(n * (n + 1) // 2)
    if op == "all_gather":
        return [float(r + 1) for r in range(n)]
    if op == "all_to_all":
        # chunk s of the output comes from rank s, its chunk number `rank`.
        return [float(s * n + rank + 1) for s in range(n)]
    if op == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {op!r}")


def _sig(value: float, digits: int = 6) -> float:
    """Round to ``digits`` significant digits (small bandwidths keep their precision)."""
    return float(f"{value:.{digits}g}")


def _count_wrong(torch, out, expected, world_size: int) -> int:
    if isinstance(expected, float):
        return int((out != expected).sum().item())
    chunks = out.view(world_size, -1)
    ref = torch.tensor(expected, dtype=out.dtype, device=out.device).view(world_size, 1)
    return int((chunks != ref).sum().item())


def _make_op(torch, dist, op: str, rank: int, n: int, count: int, device, emulate: bool = False):
    """Return ``(fill, run, output)``: fill() writes the correctness inputs, run() does the op.
    ``emulate``: reduce_scatter as an all_reduce of the input, then this rank's chunk."""
    if op == "all_reduce":
        buf = torch.empty(count, dtype=torch.float32, device=device)
        return (lambda: buf.fill_(rank + 1)), (lambda: dist.all_reduce(buf)), buf
    if op == "broadcast":
        buf = torch.empty(count, dtype=torch.float32, device=device)
        return (lambda: buf.fill_(rank + 1)), (lambda: dist.broadcast(buf, src=0)), buf
    if op == "all_gather":
        inp = torch.empty(count // n, dtype=torch.float32, device=device)
        out = torch.empty(count, dtype=torch.float32, device=device)
        outs = list(out.view(n, -1).unbind(0))
        return (lambda: inp.fill_(rank + 1)), (lambda: dist.all_gather(outs, inp)), out
    if op == "reduce_scatter":
        inp = torch.empty(count, dtype=torch.float32, device=device)
        out = torch.empty(count // n, dtype=torch.float32, device=device)
        if emulate:
            def run():
                dist.all_reduce(inp)
                out.copy_(inp.view(n, -1)[rank])
            return (lambda: inp.fill_(rank + 1)), run, out
        return (lambda: inp.fill_(rank + 1)), (lambda: dist.reduce_scatter_tensor(out, inp)), out
    if op == "all_to_all":
        inp = torch.empty(count, dtype=torch.float32, device=device)
        out = torch.empty(count, dtype=torch.float32, device=device)

        def fill():
            inp.view(n, -1).copy_(
                torch.arange(n, dtype=torch.float32, device=device).view(n, 1) + rank * n + 1
            )

        return fill, (lambda: dist.all_to_all_single(out, inp)), out
    raise ValueError(f"unknown collective {op!r}")


def run_rank(
    progress,
    rank: int,
    world_size: int,
    master_addr: str,
    master_port: int,
    backend: str,
    ops: list[str],
    sizes: list[int],
    warmup: int,
    iters: int,
    join_timeout_s: float,
    op_timeout_s: float,
) -> None:
    """Join the group, run every op over every size, and send the result through ``progress``.

    The rank first announces itself in the TCP store hosted by rank 0 and waits
    at most ``join_timeout_s`` for all ranks; if some never arrive it reports them
    in ``missing_ranks`` and stops (status HANG). Otherwise the result is
    ``{"status": "PASS"|"FAIL", "results": [row, ...], ...}`` with one row per
    (op, size): op, size_bytes, count, time_us, algbw_gbps, busbw_gbps, wrong.
    Raises whatever torch raises (the deadline runner reports it).
    """
    import torch
    import torch.distributed as dist

    host = socket.gethostname()
    progress.stage("store", rank=rank)
    store = dist.TCPStore(
        master_addr,
        master_port,
        world_size,
        is_master=(rank == 0),
        timeout=datetime.timedelta(seconds=join_timeout_s),
        wait_for_workers=False,
    )
    store.set(f"arrived/{rank}", host)
    deadline = time.monotonic() + join_timeout_s
    missing = list(range(world_size))
    while time.monotonic() < deadline:
        try:
            missing = [r for r in range(world_size) if not store.check([f"arrived/{r}"])]
        except RuntimeError:  # rank 0 gave up and its store went away: keep the last reading
            break
        if not missing:
            break
        time.sleep(0.2)
    if missing:
        progress.result(
            {"status": "HANG", "stage": "rendezvous", "missing_ranks": missing, "results": []}
        )
        return

    use_cuda = backend == "nccl"
    device = torch.device("cuda", 0) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    progress.stage("init_process_group", rank=rank)
    dist.init_process_group(
        backend,
        store=store,
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=op_timeout_s),
    )
    sync = torch.cuda.synchronize if use_cuda else (lambda: None)
    rows = []
    status = "PASS"
    try:
        for op in ops:
            if op not in SUPPORTED[backend]:
                rows.append({"op": op, "skipped": f"not supported by the {backend} backend"})
                continue
            factor = bus_factor(op, world_size)
            emulate = False
            for size in sizes:
                count = element_count(int(size), world_size)
                nbytes = count * ELEMENT_BYTES
                progress.stage(f"{op} {nbytes} B", rank=rank)
                fill, run, out = _make_op(torch, dist, op, rank, world_size, count, device, emulate)
                fill()
                try:
                    run()
                except RuntimeError as exc:  # every rank's backend refuses it before any traffic
                    if op != "reduce_scatter" or emulate or "support" not in str(exc).lower():
                        raise
                    emulate = True
                    fill, run, out = _make_op(torch, dist, op, rank, world_size, count, device, emulate)
                    fill()
                    run()
                sync()
                wrong = _count_wrong(torch, out, expected_values(op, rank, world_size, count), world_size)
                for _ in range(warmup):
                    run()
                sync()
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    run()
                sync()
                seconds = (time.perf_counter() - t0) / iters
                algbw = algbw_gbps(nbytes, seconds)
                if wrong:
                    status = "FAIL"
                rows.append(
                    {
                        "op": op,
                        "size_bytes": nbytes,
                        "count": count,
                        "time_us": _sig(seconds * 1e6),
                        "algbw_gbps": _sig(algbw),
                        "busbw_gbps": _sig(algbw * factor),
                        "wrong": wrong,
                        "measured_as": EMULATED_REDUCE_SCATTER if emulate else NATIVE,
                    }
                )
        progress.stage("destroy", rank=rank)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    progress.result(
        {
            "status": status,
            "stage": "done",
            "missing_ranks": [],
            "results": rows,
            "torch_version": torch.__version__,
            "nccl_version": (
                ".".join(str(x) for x in torch.cuda.nccl.version()) if use_cuda else None
            ),
        }
    )
