"""Reading sysfs and procfs without raising: small text files, folders, and the RDMA ports of
``class/infiniband``; the one home for what the facts readers (the concerns' readers, hostinfo,
node) share."""

from __future__ import annotations

import os


def read_text(path: str) -> str | None:
    """The file's text without surrounding white space; None when it is missing, unreadable
    or not UTF-8 (a sysfs attribute the driver does not implement raises on read)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def list_dir(path: str) -> list[str]:
    """The folder's entries, sorted; [] when it is missing or unreadable."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _port_netdev(dev_dir: str, port: int) -> str | None:
    """Netdev of port ``port`` of the RDMA device at ``dev_dir`` (None when there is none).

    One entry in ``device/net`` is the netdev. Where a PCI function carries several (mlx4 puts
    both ports' netdevs there) the one whose ``dev_port`` is ``port - 1`` wins (netdev
    ``dev_port`` is 0-based, RDMA ports 1-based: Documentation/ABI/testing/sysfs-class-net).
    """
    names = list_dir(os.path.join(dev_dir, "device", "net"))
    if len(names) <= 1:
        return names[0] if names else None
    for name in names:
        dev_port = read_text(os.path.join(dev_dir, "device", "net", name, "dev_port"))
        if dev_port is not None and dev_port.isdigit() and int(dev_port) == port - 1:
            return name
    return None


def list_rdma_ports(sysfs: str = "/sys") -> list[dict]:
    """Every port of every RDMA device under ``<sysfs>/class/infiniband``, IB and RoCE alike.

    Returns ``[{"device": "mlx5_0", "port": 1, "netdev": "enp1s0f0np0" | None,
    "link_layer": "Ethernet" | "InfiniBand" | None, "state": "ACTIVE" | None,
    "driver": "mlx5_core" | None}]`` sorted by device then port. ``state`` is the name part
    of ``4: ACTIVE``. A value sysfs does not show is None. No ``class/infiniband`` gives [].
    Never raises on a missing or unreadable file.
    """
    root = os.path.join(sysfs, "class", "infiniband")
    ports: list[dict] = []
    for dev in list_dir(root):
        dev_dir = os.path.join(root, dev)
        driver_link = os.path.join(dev_dir, "device", "driver")
        driver = os.path.basename(os.path.realpath(driver_link)) if os.path.exists(driver_link) else None
        for name in list_dir(os.path.join(dev_dir, "ports")):
            if not name.isdigit():
                continue
            port_dir = os.path.join(dev_dir, "ports", name)
            state = read_text(os.path.join(port_dir, "state"))
            if state is not None and ":" in state:
                state = state.split(":", 1)[1].strip()
            ports.append({"device": dev, "port": int(name),
                          "netdev": _port_netdev(dev_dir, int(name)),
                          "link_layer": read_text(os.path.join(port_dir, "link_layer")) or None,
                          "state": state or None, "driver": driver})
    ports.sort(key=lambda p: (p["device"], p["port"]))
    return ports


def find_roce_ports(sysfs: str = "/sys") -> list[dict]:
    """The RoCE ports: those of ``list_rdma_ports`` whose ``link_layer`` is ``Ethernet``.

    Same dict shape as ``list_rdma_ports``. InfiniBand ports (link_layer ``InfiniBand``) and
    ports without a readable link_layer are left out: PFC, DSCP trust and RoCE ECN are
    Ethernet settings. No ``<sysfs>/class/infiniband`` gives [].
    """
    return [p for p in list_rdma_ports(sysfs) if p["link_layer"] == "Ethernet"]
