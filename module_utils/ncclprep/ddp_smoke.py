"""A few steps of real DDP training, run by torchrun on every node (the torchrun smoke job).

This file is executed as a script on the nodes (torchrun_smoke writes it out),
so it imports only torch and the standard library. Each worker reads RANK,
LOCAL_RANK, WORLD_SIZE, MASTER_ADDR from torchrun, trains a small model with
gradient accumulation (``no_sync`` on all but the last micro-batch), then
checks that every rank ended with bit-identical parameters, as DDP guarantees.
It prints one line ``NCCLPREP_SMOKE {json}`` per worker and exits non-zero when
the parameters differ.
"""

import contextlib
import datetime
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
    dist.barrier()
    dist.destroy_process_group()
    print(MARKER + json.dumps({
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
    }), flush=True)
    return 0 if identical else 3


if __name__ == "__main__":
    sys.exit(main())
