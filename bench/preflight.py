#!/usr/bin/env python3
"""Benchmark: the whole preflight (validate.yml) with and without issue 9's network probe and
drift check, side by side in one run, on a provisioned cluster (default: the local one).

    scripts/local_cluster.sh up 3 && ansible-playbook site.yml -i inventory/local
    .venv/bin/python bench/preflight.py [--runs 3] [--inventory inventory/local] [--limit-ratio 1.3]

Runs alternate (baseline, full, baseline, full, ...) so that the machine's noise falls on both
alike. Baseline: ``-e preflight_net_enabled=false -e preflight_drift_enabled=false``, the
preflight as it was before issue 9.
Prints every run's wall time, the medians and their ratio (full / baseline); exits 1 when a run
fails or the ratio is above ``--limit-ratio`` (the target of issue 9: 1.3).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = {"baseline": ["-e", "preflight_net_enabled=false", "-e", "preflight_drift_enabled=false"], "full": []}


def one_run(inventory: str, extra: list[str], reports: str) -> tuple[float, int]:
    """Wall seconds and exit code of one validate.yml run."""
    bin_dir = os.path.dirname(sys.executable)
    cmd = [os.path.join(bin_dir, "ansible-playbook"), "validate.yml", "-i", inventory,
           "-e", f"preflight_report_dir={reports}", *extra]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    conf = os.path.join(REPO, ".cluster", "containers.conf")
    if os.path.exists(conf):
        env["CONTAINERS_CONF"] = conf
    start = time.monotonic()
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-2000:])
    return time.monotonic() - start, out.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each variant (default 3)")
    ap.add_argument("--inventory", default="inventory/local")
    ap.add_argument("--limit-ratio", type=float, default=1.3)
    args = ap.parse_args()
    times: dict[str, list[float]] = {k: [] for k in VARIANTS}
    failed = False
    with tempfile.TemporaryDirectory(prefix="ncclprep-bench-") as reports:
        for i in range(args.runs):
            for name, extra in VARIANTS.items():
                seconds, rc = one_run(args.inventory, extra, reports)
                times[name].append(seconds)
                failed |= rc != 0
                print(f"run {i + 1} {name:8s} {seconds:6.1f} s  rc={rc}", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["full"] / med["baseline"]
    print(f"median baseline (no net_probe, no drift) {med['baseline']:.1f} s, full {med['full']:.1f} s, "
          f"ratio {ratio:.2f} (limit {args.limit_ratio})")
    return 1 if failed or ratio > args.limit_ratio else 0


if __name__ == "__main__":
    sys.exit(main())
