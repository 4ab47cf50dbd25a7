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
import re
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


# ---------------------------------------------------------------------------------------------
# The search space (tune_space) and the plan of a run

#: The variables a variant may set, each with the concern (role, and site.yml tag) that applies
#: it: a variant goes through that role, its input checks and (nic_mtu) its rollback included.
#: RPS/RFS on or off is rps_rfs_cpus (``none``: off; null: the NIC's local CPUs); rps_rfs_enabled is not
#: among them: rps_rfs false leaves the masks as they are, so a run could not go back and forth.
TUNABLE = {"nic_mtu_value": "nic_mtu", "sysctl_tuning_overrides": "sysctl_tuning",
           "nccl_env_overrides": "nccl_env", "rps_rfs_cpus": "rps_rfs"}
#: The switch of a tunable's concern: with it false the role applies nothing, so no variant could be.
SWITCHES = {"nic_mtu_value": "nic_mtu_enabled", "rps_rfs_cpus": "rps_rfs_enabled"}
#: Every variable the plan step reads on each node (a tunable and its switch), with the role whose
#: defaults give its value where the inventory sets none: the CLI hands it to roles/tune's plan.yml
#: as ``tune_variables``.
READ = {**TUNABLE, **{switch: TUNABLE[var] for var, switch in SWITCHES.items()}}
#: Variables whose value is a mapping: a variant's mapping is merged onto the inventory's.
MERGED = frozenset({"sysctl_tuning_overrides", "nccl_env_overrides"})
#: The NCCL variables a variant may set: NCCL's "system configuration" class for sockets and IB
#: queue pairs (NVIDIA/nccl docs/userguide/source/env.rst). The debugging class (NCCL_ALGO,
#: NCCL_PROTO, ...) is not tuned here: NCCL's tuner CSV is the sanctioned way (``tuner_csv``).
NCCL_TUNABLE = ("NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD", "NCCL_IB_QPS_PER_CONNECTION")
BASELINE = "baseline"
#: A dimension's name: it names files of the run and lines of the report.
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")


def same_value(a, b) -> bool:
    """Values equal as the roles take them: ``"4096"`` from ``-e nic_mtu_value=4096`` is 4096."""
    if a is None or b is None:
        return a is b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(same_value(a[k], b[k]) for k in a)
    return str(a).strip() == str(b).strip()


def _label(values: Mapping) -> str:
    parts = []
    for var, value in values.items():
        if isinstance(value, Mapping):
            parts += [f"{k}={v}" for k, v in value.items()]
        else:
            parts.append(f"{var}={value}")
    return " ".join(parts)


def plan(space: Sequence[Mapping], baseline: Mapping) -> list[dict]:
    """The variants of a tuning run, the baseline first.

    ``space``: tune_space, ``[{name, values: [{variable: value}, ...]}]`` (one dimension per entry,
    each value a variant that sets only TUNABLE variables; roles/tune/meta/argument_specs.yml).
    ``baseline``: the inventory's value of every variable the space names (the same on every node).
    A variant's mapping (MERGED) is merged onto the inventory's; a variant equal to the baseline is
    the baseline and is not measured twice. Returns ``[{name, dimension, label, vars, concerns}]``:
    ``vars`` the extra variables that apply it (``{}`` for the baseline), ``concerns`` the roles
    that apply them. Raises ValueError naming ``tune_space[i]...``, the variable and the value for
    a variable that cannot be tuned, an NCCL variable outside NCCL_TUNABLE, an empty dimension or a
    name used twice, and for a variable whose concern is switched off (SWITCHES) in ``baseline``.
    """
    out = [{"name": BASELINE, "dimension": None, "label": "the inventory's settings", "vars": {}, "concerns": []}]
    seen = set()
    for i, dim in enumerate(space):
        where = f"tune_space[{i}]"
        if not isinstance(dim, Mapping):
            raise ValueError(f"{where}={dim!r}: valid: a mapping {{name, values}}")
        name = dim.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name) or name in seen or name == BASELINE:
            raise ValueError(f"{where}.name={name!r}: valid: a name of its own (letters, digits, '_.-'; "
                             f"not {BASELINE!r}, not used twice)")
        seen.add(name)
        values = dim.get("values") or []
        if not isinstance(values, list) or not values:
            raise ValueError(f"{where}.values={values!r}: valid: one value or more (each a mapping of variables)")
        for j, value in enumerate(values):
            at = f"{where}.values[{j}]"
            if not isinstance(value, Mapping) or not value:
                raise ValueError(f"{at}={value!r}: valid: a mapping of variables, e.g. {{nic_mtu_value: 1500}}")
            merged = {}
            for var, val in value.items():
                if var not in TUNABLE:
                    raise ValueError(f"{at}.{var}={val!r}: {var} cannot be tuned; valid: {', '.join(TUNABLE)}")
                switch = SWITCHES.get(var)
                if switch and baseline.get(switch) is False:
                    raise ValueError(f"{at}.{var}={val!r}: {switch} is false in the inventory, so {TUNABLE[var]} "
                                     "applies nothing: switch it on to tune it")
                if var in MERGED:
                    if not isinstance(val, Mapping):
                        raise ValueError(f"{at}.{var}={val!r}: valid: a mapping merged onto the inventory's")
                    if var == "nccl_env_overrides":
                        bad = sorted(set(val) - set(NCCL_TUNABLE))
                        if bad:
                            raise ValueError(f"{at}.nccl_env_overrides: {', '.join(bad)} cannot be tuned; valid: "
                                             f"{', '.join(NCCL_TUNABLE)} (NCCL's system configuration; the "
                                             "debugging class goes in a tuner CSV, `ncclprep tune --nccl-tuner`)")
                    merged[var] = dict(baseline.get(var) or {}, **val)
                else:
                    merged[var] = val
            if all(same_value(merged[v], baseline.get(v)) for v in merged):
                continue
            label = f"{name}: {_label(value)}"
            if any(v["label"] == label for v in out):
                continue
            out.append({"name": f"{name}-{j}", "dimension": name, "label": label, "vars": merged, "own": dict(value),
                        "concerns": sorted({TUNABLE[v] for v in merged})})
    return out


