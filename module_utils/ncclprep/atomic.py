"""Files written whole or not at all: the one home of the atomic write that the report, the node
check's record and the node-side core zip share, and of the lock file that makes a read, merge
and write one step among processes (the hooks' ledger, the tuned file). Standard library only
(runs on the nodes)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
import time


@contextlib.contextmanager
def held_lock(lock: str, wait: float, busy: str, mode: int = 0o600):
    """Hold an exclusive ``flock`` on the file ``lock`` (made with ``mode`` when missing, never
    through a link; its folder must exist), polled every 0.05 s for at most ``wait`` seconds.
    Closing the descriptor at the end releases it. Raises TimeoutError with ``busy`` when another
    holds it past ``wait``, OSError when it cannot be opened."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(busy) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


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


def read_once(path: str, limit: int, private: bool = False) -> bytes:
    """The first ``limit`` bytes of ``path``, a file handed from one of this user's processes to
    another (a run's secret, a claim root's Epilog took over), and the file removed, so that it is
    read once. It is read only when it is a regular file (opened without following a link and
    without waiting on a FIFO, then checked on the open descriptor) owned by this process's user,
    and with ``private``, one its group and others may not read or write. Raises ValueError saying
    why not, OSError (FileNotFoundError among them) when it cannot be opened; the file is removed
    only once read."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_uid != os.geteuid():
            raise ValueError(f"owned by uid {st.st_uid}, not by this process's uid {os.geteuid()}")
        if private and st.st_mode & 0o077:
            raise ValueError(f"mode {stat.S_IMODE(st.st_mode):04o}: its group or others may read it (0600 or 0400 "
                             "needed)")
        data = fh.read(limit)
    with contextlib.suppress(OSError):  # a read-only place: the file stays, owner-only
        os.unlink(path)
    return data
