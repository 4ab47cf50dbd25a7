#!/usr/bin/env python3
"""Benchmark: site.yml's first run against its re-run with nothing to change, side by side in one
run on the local cluster, with where the re-run's time goes.

    .venv/bin/python bench/provision.py [--nodes 4] [--reruns 3]
    .venv/bin/python bench/provision.py --no-cluster --reruns 3     # the cluster as it is

Brings the local cluster up fresh with ``--nodes`` nodes (``scripts/local_cluster.sh up``), runs
site.yml once (the first run: everything changes), then ``--reruns`` times more. Every re-run must
report changed=0 on every host (site.yml is idempotent); a change fails the benchmark.
With ``--no-cluster`` there is no first run: the cluster is taken as provisioned. With
``--against REV`` every re-run alternates with a re-run of revision REV's site.yml and roles (a
git worktree, removed at the end) on the same cluster, and the ratio is printed: a change to the
roles measured side by side. Both sides' re-runs then skip the node check's install (tag
node_check): each tree's node-side core differs, and installing it would change every node.

Prints each run's wall time, changed count, the controller's CPU seconds and the nodes' (the local
cluster's containers, from their cgroups); the medians and the ratio
re-run / first run; the re-run's time per role (from the file each task comes from, the
ansible.posix.json callback), with the tasks executed; and its ten longest tasks.
Target (issue 13): a re-run on 4 nodes in --target-s (20) seconds or less. Exits 1 when a run
fails or changes something on a re-run, or, with --strict, when the target is missed.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys

import benchlib

ROLE_RE = re.compile(r"/roles/([^/]+)/")


def role_of(task: dict) -> str:
    """The role a task comes from (``path`` = file:line), or the playbook's file name."""
    m = ROLE_RE.search(task["path"])
    return m.group(1) if m else os.path.basename(task["path"].rsplit(":", 1)[0]) or "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4, help="local cluster size (default 4)")
    ap.add_argument("--reruns", type=int, default=3, help="re-runs after the first run (default 3)")
    ap.add_argument("--inventory", default="inventory/local")
    ap.add_argument("--no-cluster", action="store_true", help="no bring-up and no first run")
    ap.add_argument("--timeout", type=int, default=1200, help="deadline of one site.yml run, s (default 1200)")
    ap.add_argument("--target-s", type=float, default=20.0)
    ap.add_argument("--strict", action="store_true", help="exit 1 when the target is missed")
    ap.add_argument("--save", metavar="DIR", help="keep each run's ansible.posix.json document in DIR")
    ap.add_argument("--against", metavar="REV",
                    help="alternate every re-run with one of git revision REV's site.yml and roles (a worktree), "
                         "and print the ratio")
    args = ap.parse_args()
    if not args.against:
        return measure(args, None)
    with benchlib.worktree(args.against) as other:
        return measure(args, other)


def measure(args: argparse.Namespace, other: str | None) -> int:
    """The runs of main(); ``other``: the checkout of --against, or None."""
    runs: dict[str, list] = {"first": [], "re-run": [], "re-run REV": []}
    if not args.no_cluster:
        benchlib.cluster("up", args.nodes)
    plan = ([] if args.no_cluster else ["first"]) + (["re-run REV", "re-run"] if other else ["re-run"]) * args.reruns
    # Side by side, each tree's re-run would install its own node-side core over the other's (a change
    # every run): both leave the node check out (site.yml's tag node_check).
    extra = ["--skip-tags", "node_check"] if other else []
    for i, kind in enumerate(plan):
        root = other if kind == "re-run REV" else benchlib.REPO
        run = benchlib.playbook("site", args.inventory, extra if kind != "first" else [], timeout=args.timeout,
                                root=root)
        run.save(args.save, f"site-{i + 1}-{kind}")
        stats = benchlib.recap(run)
        changed = sum(h.get("changed", 0) for h in stats.values())
        failed = sum(h.get("failures", 0) + h.get("unreachable", 0) for h in stats.values())
        print(f"run {i + 1} {kind:7s} {run.wall_s:6.1f} s  hosts {len(stats)} changed {changed} failed {failed} "
              f"controller CPU {run.cpu_s:.1f} s nodes CPU {run.nodes_cpu_s or float('nan'):.1f} s", flush=True)
        if run.rc != 0 or failed:
            sys.stderr.write(run.stdout[-2000:] + run.stderr[-1500:])
            return 1
        if kind != "first" and changed:
            hosts = {h: s["changed"] for h, s in stats.items() if s.get("changed")}
            tasks = [f"{t['name']}: {t['changed']}" for t in benchlib.task_times(run.json()) if t["changed"]]
            print(f"a re-run changed something: {hosts} {tasks}", file=sys.stderr)
            return 1
        runs[kind].append(run)
    rerun = statistics.median(r.wall_s for r in runs["re-run"])
    print(f"\nmedian re-run {rerun:.1f} s over {len(runs['re-run'])} runs", end="")
    if other:
        rev = statistics.median(r.wall_s for r in runs["re-run REV"])
        cpu = [statistics.median(r.nodes_cpu_s or 0.0 for r in runs[k]) for k in ("re-run", "re-run REV")]
        print(f"; {args.against}'s {rev:.1f} s; this tree / {args.against}: wall {rerun / rev:.2f}, "
              f"nodes CPU {cpu[0] / cpu[1] if cpu[1] else float('nan'):.2f}", end="")
    if runs["first"]:
        first = runs["first"][0].wall_s
        print(f"; first run {first:.1f} s; re-run / first {rerun / first:.2f}")
    else:
        print()
    per_role: dict[str, list[float]] = {}
    per_task: dict[tuple, list[float]] = {}
    n_tasks = []
    for run in runs["re-run"]:
        stages, tasks = benchlib.stage_times(run, role_of)
        n_tasks.append(len(tasks))
        for k, v in stages.items():
            per_role.setdefault(k, []).append(v)
        for t in tasks:
            per_task.setdefault((role_of(t), t["name"]), []).append(t["seconds"])
    print(f"\nre-run by role (median s; {statistics.median(n_tasks):.0f} tasks executed)")
    for role, secs in sorted(per_role.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"{statistics.median(secs):7.1f}  {role}")
    print("\nlongest tasks of the re-run (median s, role, task)")
    for (role, name), secs in sorted(per_task.items(), key=lambda kv: -statistics.median(kv[1]))[:10]:
        print(f"{statistics.median(secs):7.1f}  {role:16s} {name}")
    ok = rerun <= args.target_s
    print(f"\nre-run on {len(benchlib.recap(runs['re-run'][0]))} nodes: {rerun:.1f} s; "
          f"target {args.target_s:.0f} s: {'met' if ok else 'MISSED'}")
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
