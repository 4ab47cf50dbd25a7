#!/usr/bin/env python3
"""Benchmark: the preflight's (validate.yml's) wall time at several cluster sizes, split by stage,
and how it grows, measured in one run on the local cluster.

    .venv/bin/python bench/preflight.py [--sizes 2,4,6,8] [--runs 3]
    .venv/bin/python bench/preflight.py --no-cluster --sizes 3 --runs 1   # the cluster as it is

For each size, smallest first, the local cluster is brought to that many nodes
(``scripts/local_cluster.sh up``, then ``grow``) and provisioned (site.yml), then validate.yml runs
``--runs`` times. With ``--baseline`` every run alternates with a run without the network probe
and the drift check (issue 9's comparison); with ``--against REV`` with a run of git revision
REV's validate.yml, roles and modules (a worktree, removed at the end) on the same cluster, and
the ratio of the two is printed: a change to the preflight measured side by side.

Each run's time is split by stage from the ansible.posix.json callback (the role file a task comes
from; see STAGE_OF):

    start       ansible-playbook's start until the first task (inventory, plugins, the play)
    facts       fact gathering, node_facts and the input checks
    checks      the live state of every concern, the drift of the managed files, port counters
    probes      one job per node: latency, bandwidth and path MTU between the nodes, then the
                collectives and, when they fail, the blame rounds
    torchrun    the multi-node training job
    engine      the preflight engine on every node (issue 42: the node's reading, the logins, the
                drift, the probes and the training job in one ``ncclprep node preflight`` a node)
    report      the checks' verdicts and the reports, on the controller
    exit        from the last task to ansible-playbook's exit

Prints every run, then per size the medians of the wall time, of each stage, of the controller's
CPU seconds and largest resident set, of the CPU seconds the local cluster's containers used (their
cgroups), and the CPU bound: (controller + nodes CPU) / this host's cores, the least wall time the
run could take here, where every node shares this host's cores; the growth from 4 to 8 nodes (or the smallest to the
largest size); and the ten tasks that took longest at the largest size.
Targets (issue 13): 4 nodes in --target-s (45) seconds or less; 4 -> 8 nodes at most
--target-ratio (1.3). Exits 1 when a run fails or, with --strict, when a target is missed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

import benchlib

STAGES = ["start", "facts", "checks", "probes", "torchrun", "engine", "report", "exit"]
# (the files of older trees, kept for --against: facts.yml, node_facts and the SSH logins before
# read.yml; every stage but engine before issue 42)
STAGE_OF_FILE = {"main.yml": "facts", "facts.yml": "facts", "read.yml": "facts", "ssh.yml": "facts",
                 "concerns.yml": "checks",
                 "drift.yml": "checks", "net.yml": "probes", "probe.yml": "probes", "blame.yml": "probes",
                 "smoke.yml": "torchrun", "report.yml": "report", "wait_job.yml": None, "engine.yml": "engine"}
CORES = os.cpu_count() or 1
BASELINE = ["-e", "preflight_net_enabled=false", "-e", "preflight_drift_enabled=false"]


def stage_of(task: dict) -> str | None:
    """The stage of a task from its file (``path`` = file:line): the preflight role's files by
    STAGE_OF_FILE (wait_job.yml's tasks count to the stage that started the job), every other
    role's (the concerns' facts.yml and intent.yml, which concerns.yml includes) to checks, the
    playbook's own (fact gathering) to facts."""
    if task["name"].endswith("Read the port error counters again"):
        return "checks"
    path = task["path"].rsplit(":", 1)[0]
    if "/roles/preflight/" in path:
        return STAGE_OF_FILE.get(os.path.basename(path))
    return "checks" if "/roles/" in path else "facts"


