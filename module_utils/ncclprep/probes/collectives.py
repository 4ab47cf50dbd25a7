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

import concurrent.futures
import datetime
import os
import socket
import time

from ansible.module_utils.ncclprep.cpumask import parse_cpulist
from ansible.module_utils.ncclprep.deadline import outcome_fields, run_with_deadline
from ansible.module_utils.ncclprep.netutil import (
    Keeper,
    StoreTampered,
    await_readers,
    bound_tcp_store,
    rendezvous,
    run_token,
    signed_store,
)
from ansible.module_utils.ncclprep.parsers.nccl_log import nccl_path, parse_nccl_log
from ansible.module_utils.ncclprep.probes.busbw import algbw_gbps, bus_factor

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


_SIOCGIFADDR = 0x8915  # linux/sockios.h: an interface's IPv4 address


def gloo_bind(ifname: str | None = None) -> dict:
    """The address Gloo binds its sockets to on this host, as ProcessGroupGloo chooses it:
    the interface GLOO_SOCKET_IFNAME names when set, else the address the host name resolves
    to (torch's ProcessGroupGloo.create_default_device; a host name that resolves to
    127.0.1.1 from /etc/hosts is the classic "Gloo connectFullMesh failed").

    Returns ``{"ifname": str | None, "address": IPv4 str | None, "how": "GLOO_SOCKET_IFNAME"
    | "hostname", "error": str | None}``; never raises."""
    import fcntl
    import struct

    if ifname:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", ifname.encode()[:15]))
            return {"ifname": ifname, "address": socket.inet_ntoa(raw[20:24]), "how": "GLOO_SOCKET_IFNAME",
                    "error": None}
        except OSError as exc:
            return {"ifname": ifname, "address": None, "how": "GLOO_SOCKET_IFNAME",
                    "error": f"no IPv4 address on {ifname}: {exc.strerror or exc}"}
    try:
        return {"ifname": None, "address": socket.gethostbyname(socket.gethostname()), "how": "hostname",
                "error": None}
    except OSError as exc:
        return {"ifname": None, "address": None, "how": "hostname", "error": f"host name does not resolve: {exc}"}


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


#: Seconds past rank 0's join deadline that the other ranks wait for its word on who arrived.
JOIN_SLACK_S = 10


def _store_failed(state: str, error: str) -> dict:
    """A rank's result when the store failed during the join (``state``: tampered, lost): SKIP,
    which blames no rank (checks/collectives.py leaves SKIP results out)."""
    return {"status": "SKIP", "stage": "rendezvous", "missing_ranks": [], "results": [], "store_state": state,
            "store_error": error, "error": error}


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
    local_rank: int = 0,
    cpus: str | None = None,
    token: str | None = None,
) -> None:
    """Join the group, run every op over every size, and send the result through ``progress``.

    ``local_rank``: this rank's index on its node, the CUDA device it uses under NCCL (as
    torchrun's LOCAL_RANK); ``cpus``: a CPU list (``"0-15,32-47"``) the rank binds itself to
    first (sched_setaffinity, as the launcher's NUMA binding does), None for no binding;
    ``token``: the run's secret, which seals every value in the store, torch's Gloo addresses
    and NCCL unique id too (netutil.signed_store, review F9), so a host outside the run that
    reaches the store cannot steer the ranks: a rank that reads a value not sealed with it
    raises StoreTampered, named in the result's error. None: values unsealed.

    The rank first announces itself in the TCP store hosted by rank 0, which waits at most
    ``join_timeout_s`` for every rank's sealed word and posts who arrived (netutil.rendezvous:
    one decision for all ranks, a deleted key delays it; review N4); if some never arrived every
    rank reports them in ``missing_ranks`` and stops (status HANG). A store found tampered with
    or lost during that join: status SKIP, ``store_state`` ``"tampered"`` or ``"lost"``,
    ``store_error`` saying what, no rank missing (no rank is blamed: what the store showed is a
    stranger's doing). Otherwise the result is
    ``{"status": "PASS"|"FAIL", "results": [row, ...], ...}`` with one row per
    (op, size): op, size_bytes, count, time_us, algbw_gbps, busbw_gbps, wrong.
    Raises whatever torch raises (the deadline runner reports it).
    """
    import torch
    import torch.distributed as dist

    host = socket.gethostname()
    if cpus:
        os.sched_setaffinity(0, parse_cpulist(cpus))
    progress.stage("store", rank=rank)
    # bound to rank 0's data-plane address only (review F9); _listener keeps its socket open
    raw, _listener = bound_tcp_store(dist, rank, world_size, master_addr, master_port, join_timeout_s)
    try:
        store = signed_store(dist, raw, run_token(raw, rank, token, join_timeout_s) if token else None)
        present = rendezvous(store, Keeper(store), rank, world_size, "arrived", host, join_timeout_s,
                             JOIN_SLACK_S)
    except StoreTampered as exc:
        progress.result(_store_failed("tampered", f"the store on rank 0 ({master_addr}:{master_port}) was tampered "
                                                  f"with: {exc} (a host other than this run's ranks wrote to it or "
                                                  "deleted from it): no rank is blamed"))
        return
    except RuntimeError as exc:  # rank 0 gave up and its store went away, or it stopped answering
        progress.result(_store_failed("lost", f"the store on rank 0 ({master_addr}:{master_port}): "
                                              f"{str(exc).splitlines()[0][:200]}: no rank is blamed"))
        return
    missing = [r for r in range(world_size) if r not in present]
    if missing:
        if rank == 0:  # its store goes with it: the others read the decision first
            await_readers(store, "arrived", len(present) - 1, JOIN_SLACK_S)
        progress.result(
            {"status": "HANG", "stage": "rendezvous", "missing_ranks": missing, "results": []}
        )
        return

    use_cuda = backend == "nccl"
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
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
            "cpus": sorted(os.sched_getaffinity(0)) if cpus else None,
            "gloo_bind": None if use_cuda else gloo_bind(os.environ.get("GLOO_SOCKET_IFNAME")),
            "torch_version": torch.__version__,
            "nccl_version": (
                ".".join(str(x) for x in torch.cuda.nccl.version()) if use_cuda else None
            ),
        }
    )


