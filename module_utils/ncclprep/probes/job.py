"""A node's probe job: the collectives on this node's ranks, then, when they went wrong, the
collective blame's rounds (``ncclprep node preflight``, node/preflight.py, runs it). It sits above
collectives.py (one run of ranks) and collective_blame.py (the rounds), which never import it."""

from __future__ import annotations

import glob
import os
import shutil
import tempfile

from ansible.module_utils.ncclprep.probes.collective_blame import run_blame
from ansible.module_utils.ncclprep.probes.collectives import nccl_log_summary, run_local_ranks


def host_collectives(p: dict, host: str, offsets: list, torch_error: str | None) -> dict:
    """This host's part of the collectives (and of the blame, with ``p["blame"]``): ``{status, rank,
    host, hosts, backend, stage, results (one row per op and size: op, size_bytes, count, time_us,
    algbw_gbps, busbw_gbps, wrong), missing_ranks, missing_hosts, error, ...}``. ``p``: the options of
    node/preflight.py options' ``probe``; ``offsets``: rank_layout of the hosts' local ranks. Raises
    nothing: every failure is a status in the result."""
    if torch_error:
        # A measurement result, not a task error: the other ranks report this rank missing.
        return {"status": "FAIL", "rank": p["rank"], "host": host, "stage": "start", "results": [],
                "missing_ranks": [], "missing_hosts": [], "error": torch_error}
    import torch  # here, not at the top: this file is imported by tests and hosts without torch

    backend = p["backend"]
    if backend == "auto":
        # Ask NVML, not the CUDA runtime: the ranks are forked from here, and a CUDA runtime
        # initialized before the fork fails in the children (torch's notes on
        # PYTORCH_NVML_BASED_CUDA_CHECK, "forked processes fail with a CUDA initialization error").
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() > 0 else "gloo"
    log_dir = None
    if backend == "nccl":  # NCCL's own log of what it chose: version, network, transports, HCAs, GDR
        log_dir = tempfile.mkdtemp(prefix="ncclprep-nccl-")
        os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_FILE=os.path.join(log_dir, "nccl.%h.%p.log"))
    result = run_local_ranks(
        p["rank"], len(p["hosts"]), p["local_ranks"], p["cpu_binding"], p["timeout"],
        master_addr=p["master_addr"], master_port=p["master_port"], backend=backend, ops=p["ops"],
        sizes=p["sizes"], warmup=p["warmup"], iters=p["iters"], join_timeout_s=p["join_timeout"],
        op_timeout_s=max(p["timeout"] - p["join_timeout"], 5), token=p["token"])
    probe = {"rank": p["rank"], "host": host, "hosts": p["hosts"], "backend": backend, "error": None,
             "missing_ranks": [], "results": []}
    probe.update(result)
    # a global rank -> the host that runs it (ranks are numbered host by host)
    owner = {r: p["hosts"][i] for i in range(len(p["hosts"])) for r in range(offsets[i], offsets[i + 1])}
    probe["missing_hosts"] = sorted({owner[r] for r in probe.get("missing_ranks", []) if r in owner})
    if log_dir:
        texts = []
        for path in sorted(glob.glob(os.path.join(log_dir, "nccl.*.log"))):
            with open(path, encoding="utf-8", errors="replace") as fh:
                texts.append(fh.read())
        shutil.rmtree(log_dir, ignore_errors=True)
        probe["nccl_log"] = nccl_log_summary(texts)
    else:
        probe["gloo_ifname"] = os.environ.get("GLOO_SOCKET_IFNAME")
    if p["blame"] and len(p["hosts"]) > 1:
        probe.update(blame=None, blame_error=None)
        os.environ.pop("NCCL_DEBUG", None)  # the rounds' NCCL logs would tell nothing the first run's did not
        blame = run_blame(torch.distributed, p["rank"], p["hosts"], p["addresses"], p["master_port"] + 1, probe,
                          round_runner(p, backend), token=p["token"], floor=p["blame_floor"], z=p["slow_z"],
                          ratio=p["slow_ratio"], round_timeout_s=p["blame_timeout"],
                          gather_timeout_s=max(p["timeout"] - probe.get("elapsed_s", 0), 0) + p["join_timeout"])
        if p["rank"] == 0:
            probe["blame"] = blame
        elif blame:
            probe["blame_error"] = blame.get("error")
    return probe


def round_runner(p: dict, backend: str):
    """``run_group`` for collective_blame.run_blame: this host's ranks in a round's group, the op
    that went wrong at the largest size, one warmup, under the round's deadline (half of it, at
    most join_timeout, for the ranks to arrive); no CPU binding (the rounds compare groups)."""
    me = p["hosts"][p["rank"]]
    per_host = dict(zip(p["hosts"], p["local_ranks"] or [1] * len(p["hosts"]), strict=True))
    join = min(p["join_timeout"], p["blame_timeout"] // 2)

    def run_group(group: list, master_addr: str, master_port: int, ops: list) -> dict:
        return run_local_ranks(
            group.index(me), len(group), [per_host[h] for h in group], [], p["blame_timeout"],
            master_addr=master_addr, master_port=master_port, backend=backend, ops=ops,
            sizes=[max(p["sizes"])], warmup=1, iters=p["iters"], join_timeout_s=join,
            op_timeout_s=max(p["blame_timeout"] - join, 5), token=p["token"])

    return run_group
