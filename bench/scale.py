#!/usr/bin/env python3
"""Benchmark: the preflight's pair schedule and blame at 64 to 4096 nodes, simulated on a model
of the network with the project's own planners (module_utils/ncclprep/probes/schedule.py, blame.py).

    .venv/bin/python bench/scale.py [--sizes 64,512,1024,4096] [--trials 10] [--seed 1]

Per size it prints:
- the network probe's schedule (schedule.pair_schedule, ring + 2 random matchings): rounds,
  pairs, the most pairs one node is in; one probe process per node, whatever the size;
- for 1, 2 and 8 bad nodes (slow: 0.1 x the healthy bandwidth, half of them dead in the
  collective): the network probe's verdict (both phases, see ``network_verdict``) and the
  collective blame (blame.collective_plan, round after round until its verdict):
  rounds, how often exactly the bad nodes were named, how often a healthy node was named;
- the controller's CPU time for those judgements, per call, and the network judgement's as a
  ratio to the smallest size (the growth, side by side in one run);
- the network probe's rounds (scheduled and re-paired) and its wall time: rounds x
  --net-round-s (measured on the local cluster) + the judgement's CPU; with --coll-round-s, the
  collective blame's the same way.

The model: every node's bandwidth is 1.0 x lognormal(0, --noise); one direction measures
min(sender, receiver) x lognormal(0, --noise); a group's busbw is the minimum over its nodes
x lognormal(0, --noise); a dead node makes its group FAIL. Nothing runs on the network.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "src"))
import ncclprep  # noqa: E402,F401,I001  (first: it extends ansible.module_utils.__path__)
from ansible.module_utils.ncclprep.probes import blame  # noqa: E402
from ansible.module_utils.ncclprep.probes import schedule  # noqa: E402

SLOW = 0.1


def network_verdict(n: int, bad: set[int], rng: random.Random, noise: float) -> tuple[set[str], float, int]:
    """Nodes the network probe's bandwidth judgement names, the controller's CPU seconds, and
    the rounds of pairs measured (scheduled and re-paired).

    As netprobe.py and checks/network.py judge: the scheduled rounds; the suspects (the nodes of
    every direction blame.slow_bandwidth finds slow) re-paired with 2 good nodes each
    (schedule.repair_rounds), the second phase; then slow_bandwidth on each direction's worse
    rate, and the slow links classified into nodes and links (blame.classify).
    """
    speed = {i: (SLOW if i in bad else 1.0) * rng.lognormvariate(0, noise) for i in range(n)}

    def measure(pairs, rates):
        for a, b in pairs:
            for src, dst in ((a, b), (b, a)):
                v = min(speed[src], speed[dst]) * rng.lognormvariate(0, noise)
                rates[(f"n{src}", f"n{dst}")] = min(rates.get((f"n{src}", f"n{dst}"), v), v)

    rates: dict = {}
    scheduled = schedule.pair_schedule(n, 2, seed="bench")
    n_rounds = len(scheduled)
    measure([p for rnd in scheduled for p in rnd], rates)
    start = time.process_time()
    first = blame.slow_bandwidth(rates)
    cpu = time.process_time() - start
    suspects = {int(h[1:]) for h in first["nodes"]} | {int(h[1:]) for link in first["links"] for h in link}
    if suspects:
        met = [(int(a[1:]), int(b[1:])) for a, b in rates]
        good = [i for i in range(n) if i not in suspects]
        repair = schedule.repair_rounds(sorted(suspects), good, met, 2, seed="bench")
        n_rounds += len(repair)
        measure([p for rnd in repair for p in rnd], rates)
    start = time.process_time()
    final = blame.slow_bandwidth(rates)
    found = blame.classify({tuple(sorted(k)) for k in rates}, {tuple(sorted(k)) for k in final["links"]})
    cpu += time.process_time() - start
    named = set(final["nodes"]) | set(found["nodes"]) | {h for link in found["links"] for h in link}
    return named, cpu, n_rounds


def collective_verdict(n: int, bad: set[int], dead: set[int], rng: random.Random,
                       noise: float) -> tuple[set[str], int, float]:
    """Nodes (or the hosts of the smallest failing groups) the collective blame names, its
    rounds, and the controller's CPU seconds for planning them."""
    hosts = [f"n{i}" for i in range(n)]
    speed = {f"n{i}": (SLOW if i in bad else 1.0) * rng.lognormvariate(0, noise) for i in range(n)}
    history: list[dict] = []
    cpu = 0.0
    while True:
        start = time.process_time()
        plan = blame.collective_plan(hosts, history)
        cpu += time.process_time() - start
        if plan["stage"] == "done":
            named = set(plan["nodes"]) | {h for g in plan["groups"] for h in g} | set(plan["suspects"])
            named |= {h for link in plan["links"] for h in link}
            return named, len(history), cpu
        groups = []
        for g in plan["groups"]:
            failed = any(int(h[1:]) in dead for h in g)
            groups.append({"hosts": g, "status": "FAIL" if failed else "PASS",
                           "busbw_gbps": None if failed else min(speed[h] for h in g) * rng.lognormvariate(0, noise)})
        history.append({"stage": plan["stage"], "groups": groups})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64,512,1024,4096", help="node counts (default 64,512,1024,4096)")
    ap.add_argument("--bad", default="1,2,8", help="bad node counts (default 1,2,8)")
    ap.add_argument("--trials", type=int, default=10, help="random networks per size and bad count (default 10)")
    ap.add_argument("--noise", type=float, default=0.05, help="lognormal sigma of every measurement (default 0.05)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--net-round-s", type=float, default=0.96,
                    help="wall seconds of one round of the network probe (default 0.96: the network probe's elapsed_s "
                         "3.83 s over its 4 rounds at 8 local nodes, docs/benchmarks.md)")
    ap.add_argument("--coll-round-s", type=float, default=None,
                    help="wall seconds of one round of the collective blame (measured: docs/scale.md); "
                         "with it, the collective blame's wall time is printed too")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    bads = [int(b) for b in args.bad.split(",")]
    rng = random.Random(args.seed)
    base_cpu: dict[int, float] = {}  # bad count -> the network judgement's CPU at the smallest size
    print(f"{'nodes':>6s} {'rounds':>6s} {'pairs':>7s} {'max/node':>8s}")
    for n in sizes:
        rounds = schedule.pair_schedule(n, 2, seed="bench")
        per_node: dict[int, int] = {}
        for rnd in rounds:
            for a, b in rnd:
                per_node[a] = per_node.get(a, 0) + 1
                per_node[b] = per_node.get(b, 0) + 1
        print(f"{n:6d} {len(rounds):6d} {sum(len(r) for r in rounds):7d} {max(per_node.values()):8d}")
    print(f"\n{'nodes':>6s} {'bad':>4s} | {'net exact':>9s} {'net healthy named':>17s} {'net cpu s':>9s} | "
          f"{'coll rounds':>11s} {'coll exact':>10s} {'coll healthy named':>18s} {'coll cpu s':>10s} | "
          f"{'net cpu x smallest':>18s} | {'net rounds':>10s} {'net wall s':>10s}"
          + (f" {'coll wall s':>11s}" if args.coll_round_s else ""))
    for n in sizes:
        for b in bads:
            net_ok = net_fp = coll_ok = coll_fp = 0
            net_cpu, coll_cpu, coll_rounds, net_rounds = [], [], [], []
            for _ in range(args.trials):
                bad = set(rng.sample(range(n), b))
                dead = set(sorted(bad)[: b // 2])
                truth = {f"n{i}" for i in bad}
                named, cpu, rounds = network_verdict(n, bad, rng, args.noise)
                net_rounds.append(rounds)
                net_ok += named == truth
                net_fp += bool(named - truth)
                net_cpu.append(cpu)
                named, r, cpu = collective_verdict(n, bad, dead, rng, args.noise)
                coll_ok += named == truth
                coll_fp += bool(named - truth)
                coll_cpu.append(cpu)
                coll_rounds.append(r)
            t = args.trials
            base = base_cpu.setdefault(b, statistics.median(net_cpu))
            print(f"{n:6d} {b:4d} | {net_ok / t:9.0%} {net_fp / t:17.0%} {statistics.median(net_cpu):9.3f} | "
                  f"{statistics.median(coll_rounds):11g} {coll_ok / t:10.0%} {coll_fp / t:18.0%} "
                  f"{statistics.median(coll_cpu):10.3f} | {statistics.median(net_cpu) / max(base, 1e-9):18.1f} | "
                  f"{statistics.median(net_rounds):10g} "
                  f"{statistics.median(net_rounds) * args.net_round_s + statistics.median(net_cpu):10.1f}"
                  + (f" {statistics.median(coll_rounds) * args.coll_round_s + statistics.median(coll_cpu):11.1f}"
                     if args.coll_round_s else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
