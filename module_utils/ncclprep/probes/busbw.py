"""Algorithm and bus bandwidth of collectives, as nccl-tests defines them.

Source: NVIDIA nccl-tests, doc/PERFORMANCE.md. ``algbw = size / time``;
``busbw = algbw * factor(op, n)`` where the factor makes the figure comparable
with the hardware's link bandwidth whatever the number of ranks ``n``:

- all_reduce: 2 (n - 1) / n
- all_gather, reduce_scatter, all_to_all: (n - 1) / n
- broadcast, reduce: 1

Units: sizes in bytes, times in seconds, bandwidths in GB/s with GB = 1e9.
"""

from __future__ import annotations

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce")


def bus_factor(op: str, world_size: int) -> float:
    """Return the nccl-tests bus bandwidth factor of ``op`` for ``world_size`` ranks.

    Raises ValueError for an unknown ``op`` or a ``world_size`` below 1.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size!r}")
    n = world_size
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"unknown collective {op!r}; valid: {', '.join(COLLECTIVES)}")


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes/s) of moving ``size_bytes`` in ``seconds``.

    Raises ValueError when ``seconds`` is not positive.
    """
    if seconds <= 0:
        raise ValueError(f"time must be > 0 s, got {seconds!r}")
    return size_bytes / seconds / 1e9


def busbw_gbps(op: str, size_bytes: int, seconds: float, world_size: int) -> float:
    """Bus bandwidth in GB/s: ``algbw_gbps(size, seconds) * bus_factor(op, world_size)``."""
    return algbw_gbps(size_bytes, seconds) * bus_factor(op, world_size)
