"""Port state a preflight reads twice: the error counters of the RDMA ports and of the
data-plane netdev (read before and after the run, so growth during the run is seen), and
the GID table of RoCE ports (which index carries RoCE v2).

Sources (kernel Documentation/ABI/stable/sysfs-class-infiniband and sysfs-class-net):

- ``/sys/class/infiniband/<dev>/ports/<n>/counters/<name>``: the IB PortCounters attributes
  (IBTA spec vol. 1, 16.1.3.5): ``link_downed`` (times the link went down),
  ``link_error_recovery``, ``symbol_error``, ``port_rcv_errors``,
  ``port_rcv_remote_physical_errors``, ``local_link_integrity_errors``,
  ``excessive_buffer_overrun_errors``, ``port_xmit_discards``. Decimal integers.
- ``/sys/class/infiniband/<dev>/ports/<n>/gid_attrs/types/<i>``: ``IB/RoCE v1`` or
  ``RoCE v2``; reading an unused entry fails (EINVAL), so only populated GIDs are listed.
  ``gids/<i>`` is the GID itself (all zeros when unused); ``gid_attrs/ndevs/<i>`` its netdev.
  NCCL picks the GID with ``NCCL_IB_GID_INDEX`` (NCCL environment variable documentation:
  RoCE v2 needs the index of a RoCE v2 GID, usually 3 on ConnectX with an IPv4 address).
- ``/sys/class/net/<dev>/carrier_changes`` (times the carrier went up or down) and
  ``statistics/{rx_errors, tx_errors, rx_crc_errors}``.

Standard library only (runs on the nodes); never raises on a missing or unreadable file.
"""

from __future__ import annotations

import os

from ansible.module_utils.ncclprep.sysfs import list_dir, read_text

#: The RDMA port counters read (each a count of events; any growth during a run is a fault).
IB_COUNTERS = ("link_downed", "link_error_recovery", "symbol_error", "port_rcv_errors",
               "port_rcv_remote_physical_errors", "local_link_integrity_errors",
               "excessive_buffer_overrun_errors", "port_xmit_discards")
#: The netdev counters read: ``carrier_changes`` and three of ``statistics/``.
NET_COUNTERS = ("carrier_changes", "rx_errors", "tx_errors", "rx_crc_errors")
#: Counters whose growth means the link went down (the others: errors on a link that stayed up).
LINK_DOWN_COUNTERS = ("link_downed", "carrier_changes")
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def _count(path: str) -> int | None:
    text = read_text(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def rdma_port_dirs(sysfs: str = "/sys") -> list[tuple[str, str]]:
    """``[("<dev>/<port>", path of its ports/<n> folder)]`` for every RDMA port, sorted."""
    root = os.path.join(sysfs, "class", "infiniband")
    out = []
    for dev in list_dir(root):
        for port in sorted((n for n in list_dir(os.path.join(root, dev, "ports")) if n.isdigit()), key=int):
            out.append((f"{dev}/{port}", os.path.join(root, dev, "ports", port)))
    return out


def read_counters(sysfs: str = "/sys", netdevs: list[str] | tuple[str, ...] = ()) -> dict:
    """Every counter of IB_COUNTERS on every RDMA port and of NET_COUNTERS on ``netdevs``.

    Returns ``{"rdma": {"<dev>/<port>": {counter: int | None}}, "net": {netdev: {counter:
    int | None}}}``; a counter the driver does not show is None, a netdev that does not
    exist is left out. Never raises.
    """
    rdma = {name: {c: _count(os.path.join(path, "counters", c)) for c in IB_COUNTERS}
            for name, path in rdma_port_dirs(sysfs)}
    net = {}
    for dev in netdevs:
        base = os.path.join(sysfs, "class", "net", dev)
        if not os.path.isdir(base):
            continue
        net[dev] = {c: _count(os.path.join(base, c if c == "carrier_changes" else os.path.join("statistics", c)))
                    for c in NET_COUNTERS}
    return {"rdma": rdma, "net": net}


def read_gids(sysfs: str = "/sys") -> dict:
    """The populated GIDs of every RDMA port: ``{"<dev>/<port>": [{"index": int, "type":
    "RoCE v2" | "IB/RoCE v1" | ..., "gid": str, "netdev": str | None}]}``, by index. An entry
    whose type cannot be read or whose GID is all zeros is unused and left out."""
    out = {}
    for name, path in rdma_port_dirs(sysfs):
        rows = []
        indices = sorted((i for i in list_dir(os.path.join(path, "gid_attrs", "types")) if i.isdigit()), key=int)
        for idx in indices:
            kind = read_text(os.path.join(path, "gid_attrs", "types", idx))
            gid = read_text(os.path.join(path, "gids", idx))
            if not kind or not gid or gid == _ZERO_GID:
                continue
            rows.append({"index": int(idx), "type": kind, "gid": gid,
                         "netdev": read_text(os.path.join(path, "gid_attrs", "ndevs", idx))})
        out[name] = rows
    return out


def counter_growth(before: dict | None, after: dict | None) -> dict:
    """What grew between two ``read_counters`` results of one host.

    Returns ``{"grew": {"rdma <dev>/<port>" | "net <dev>": {counter: delta}}, "reset":
    [same names whose counter went down (a driver reload or a counter reset, so the run
    cannot be judged there)]}``. A counter missing (None) on either side is not compared;
    a port present on one side only is not compared either. Raises nothing.
    """
    grew: dict = {}
    reset: list = []
    for kind in ("rdma", "net"):
        old = (before or {}).get(kind) or {}
        new = (after or {}).get(kind) or {}
        for name in sorted(set(old) & set(new)):
            label = f"{kind} {name}"
            for counter, value in (new[name] or {}).items():
                was = (old[name] or {}).get(counter)
                if value is None or was is None:
                    continue
                if value > was:
                    grew.setdefault(label, {})[counter] = value - was
                elif value < was and label not in reset:
                    reset.append(label)
    return {"grew": grew, "reset": reset}
