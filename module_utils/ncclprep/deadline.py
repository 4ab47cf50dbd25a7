"""Run a function in a forked child under a hard deadline.

A collective that never completes blocks inside C++ and cannot be interrupted
from Python, so the work runs in a child process that reports progress over a
pipe; when the deadline passes the child is killed and the caller learns the
last stage it reached. Nothing here ever waits without a deadline.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from typing import Any


class Progress:
    """Sends ``(kind, payload)`` messages from the child to the parent."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def stage(self, name: str, **info: Any) -> None:
        """Record that the child entered stage ``name`` (extra info is kept with it)."""
        self._conn.send(("stage", dict(info, stage=name)))

    def result(self, value: Any) -> None:
        """Send the final result (must be picklable)."""
        self._conn.send(("result", value))


def _child(conn: Any, func: Callable[..., Any], kwargs: dict) -> None:
    progress = Progress(conn)
    try:
        func(progress=progress, **kwargs)
    except BaseException as exc:  # report every failure of the child to the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def run_with_deadline(func: Callable[..., Any], kwargs: dict, timeout_s: float) -> dict:
    """Run ``func(progress=Progress, **kwargs)`` in a forked child for at most ``timeout_s`` seconds.

    Returns ``{"outcome": "result"|"error"|"hang"|"died", "value": ..., "stages": [...],
    "elapsed_s": float}``: ``value`` is what the child passed to ``progress.result`` (or the
    error text); ``stages`` lists every stage the child reported, last one last. On "hang"
    the child was killed at the deadline. Raises ValueError when ``timeout_s`` <= 0.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
    ctx = multiprocessing.get_context("fork")
    parent_conn, child_conn = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child_conn, func, kwargs), daemon=True)
    start = time.monotonic()
    proc.start()
    child_conn.close()
    stages: list[dict] = []
    outcome, value = "died", None
    deadline = start + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            outcome = "hang"
            break
        try:
            ready = parent_conn.poll(min(left, 0.5))
        except (EOFError, OSError):
            break
        if ready:
            try:
                kind, payload = parent_conn.recv()
            except (EOFError, OSError):
                break
            if kind == "stage":
                stages.append(payload)
            else:
                outcome, value = kind, payload
                break
        elif not proc.is_alive():
            # The child exited without a result (killed, crashed in C++).
            break
    if proc.is_alive():
        proc.terminate()
        proc.join(2)
        if proc.is_alive():
            proc.kill()
            proc.join(2)
    else:
        proc.join(0.1)
    if outcome == "died":
        value = f"worker exited with code {proc.exitcode} without a result"
    return {
        "outcome": outcome,
        "value": value,
        "stages": stages,
        "elapsed_s": round(time.monotonic() - start, 3),
    }


def outcome_fields(run: dict, timeout_s: float) -> dict:
    """The result keys of a ``run_with_deadline`` run, as the probe modules report them.

    ``"result"`` gives the child's value (a dict) as is; ``"hang"`` gives ``{"status":
    "HANG", "stage": <last stage reported>, "error": "no progress past '<stage>' within
    <timeout_s> s"}``; ``"error"`` and ``"died"`` give ``{"status": "FAIL", "stage", "error":
    <the error text>}``. The stage before any report is ``start``. Raises nothing.
    """
    stage = run["stages"][-1]["stage"] if run.get("stages") else "start"
    if run["outcome"] == "result":
        return dict(run["value"])
    if run["outcome"] == "hang":
        return {"status": "HANG", "stage": stage, "error": f"no progress past '{stage}' within {timeout_s} s"}
    return {"status": "FAIL", "stage": stage, "error": run["value"]}
