"""``ss -Htlnp``: the TCP sockets that listen, and the processes that hold them.

iproute2's ss(8) prints one socket per line: with ``-H`` no header; with one protocol (``-t``)
no ``Netid`` column, so ``State Recv-Q Send-Q Local-Address:Port Peer-Address:Port [Process]``.
The local address is ``0.0.0.0:22``, ``[::]:22``, ``*:22`` or ``127.0.0.53%lo:53``; the process
column (``-p``, root only) is ``users:(("sshd",pid=812,fd=3),...)``. Read as
community.general.listen_ports_facts reads ss (its ``ss_parse``): the address without brackets
and port, one entry per process holding the socket, so ``ncclprep node check`` keeps the same
``listening`` facts as validate.yml's firewall reading.
"""

from __future__ import annotations

import re

_ADDR_RE = re.compile(r"^\[?(.+?)\]?:(\d+)$")
_PROC_RE = re.compile(r'"(.*?)",pid=(\d+)')


def parse_ss_listen(text: str) -> list[dict]:
    """``[{port (int), address (str), pid (int | None), name (str | None)}]``, one per listening
    TCP socket and process, in the order printed; pid and name None where ss showed no process
    (not root). Lines that are not a LISTEN socket are skipped. Never raises."""
    out = []
    for line in (text or "").splitlines():
        # the process column (the sixth) is kept whole: a process name may hold blanks
        cells = line.split(None, 5)
        if cells and cells[0] in ("tcp", "udp"):  # a Netid column (several protocols asked for)
            cells = line.split(None, 6)[1:]
        if len(cells) < 5 or cells[0] != "LISTEN":
            continue
        addr = _ADDR_RE.match(cells[3])
        if not addr:
            continue
        procs = _PROC_RE.findall(cells[5]) if len(cells) > 5 else []
        for name, pid in procs or [(None, None)]:
            out.append({"port": int(addr.group(2)), "address": addr.group(1),
                        "pid": int(pid) if pid is not None else None, "name": name})
    return out
