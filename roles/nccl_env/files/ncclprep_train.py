#!/usr/bin/env python3
"""ncclprep's template training job: data-parallel training over torchrun, with the
communication savings engineers reach for made visible.

Start it on every node with the launcher that site.yml installs (same command everywhere):

    ncclprep-torchrun /usr/local/share/ncclprep/ncclprep_train.py --steps 20 --accumulation 4

Copy it as the starting point of your own job: replace ``make_dataset`` and ``make_model``.
It imports only torch and the standard library.

What it does, and why:
- The data: a synthetic dataset (the same on every rank, from a fixed seed) split between the
  ranks by ``DistributedSampler``, so each rank sees a different part of every epoch
  (``set_epoch`` reshuffles per epoch).
- The model: wrapped in ``DistributedDataParallel`` (``bucket_cap_mb``: the size of the
  gradient buckets DDP all-reduces while backward still runs), or sharded with FSDP
  (``--fsdp``: torch's ``fully_shard``).
- Gradient accumulation: ``--accumulation N`` micro-batches per optimizer step; the first N-1
  run under ``no_sync()`` (FSDP: ``set_requires_gradient_sync(False)``) so that gradients are
  all-reduced once per optimizer step instead of N times.
  ``--sync-every-micro-batch`` turns that off: the naive accumulation, to compare against.
- PowerSGD (``--powersgd-rank R``): DDP's communication hook that all-reduces rank-R factors
  of each gradient matrix instead of the matrix (torch.distributed.algorithms.ddp_comm_hooks.
  powerSGD_hook; Vogels et al., "PowerSGD", NeurIPS 2019), with error feedback.
- The effective global batch = per-rank micro-batch x world size x accumulation, and the
  learning rate scaled from ``--lr`` (tuned at ``--base-batch``) by the linear rule
  (Goyal et al., 2017: lr x global/base), or ``sqrt``, or ``none``; for very large batches
  LARS (You et al., 2017) and LAMB (You et al., 2019) are the usual alternatives.
- Per optimizer step: wall time split into compute and exposed communication (the part of
  the synchronising backward that waits for all-reduce after the last gradient bucket was
  ready; see ``StepMeter``), and the bytes each rank hands to torch.distributed's
  all_reduce (FSDP: reduce_scatter and all_gather), counted where the communication hook calls
  it: the payload per rank, not what a ring sends on the wire (2(n-1)/n times that for
  all_reduce).
- Logging and checkpoints from rank 0 only; a checkpoint is loaded by rank 0 and broadcast to
  every rank (the other nodes need not see rank 0's disk).
- When a collective fails or times out on Gloo, each rank writes torch's flight recorder (its
  last collectives) to ``$TORCH_FR_DUMP_TEMP_FILE<rank>`` (or TORCH_NCCL_DEBUG_INFO_TEMP_FILE's),
  as NCCL's watchdog does with TORCH_NCCL_DUMP_ON_TIMEOUT=1: the launcher's ``--debug`` sets the
  prefix, and ``ncclprep doctor <debug folder>`` names the rank that never reached the collective.

Output: rank 0 prints progress lines starting ``ncclprep-train:``; every rank prints one line
``NCCLPREP_RESULT {json}`` at the end (``result_line``), which validate.yml reads, and exits 0,
or 3 when the ranks ended with different parameters (DDP keeps them bit-identical).
Units: seconds, bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import socket
import statistics
import sys
import time

RESULT_MARKER = "NCCLPREP_RESULT "
IN_FEATURES, OUT_FEATURES = 64, 8


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="ncclprep's template DDP/FSDP training job (run it under torchrun)")
    ap.add_argument("--steps", type=int, default=5, help="optimizer steps (default 5)")
    ap.add_argument("--accumulation", type=int, default=2, help="micro-batches per optimizer step (default 2)")
    ap.add_argument("--micro-batch", type=int, default=32, help="samples per rank per micro-batch (default 32)")
    ap.add_argument("--sync-every-micro-batch", action="store_true",
                    help="all-reduce after every micro-batch (no no_sync): the naive accumulation, for comparison")
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP gradient bucket size in MB (default 25)")
    ap.add_argument("--powersgd-rank", type=int, default=0, help="PowerSGD hook of this rank; 0: off (default)")
    ap.add_argument("--powersgd-start-iter", type=int, default=2,
                    help="synchronising backward passes with plain all_reduce before PowerSGD starts (default 2)")
    ap.add_argument("--fsdp", action="store_true", help="shard the model with FSDP (fully_shard) instead of DDP")
    ap.add_argument("--lr", type=float, default=0.05, help="learning rate at --base-batch (default 0.05)")
    ap.add_argument("--base-batch", type=int, default=64, help="global batch --lr was tuned for (default 64)")
    ap.add_argument("--lr-scaling", choices=["linear", "sqrt", "none"], default="linear",
                    help="rule scaling --lr to the global batch (default linear)")
    ap.add_argument("--width", type=int, default=256, help="hidden layer width of the model (default 256)")
    ap.add_argument("--samples", type=int, default=8192, help="size of the synthetic dataset (default 8192)")
    ap.add_argument("--checkpoint-dir", default=None,
                    help="rank 0 saves last.pt here and resumes from it when it exists; default: no checkpoints")
    ap.add_argument("--checkpoint-every", type=int, default=0, help="save every N steps too; 0: only at the end")
    ap.add_argument("--timeout", type=float, default=60.0, help="process group timeout in seconds (default 60)")
    ap.add_argument("--log-every", type=int, default=1, help="rank 0 prints every N steps (default 1)")
    args = ap.parse_args(argv)
    for name in ("steps", "accumulation", "micro_batch", "base_batch", "width", "samples", "log_every"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')}={getattr(args, name)} must be >= 1")
    if args.bucket_cap_mb <= 0 or args.timeout <= 0 or args.lr <= 0:
        ap.error("--bucket-cap-mb, --timeout and --lr must be > 0")
    if args.powersgd_rank < 0 or args.powersgd_start_iter < 2:
        ap.error("--powersgd-rank must be >= 0 and --powersgd-start-iter >= 2 (PowerSGD's error feedback)")
    if args.fsdp and (args.powersgd_rank or args.checkpoint_dir):
        ap.error("--fsdp takes neither --powersgd-rank (a DDP hook) nor --checkpoint-dir (sharded checkpoints "
                 "need torch.distributed.checkpoint)")
    return args


def scaled_lr(lr: float, global_batch: int, base_batch: int, rule: str) -> float:
    """The learning rate for ``global_batch`` samples per step, from ``lr`` tuned at ``base_batch``.

    linear: lr x global/base (Goyal et al., "Accurate, Large Minibatch SGD", 2017); sqrt:
    lr x sqrt(global/base) (Krizhevsky, "One weird trick", 2014); none: lr.
    """
    ratio = global_batch / base_batch
    return lr * {"linear": ratio, "sqrt": math.sqrt(ratio), "none": 1.0}[rule]


def make_dataset(samples: int):
    """A fixed synthetic regression set: inputs (samples, 64) and targets (samples, 8), float32."""
    import torch
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(samples, IN_FEATURES, generator=gen)
    w = torch.randn(IN_FEATURES, OUT_FEATURES, generator=gen)
    return torch.utils.data.TensorDataset(x, torch.tanh(x @ w))


def make_model(width: int):
    import torch
    return torch.nn.Sequential(torch.nn.Linear(IN_FEATURES, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                               torch.nn.ReLU(), torch.nn.Linear(width, OUT_FEATURES))


class StepMeter:
    """Counts the bytes handed to torch.distributed collectives and times the communication.

    ``count()`` wraps the collectives below for its duration: DDP's communication hooks (the
    plain one and PowerSGD's) and FSDP call them through the torch.distributed module, so each
    payload they send is added to ``bytes[kind]`` (numel x element size of the tensor this rank
    contributes; kind: all_reduce, reduce_scatter, all_gather).
    ``hook(inner)`` wraps a DDP communication hook to note when it was last called: once the
    last bucket is handed over, backward's own computation is done, and what the synchronising
    backward takes after that is communication not hidden behind computation (exposed).
    """

    # torch.distributed function -> (kind, the argument holding this rank's payload)
    OPS = {"all_reduce": ("all_reduce", "tensor"),
           "reduce_scatter_tensor": ("reduce_scatter", "input"),
           "reduce_scatter_single": ("reduce_scatter", "input"),
           "all_gather_into_tensor": ("all_gather", "input_tensor"),
           "all_gather_single": ("all_gather", "input_tensor")}
    KINDS = ("all_reduce", "reduce_scatter", "all_gather")

    def __init__(self):
        self.bytes = dict.fromkeys(self.KINDS, 0)
        self.last_hook = None

    @contextlib.contextmanager
    def count(self):
        import inspect

        import torch.distributed as dist
        saved = {name: getattr(dist, name) for name in self.OPS if hasattr(dist, name)}

        def wrap(name, fn):
            kind, arg = self.OPS[name]
            signature = inspect.signature(fn)

            def counted(*args, **kwargs):
                payload = signature.bind_partial(*args, **kwargs).arguments.get(arg)
                if payload is not None:
                    self.bytes[kind] += payload.numel() * payload.element_size()
                return fn(*args, **kwargs)
            return counted

        for name, fn in saved.items():
            setattr(dist, name, wrap(name, fn))
        try:
            yield self
        finally:
            for name, fn in saved.items():
                setattr(dist, name, fn)

    def hook(self, inner):
        def timed(state, bucket):
            self.last_hook = time.perf_counter()
            return inner(state, bucket)
        return timed

    def total(self) -> int:
        return sum(self.bytes.values())


def wrap_model(model, args, device, meter: StepMeter):
    """DDP with a counted communication hook (plain all_reduce or PowerSGD), or FSDP."""
    import torch
    if args.fsdp:
        from torch.distributed.fsdp import fully_shard
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)
        return model, None
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel
    ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb,
                                  device_ids=[device.index] if device.type == "cuda" else None)
    if args.powersgd_rank:
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                            start_powerSGD_iter=args.powersgd_start_iter)
        ddp.register_comm_hook(state, meter.hook(powerSGD_hook.powerSGD_hook))
    else:
        ddp.register_comm_hook(None, meter.hook(default_hooks.allreduce_hook))
    return ddp, ddp


def load_checkpoint(path: str | None, rank: int):
    """Rank 0 reads ``path`` (when it exists) and broadcasts it; every rank gets the same dict or None."""
    import torch
    import torch.distributed as dist
    box = [None]
    if rank == 0 and path and os.path.exists(path):
        box[0] = torch.load(path, map_location="cpu", weights_only=True)
    dist.broadcast_object_list(box, src=0)
    return box[0]


def save_checkpoint(path: str, model, opt, step: int) -> None:
    """Rank 0 only: write to a temporary file, then rename, so a crash never leaves half a file.

    The temporary file is made by mkstemp (O_EXCL, an unpredictable name, mode 0600) beside
    ``path``: a fixed ``path + ".tmp"`` in a shared folder let another user plant a link there
    that the job, often root, wrote through (review, low findings).
    """
    import tempfile

    import torch
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, fh)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def result_line(result: dict) -> None:
    """Write ``NCCLPREP_RESULT {json}`` to standard output in a single write(2).

    The workers of a node share torchrun's standard output; one write of under PIPE_BUF (4096)
    bytes to a pipe is atomic (POSIX write(2), pipe(7)), so lines never run into each other.
    """
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (RESULT_MARKER + json.dumps(result) + "\n").encode())


def dump_flight_recorder(rank: int) -> str | None:
    """Write torch's flight recorder of this process to ``<prefix><rank>`` (the prefix from
    TORCH_FR_DUMP_TEMP_FILE, else TORCH_NCCL_DEBUG_INFO_TEMP_FILE) and return the path; None when
    no prefix is set, or this torch has no flight recorder (before 2.6) or cannot dump."""
    import torch

    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE") or os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    dump = getattr(torch._C._distributed_c10d, "_dump_fr_trace", None)
    if not prefix or dump is None:
        return None
    try:
        data = dump()
        path = f"{prefix}{rank}"
        with open(path + ".tmp", "wb") as fh:
            fh.write(data)
        os.replace(path + ".tmp", path)
        return path
    except (OSError, RuntimeError):
        return None


def train(args) -> int:
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    start = time.perf_counter()
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    is_logger = rank == 0

    def log(msg):
        if is_logger:
            print(f"ncclprep-train: {msg}", flush=True)

    global_batch = args.micro_batch * world * args.accumulation
    lr = scaled_lr(args.lr, global_batch, args.base_batch, args.lr_scaling)
    log(f"world size {world} ({backend}); global batch {global_batch} = {args.micro_batch} per rank x {world} ranks"
        f" x {args.accumulation} micro-batches; lr {lr:g} = {args.lr:g} scaled {args.lr_scaling} from batch "
        f"{args.base_batch} (for very large batches: LARS or LAMB)")

    dataset = make_dataset(args.samples)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=True)
    loader = DataLoader(dataset, batch_size=args.micro_batch, sampler=sampler, drop_last=True)
    if len(loader) < 1:
        raise SystemExit(f"--samples={args.samples} gives no full micro-batch of {args.micro_batch} per rank "
                         f"at world size {world}")

    torch.manual_seed(0)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    model = make_model(args.width).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    ckpt_path = os.path.join(args.checkpoint_dir, "last.pt") if args.checkpoint_dir else None
    first_step = 0
    if ckpt_path:
        state = load_checkpoint(ckpt_path, rank)
        if state is not None:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            first_step = int(state["step"])
            log(f"resumed from {ckpt_path} at step {first_step}")
    meter = StepMeter()
    model, ddp = wrap_model(model, args, device, meter)

    def batches():
        epoch = 0
        while True:
            sampler.set_epoch(epoch)
            yield from loader
            epoch += 1

    data = batches()
    steps = []
    loss_value = None
    try:
        loss_value = run_steps(args, model, opt, data, meter, steps, first_step, ckpt_path, ddp, device, use_cuda,
                               log, is_logger)
    except Exception as exc:  # a collective that failed or timed out: keep what the ranks were doing
        written = dump_flight_recorder(rank) if backend == "gloo" else None  # NCCL's watchdog dumps its own
        print(f"ncclprep-train: rank {rank}: {type(exc).__name__}: {str(exc)[:300]}"
              + (f"; flight recorder written to {written}" if written else ""), file=sys.stderr, flush=True)
        raise
    if ckpt_path and is_logger:
        save_checkpoint(ckpt_path, model.module if ddp else model, opt, first_step + args.steps)
        log(f"checkpoint {ckpt_path} at step {first_step + args.steps}")
    return finish(args, model, ddp, opt, steps, meter, loss_value, rank, local_rank, world, backend, global_batch,
                  lr, first_step, start)


def run_steps(args, model, opt, data, meter, steps, first_step, ckpt_path, ddp, device, use_cuda, log,
              is_logger) -> float | None:
    """The optimizer steps (``steps`` gets each step's figures); returns the last loss."""
    import torch

    loss_value = None
    with meter.count():
        for step in range(first_step, first_step + args.steps):
            before = meter.total()
            exposed = 0.0
            t0 = time.perf_counter()
            for micro in range(args.accumulation):
                x, y = (t.to(device) for t in next(data))
                sync = args.sync_every_micro_batch or micro == args.accumulation - 1
                if args.fsdp:
                    model.set_requires_gradient_sync(sync)
                    quiet = contextlib.nullcontext()
                else:
                    quiet = contextlib.nullcontext() if sync else model.no_sync()
                with quiet:
                    loss = torch.nn.functional.mse_loss(model(x), y) / args.accumulation
                    meter.last_hook = None
                    loss.backward()
                if use_cuda:
                    torch.cuda.synchronize(device)
                if sync and meter.last_hook is not None:
                    exposed += max(time.perf_counter() - meter.last_hook, 0.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            seconds = time.perf_counter() - t0
            loss_value = float(loss.detach()) * args.accumulation
            steps.append({"seconds": seconds, "comm_s": exposed if ddp else None,
                          "bytes": meter.total() - before, "by_op": dict(meter.bytes)})
            if ckpt_path and is_logger and args.checkpoint_every and (step + 1) % args.checkpoint_every == 0:
                save_checkpoint(ckpt_path, model.module if ddp else model, opt, step + 1)
            if (step + 1 - first_step) % args.log_every == 0 or step + 1 == first_step + args.steps:
                log(f"step {step + 1}/{first_step + args.steps} loss {loss_value:.4f} {seconds * 1e3:.1f} ms "
                    f"collective payload {steps[-1]['bytes']} bytes")
    return loss_value


def finish(args, model, ddp, opt, steps, meter, loss_value, rank, local_rank, world, backend, global_batch, lr,
           first_step, start) -> int:
    """The figures, the check that every rank ends with the same parameters, the teardown and the
    result line; returns the exit code (0, or 3 when the parameters differ)."""
    import torch
    import torch.distributed as dist

    measured = steps[warmup_steps(args):] or steps[-1:]
    step_s = statistics.median(s["seconds"] for s in measured)
    comm_s = statistics.median(s["comm_s"] for s in measured) if ddp else None
    # by_op is cumulative: the measured steps' payload is the last step's total less the warm-up's
    warm = steps[-len(measured) - 1]["by_op"] if len(measured) < len(steps) else dict.fromkeys(StepMeter.KINDS, 0)
    by_op = {op: (steps[-1]["by_op"][op] - warm[op]) / len(measured) for op in StepMeter.KINDS}

    if args.fsdp:
        from torch.distributed.tensor import DTensor
        flat = torch.cat([(p.full_tensor() if isinstance(p, DTensor) else p).detach().reshape(-1)
                          for p in model.parameters()])
    else:
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    identical = all(torch.equal(gathered[0], g) for g in gathered)
    # Tear down before the interpreter does: DDP's reducer holds the process group and its
    # pending work; left to interpreter finalization, Gloo's threads can free tensors after
    # Python is gone and the worker dies with SIGABRT after a correct job (pytorch/pytorch#179291
    # describes that crash). Every rank drops the model, meets the others, then destroys the group.
    del model, ddp, opt, gathered
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    result_line({
        "rank": rank, "local_rank": local_rank, "world_size": world, "host": socket.gethostname(),
        "backend": backend, "master_addr": os.environ.get("MASTER_ADDR"),
        "mode": "fsdp" if args.fsdp else "ddp", "steps": args.steps, "accumulation": args.accumulation,
        "sync_every_micro_batch": args.sync_every_micro_batch, "micro_batch": args.micro_batch,
        "global_batch": global_batch, "lr": lr, "lr_scaling": args.lr_scaling,
        "bucket_cap_mb": args.bucket_cap_mb, "powersgd_rank": args.powersgd_rank,
        "parameters": int(flat.numel()), "resumed_from_step": first_step,
        "measured_steps": len(measured), "step_s": round(step_s, 6),
        "comm_s": None if comm_s is None else round(comm_s, 6),
        "compute_s": None if comm_s is None else round(step_s - comm_s, 6),
        "comm_share": None if comm_s is None or step_s <= 0 else round(comm_s / step_s, 4),
        "bytes_per_step": {op: round(v) for op, v in by_op.items()},
        "allreduce_bytes_per_step": round(by_op["all_reduce"]),
        "final_loss": loss_value, "params_identical": identical,
        "seconds": round(time.perf_counter() - start, 3),
    })
    return 0 if identical else 3


def warmup_steps(args) -> int:
    """Steps left out of the medians: the first (allocations, first bucket rebuild) and, with
    PowerSGD, those whose synchronising backward passes still ran plain all_reduce."""
    if not args.powersgd_rank:
        return 1
    syncs_per_step = args.accumulation if args.sync_every_micro_batch else 1
    return max(1, math.ceil(args.powersgd_start_iter / syncs_per_step) + 1)


def main(argv=None) -> None:
    """Train, then leave at once with the exit code, skipping interpreter finalization: the result
    line is written and the process group destroyed; torch's own teardown at exit is where the
    SIGABRT described in ``train`` happens."""
    code = train(parse_args(argv))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
