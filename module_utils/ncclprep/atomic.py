"""Files written whole or not at all: the one home of the atomic write that the report, the node
check's record and the node-side core zip share. Standard library only (runs on the nodes)."""

from __future__ import annotations

import os
import tempfile


def write_atomic(path: str, data: str | bytes, mode: int = 0o644) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` through a temp file in the same folder
    (``.<name>.*.tmp``, a name node_exporter's textfile collector skips), with ``mode``, then
    ``os.replace``: a reader sees the old file or the new one, never a part. The folder must exist.
    Raises OSError when it cannot be written; the temp file is removed then."""
    folder, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