def run_figures(records: Mapping[str, Mapping], op: str) -> dict:
    """One measurement run's figures from the nodes' records (host -> ``{probe, smoke}``, the
    collectives' and the training job's results as the engine's records hold them): ``{busbw:
    {size: GB/s}, step_s: seconds or None, errors: [...]}``. busbw per size is the slowest rank's
    (collectives.summarize_collectives); the step time is the slowest worker's. A probe or job
    that did not pass is an error (its figures are not used)."""
    from ansible.module_utils.ncclprep.probes.collectives import summarize_collectives

    errors = []
    for host, rec in sorted(records.items()):
        for what in ("probe", "smoke"):
            res = rec.get(what)
            if res and res.get("status") != "PASS":
                why = res.get("error") or res.get("stage") or ""
                errors.append(f"{host}: {what} {res.get('status')}: {why}".strip())
    rows = summarize_collectives({h: r for h, r in records.items() if r.get("probe")}).get(op) or []
    busbw = {int(r["size_bytes"]): float(r["busbw_gbps"]) for r in rows if not r.get("wrong")}
    steps = [w.get("step_s") for r in records.values() for w in ((r.get("smoke") or {}).get("workers") or [])]
    steps = [float(s) for s in steps if isinstance(s, (int, float))]
    return {"busbw": busbw, "step_s": max(steps) if steps else None, "errors": errors}


def judge(variants: Sequence[Mapping], runs: Mapping[str, Sequence[Mapping]], target: int | None = None,
          min_gain: float = MIN_GAIN, max_loss: float = MAX_LOSS) -> dict:
    """The decision of a whole run: every variant against the baseline, then the winner of each dimension.

    ``variants``: ``plan``'s list; ``runs``: variant name -> its runs' ``run_figures``. A variant is
    kept when ``decide`` keeps its busbw and, where the training job was measured, its median step
    time is not more than ``max_loss`` worse (a setting that wins alone can lose under training
    traffic). Of a dimension's kept variants, the one with the largest gain at the target wins.
    ``target``: the size asked for (bytes); the measured size nearest to it is judged (the probe
    rounds a size down to whole elements per rank). Returns ``{decisions: {name: decide's dict +
    step}, winners: [name], vars: {variable: value}}``, the winners' mappings (MERGED) merged key by
    key. Raises ValueError as ``decide`` does (too few runs)."""
    def series(name):
        sizes: dict[int, list[float]] = {}
        steps = []
        for fig in runs.get(name) or []:
            for size, v in fig["busbw"].items():
                sizes.setdefault(int(size), []).append(v)
            if fig.get("step_s"):
                steps.append(fig["step_s"])
        return sizes, steps

    base, base_steps = series(BASELINE)
    if target is not None and base and target not in base:
        # the collectives round a size down to whole elements per rank (16777216 -> 16777212 on 3 ranks)
        target = min(base, key=lambda s: abs(s - target))
    decisions, best = {}, {}
    for v in variants:
        if v["name"] == BASELINE:
            continue
        sizes, steps = series(v["name"])
        d = decide(base, sizes, True, target, min_gain, max_loss)
        step = None
        if len(steps) >= MIN_RUNS and len(base_steps) >= MIN_RUNS:
            step = {"base_median": statistics.median(base_steps), "variant_median": statistics.median(steps),
                    "ratio": _ratio(base_steps, steps, higher_is_better=False)}
            if d["keep"] and step["ratio"] < 1 - max_loss:
                d = dict(d, keep=False, verdict="worse in training",
                         why=f"busbw {d['why'].split(',')[0]}, but the training step is "
                             f"{(1 / step['ratio'] - 1) * 100:+.1f} % longer (more than {max_loss * 100:g} %): "
                             "the defaults stay")
        d = dict(d, step=step, label=v["label"], dimension=v["dimension"])
        decisions[v["name"]] = d
        gain = d["sizes"][d["target"]]["ratio"]
        if d["keep"] and (v["dimension"] not in best or gain > best[v["dimension"]][0]):
            best[v["dimension"]] = (gain, v)
    winners = [v["name"] for _, v in best.values()]
    merged: dict = {}
    for _, v in best.values():
        for var, value in v["vars"].items():
            # two dimensions may tune one mapping (socket buffers and the backlog, both sysctls): each
            # adds its own keys onto what the first brought (the inventory's and its own)
            merged[var] = dict(merged[var], **v["own"][var]) if var in MERGED and var in merged else value
    return {"decisions": decisions, "winners": winners, "vars": merged}


