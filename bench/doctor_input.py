#!/usr/bin/env python3
"""Benchmark: the doctor on hostile or unusual input (review F14), this checkout against another
revision side by side in one run.

    .venv/bin/python bench/doctor_input.py [--against REV] [--runs 3] [--timeout 60] [--big-gb 2]

Inputs, written once to a temporary folder:

    long line      an NCCL log with one base64 line of 100 KB
    20000 WARN     an NCCL log of 20,000 WARN lines, each with other numbers
    alias bomb     netplan YAML whose nine levels of aliases expand to 9^9 entries
    big file       an NCCL log of --big-gb GB (1e9 bytes): a failed job's log run long

Each run is ``ncclprep doctor --json FILE`` in a fresh process (this checkout's venv, each
revision's own sources first on sys.path), timed with its own wall seconds and its largest resident
set (getrusage of the child: Linux reports KiB, printed as MB = 1e6 bytes). A run past
``--timeout`` s is killed and printed as such. Prints every run, then per input the medians and
the ratio other/this. Target (issue 23): every input answered in seconds under 200 MB. Exits 1
when this checkout misses the target or ends otherwise than the doctor's 0, 1 (a finding) or 2
(input refused, as the alias bomb is).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import benchlib

WARN = "node1:4242:4300 [0] transport/net_socket.cc:{n} NCCL WARN NET/Socket : peer 10.0.0.{m}<{p}> closed\n"
TARGET_S, TARGET_MB = 10.0, 200.0


def write_inputs(folder: str, big_gb: float) -> dict[str, str]:
    """Write the four inputs into ``folder``; returns {input name: path}."""
    paths = {}
    paths["long line"] = os.path.join(folder, "long.log")
    with open(paths["long line"], "w", encoding="ascii") as fh:
        fh.write("node1:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n" + "QUJD" * 25_000 + "\n")
    paths["20000 WARN"] = os.path.join(folder, "warn.log")
    with open(paths["20000 WARN"], "w", encoding="ascii") as fh:
        fh.writelines(WARN.format(n=i, m=i % 250, p=40000 + i) for i in range(20_000))
    paths["alias bomb"] = os.path.join(folder, "bomb.yaml")
    with open(paths["alias bomb"], "w", encoding="ascii") as fh:
        fh.write("network:\n  version: 2\n  ethernets:\n    eth0: {mtu: 9000}\na0: &a0 [x, x, x, x, x, x, x, x, x]\n")
        for i in range(1, 10):
            fh.write(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n")
    paths["big file"] = os.path.join(folder, "big.log")
    block = "".join(f"node1:1:1 [0] NCCL INFO Channel {i:02d} : 0[0] -> 1[1] via NET/Socket/0\n"
                    for i in range(64)).encode()
    todo = int(big_gb * 1e9)
    with open(paths["big file"], "wb") as fh:
        while todo > 0:
            fh.write(block[:todo])
            todo -= len(block)
    return paths


def doctor_run(root: str, path: str, timeout: int) -> dict:
    """``ncclprep doctor --json PATH`` with the sources of checkout ``root``; returns wall_s,
    maxrss_mb (None when killed), rc (None when killed past ``timeout``)."""
    code = ("import sys; sys.path[:0] = [sys.argv[1] + '/src']; from ncclprep.cli import main; "
            "sys.exit(main(['doctor', '--json', sys.argv[2]]))")
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", code, root, path], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        _, status, usage = _wait4(proc, timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return {"wall_s": time.monotonic() - start, "maxrss_mb": None, "rc": None}
    return {"wall_s": time.monotonic() - start, "maxrss_mb": usage.ru_maxrss * 1024 / 1e6,
            "rc": os.waitstatus_to_exitcode(status)}


def _wait4(proc: subprocess.Popen, timeout: int):
    """os.wait4 on ``proc`` with a deadline (polling every 20 ms); raises subprocess.TimeoutExpired."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return pid, status, usage
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        time.sleep(0.02)


def _fmt(run: dict) -> str:
    if run["rc"] is None:
        return f"killed after {run['wall_s']:.1f} s"
    return f"{run['wall_s']:.2f} s, {run['maxrss_mb']:.0f} MB, exit {run['rc']}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", default="540fac9", help="the revision to compare with (default 540fac9)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=60, help="seconds before a run is killed")
    parser.add_argument("--big-gb", type=float, default=2.0, help="size of the big file in GB (1e9 bytes)")
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with tempfile.TemporaryDirectory(prefix="ncclprep-doctor-bench-") as tmp, benchlib.worktree(args.against) as other:
        print(f"writing inputs ({args.big_gb:g} GB big file) ...", flush=True)
        inputs = write_inputs(tmp, args.big_gb)
        trees = {"this": benchlib.REPO, args.against: other}
        runs: dict[tuple[str, str], list[dict]] = {}
        for round_ in range(args.runs):
            for name, path in inputs.items():
                for label, root in trees.items():
                    run = doctor_run(root, path, args.timeout)
                    runs.setdefault((name, label), []).append(run)
                    print(f"round {round_ + 1}  {name:<11} {label:<8} {_fmt(run)}", flush=True)
    print(f"\n{'input':<11} {'this s':>8} {'this MB':>8} {args.against + ' s':>12} {'ratio':>7}")
    failed = False
    for name in inputs:
        mine, theirs = runs[(name, "this")], runs[(name, args.against)]
        wall = statistics.median(r["wall_s"] for r in mine)
        rss = max((r["maxrss_mb"] or 0) for r in mine)
        other_wall = statistics.median(r["wall_s"] for r in theirs)
        killed = sum(r["rc"] is None for r in theirs)
        other = f">{other_wall:.1f}" if killed else f"{other_wall:.2f}"
        print(f"{name:<11} {wall:>8.2f} {rss:>8.0f} {other:>12} {other_wall / wall:>6.1f}x"
              + (f"  ({killed} of {len(theirs)} killed at {args.timeout} s)" if killed else ""))
        if wall > TARGET_S or rss > TARGET_MB or any(r["rc"] not in (0, 1, 2) for r in mine):
            failed = True
    print(f"\ntarget: under {TARGET_S:g} s and {TARGET_MB:g} MB each: {'MISSED' if failed else 'met'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
