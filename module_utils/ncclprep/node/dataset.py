"""Whether the training data path is readable on a node, read under a deadline (a dead NFS
or Lustre mount blocks ``stat`` forever, so the reading runs in a daemon thread).

Standard library only (runs on the nodes). The check is checks/dataset.py (dataset.path).
"""

from __future__ import annotations

import os
import threading

#: Entries of a folder listed at most (a dataset of millions of files is not walked).
MAX_ENTRIES = 1000


def _read(path: str) -> dict:
    out = {"path": path, "exists": False, "kind": None, "readable": False, "entries": None,
           "sample": None, "error": None}
    try:
        os.stat(path)
    except FileNotFoundError:
        out["error"] = "does not exist"
        return out
    except OSError as exc:
        out["error"] = f"cannot stat: {exc.strerror or exc}"
        return out
    out["exists"] = True
    if os.path.isdir(path):
        out["kind"] = "dir"
        try:
            names = []
            with os.scandir(path) as it:
                for entry in it:
                    names.append(entry.name)
                    if len(names) >= MAX_ENTRIES:
                        break
        except OSError as exc:
            out["error"] = f"cannot list: {exc.strerror or exc}"
            return out
        out["entries"] = len(names)
        files = sorted(n for n in names if os.path.isfile(os.path.join(path, n)))
        sample = os.path.join(path, files[0]) if files else None
    else:
        out["kind"] = "file" if os.path.isfile(path) else "other"
        sample = path if out["kind"] == "file" else None
    if sample is not None:
        try:
            with open(sample, "rb") as fh:
                fh.read(1)
            out["sample"] = sample
        except OSError as exc:
            out["error"] = f"cannot read {sample}: {exc.strerror or exc}"
            return out
    out["readable"] = True
    return out


def read_dataset(path: str, timeout: float) -> dict:
    """Is ``path`` (a folder or a file) readable here, within ``timeout`` seconds?

    Returns ``{"path", "exists": bool, "kind": "dir" | "file" | "other" | None, "readable":
    bool, "entries": int | None (a folder's entries, at most MAX_ENTRIES counted), "sample":
    the file whose first byte was read, or None, "error": str | None, "hung": bool}``.
    ``readable`` means stat, listing (a folder) and reading one byte of one file all worked;
    ``hung`` that they did not finish in time (the thread is left behind, as a blocked
    syscall cannot be interrupted). Raises nothing.
    """
    box: dict = {}
    worker = threading.Thread(target=lambda: box.update(_read(path)), daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        return {"path": path, "exists": None, "kind": None, "readable": False, "entries": None,
                "sample": None, "error": f"did not answer within {timeout:g} s (a hung mount?)", "hung": True}
    return dict(box, hung=False)