def work_line(runs: list) -> str:
    """Medians over ``runs`` of the tasks and module runs of the second host (the first is also the
    rendezvous and report host) and of the most on any host (benchlib.host_work)."""
    works = [benchlib.host_work(r[0].json()) for r in runs]
    second = [w[sorted(w)[1]] for w in works if len(w) > 1]
    most = [{k: max(c[k] for c in w.values()) for k in ("tasks", "module_runs")} for w in works if w]

    def med(rows, key):
        return statistics.median(r[key] for r in rows) if rows else float("nan")

    return (f"second host {med(second, 'tasks'):.0f} tasks, {med(second, 'module_runs'):.0f} module runs; "
            f"most on a host {med(most, 'tasks'):.0f} tasks, {med(most, 'module_runs'):.0f} module runs")


def one_run(inventory: str, reports: str, extra: list[str], timeout: int,
            root: str = benchlib.REPO) -> tuple[benchlib.Run, dict, list]:
    run = benchlib.playbook("validate", inventory, ["-e", f"preflight_report_dir={reports}", *extra], timeout,
                            root=root)
    stages, tasks = benchlib.stage_times(run, stage_of)
    return run, stages, tasks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2,4,6,8", help="cluster sizes, comma-separated (default 2,4,6,8)")
    ap.add_argument("--runs", type=int, default=3, help="validate.yml runs per size (default 3)")
    ap.add_argument("--inventory", default="inventory/local")
    ap.add_argument("--no-cluster", action="store_true",
                    help="use the inventory as it is (one size): no bring-up, no site.yml")
    ap.add_argument("--baseline", action="store_true",
                    help="alternate every run with one without the network probe and drift, and print the ratio")
    ap.add_argument("--timeout", type=int, default=900, help="deadline of one playbook run, s (default 900)")
    ap.add_argument("--target-s", type=float, default=45.0)
    ap.add_argument("--target-ratio", type=float, default=1.3)
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--save", metavar="DIR", help="keep each run's ansible.posix.json document in DIR")
    ap.add_argument("--against", metavar="REV",
                    help="alternate every run with one of git revision REV's preflight (a worktree), "
                         "and print the ratio")
    args = ap.parse_args()
    if not args.against:
        return measure(ap, args, None)
    with benchlib.worktree(args.against) as other:
        return measure(ap, args, other)


