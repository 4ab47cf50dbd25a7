#!/usr/bin/env python3
# Copyright: ncclprep contributors
# Apache-2.0
"""ncclprep's rendezvous guard: proof that what listens on a job's rendezvous port is the
rendezvous host's own torchrun agent, checked on every other node before its agent connects.

torch's c10d rendezvous unpickles the state it reads from its store on every sync
(torch/distributed/elastic/rendezvous/dynamic_rendezvous.py, ``pickle.loads``), so an agent that
joins a store someone else listens with runs that someone's code. ncclprep-torchrun (role
nccl_env) runs this guard when the job has a secret, ``NCCLPREP_RDZV_NONCE`` in the environment,
the same on every node and known only to the job (docs/security.md):

``prove ID HOST PORT PID``
    On the rendezvous host, started beside its agent (the launcher's process, PID, which then
    becomes torchrun). Waits until a socket listening on PORT belongs to PID or one of its
    descendants (/proc/net/tcp, /proc/net/tcp6 and /proc/<pid>/fd), then sets the proof key in
    that store. A listener of any other process gets no proof: exit 3, saying what holds it.
``verify ID HOST PORT``
    On every other node, before its agent starts: connects to HOST:PORT as a store client (no
    unpickling: keys and values are bytes), waits for the proof key and compares it with its
    own. A wrong or missing proof within the deadline is a refusal: exit 2 with the reason.

The proof is the hex HMAC-SHA256 of ``ncclprep-rdzv-proof NUL ID NUL HOST NUL PORT`` keyed by the
nonce (RFC 2104, Python's hmac): it names this job's rendezvous, and whoever reads the store
learns nothing of the nonce. The deadline is ``NCCLPREP_RDZV_VERIFY_TIMEOUT`` seconds (default
120) for both; a store that never answers is cut by SIGALRM at the deadline plus 5 s.

Exit codes: 0 proved or verified, 2 refused (verify), 3 not proved (prove), 64 wrong usage.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import signal
import sys
import time
from datetime import timedelta

KEY_PREFIX = "ncclprep.rdzv-proof."
DEFAULT_TIMEOUT_S = 120.0
POLL_S = 0.2
TCP_LISTEN = "0A"  # st column of /proc/net/tcp: TCP_LISTEN (include/net/tcp_states.h)


def proof(nonce: str, rdzv_id: str, host: str, port: int) -> str:
    """Hex HMAC-SHA256 (64 characters) of this rendezvous, keyed by the job's nonce."""
    message = "\0".join(("ncclprep-rdzv-proof", rdzv_id, host, str(port))).encode()
    return hmac.new(nonce.encode(), message, hashlib.sha256).hexdigest()


def listening_inodes(port: int, proc: str = "/proc") -> set[str]:
    """Socket inodes listening on TCP ``port`` in this network namespace (IPv4 and IPv6).

    Reads ``<proc>/net/tcp`` and ``tcp6`` (Documentation/networking/proc_net_tcp.rst: local
    address as hex ``ADDR:PORT``, ``st`` the state, the inode in the tenth column)."""
    inodes = set()
    for name in ("tcp", "tcp6"):
        try:
            with open(f"{proc}/net/{name}") as table:
                rows = table.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def family(pid: int, proc: str = "/proc") -> set[int]:
    """``pid`` and its descendants, from each process's parent in ``<proc>/<pid>/stat``."""
    parents = {}
    for entry in os.listdir(proc):
        if entry.isdigit():
            try:
                with open(f"{proc}/{entry}/stat") as stat:
                    # the command may hold spaces and parentheses: the fields follow the last ")"
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    members, grew = {pid}, True
    while grew:
        grown = members | {child for child, parent in parents.items() if parent in members}
        grew, members = grown != members, grown
    return members


