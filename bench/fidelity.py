#!/usr/bin/env python3
"""Benchmark: how close the collective probe gets to the wire. the preflight's all_reduce busbw at
its largest size against the single-stream TCP throughput its network probe measures between the same two
nodes, both in one validate.yml run, as a ratio; with the probe's message size and iteration
count varied side by side to show what limits it.

    .venv/bin/python bench/fidelity.py [--pair node1,node2] [--runs 3]

Every run is ``validate.yml --limit A,B --tags facts,net,probe`` (the engine's network probe and
collectives, nothing else), only all_reduce, the probe's stream held for
``--tcp-seconds`` (default 1 s rather than the preflight's 0.25 s, for a steadier denominator).
Variants alternate within each round so the machine's noise falls on all alike:

    preflight        the preflight's sizes (largest 16 MiB) and 5 iterations
    16 MiB x 20      the same largest size, 20 iterations
    64 MiB x 5       a 64 MiB buffer, 5 iterations
    64 MiB x 20      a 64 MiB buffer, 20 iterations

busbw follows nccl-tests (module_utils/ncclprep/probes/busbw.py): all_reduce moves 2 (n-1)/n of the
buffer per rank, so with 2 ranks busbw = algbw = buffer bytes / seconds per iteration, the bytes
each direction of the pair carries. The TCP figure is the slower of the pair's two directions
(GB/s = 1e9 bytes/s, as the receiver counted them): a ring all_reduce can go no faster than its
slowest hop.
Prints every run, then per variant the medians of busbw, TCP and their ratio. Target (issue 13):
0.5 or better with Gloo. Exits 1 when a run fails or, with --strict, when the preflight's own
variant is below the target.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import benchlib

MIB = 1 << 20
VARIANTS = {
    "preflight": ([4096, 65536, MIB, 16 * MIB], 5),
    "16 MiB x 20": ([16 * MIB], 20),
    "64 MiB x 5": ([64 * MIB], 5),
    "64 MiB x 20": ([64 * MIB], 20),
}


def one_run(inventory: str, pair: list[str], sizes: list[int], iters: int, tcp_s: float, timeout: int) -> dict:
    """busbw (GB/s) of all_reduce at the largest size and the TCP GB/s of each direction of the pair.
    Raises RuntimeError naming the host when a probe did not pass."""
    extra = ["--limit", ",".join(pair), "--tags", "facts,net,probe",
             "-e", json.dumps({"preflight_probe_ops": ["all_reduce"], "preflight_probe_sizes": sizes,
                               "preflight_probe_iters": iters, "preflight_net_bandwidth_seconds": tcp_s,
                               "preflight_probe_blame": False})]
    run = benchlib.playbook("validate", inventory, extra, timeout=timeout)
    busbw, tcp = None, {}
    results = []  # (host, a module's result or a host's record): the modules' before issue
    # 42, every node's record from the engine (roles/preflight/tasks/engine.yml) after it
    for play in run.json().get("plays", []):
        for task in play.get("tasks", []):
            for host, res in (task.get("hosts") or {}).items():
                results.append((host, res))
                records = (res.get("ansible_facts") or {}).get("__preflight_records") or {}
                results += [(h, r) for h, r in records.items() if isinstance(r, dict)]
    for host, res in results:
        if isinstance(res.get("probe"), dict) and res["probe"].get("results") is not None:
            probe = res["probe"]
            if probe.get("status") != "PASS":
                raise RuntimeError(f"{host}: the collectives {probe.get('status')}: {probe.get('error')}")
            rows = [r for r in probe["results"] if r.get("op") == "all_reduce" and "busbw_gbps" in r]
            top = max(r["size_bytes"] for r in rows)
            busbw = min(r["busbw_gbps"] for r in rows if r["size_bytes"] == top)
        if isinstance(res.get("net"), dict) and res["net"].get("links") is not None:
            if res["net"].get("status") != "PASS":
                raise RuntimeError(f"{host}: the network probe {res['net'].get('status')}: {res['net'].get('error')}")
            for link in res["net"]["links"]:
                if link.get("bandwidth_gbps") is not None:
                    key = (link["src"], link["dst"])
                    tcp[key] = min(tcp.get(key, link["bandwidth_gbps"]), link["bandwidth_gbps"])
    if run.rc != 0 or busbw is None or len(tcp) < 2:
        raise RuntimeError(f"validate.yml rc {run.rc}, busbw {busbw}, TCP directions {sorted(tcp)}: "
                           f"{run.stderr[-800:]}")
    return {"busbw": busbw, "tcp": min(tcp.values()), "tcp_dirs": tcp, "wall_s": run.wall_s}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="node1,node2", help="the two inventory hosts (default node1,node2)")
    ap.add_argument("--runs", type=int, default=3, help="rounds of all variants (default 3)")
    ap.add_argument("--tcp-seconds", type=float, default=1.0, help="the network probe's stream, s (default 1)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of the variants")
    ap.add_argument("--inventory", default="inventory/local")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--target", type=float, default=0.5)
    ap.add_argument("--strict", action="store_true", help="exit 1 when the preflight variant is below the target")
    args = ap.parse_args()
    pair = args.pair.split(",")
    names = args.variants.split(",")
    if len(pair) != 2 or not set(names) <= set(VARIANTS):
        ap.error(f"--pair takes two hosts; --variants a subset of {', '.join(VARIANTS)}")
    results: dict[str, list[dict]] = {k: [] for k in names}
    for i in range(args.runs):
        for name in names:
            sizes, iters = VARIANTS[name]
            try:
                r = one_run(args.inventory, pair, sizes, iters, args.tcp_seconds, args.timeout)
            except RuntimeError as exc:
                print(f"run {i + 1} {name}: FAILED: {exc}", file=sys.stderr)
                return 1
            results[name].append(r)
            dirs = " ".join(f"{a}->{b} {v:.3f}" for (a, b), v in sorted(r["tcp_dirs"].items()))
            print(f"run {i + 1} {name:12s} busbw {r['busbw']:.3f} GB/s  TCP {dirs} GB/s  "
                  f"ratio {r['busbw'] / r['tcp']:.2f}  ({r['wall_s']:.0f} s)", flush=True)
    print(f"\nmedians of {args.runs} rounds, pair {pair[0]} <-> {pair[1]}")
    print(f"{'variant':12s} {'busbw GB/s':>10s} {'TCP GB/s':>9s} {'ratio':>6s}")
    ratios = {}
    for name, rs in results.items():
        ratios[name] = statistics.median(r["busbw"] / r["tcp"] for r in rs)
        print(f"{name:12s} {statistics.median(r['busbw'] for r in rs):10.3f} "
              f"{statistics.median(r['tcp'] for r in rs):9.3f} {ratios[name]:6.2f}")
    if "preflight" in ratios:
        ok = ratios["preflight"] >= args.target
        print(f"preflight probe: {ratios['preflight']:.2f} of the wire; target {args.target}: "
              f"{'met' if ok else 'MISSED'}")
        if args.strict and not ok:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
