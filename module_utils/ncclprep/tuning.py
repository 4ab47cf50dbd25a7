"""The decision rule of ``ncclprep tune`` (issue 26): keep a variant only when it wins beyond the noise.

A tuning run measures the baseline (the settings in force) and each variant several times,
alternating (ABAB..., ``schedule``), so that a slow minute of a noisy machine falls on both. This
module judges the samples; it measures nothing and needs no torch, Ansible or Slurm.

The rule (``decide``), for a variant against the baseline:

1. at every message size, the ratio of the medians, oriented so that above 1 is better
   (busbw: variant / baseline; a time such as the training step: baseline / variant);
2. the target (by default the largest size, where busbw is the figure that matters to training)
   must be at least ``min_gain`` (5 %) better, and significantly so: the lower end of a 95 %
   percentile bootstrap interval of the ratio of medians (``bootstrap_ratio``: both sample sets
   resampled with replacement, ``resamples`` times, a fixed seed, so a run is repeatable) is above 1;
3. no size may be more than ``max_loss`` (2 %) worse (median ratio below 1 - max_loss): a
   setting that wins at one size and loses at another is not kept.

Anything else is "no significant difference" (or "worse at ...") and the defaults stay. The rule and
its thresholds are issue 26's; the bootstrap is Efron's percentile interval (Efron & Tibshirani,
*An Introduction to the Bootstrap*, 1993, ch. 13), chosen over a rank test because it bounds the
quantity the rule is about, the ratio of the medians, and works with five runs a side.

Units: busbw in GB/s (GB = 1e9 bytes), sizes in bytes, times in seconds; the rule uses ratios only.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping, Sequence

#: Smallest gain at the target that is kept (5 %: issue 26).
MIN_GAIN = 0.05
#: Largest loss tolerated at any size (2 %: issue 26).
MAX_LOSS = 0.02
#: Runs of each variant at least (issue 26).
MIN_RUNS = 5
#: Bootstrap resamples, the interval's confidence and the seed (a repeatable decision).
RESAMPLES = 4000
CONFIDENCE = 0.95
SEED = 20261206
METHOD = f"95 % percentile bootstrap of the ratio of medians ({RESAMPLES} resamples)"


def schedule(variants: Sequence[str], runs: int) -> list[tuple[int, str]]:
    """The order of the measurements: ``runs`` rounds, each measuring every variant once, the order
    within a round rotated by one each round (A B C, B C A, C A B, ...), so that no variant is
    measured all in a row and none always first. Returns ``[(round, variant)]``. Raises
    ValueError for fewer than MIN_RUNS runs, fewer than two variants or a variant named twice."""
    if runs < MIN_RUNS:
        raise ValueError(f"runs={runs}: valid: at least {MIN_RUNS} (a median of fewer is noise on a loaded machine)")
    if len(variants) < 2 or len(set(variants)) != len(variants):
        raise ValueError(f"variants={list(variants)}: valid: two or more distinct names (the baseline among them)")
    n = len(variants)
    return [(r, variants[(r + i) % n]) for r in range(runs) for i in range(n)]


def _ratio(base: Sequence[float], variant: Sequence[float], higher_is_better: bool) -> float:
    b, v = statistics.median(base), statistics.median(variant)
    if b <= 0 or v <= 0:
        raise ValueError(f"medians {b} and {v}: valid: positive figures (a rate or a time)")
    return v / b if higher_is_better else b / v


def bootstrap_ratio(base: Sequence[float], variant: Sequence[float], higher_is_better: bool = True,
                    resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                    seed: int = SEED) -> tuple[float, float]:
    """The percentile bootstrap interval ``(low, high)`` of the ratio of medians (oriented as in the
    module docstring), at ``confidence``. Raises ValueError for an empty sample or a median that is
    not positive."""
    if not base or not variant:
        raise ValueError("both the baseline and the variant need samples")
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        b = [rng.choice(base) for _ in base]
        v = [rng.choice(variant) for _ in variant]
        ratios.append(_ratio(b, v, higher_is_better))
    ratios.sort()
    tail = (1 - confidence) / 2
    return ratios[int(tail * (resamples - 1))], ratios[int((1 - tail) * (resamples - 1))]


def decide(base: Mapping[int, Sequence[float]], variant: Mapping[int, Sequence[float]], higher_is_better: bool = True,
           target: int | None = None, min_gain: float = MIN_GAIN, max_loss: float = MAX_LOSS) -> dict:
    """Whether to keep a variant (module docstring).

    ``base`` and ``variant``: size (bytes; any key for a single figure such as the step time) ->
    the samples of each run. ``target``: the size the gain is judged at (default the largest).
    Returns ``{keep, verdict, why, method, target, sizes: {size: {base_median, variant_median,
    ratio}}, interval: (low, high)}``; ``verdict`` is ``keep``, ``no significant difference`` or
    ``worse at <sizes>``. Raises ValueError when the sizes differ, a size has fewer than MIN_RUNS
    samples, or the target is not a measured size."""
    if set(base) != set(variant) or not base:
        raise ValueError(f"sizes {sorted(base)} and {sorted(variant)}: valid: the same sizes, at least one")
    short = sorted(s for s in base if min(len(base[s]), len(variant[s])) < MIN_RUNS)
    if short:
        raise ValueError(f"sizes {short}: fewer than {MIN_RUNS} runs a side")
    target = max(base) if target is None else target
    if target not in base:
        raise ValueError(f"target={target}: valid: a measured size ({', '.join(map(str, sorted(base)))})")
    sizes = {s: {"base_median": statistics.median(base[s]), "variant_median": statistics.median(variant[s]),
                 "ratio": _ratio(base[s], variant[s], higher_is_better)} for s in sorted(base)}
    low, high = bootstrap_ratio(base[target], variant[target], higher_is_better)
    gain = sizes[target]["ratio"] - 1
    worse = [s for s, row in sizes.items() if row["ratio"] < 1 - max_loss]
    out = {"method": METHOD, "target": target, "sizes": sizes, "interval": (low, high)}
    better = "higher" if higher_is_better else "lower"
    if worse:
        text = ", ".join(f"{s} ({(sizes[s]['ratio'] - 1) * 100:+.1f} %)" for s in worse)
        return dict(out, keep=False, verdict=f"worse at {', '.join(map(str, worse))}",
                    why=f"more than {max_loss * 100:g} % worse at {text}: the defaults stay")
    if gain >= min_gain and low > 1:
        return dict(out, keep=True, verdict="keep",
                    why=f"{gain * 100:+.1f} % at {target} ({better} is better), interval {low:.3f}-{high:.3f} above 1, "
                        f"no size more than {max_loss * 100:g} % worse")
    reason = (f"{gain * 100:+.1f} % at {target} is below the {min_gain * 100:g} % a change must win"
              if gain < min_gain else f"the interval {low:.3f}-{high:.3f} of the ratio reaches 1")
    return dict(out, keep=False, verdict="no significant difference", why=f"{reason}: the defaults stay")