def measure(ap: argparse.ArgumentParser, args: argparse.Namespace, other: str | None) -> int:
    """The runs of main(); ``other``: the checkout of --against, or None."""
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",")})
    except ValueError:
        ap.error(f"--sizes {args.sizes!r}: comma-separated node counts, e.g. 2,4,6,8")
    if args.no_cluster and len(sizes) != 1:
        ap.error("--no-cluster measures the cluster as it is: give one size")
    # variant -> (extra arguments, checkout)
    variants = {"full": ([], benchlib.REPO), **({"baseline": (BASELINE, benchlib.REPO)} if args.baseline else {}),
                **({args.against: ([], other)} if other else {})}
    results: dict[int, dict[str, list]] = {}
    failed = False
    with tempfile.TemporaryDirectory(prefix="ncclprep-bench-") as reports:
        for i, n in enumerate(sizes):
            if not args.no_cluster:
                benchlib.cluster("up" if i == 0 else "grow", n)
                site = benchlib.playbook("site", args.inventory, timeout=args.timeout, json_out=False)
                print(f"{n} nodes: site.yml {site.wall_s:.1f} s rc={site.rc}", flush=True)
                if site.rc != 0:
                    sys.stderr.write(site.stdout[-3000:])
                    return 1
            results[n] = {v: [] for v in variants}
            for r in range(args.runs):
                for name, (extra, root) in variants.items():
                    run, stages, tasks = one_run(args.inventory, reports, extra, args.timeout, root)
                    failed |= run.rc != 0
                    if run.rc != 0:
                        sys.stderr.write(f"{n} nodes run {r + 1} {name}: rc {run.rc}\n{run.stderr[-1500:]}\n")
                        failures = [f"{t['name']}: {', '.join(t['failed'])}" for t in tasks if t["failed"]]
                        sys.stderr.write("\n".join(failures))
                    results[n][name].append((run, stages, tasks))
                    run.save(args.save, f"{n}-nodes-{name}-{r + 1}")
                    print(f"{n} nodes run {r + 1} {name:8s} {run.wall_s:6.1f} s rc={run.rc} "
                          + " ".join(f"{s}={stages.get(s, 0):.1f}" for s in STAGES), flush=True)
    print()
    header = (f"{'nodes':>5s} {'wall s':>7s} " + " ".join(f"{s:>10s}" for s in STAGES)
              + f" {'ctl CPU s':>9s} {'ctl RSS MB':>10s} {'nodes CPU s':>11s} {'CPU bound s':>11s}")
    print(f"medians of {args.runs} runs per size")
    print(header)
    med_wall: dict[int, float] = {}
    for n, by_variant in results.items():
        runs = by_variant["full"]
        med_wall[n] = statistics.median(r[0].wall_s for r in runs)
        cells = [statistics.median(r[1].get(s, 0.0) for r in runs) for s in STAGES]
        cpu = statistics.median(r[0].cpu_s for r in runs)
        rss = max(r[0].maxrss_bytes for r in runs) / 1e6
        node_cpu = [r[0].nodes_cpu_s for r in runs if r[0].nodes_cpu_s is not None]
        node_cpu_s = statistics.median(node_cpu) if node_cpu else float("nan")
        print(f"{n:5d} {med_wall[n]:7.1f} " + " ".join(f"{c:10.1f}" for c in cells) + f" {cpu:9.1f} {rss:10.0f}"
              f" {node_cpu_s:11.1f} {(cpu + node_cpu_s) / CORES:11.1f}")
        print(f"      per host: {work_line(runs)}")
        if args.baseline:
            base = statistics.median(r[0].wall_s for r in by_variant["baseline"])
            print(f"      without the network probe and drift {base:.1f} s; full / baseline {med_wall[n] / base:.2f}")
        if other:
            rev = by_variant[args.against]
            rev_wall = statistics.median(r[0].wall_s for r in rev)
            rev_cpu = [statistics.median(r[0].cpu_s for r in rev),
                       statistics.median(r[0].nodes_cpu_s or 0.0 for r in rev)]
            print(f"      {args.against} per host: {work_line(rev)}")
            print(f"      {args.against}: {rev_wall:.1f} s; this tree / {args.against}: "
                  f"wall {med_wall[n] / rev_wall:.2f}, controller CPU {cpu / rev_cpu[0]:.2f}, nodes CPU "
                  f"{node_cpu_s / rev_cpu[1] if rev_cpu[1] else float('nan'):.2f}")
    lo, hi = (4, 8) if {4, 8} <= set(med_wall) else (min(med_wall), max(med_wall))
    missed = []
    if lo != hi:
        ratio = med_wall[hi] / med_wall[lo]
        per_node = (med_wall[hi] - med_wall[lo]) / (hi - lo)
        print(f"\ngrowth {lo} -> {hi} nodes: {ratio:.2f}x ({per_node:.1f} s per added node); "
              f"target {args.target_ratio}x: {'met' if ratio <= args.target_ratio else 'MISSED'}")
        if (lo, hi) == (4, 8) and ratio > args.target_ratio:
            missed.append("growth")
    if 4 in med_wall:
        ok = med_wall[4] <= args.target_s
        print(f"4 nodes: {med_wall[4]:.1f} s; target {args.target_s:.0f} s: {'met' if ok else 'MISSED'}")
        if not ok:
            missed.append("4 nodes")
    top = max(results)
    per_task: dict[tuple, list[float]] = {}
    for _run, _stages, tasks in results[top]["full"]:
        for t in tasks:
            per_task.setdefault((stage_of(t) or "", t["name"]), []).append(t["seconds"])
    print(f"\nlongest tasks at {top} nodes (median s over runs, stage, task)")
    for (stage, name), secs in sorted(per_task.items(), key=lambda kv: -statistics.median(kv[1]))[:10]:
        print(f"{statistics.median(secs):7.1f}  {stage:10s} {name}")
    return 1 if failed or (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