def verify_figures(result: Mapping, runs: Sequence[Mapping], measured: Mapping[int, float],
                   variants: Mapping[str, Mapping]) -> dict:
    """validate.yml's busbw after the decision against the tuning's own runs, at the target size.

    ``result``: ``judge``'s; ``runs``: every run's ``run_figures`` with its ``variant``; ``measured``:
    validate.yml's busbw per size (GB/s) for the same collective. The expected figure is the kept
    variant's (the best of several), else the baseline's. Returns ``{ok, expected: [low, median,
    high], measured, note}``: ``ok`` when the measured figure is at least the lowest run of the
    expected variant (inside or above its spread); None when nothing was measured at the target."""
    decisions = result.get("decisions") or {}
    target = next((d["target"] for d in decisions.values()), None)
    name = max(result.get("winners") or [BASELINE],
               key=lambda n: decisions[n]["sizes"][target]["ratio"] if n in decisions else 0)
    series = [r["busbw"][target] for r in runs if r.get("variant") == name and target in (r.get("busbw") or {})]
    got = measured.get(target) if target is not None else None
    if got is None or not series:
        return {"ok": None, "expected": None, "measured": got,
                "note": f"validate.yml measured no busbw at {target} bytes: nothing to compare"}
    low, med, high = min(series), statistics.median(series), max(series)
    ok = got >= low
    label = variants[name]["label"] if name in variants else name
    note = (f"busbw at {target} bytes {got:.4g} GB/s against {med:.4g} (runs {low:.4g}-{high:.4g}) of {label}: "
            + ("as tuned" if ok else "below every tuning run; run validate.yml again, and if it stays low the "
                                     "kept settings do not hold together (docs/tuning.md)"))
    return {"ok": ok, "expected": [low, med, high], "measured": got, "note": note}


def _at(by_size: Mapping, size) -> dict:
    """``by_size[size]`` whether the keys are ints or, read back from JSON, strings."""
    return by_size[size] if size in by_size else by_size[str(size)]


def report_section(record: Mapping) -> dict:
    """cluster.json's ``tuning`` (docs/report-schema.md) from ``ncclprep tune``'s record
    (reports/tune-*/tuning.json): the decision, and per variant its busbw per size as the median
    and the spread of its runs (GB/s). Sizes are strings (JSON keys)."""
    result = record.get("result") or {}
    decisions = result.get("decisions") or {}
    variants = []
    for v in record.get("variants") or []:
        runs = [r for r in record.get("runs") or [] if r.get("variant") == v["name"]]
        sizes: dict[str, dict] = {}
        for size in sorted({int(s) for r in runs for s in r.get("busbw") or {}}):
            xs = [r["busbw"][size] if size in r["busbw"] else r["busbw"].get(str(size)) for r in runs]
            xs = [x for x in xs if x is not None]
            sizes[str(size)] = {"median": statistics.median(xs), "low": min(xs), "high": max(xs), "runs": len(xs)}
        steps = [r["step_s"] for r in runs if r.get("step_s")]
        d = decisions.get(v["name"]) or {}
        variants.append({"name": v["name"], "label": v["label"], "vars": v.get("vars") or {}, "sizes": sizes,
                         "step_s": statistics.median(steps) if steps else None,
                         "verdict": d.get("verdict", "baseline" if v["name"] == BASELINE else None),
                         "keep": bool(d.get("keep")), "why": d.get("why"),
                         "interval": list(d["interval"]) if d.get("interval") else None,
                         "ratio": _at(d["sizes"], d["target"])["ratio"] if d else None})
    target = next((d.get("target") for d in decisions.values()), None)
    plan = record.get("plan") or {}
    winners = [v["label"] for v in variants if v["name"] in (result.get("winners") or [])]
    return {"generated_at": record.get("generated_at"), "status": record.get("status"),
            "op": plan.get("op"), "target_bytes": target, "method": record.get("method"),
            "min_gain": plan.get("min_gain"), "max_loss": plan.get("max_loss"), "runs_per_variant": plan.get("runs"),
            "winners": winners, "written": record.get("written"), "error": record.get("error"),
            "decision": (f"kept {', '.join(winners)}" if winners else
                         "no significant difference: the defaults stay" if decisions else
                         record.get("error") or record.get("status")),
            "variants": variants}