def holders(inodes: set[str], pids, proc: str = "/proc") -> set[int]:
    """Those of ``pids`` that hold one of the socket ``inodes`` (``socket:[N]`` in /proc/<pid>/fd)."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    found = set()
    for pid in pids:
        try:
            fds = os.listdir(f"{proc}/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{proc}/{pid}/fd/{fd}") in wanted:
                    found.add(pid)
                    break
            except OSError:
                continue
    return found


def _store(host: str, port: int, seconds: float):
    from torch.distributed import TCPStore  # imported here: the helpers above need no torch

    return TCPStore(host, port, is_master=False, timeout=timedelta(seconds=max(seconds, 1.0)),
                    wait_for_workers=False)


def prove(rdzv_id: str, host: str, port: int, pid: int, nonce: str, timeout_s: float) -> int:
    """Set the proof once PID's own socket listens on ``port``; 0 when set, 3 when not."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not os.path.exists(f"/proc/{pid}"):
            print(f"ncclprep-torchrun: the agent (pid {pid}) ended before its store listened on port {port}; "
                  "no rendezvous proof set", file=sys.stderr)
            return 3
        inodes = listening_inodes(port)
        if inodes:
            if holders(inodes, family(pid)):
                store = _store(host, port, deadline - time.monotonic())
                store.set(KEY_PREFIX + rdzv_id, proof(nonce, rdzv_id, host, port))
                return 0
            others = holders(inodes, [int(p) for p in os.listdir("/proc") if p.isdigit()])
            print(f"ncclprep-torchrun: port {port} is held by pid(s) {sorted(others) or 'unknown'}, not by this "
                  f"job's agent (pid {pid}): no rendezvous proof set, the other nodes will refuse", file=sys.stderr)
            return 3
        time.sleep(POLL_S)
    print(f"ncclprep-torchrun: the agent's store did not listen on port {port} within {timeout_s:g} s; "
          "no rendezvous proof set", file=sys.stderr)
    return 3


def verify(rdzv_id: str, host: str, port: int, nonce: str, timeout_s: float) -> int:
    """0 when the store at HOST:PORT holds this job's proof within the deadline, else 2 (said why)."""
    where = f"rendezvous {host}:{port}"
    deadline = time.monotonic() + timeout_s
    try:
        store = _store(host, port, timeout_s)
        store.wait([KEY_PREFIX + rdzv_id], timedelta(seconds=max(deadline - time.monotonic(), 1.0)))
        got = store.get(KEY_PREFIX + rdzv_id).decode(errors="replace")
    except (RuntimeError, OSError, ValueError) as exc:  # torch's DistStoreError is a RuntimeError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"{where} gave no proof that it is this job's agent within {timeout_s:g} s ({first[:200]}): "
              f"the rendezvous host's launcher was not started with the same NCCLPREP_RDZV_NONCE, "
              f"or something else listens on the port", file=sys.stderr)
        return 2
    if not hmac.compare_digest(got, proof(nonce, rdzv_id, host, port)):
        print(f"{where} holds a wrong rendezvous proof: what listens there is not this job's agent "
              f"(another job's, or a process squatting the port), or NCCLPREP_RDZV_NONCE differs between the nodes",
              file=sys.stderr)
        return 2
    return 0


def main(argv: list[str]) -> int:
    nonce = os.environ.pop("NCCLPREP_RDZV_NONCE", "")
    try:
        timeout_s = float(os.environ.get("NCCLPREP_RDZV_VERIFY_TIMEOUT", DEFAULT_TIMEOUT_S))
        if not nonce or timeout_s <= 0:
            raise ValueError("NCCLPREP_RDZV_NONCE empty or NCCLPREP_RDZV_VERIFY_TIMEOUT not > 0")
        if len(argv) == 5 and argv[0] == "prove":
            run = lambda: prove(argv[1], argv[2], int(argv[3]), int(argv[4]), nonce, timeout_s)  # noqa: E731
        elif len(argv) == 4 and argv[0] == "verify":
            run = lambda: verify(argv[1], argv[2], int(argv[3]), nonce, timeout_s)  # noqa: E731
        else:
            raise ValueError("usage: prove ID HOST PORT PID | verify ID HOST PORT")
    except ValueError as exc:
        print(f"ncclprep_rdzv_guard: {exc}", file=sys.stderr)
        return 64
    # a store that accepts and never answers must not hold the launch: the default action of
    # SIGALRM ends the process even inside torch's C++ calls, where a Python handler would wait
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(int(timeout_s) + 5)
    return run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
