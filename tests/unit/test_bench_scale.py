"""A short run of bench/scale.py (the benchmark itself is not a test): its tables come out and a
single slow node among 16 is named exactly, by the network probe's judgement and by the
collective blame, in every trial."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO


def test_the_scale_bench_runs_and_names_one_slow_node_exactly():
    out = subprocess.run([sys.executable, os.path.join(REPO, "bench", "scale.py"), "--sizes", "8,16", "--bad", "1",
                          "--trials", "3"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    schedule_rows = {int(r.split()[0]): [int(x) for x in r.split()[1:]] for r in lines[1:3]}
    # the ring (n pairs) plus 2 matchings (n/2 pairs each, less the pairs the ring has): 2-3 + 2 rounds
    for n, (rounds, pairs, most) in schedule_rows.items():
        assert 3 <= rounds <= 5 and n < pairs <= 2 * n and 2 <= most <= 4
    verdicts = [r for r in lines if r.strip().startswith("16    1 |")]
    assert len(verdicts) == 1
    cells = verdicts[0].replace("|", " ").split()
    # nodes bad | net exact, healthy named, cpu | coll rounds, exact, healthy named, cpu
    assert cells[2:4] == ["100%", "0%"] and cells[6:8] == ["100%", "0%"], verdicts[0]
    assert cells[5] == "2"  # the ring pairs' two rounds name the node
