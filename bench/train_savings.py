#!/usr/bin/env python3
"""Benchmark: what gradient accumulation, the DDP bucket size and PowerSGD do to a training step,
measured side by side in one run on a provisioned cluster (default: the local one).

    scripts/local_cluster.sh up 3 && ansible-playbook site.yml -i inventory/local
    .venv/bin/python bench/train_savings.py [--runs 3] [--steps 12] [--width 1024]

Every variant is the template training job (nccl_env's ncclprep_train.py) started on every node at
once through the launcher (the torchrun_smoke module, as validate.yml starts it), with the same
per-rank micro-batch and the same global batch: 4 micro-batches per optimizer step.

    plain          every micro-batch all-reduced (accumulation written without no_sync), 25 MB buckets
    accumulation   the first 3 micro-batches under no_sync: one all-reduce per optimizer step
    bucket 1 MB    as plain, with 1 MB gradient buckets instead of 25 MB
    powersgd r4    as plain, with the PowerSGD hook of rank 4

Variants alternate within each round so the machine's noise falls on all alike. Prints, per
variant, the medians over rounds of rank 0's all-reduce payload per optimizer step (bytes, counted
in the communication hook) and step time, each as a ratio to plain, and the communication share.
Exits 1 when a run fails, or when accumulation or PowerSGD does not send fewer bytes than plain.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import time

import benchlib

ACCUMULATION = 4
VARIANTS = {
    "plain": (25, ["--sync-every-micro-batch"]),
    "accumulation": (25, []),
    "bucket 1 MB": (1, ["--sync-every-micro-batch"]),
    "powersgd r4": (25, ["--sync-every-micro-batch", "--powersgd-rank", "4"]),
}


def one_run(inventory: str, group: str, name: str, steps: int, width: int, timeout: int) -> dict:
    """Rank 0's result of one variant on every host of ``group``; raises RuntimeError naming the host."""
    bucket_mb, extra = VARIANTS[name]
    args = {"rdzv_id": f"bench-{name.replace(' ', '-')}-{time.time_ns()}", "nonce": secrets.token_hex(16),
            "steps": steps,
            "accumulation": ACCUMULATION, "bucket_mb": bucket_mb, "timeout": timeout,
            "job_args": ["--width", str(width), "--log-every", str(steps), *extra]}
    out = benchlib.run([os.path.join(benchlib.BIN, "ansible"), group, "-i", inventory, "-m", "torchrun_smoke",
                        "-a", json.dumps(args)], timeout=timeout + 120, json_out=True)
    try:
        hosts = out.json()["plays"][0]["tasks"][0]["hosts"]
    except (RuntimeError, KeyError, IndexError) as exc:
        raise RuntimeError(f"{name}: no result from ansible (rc {out.rc}): {out.stderr[-500:]}") from exc
    workers = []
    for host, res in sorted(hosts.items()):
        smoke = res.get("smoke") or {}
        if smoke.get("status") != "PASS":
            raise RuntimeError(f"{name}: {host}: {smoke.get('status')} {smoke.get('error') or res.get('msg')}: "
                               f"{(smoke.get('log_tail') or [''])[-1]}")
        workers += smoke["workers"]
    return min(workers, key=lambda w: w["rank"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="rounds of all variants (default 3)")
    ap.add_argument("--steps", type=int, default=12, help="optimizer steps per run (default 12)")
    ap.add_argument("--width", type=int, default=1024,
                    help="hidden width of the model (default 1024: 1.1 M parameters, 4.4 MB of gradients)")
    ap.add_argument("--inventory", default="inventory/local")
    ap.add_argument("--group", default="ncclprep_nodes", help="hosts to run on (default ncclprep_nodes)")
    ap.add_argument("--timeout", type=int, default=300, help="deadline of one run in seconds (default 300)")
    args = ap.parse_args()
    results: dict[str, list[dict]] = {k: [] for k in VARIANTS}
    for i in range(args.runs):
        for name in VARIANTS:
            try:
                r = one_run(args.inventory, args.group, name, args.steps, args.width, args.timeout)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"run {i + 1} {name}: FAILED: {exc}", file=sys.stderr)
                return 1
            results[name].append(r)
            print(f"run {i + 1} {name:13s} world {r['world_size']} global batch {r['global_batch']} "
                  f"step {r['step_s'] * 1e3:7.1f} ms all-reduce {r['allreduce_bytes_per_step']:>10d} B/step "
                  f"communication {r['comm_share'] * 100:3.0f}%", flush=True)
    med = {k: {"bytes": statistics.median(r["allreduce_bytes_per_step"] for r in v),
               "step_ms": statistics.median(r["step_s"] for r in v) * 1e3,
               "share": statistics.median(r["comm_share"] for r in v)} for k, v in results.items()}
    base = med["plain"]
    print(f"\nmedians of {args.runs} rounds; world size {results['plain'][0]['world_size']}, "
          f"{results['plain'][0]['parameters']} parameters, {ACCUMULATION} micro-batches of "
          f"{results['plain'][0]['micro_batch']} per rank per optimizer step")
    print(f"{'variant':14s} {'all-reduce B/step':>18s} {'ratio':>6s} {'step ms':>8s} {'ratio':>6s} {'comm':>5s}")
    for name, m in med.items():
        print(f"{name:14s} {m['bytes']:18.0f} {m['bytes'] / base['bytes']:6.3f} {m['step_ms']:8.1f} "
              f"{m['step_ms'] / base['step_ms']:6.2f} {m['share'] * 100:4.0f}%")
    fewer = med["accumulation"]["bytes"] < base["bytes"] and med["powersgd r4"]["bytes"] < base["bytes"]
    return 0 if fewer else 1


if __name__ == "__main__":
    sys.exit(main())
