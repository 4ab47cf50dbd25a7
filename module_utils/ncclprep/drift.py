"""Drift: a file site.yml manages, compared with what site.yml would write now.

``compare`` reads one file and holds it against the content the controller rendered from the
same template and inventory (library/managed_files.py ships the rendered text); the result
names what differs, with a unified diff (difflib, expected first) cut to ``max_lines``.
"""

from __future__ import annotations

import difflib
import os
import stat

STATES = ("ok", "differs", "missing", "mode", "unreadable")


def compare(path: str, expected: str, mode: str | None = None, max_lines: int = 40) -> dict:
    """``{path, state, diff, mode_expected, mode_found}`` for one managed file.

    ``expected``: the content site.yml would write (text); ``mode``: its octal mode (``"0644"``)
    or None. state: ``ok``; ``differs`` (content; ``diff`` holds the unified diff, ``---
    expected`` / ``+++ <path>``, at most ``max_lines`` lines, the last one saying how many were
    left out); ``mode`` (content right, mode not); ``missing``; ``unreadable`` (``error``).
    Raises nothing.
    """
    out = {"path": path, "state": "ok", "diff": [], "mode_expected": mode, "mode_found": None}
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            found = fh.read()
        out["mode_found"] = f"{stat.S_IMODE(os.stat(path).st_mode):04o}"
    except FileNotFoundError:
        return dict(out, state="missing")
    except OSError as exc:
        return dict(out, state="unreadable", error=str(exc))
    if found != expected:
        lines = list(difflib.unified_diff(expected.splitlines(), found.splitlines(), "expected", path, lineterm=""))
        if len(lines) > max_lines:
            lines = lines[:max_lines - 1] + [f"... {len(lines) - max_lines + 1} more diff lines"]
        return dict(out, state="differs", diff=lines)
    if mode is not None and int(str(mode), 8) != int(out["mode_found"], 8):
        return dict(out, state="mode")
    return out


def summary(result: dict) -> str:
    """One line for a report: ``/etc/nccl.conf differs: +NCCL_DEBUG=TRACE -NCCL_DEBUG=WARN``."""
    state = result["state"]
    if state == "differs":
        changed = [ln for ln in result["diff"] if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
        return f"{result['path']} differs: " + " ".join(changed[:6])[:300]
    if state == "mode":
        return f"{result['path']} has mode {result['mode_found']}, expected {result['mode_expected']}"
    if state == "unreadable":
        return f"{result['path']} unreadable: {result.get('error')}"
    return f"{result['path']} {state}"
