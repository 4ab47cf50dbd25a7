"""Helpers every report renderer shares: which hosts a check names, the status of each host
under each check, and short readable text for measured / expected values.

Pure Python, standard library only: imported as ``ansible.module_utils.ncclprep.report.common``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

#: Statuses from the worst to the best: the order problems are listed in.
SEVERITY = ("HANG", "FAIL", "WARN", "SKIP", "PASS")
#: Statuses that fail the run (model.BAD).
BAD = ("FAIL", "HANG")

_LINK = re.compile(r"^(?:link )?(.+?) <?-> (.+)$")


def name_ends(name: str) -> list[str]:
    """The hosts a blamed name stands for: ``node1`` -> [node1]; a link ``node1 -> node2`` or
    ``node1 <-> node2`` (how the checks name links, checks/network.py) -> both ends."""
    m = _LINK.match(name)
    return [m.group(1), m.group(2)] if m else [name]


def named_hosts(check: Mapping[str, Any], hosts: Iterable[str]) -> set[str]:
    """The hosts of ``hosts`` that ``check`` names, directly or as an end of a named link."""
    cluster = set(hosts)
    return {h for name in check.get("hosts") or [] for h in name_ends(str(name)) if h in cluster}


def host_status(check: Mapping[str, Any], hosts: Iterable[str]) -> dict[str, str]:
    """host -> that host's status under ``check``, for every host of ``hosts``.

    PASS and SKIP hold for every host. FAIL, HANG and WARN hold for the hosts the check names
    (``named_hosts``; the others PASS), or for every host when it names none of them (a
    cluster-wide problem). The one rule of the status grid, the JUnit file and the metrics.
    """
    hosts = list(hosts)
    status = check["status"]
    if status in ("PASS", "SKIP"):
        return dict.fromkeys(hosts, status)
    named = named_hosts(check, hosts)
    return {h: (status if not named or h in named else "PASS") for h in hosts}


def summary_status(statuses: Iterable[str]) -> str:
    """One status for several checks: the worst problem (HANG, FAIL, WARN), else PASS when
    any passed, else SKIP (a group where some checks passed and the rest did not apply passed)."""
    seen = set(statuses)
    return next((s for s in ("HANG", "FAIL", "WARN", "PASS") if s in seen), "SKIP")


def counts(checks: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """status -> number of checks, in SEVERITY order, every status present (0 where none)."""
    out = dict.fromkeys(SEVERITY, 0)
    for c in checks:
        out[c["status"]] = out.get(c["status"], 0) + 1
    return out


def ordered(checks: Iterable[Mapping[str, Any]]) -> list:
    """Checks sorted worst first (SEVERITY), report order kept within a status."""
    rank = {s: i for i, s in enumerate(SEVERITY)}
    return sorted(checks, key=lambda c: rank.get(c["status"], len(SEVERITY)))


def group_of(check_id: str) -> str:
    """A check's group: its id up to the first dot (``sysctl.net.core.somaxconn`` -> ``sysctl``)."""
    return check_id.split(".", 1)[0]


def grid_rows(checks: list, hosts: list[str]) -> list[tuple[str, dict[str, str]]]:
    """The rows of a per-host status grid: ``[(label, {host: status})]``, report order.

    A check whose status differs between hosts (it named some) has a row of its own; the
    other checks of its group share one row, ``<group>.* (n)`` (or the check's id when it is
    alone), holding each host's summary_status among them.
    """
    groups: dict[str, list] = {}
    for c in checks:
        groups.setdefault(group_of(c["id"]), []).append((c["id"], host_status(c, hosts)))
    rows: list[tuple[str, dict[str, str]]] = []
    for group, members in groups.items():
        uniform = [(cid, st) for cid, st in members if len(set(st.values())) <= 1]
        own = [(cid, st) for cid, st in members if len(set(st.values())) > 1]
        if len(uniform) == 1:
            rows.append(uniform[0])
        elif uniform:
            rows.append((f"{group}.* ({len(uniform)})", {h: summary_status(st[h] for _, st in uniform) for h in hosts}))
        rows += own
    return rows


def human_size(n: int | float) -> str:
    """Bytes as a short label: 4096 -> ``4 KiB``, 16777216 -> ``16 MiB``, 4092 -> ``4092 B``
    (binary prefixes only where the size is an exact multiple)."""
    n = int(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def fmt_num(value: Any) -> str:
    """A number as short text: floats with 4 significant digits, ints as they are."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def brief(value: Any, limit: int = 240) -> str:
    """``value`` (any JSON value: a check's measured or expected) as one short line of text.

    None -> ``-``; numbers via fmt_num; a list joined with ``, ``; a dict as ``key: value``
    items joined with ``; `` (nested: ``key value`` joined with ``, ``; deeper as ``{...}``).
    At most ``limit`` characters: items that do not fit are counted (``... (+3 more)``).
    """
    if isinstance(value, Mapping):
        parts = [f"{k}: {_inner(v, 1)}" for k, v in value.items()]
        return _fit(parts, "; ", limit) if parts else "none"
    if isinstance(value, (list, tuple)):
        parts = [_inner(v, 1) for v in value]
        return _fit(parts, ", ", limit) if parts else "none"
    return _cut(_inner(value, 0), limit)


def _inner(value: Any, depth: int) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, Mapping):
        if depth >= 2:
            return "{" + ", ".join(f"{k}: {_inner(v, depth + 1)}" for k, v in value.items()) + "}"
        return ", ".join(f"{k} {_inner(v, depth + 1)}" for k, v in value.items()) or "none"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_inner(v, depth + 1) for v in value)
        return f"[{inner}]" if depth >= 1 and any(isinstance(v, (Mapping, list)) for v in value) else (inner or "none")
    return fmt_num(value)


def _fit(parts: list[str], sep: str, limit: int) -> str:
    """Join ``parts`` with ``sep`` into at most ``limit`` characters, counting those left out."""
    out: list[str] = []
    used = 0
    for i, part in enumerate(parts):
        rest = len(parts) - i - 1
        tail = f" ... (+{rest} more)" if rest else ""
        if used + len(sep) * bool(out) + len(part) + len(tail) > limit:
            if not out:  # the first item alone is too long: cut it
                return _cut(part, limit - len(tail)) + tail
            return sep.join(out) + f" ... (+{len(parts) - i} more)"
        used += len(sep) * bool(out) + len(part)
        out.append(part)
    return sep.join(out)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 3, 1)].rstrip() + "..."