def rank_layout(local_ranks: list[int], n_hosts: int) -> list[int]:
    """The first global rank of each host (a prefix sum), ranks numbered host by host as
    torchrun numbers them (node rank, then local rank). ``local_ranks``: ranks per host in
    host order, [] for one each. Returns ``offsets`` with ``offsets[i]`` the first rank of
    host i and ``offsets[-1]`` the world size (length ``n_hosts + 1``). Raises ValueError
    naming the bad value when the list's length is not ``n_hosts`` or a count is below 1."""
    counts = list(local_ranks) if local_ranks else [1] * n_hosts
    if len(counts) != n_hosts:
        raise ValueError(f"local_ranks has {len(counts)} entries for {n_hosts} hosts ({counts})")
    bad = [c for c in counts if not isinstance(c, int) or isinstance(c, bool) or c < 1]
    if bad:
        raise ValueError(f"local_ranks {bad}: each must be an integer >= 1")
    offsets = [0]
    for c in counts:
        offsets.append(offsets[-1] + c)
    return offsets


_WORST = {"HANG": 3, "FAIL": 2, "PASS": 1}


def merge_local_ranks(outs: list[dict], first_rank: int) -> dict:
    """One host's probe result from its local ranks' results (``outcome_fields`` dicts, local
    rank order). Each row (op, size) is the slowest local rank's (time_us, algbw, busbw: the
    host is as fast as its slowest rank), with ``rank_time_us``: global rank -> time_us of
    every local rank; ``wrong`` is summed over the local ranks. ``status`` is the worst
    (HANG, FAIL, PASS), with ``error`` and ``stage`` of the first rank in that status;
    ``missing_ranks`` the union; ``ranks``: per local rank ``{rank, local_rank, status, stage,
    error, cpus}``. The other keys are local rank 0's."""
    first = outs[0]
    merged = dict(first)
    rows: dict[tuple, dict] = {}
    order: list = []
    for local, out in enumerate(outs):
        for row in out.get("results") or []:
            if "time_us" not in row:
                if local == 0:
                    order.append(row)
                continue
            key = (row["op"], row["size_bytes"])
            cur = rows.get(key)
            if cur is None:
                rows[key] = dict(row, rank_time_us={first_rank + local: row["time_us"]})
                order.append(key)
                continue
            times = {**cur["rank_time_us"], first_rank + local: row["time_us"]}
            wrong = cur["wrong"] + row["wrong"]
            if row["time_us"] > cur["time_us"]:
                cur = dict(row)
            rows[key] = dict(cur, rank_time_us=times, wrong=wrong)
    merged["results"] = [rows[k] if isinstance(k, tuple) else k for k in order]
    worst = max(outs, key=lambda o: _WORST.get(o.get("status"), 2))
    if _WORST.get(worst.get("status"), 2) > _WORST.get(first.get("status"), 2):
        merged.update(status=worst.get("status"), stage=worst.get("stage"), error=worst.get("error"))
    merged["missing_ranks"] = sorted({r for o in outs for r in o.get("missing_ranks") or []})
    merged["ranks"] = [{"rank": first_rank + i, "local_rank": i, "status": o.get("status"), "stage": o.get("stage"),
                        "error": o.get("error"), "cpus": o.get("cpus")} for i, o in enumerate(outs)]
    return merged


