"""CPU lists (``0-3,8``) and the kernel's hex CPU masks (``rps_cpus``, ``smp_affinity``).

Mask format, as the kernel prints it (lib/bitmap.c, ``%*pb``): hex, in 32-bit
groups separated by commas, most significant group first; the first group has
``ceil((nr_cpus % 32) / 4)`` digits (8 when nr_cpus is a multiple of 32), every
other group 8 digits. Example: 40 CPUs, CPUs 0-15 -> ``00,0000ffff``.
"""

from __future__ import annotations

import re

_RANGE_RE = re.compile(r"^(\d+)(?:-(\d+))?$")


def parse_cpulist(text: str) -> list[int]:
    """``"0-3,8,10-11"`` -> ``[0, 1, 2, 3, 8, 10, 11]`` (sorted, unique; ``""`` -> ``[]``).

    Raises ValueError naming the bad part (``"3-1"``, ``"a"``).
    """
    cpus: set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        m = _RANGE_RE.match(part)
        if not m:
            raise ValueError(f"not a CPU list item: {part!r} in {text!r}")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ValueError(f"descending CPU range {part!r} in {text!r}")
        cpus.update(range(lo, hi + 1))
    return sorted(cpus)


def format_cpulist(cpus) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``"0-3,8"``; ``[]`` -> ``""``."""
    out, run = [], []
    for cpu in sorted(set(int(c) for c in cpus)):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [cpu]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def cpus_to_mask(cpus, nr_cpus: int) -> str:
    """Kernel-style hex mask of ``cpus`` on a machine with ``nr_cpus`` possible CPUs.

    Raises ValueError when a CPU is >= nr_cpus or nr_cpus < 1.
    """
    cpus = [int(c) for c in (parse_cpulist(cpus) if isinstance(cpus, str) else cpus)]
    if nr_cpus < 1:
        raise ValueError(f"nr_cpus must be >= 1, got {nr_cpus}")
    bad = [c for c in cpus if c < 0 or c >= nr_cpus]
    if bad:
        raise ValueError(f"CPU(s) {bad} outside 0..{nr_cpus - 1}")
    value = 0
    for c in cpus:
        value |= 1 << c
    groups = (nr_cpus + 31) // 32
    words = [(value >> (32 * i)) & 0xFFFFFFFF for i in reversed(range(groups))]
    first_digits = ((nr_cpus % 32) + 3) // 4 or 8
    return ",".join([f"{words[0]:0{first_digits}x}"] + [f"{w:08x}" for w in words[1:]])


def mask_to_cpus(mask: str) -> list[int]:
    """``"00,0000ffff"`` -> ``[0..15]``. Raises ValueError for non-hex input."""
    text = str(mask).strip().replace(",", "")
    if not text:
        return []
    try:
        value = int(text, 16)
    except ValueError:
        raise ValueError(f"not a hex CPU mask: {mask!r}") from None
    return [i for i in range(value.bit_length()) if value >> i & 1]
