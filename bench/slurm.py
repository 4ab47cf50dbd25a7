#!/usr/bin/env python3
"""Benchmark: a Slurm job's preflight (``srun ncclprep node preflight``) against validate.yml on the
same nodes, side by side in one run on the local Slurm cluster, with the health check's and the
Prolog's wall time.

    .venv/bin/python bench/slurm.py [--sizes 4,8] [--runs 2]
    .venv/bin/python bench/slurm.py --no-cluster --sizes 3 --runs 1     # the cluster as it is

For each size, smallest first, the local cluster is brought to that many nodes with Slurm
(``scripts/local_cluster.sh up N --slurm``, then ``grow``) and provisioned (site.yml); then each of
``--runs`` rounds runs validate.yml and the job's preflight on every node (``srun --nodes N
--ntasks-per-node=1 ncclprep node preflight``, submitted on node1 through ``podman exec``), one after
the other. Both must pass. For each it prints the wall time, the controller's CPU seconds (this
host's processes: ansible-playbook and its children for validate.yml; the podman client for srun,
where on a real cluster it is Slurm's srun on a login node) per host, and the nodes' CPU seconds
(the containers' cgroups). Then, after a node check on every node (its record is what the health
check judges), ``ncclprep-health --dry-run --no-refresh`` and ``ncclprep-prolog --dry-run`` on every
node, timed on the node itself.

With ``--against REV`` each round also runs git revision REV's validate.yml (a worktree, its own
ansible.cfg, roles and modules) on the same nodes, e.g. 64ebd4f, the last tree whose validate.yml
ran its own tasks and modules on every node instead of the engine.

Targets (issue 25): the srun path's controller CPU per host at least --target-cpu-ratio (10) times
less than validate.yml's; the health check within --target-health-s (5) and the Prolog within
--target-prolog-s (10). Targets (issue 42, validate.yml launching the engine): its controller CPU
at most --target-ctl-cpu (0.3) s per host, its wall at most --target-wall-ratio (1.15) times the
srun path's, the nodes' CPU per node at most --target-nodes-cpu-ratio (1.10) times the srun path's.
The controller's CPU per host is also given as it grows from the smallest size to the largest
(what each added node costs; ansible-playbook's own start, about 3 CPU-s here, is paid once a
run). Exits 1 when a run fails or, with --strict, when a target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import statistics
import sys
import tempfile

import benchlib

NODE1 = "ncclprep-node1"
#: Timed on the node (a podman exec's own start is not the command's): seconds as the last line.
TIMED = ("python3 -c 'import subprocess, sys, time; t = time.monotonic(); "
         "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode; "
         "print(rc, round(time.monotonic() - t, 3))'")


def srun_preflight(n: int, timeout: int) -> benchlib.Run:
    """The job's preflight on ``n`` nodes, submitted on node1 (reports in /tmp on node1), with this
    run's secret in srun's environment (main draws it), so that it runs the training smoke job as
    validate.yml does (without one, torchrun.smoke is a SKIP)."""
    return benchlib.run(["podman", "exec", "-e", "NCCLPREP_PREFLIGHT_TOKEN", "-w", "/tmp", NODE1, "timeout",
                         str(timeout), "srun", "--nodes", str(n), "--ntasks-per-node=1", "/usr/local/sbin/ncclprep",
                         "node", "preflight", "--report-dir", "/tmp/ncclprep-bench-reports"], timeout + 30)


def timed_on(node: int, argv: list[str]) -> tuple[int, float]:
    """``(exit code, seconds)`` of ``argv`` run on node ``node``, timed there."""
    out = benchlib.run(["podman", "exec", f"ncclprep-node{node}", "sh", "-c", f"{TIMED} {' '.join(argv)}"], 120)
    rc, seconds = out.stdout.split()[-2:]
    return int(rc), float(seconds)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,8", help="cluster sizes, comma-separated (default 4,8)")
    ap.add_argument("--runs", type=int, default=2, help="rounds per size (default 2)")
    ap.add_argument("--inventory", default="inventory/local")
    ap.add_argument("--no-cluster", action="store_true", help="the cluster as it is (one size): no bring-up")
    ap.add_argument("--timeout", type=int, default=900, help="deadline of one run, s (default 900)")
    ap.add_argument("--target-cpu-ratio", type=float, default=10.0)
    ap.add_argument("--target-health-s", type=float, default=5.0)
    ap.add_argument("--target-prolog-s", type=float, default=10.0)
    ap.add_argument("--target-ctl-cpu", type=float, default=0.3)
    ap.add_argument("--target-wall-ratio", type=float, default=1.15)
    ap.add_argument("--target-nodes-cpu-ratio", type=float, default=1.10)
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--against", metavar="REV",
                    help="each round also runs git revision REV's validate.yml (a worktree) on the same nodes")
    args = ap.parse_args()
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",")})
    except ValueError:
        ap.error(f"--sizes {args.sizes!r}: comma-separated node counts, e.g. 4,8")
    if args.no_cluster and len(sizes) != 1:
        ap.error("--no-cluster measures the cluster as it is: give one size")
    failed, missed = False, []
    rows = []
    os.environ["NCCLPREP_PREFLIGHT_TOKEN"] = secrets.token_hex(16)  # srun_preflight's (podman exec -e NAME)
    variants = {"validate.yml": benchlib.REPO, "srun preflight": None}
    with contextlib.ExitStack() as stack:
        if args.against:
            variants[f"validate.yml {args.against}"] = stack.enter_context(benchlib.worktree(args.against))
        reports = stack.enter_context(tempfile.TemporaryDirectory(prefix="ncclprep-bench-"))
        for i, n in enumerate(sizes):
            if not args.no_cluster:
                benchlib.cluster("up" if i == 0 else "grow", n, slurm=True)
                site = benchlib.playbook("site", args.inventory, timeout=args.timeout, json_out=False)
                print(f"{n} nodes: site.yml {site.wall_s:.1f} s rc={site.rc}", flush=True)
                if site.rc != 0:
                    sys.stderr.write(site.stdout[-3000:])
                    return 1
            runs: dict[str, list[benchlib.Run]] = {name: [] for name in variants}
            for r in range(args.runs):
                for name, root in variants.items():
                    run = (benchlib.playbook("validate", args.inventory, ["-e", f"preflight_report_dir={reports}"],
                                             args.timeout, json_out=False, root=root)
                           if root else srun_preflight(n, args.timeout))
                    runs[name].append(run)
                    if run.rc != 0:
                        failed = True
                        sys.stderr.write(f"{n} nodes run {r + 1} {name}: rc {run.rc}\n{run.stdout[-2000:]}\n"
                                         f"{run.stderr[-1500:]}\n")
                    print(f"{n} nodes run {r + 1} {name:22s} {run.wall_s:6.1f} s rc={run.rc} controller CPU "
                          f"{run.cpu_s:.2f} s nodes CPU {run.nodes_cpu_s or float('nan'):.1f} s", flush=True)
            for k in range(1, n + 1):  # a fresh record for the health check to judge (not timed)
                benchlib.run(["podman", "exec", f"ncclprep-node{k}", "/usr/local/sbin/ncclprep", "node", "check",
                              "--json"], 120)
            health = [timed_on(k, ["/usr/local/sbin/ncclprep-health", "--dry-run", "--no-refresh"])
                      for k in range(1, n + 1)]
            prolog = [timed_on(k, ["/usr/local/sbin/ncclprep-prolog", "--dry-run"]) for k in range(1, n + 1)]
            rows.append((n, runs, health, prolog))
    print("\nmedians per size: wall s, controller CPU s per host, nodes CPU s per node")
    print(f"{'nodes':>5s} {'variant':22s} {'wall s':>7s} {'ctl CPU/host':>12s} {'nodes CPU/node':>14s}")
    per_size = {}
    for n, runs, health, prolog in rows:
        wall, cpu, nodes = {}, {}, {}
        for name, rs in runs.items():
            wall[name] = median([r.wall_s for r in rs])
            cpu[name] = median([r.cpu_s for r in rs]) / n
            nodes[name] = median([r.nodes_cpu_s for r in rs if r.nodes_cpu_s is not None]) / n
            print(f"{n:5d} {name:22s} {wall[name]:7.1f} {cpu[name]:12.3f} {nodes[name]:14.2f}")
        per_size[n] = cpu
        val, srun = "validate.yml", "srun preflight"
        ratio = cpu[val] / cpu[srun] if cpu[srun] else float("inf")
        ok = ratio >= args.target_cpu_ratio
        print(f"      controller CPU per host, validate.yml / srun preflight: {ratio:.0f}x; target "
              f"{args.target_cpu_ratio:.0f}x: {'met' if ok else 'MISSED'}")
        checks = [("validate.yml controller CPU per host", cpu[val], args.target_ctl_cpu, "s"),
                  ("validate.yml wall / srun preflight's", wall[val] / wall[srun], args.target_wall_ratio, "x"),
                  ("validate.yml nodes CPU per node / srun preflight's", nodes[val] / nodes[srun],
                   args.target_nodes_cpu_ratio, "x")]
        for what, got, target, unit in checks:
            print(f"      {what}: {got:.2f} {unit}; target at most {target:.2f} {unit}: "
                  f"{'met' if got <= target else 'MISSED'}")
            missed += [f"{n}: {what}"] * (got > target)
        for name in runs:
            if name.startswith("validate.yml "):
                print(f"      validate.yml / {name}: wall {wall[val] / wall[name]:.2f}, controller CPU "
                      f"{cpu[val] / cpu[name]:.2f}, nodes CPU {nodes[val] / nodes[name]:.2f}")
        h_s, p_s = max(s for _, s in health), max(s for _, s in prolog)
        print(f"      health check (dry run) on {n} nodes: median {median([s for _, s in health]):.2f} s, "
              f"longest {h_s:.2f} s, exit codes {sorted({rc for rc, _ in health})}; target "
              f"{args.target_health_s:.0f} s: {'met' if h_s <= args.target_health_s else 'MISSED'}")
        print(f"      Prolog (dry run) on {n} nodes: median {median([s for _, s in prolog]):.2f} s, longest "
              f"{p_s:.2f} s, exit codes {sorted({rc for rc, _ in prolog})}; target {args.target_prolog_s:.0f} s: "
              f"{'met' if p_s <= args.target_prolog_s else 'MISSED'}")
        missed += [f"{n}: cpu"] * (not ok) + [f"{n}: health"] * (h_s > args.target_health_s) \
            + [f"{n}: prolog"] * (p_s > args.target_prolog_s)
    if len(per_size) > 1:  # what each added node costs the controller (the run's fixed start cancels out)
        lo, hi = min(per_size), max(per_size)
        for name in per_size[lo]:
            added = (per_size[hi][name] * hi - per_size[lo][name] * lo) / (hi - lo)
            print(f"controller CPU per added node, {lo} -> {hi} nodes, {name}: {added:.3f} s")
    return 1 if failed or (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