def run_local_ranks(node_rank: int, n_hosts: int, local_ranks: list[int], cpu_binding: list, timeout_s: float,
                    **common) -> dict:
    """Run this host's ranks (``run_rank``), each in its own child under ``timeout_s``, all at once.

    ``node_rank``: this host's index of ``n_hosts``; ``local_ranks``: ranks per host (``rank_layout``);
    ``cpu_binding``: per local rank a CPU list or None ([]: no binding); ``common``: the
    other ``run_rank`` arguments except rank, world_size, local_rank and cpus. Returns
    ``merge_local_ranks`` of the children's results, plus ``elapsed_s`` (the slowest child),
    ``world_size`` and ``first_rank``. Raises ValueError as ``rank_layout``.
    """
    offsets = rank_layout(local_ranks, n_hosts)
    first, count, world = offsets[node_rank], offsets[node_rank + 1] - offsets[node_rank], offsets[-1]

    def one(local: int) -> dict:
        cpus = cpu_binding[local] if local < len(cpu_binding) else None
        run = run_with_deadline(run_rank, dict(common, rank=first + local, world_size=world, local_rank=local,
                                               cpus=cpus), timeout_s=timeout_s)
        return dict(outcome_fields(run, timeout_s), elapsed_s=run["elapsed_s"])

    with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
        outs = list(pool.map(one, range(count)))
    return dict(merge_local_ranks(outs, first), elapsed_s=max(o["elapsed_s"] for o in outs),
                world_size=world, first_rank=first)


def summarize_collectives(records: dict[str, dict]) -> dict:
    """Merge every rank's rows: per op and size the slowest rank's time and the busbw it gives.

    ``records``: host -> a host record (model.HostRecord) or any mapping whose ``probe.results``
    are the collectives' rows ``{op, size_bytes, time_us, algbw_gbps, busbw_gbps, wrong}`` (rows with
    ``skipped`` are left out).
    Returns ``{op: [{size_bytes, time_us_max, algbw_gbps, busbw_gbps, wrong, slowest_host}]}``,
    sizes ascending (bandwidths in GB/s, GB = 1e9 bytes, from the slowest rank, as nccl-tests
    doc/PERFORMANCE.md reports them; wrong: elements summed over ranks).
    """
    merged: dict = {}
    for host, rec in sorted(records.items()):
        for row in ((rec or {}).get("probe") or {}).get("results") or []:
            if "skipped" in row:
                continue
            key = (row["op"], row["size_bytes"])
            cur = merged.get(key)
            if cur is None or row["time_us"] > cur["time_us_max"]:
                wrong = row["wrong"] + (cur["wrong"] if cur else 0)
                merged[key] = {"size_bytes": row["size_bytes"], "time_us_max": row["time_us"],
                               "algbw_gbps": row["algbw_gbps"], "busbw_gbps": row["busbw_gbps"],
                               "wrong": wrong, "slowest_host": host}
            else:
                cur["wrong"] += row["wrong"]
    out: dict = {}
    for (op, _size), row in sorted(merged.items()):
        out.setdefault(op, []).append(row)
    return out


def collective_trigger(probes: dict[str, dict | None], floor: float | None = None) -> dict:
    """Whether the collective blame (blame.collective_plan, run by the engine's probe job:
    collective_blame.py) should run after the probe on all hosts, and on which op.

    ``probes``: host -> the collectives' result (None where it did not run). Runs when a
    probe FAILed (an error or wrong elements), HANGed with every rank present (an op that
    never completed; a rank that never arrived is already named, and pairing it would only
    hang again), or when an op's busbw at the largest size (``summarize_collectives``, the
    slowest rank's, as check_collectives holds it) is below ``floor`` (GB/s; None: no floor).
    Returns ``{"run": bool, "ops": [the one op the rounds run: all_reduce when it went wrong
    or nothing op-specific did, else the first op that did], "reason": str}``.
    """
    reasons = [f"{host}: {p['status']} ({p.get('error') or p.get('stage')})" for host, p in sorted(probes.items())
               if p and (p.get("status") == "FAIL" or (p.get("status") == "HANG" and not p.get("missing_hosts")))]
    summary = summarize_collectives({h: {"probe": p} for h, p in probes.items()})
    ops = {op for op, rows in summary.items() if any(r["wrong"] for r in rows)}
    if floor is not None:
        for op, rows in sorted(summary.items()):
            if rows[-1]["busbw_gbps"] < floor:
                ops.add(op)
                reasons.append(f"{op} busbw {rows[-1]['busbw_gbps']:.3g} GB/s below {floor:g}")
    # one op is enough to tell the node or link apart (each round then costs one op at the largest size)
    op = "all_reduce" if "all_reduce" in ops or not ops else sorted(ops)[0]
    return {"run": bool(reasons), "ops": [op], "reason": "; ".join(reasons)}
