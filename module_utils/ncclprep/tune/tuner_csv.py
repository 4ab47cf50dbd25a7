"""An NCCL tuner CSV from recorded nccl-tests sweeps (``ncclprep tune --nccl-tuner``, issue 26).

NCCL's docs put NCCL_ALGO and NCCL_PROTO among the debugging variables ("should generally not be set
for production code"); the sanctioned way to choose an algorithm and a protocol per message size is a
tuner plugin, and NCCL's example tuner reads a CSV named by NCCL_TUNER_CONFIG_FILE, one line per
size range (NVIDIA/nccl ``plugins/tuner/example``):

    collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks

with collectives ``allreduce``, ``allgather``, ``reducescatter``, ``broadcast``, ``reduce``;
algorithms ``tree``, ``ring``, ``collnet_direct``, ``collnet_chain``, ``nvls``, ``nvls_tree``,
``pat``; protocols ``ll``, ``ll128``, ``simple``; ``-1`` keeps NCCL's channel count, or matches
any number of nodes or ranks.

The input is one nccl-tests output per forced (algorithm, protocol) and, best, one with NCCL's own
choice (no NCCL_ALGO, NCCL_PROTO): the sweep's label comes from the NCCL INFO lines that show them
(``NCCL_ALGO set by environment to Ring``, printed under NCCL_DEBUG=INFO) or is given as
``ALGO,PROTO=FILE`` (``default=FILE`` for NCCL's own). Rows are read by the doctor's parser
(``parsers.nccl_tests``). At each size a sweep's figure is the lower of its out-of-place and
in-place busbw (GB/s, GB = 1e9 bytes). The rule, ``choose``: the best sweep at a size is written
only when it beats NCCL's own choice by at least ``min_gain`` (5 %, as ``tuning.decide``); without
a default sweep, the best is written. Consecutive sizes with the same choice make one range; sizes
outside the sweeps are left to NCCL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ansible.module_utils.ncclprep.parsers.nccl_tests import parse_nccl_tests

#: nccl-tests' binary -> the tuner CSV's collective name.
COLLECTIVES = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reducescatter",
               "broadcast": "broadcast", "reduce": "reduce"}
ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")
DEFAULT = "default"
MIN_GAIN = 0.05
HEADER = "collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks"

_ENV_RE = re.compile(r"\bNCCL_(ALGO|PROTO) set (?:by environment )?to (\S+?)\.?\s*$", re.M)
_TEST_RE = re.compile(r"Collective test starting: (\w+?)_perf", re.M)
_RANK_RE = re.compile(r"^#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)", re.M)


def read_sweep(text: str, label: str | None = None, source: str = "") -> dict:
    """One nccl-tests output: ``{label, algorithm, protocol, collective, nodes, ranks, busbw: {size:
    GB/s}, source}``. ``label``: ``ALGO,PROTO`` or ``default``; None reads it from the NCCL INFO lines
    (no NCCL_ALGO/NCCL_PROTO line: NCCL's own choice, ``default``). Raises ValueError naming ``source``
    for an unknown algorithm or protocol, a sweep forcing only one of the two, or no data row."""
    found = {k.lower(): v.lower() for k, v in _ENV_RE.findall(text)}
    if label is not None:
        if label.lower() == DEFAULT:
            found = {}
        else:
            parts = [p.strip().lower() for p in label.split(",")]
            if len(parts) != 2:
                raise ValueError(f"{source}: label {label!r}: valid: ALGO,PROTO (e.g. ring,simple) or {DEFAULT}")
            found = {"algo": parts[0], "proto": parts[1]}
    algo, proto = found.get("algo"), found.get("proto")
    if (algo is None) != (proto is None):
        raise ValueError(f"{source}: forces only NCCL_{'ALGO' if algo else 'PROTO'}: give both, as ALGO,PROTO=FILE, "
                         "so the CSV line says what was measured")
    if algo is not None and (algo not in ALGORITHMS or proto not in PROTOCOLS):
        raise ValueError(f"{source}: algorithm {algo!r}, protocol {proto!r}: valid: {', '.join(ALGORITHMS)}; "
                         f"{', '.join(PROTOCOLS)}")
    parsed = parse_nccl_tests(text)
    busbw = {}
    for row in parsed["rows"]:
        halves = [h["busbw_gbps"] for h in (row["out_of_place"], row["in_place"]) if h["busbw_gbps"] is not None]
        if halves:
            busbw[row["size"]] = min(halves)
    if not busbw:
        raise ValueError(f"{source}: no nccl-tests data row (size, count, type, ... busbw)")
    test = _TEST_RE.search(text)
    if test and test.group(1) not in COLLECTIVES:
        raise ValueError(f"{source}: {test.group(1)}_perf: the tuner CSV takes {', '.join(COLLECTIVES)} "
                         "(NCCL's example tuner)")
    ranks = _RANK_RE.findall(text)
    return {"label": DEFAULT if algo is None else f"{algo},{proto}", "algorithm": algo, "protocol": proto,
            "collective": COLLECTIVES.get(test.group(1)) if test else None,
            "ranks": len({r for r, _ in ranks}) or None, "nodes": len({h for _, h in ranks}) or None,
            "busbw": busbw, "source": source}


def choose(sweeps: Sequence[Mapping], min_gain: float = MIN_GAIN) -> list[dict]:
    """Per size measured by every sweep: ``{size, choice: (algo, proto) or None, best, default,
    gain}``, sizes ascending. ``choice`` None leaves the size to NCCL (no forced sweep beat NCCL's
    own by ``min_gain``). Raises ValueError with no forced sweep, or two sweeps of one label."""
    labels = [s["label"] for s in sweeps]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        named = "; ".join(f"{x}: {', '.join(s['source'] for s in sweeps if s['label'] == x)}" for x in twice)
        raise ValueError(f"two sweeps of one label ({named}): valid: one sweep per algorithm and protocol (and one "
                         f"{DEFAULT}); a sweep without NCCL_ALGO/NCCL_PROTO lines (NCCL_DEBUG=INFO) is {DEFAULT}: "
                         "label it as ALGO,PROTO=FILE")
    forced = [s for s in sweeps if s["label"] != DEFAULT]
    if not forced:
        raise ValueError("no sweep forces an algorithm and a protocol: nothing to choose from")
    default = next((s for s in sweeps if s["label"] == DEFAULT), None)
    sizes = sorted(set.intersection(*(set(s["busbw"]) for s in sweeps)))
    if not sizes:
        spans = "; ".join(f"{s['source']}: {min(s['busbw'])}-{max(s['busbw'])}" for s in sweeps)
        raise ValueError(f"the sweeps share no size: {spans} (record them with the same -b -e -f)")
    out = []
    for size in sizes:
        best = max(forced, key=lambda s: s["busbw"][size])
        ref = default["busbw"][size] if default else None
        # NCCL's own at 0.00 (nccl-tests prints two decimals: a small size): no figure to beat, left to NCCL
        gain = None if not ref else best["busbw"][size] / ref - 1
        keep = default is None or (gain is not None and gain >= min_gain)
        out.append({"size": size, "choice": (best["algorithm"], best["protocol"]) if keep else None,
                    "best": best["label"], "busbw": best["busbw"][size], "default": ref, "gain": gain})
    return out


def ranges(chosen: Sequence[Mapping]) -> list[dict]:
    """Consecutive sizes with one choice as one range: ``{min_bytes, max_bytes, algorithm, protocol}``.
    A size owns the bytes above the size before it (the smallest only itself: below it nothing was
    measured and NCCL chooses); a size left to NCCL ends a range."""
    out: list[dict] = []
    prev = None
    for row in chosen:
        low = row["size"] if prev is None else prev + 1
        prev = row["size"]
        if row["choice"] is None:
            continue
        algo, proto = row["choice"]
        if out and out[-1]["max_bytes"] == low - 1 and (out[-1]["algorithm"], out[-1]["protocol"]) == (algo, proto):
            out[-1]["max_bytes"] = row["size"]
        else:
            out.append({"min_bytes": low, "max_bytes": row["size"], "algorithm": algo, "protocol": proto})
    return out


def render(collective: str, rows: Sequence[Mapping], chosen: Sequence[Mapping], nodes: int | None,
           ranks: int | None, sources: Sequence[str], stamp: str) -> str:
    """The CSV with comment lines (``#``, which the example tuner skips): the sweeps read, and per
    size the best busbw and its gain over NCCL's own. ``nodes``/``ranks`` None match any (-1)."""
    lines = [f"# NCCL tuner config (NCCL_TUNER_CONFIG_FILE) written by `ncclprep tune --nccl-tuner` on {stamp}",
             f"# from {len(sources)} nccl-tests sweeps: {', '.join(sources)}",
             "# size (bytes): best sweep, its busbw (GB/s; the lower of out-of-place and in-place), against NCCL's own"]
    for c in chosen:
        vs = "" if c["default"] is None else f" against {c['default']:.4g}" + (
            "" if c["gain"] is None else f" ({c['gain'] * 100:+.1f} %)")
        lines.append(f"#   {c['size']}: {c['best']} {c['busbw']:.4g}{vs}"
                     + ("" if c["choice"] else ": left to NCCL"))
    lines.append("# " + HEADER)
    for r in rows:
        lines.append(f"{collective},{r['min_bytes']},{r['max_bytes']},{r['algorithm']},{r['protocol']},-1,"
                     f"{nodes if nodes else -1},{ranks if ranks else -1}")
    return "\n".join(lines) + "\n"
