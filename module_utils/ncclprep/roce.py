"""RoCE ports and their lossless QoS: PFC on one priority, trust DSCP, ECN (the roce_qos role).

Everything here is pure (reads a sysfs tree given as an argument, plans, builds argv lists); the
text that ``dcb`` and ``mlnx_qos`` print is parsed in ``parsers/dcb.py`` and
``parsers/mlnx_qos.py``; the ``roce_qos`` module runs the commands and writes the files.
Sources of the rules:

- Ports: the kernel's RDMA sysfs ABI (Documentation/ABI/stable/sysfs-class-infiniband):
  ``/sys/class/infiniband/<dev>/ports/<n>/link_layer`` is ``Ethernet`` on a RoCE port and
  ``InfiniBand`` on an IB port; ``ports/<n>/state`` reads like ``4: ACTIVE``;
  ``<dev>/device`` is the PCI function, whose ``net/`` holds the netdev and whose ``driver``
  link names the driver (``mlx5_core``).
- ``dcb`` (iproute2 >= 6.1 for ``apptrust``): dcb-pfc(8) ``dcb pfc set dev DEV prio-pfc
  PRIO:{on|off} ...``; dcb-apptrust(8) ``dcb apptrust set dev DEV order SEL-LIST``. With
  ``-j`` (dcb(8)) ``pfc show`` prints one object whose ``prio_pfc`` is an array of 8 booleans,
  priority 0 first (iproute2 dcb/dcb_pfc.c, dcb_print_array_on_off), and ``apptrust show``
  prints ``{"order": ["dscp", ...]}`` (dcb/dcb_apptrust.c).
- ``mlnx_qos`` (Mellanox/NVIDIA mlnx-tools, python/mlnx_qos): ``mlnx_qos -i IF`` prints
  ``Priority trust state: dscp`` and a ``PFC configuration:`` table whose ``enabled`` row holds
  one 0/1 per priority 0..7; ``mlnx_qos -i IF --trust dscp --pfc 0,0,0,1,0,0,0,0`` sets both.
  It prints ``Priority trust state: none`` when the driver cannot report trust.
- ECN: NVIDIA MLNX_OFED / DOCA "Explicit Congestion Notification":
  ``/sys/class/net/<if>/ecn/roce_np/enable/<prio>`` (notification point) and
  ``.../ecn/roce_rp/enable/<prio>`` (reaction point), ``0`` or ``1`` per priority 0..7. These
  files come with NVIDIA's mlx5 driver; a netdev without them has no ECN switch to manage.

Shapes used throughout: a priority map is ``{prio (int 0..7): bool | None}`` (None: not
readable); a port state is ``{"pfc": map | None, "trust": str | None, "ecn_np": map | None,
"ecn_rp": map | None}`` where None means "cannot be read on this netdev, not managed".
Standard library only: this module also runs on the nodes.
"""

from __future__ import annotations

import os

from ansible.module_utils.ncclprep.parsers import PRIORITIES
from ansible.module_utils.ncclprep.sysfs import list_dir, read_text

TOOLS = ("dcb", "mlnx_qos")
ECN_KINDS = {"ecn_np": "roce_np", "ecn_rp": "roce_rp"}
MLX5_DRIVERS = ("mlx5_core",)


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


def read_ecn(netdev: str, sysfs: str = "/sys") -> dict:
    """ECN switches of ``netdev``: ``{"ecn_np": map | None, "ecn_rp": map | None}``.

    Each map reads ``<sysfs>/class/net/<netdev>/ecn/<roce_np|roce_rp>/enable/<prio>``
    (``1`` on, ``0`` off; another value or an unreadable file gives None for that priority).
    A netdev without the ``enable`` directory gets None: it has no ECN switch (NVIDIA MLNX_OFED /
    DOCA ECN documentation; only NVIDIA's mlx5 driver creates these files).
    """
    out: dict = {}
    for what in ECN_KINDS:
        base = ecn_dir(netdev, what, sysfs)
        if not os.path.isdir(base):
            out[what] = None
            continue
        values = {}
        for prio in PRIORITIES:
            raw = read_text(os.path.join(base, str(prio)))
            values[prio] = {"1": True, "0": False}.get(raw) if raw is not None else None
        out[what] = values
    return out


def ecn_dir(netdev: str, what: str, sysfs: str = "/sys") -> str:
    """``<sysfs>/class/net/<netdev>/ecn/<roce_np|roce_rp>/enable`` for ``what`` ecn_np / ecn_rp."""
    return os.path.join(sysfs, "class", "net", netdev, "ecn", ECN_KINDS[what], "enable")


def choose_tool(requested: str, drivers: list, found: dict) -> tuple:
    """Pick the QoS tool: returns ``(tool | None, reason | None)``.

    ``requested`` is ``auto``, ``dcb`` or ``mlnx_qos``; ``drivers`` the drivers of the ports
    to configure; ``found`` maps tool name to its path or None (not on PATH). ``auto`` takes
    ``mlnx_qos`` when it is found and every port is mlx5 (mlnx_qos is NVIDIA's tool for its
    NICs, and mlx5 has no apptrust support in the kernel's dcbnl ops, so ``dcb apptrust`` cannot
    set trust there), else ``dcb``, else ``mlnx_qos`` if only that is found. A named tool is
    used only if found. ``reason`` says why no tool was chosen (it names the missing tools).
    """
    if requested in TOOLS:
        if found.get(requested):
            return requested, None
        return None, f"{requested} is not on PATH"
    all_mlx5 = bool(drivers) and all(d in MLX5_DRIVERS for d in drivers)
    if found.get("mlnx_qos") and all_mlx5:
        return "mlnx_qos", None
    if found.get("dcb"):
        return "dcb", None
    if found.get("mlnx_qos"):
        return "mlnx_qos", None
    return None, ("neither dcb (iproute2 >= 6.1) nor mlnx_qos (NVIDIA mlnx-tools / MLNX_OFED) is on PATH")


def show_commands(netdev: str, tool: str) -> dict:
    """Read-only commands that show ``netdev``'s QoS state, as ``{key: argv}``.

    dcb: ``{"pfc": [dcb, -j, pfc, show, dev, IF], "apptrust": [dcb, -j, apptrust, show, dev,
    IF]}``; mlnx_qos: ``{"mlnx_qos": [mlnx_qos, -i, IF]}``. argv[0] is the bare tool name.
    Raises ValueError for another tool.
    """
    if tool == "dcb":
        return {"pfc": ["dcb", "-j", "pfc", "show", "dev", netdev],
                "apptrust": ["dcb", "-j", "apptrust", "show", "dev", netdev]}
    if tool == "mlnx_qos":
        return {"mlnx_qos": ["mlnx_qos", "-i", netdev]}
    raise ValueError(f"tool {tool!r} is not one of {TOOLS}")


def desired_pfc(pfc_priority: int) -> dict:
    """``{prio: prio == pfc_priority}``: PFC on exactly the RoCE priority. Raises ValueError outside 0..7."""
    if pfc_priority not in PRIORITIES:
        raise ValueError(f"pfc_priority={pfc_priority!r} is outside 0..7")
    return {p: p == pfc_priority for p in PRIORITIES}


def _readable(value) -> bool:
    return value is not None and not (isinstance(value, dict) and all(v is None for v in value.values()))


def plan(port_state: dict, desired: dict) -> list:
    """Changes that bring one netdev from ``port_state`` to ``desired``; [] when nothing differs.

    ``port_state``: ``{"pfc": map | None, "trust": str | None, "ecn_np": map | None,
    "ecn_rp": map | None}`` (maps ``{prio: bool | None}``). ``desired``: ``{"pfc_priority":
    0..7, "trust": "dscp" | "pcp", "ecn": bool}``. Returns ``[{"what": "pfc" | "trust" |
    "ecn_np" | "ecn_rp", "from": current, "to": target}]`` in that order. Rules: PFC on exactly
    ``pfc_priority`` and off on the other seven; trust equal to ``desired["trust"]``; with
    ``ecn`` true, ECN enabled at the notification and reaction points on ``pfc_priority`` (the
    RoCE priority) and the other priorities left as they are; ``ecn`` false leaves ECN alone.
    A state value that is None (or a map of only None) cannot be read and is not planned; see
    ``unmanaged``. Raises ValueError for a pfc_priority outside 0..7.
    """
    changes: list = []
    prio = desired["pfc_priority"]
    target_pfc = desired_pfc(prio)
    pfc = port_state.get("pfc")
    if _readable(pfc) and {p: pfc.get(p) for p in PRIORITIES} != target_pfc:
        changes.append({"what": "pfc", "from": {p: pfc.get(p) for p in PRIORITIES}, "to": target_pfc})
    trust = port_state.get("trust")
    if trust is not None and trust != desired["trust"]:
        changes.append({"what": "trust", "from": trust, "to": desired["trust"]})
    if desired.get("ecn"):
        for what in ECN_KINDS:
            current = port_state.get(what)
            if current is None:
                continue
            current = {p: current.get(p) for p in PRIORITIES}
            if current[prio] is not True:
                changes.append({"what": what, "from": current, "to": {**current, prio: True}})
    return changes


def unmanaged(port_state: dict, desired: dict) -> list:
    """What ``desired`` asks for that ``port_state`` cannot show: a list of ``what`` names.

    ``pfc`` or ``trust`` when None (or a map of only None); ``ecn_np`` / ``ecn_rp`` when None
    and ``desired["ecn"]`` is true. ``plan`` makes no change for these; the caller reports them.
    """
    out = []
    if not _readable(port_state.get("pfc")):
        out.append("pfc")
    if port_state.get("trust") is None:
        out.append("trust")
    if desired.get("ecn"):
        out.extend(what for what in ECN_KINDS if port_state.get(what) is None)
    return out


def _by_what(changes: list) -> dict:
    return {c["what"]: c for c in changes}


def commands(netdev: str, changes: list, tool: str) -> list:
    """argv lists that make the ``pfc`` and ``trust`` changes of ``plan`` with ``tool``.

    dcb (dcb-pfc(8), dcb-apptrust(8)): ``[dcb, pfc, set, dev, IF, prio-pfc, 0:off, ..., 7:off]``
    with all eight priorities, then ``[dcb, apptrust, set, dev, IF, order, dscp]``.
    mlnx_qos (mlnx-tools python/mlnx_qos): one ``[mlnx_qos, -i, IF, --trust, dscp, --pfc,
    0,0,0,1,0,0,0,0]`` carrying whichever of the two changed. ECN changes are sysfs writes,
    see ``ecn_writes``. [] when there is nothing to run. argv[0] is the bare tool name.
    Raises ValueError for another tool.
    """
    if tool not in TOOLS:
        raise ValueError(f"tool {tool!r} is not one of {TOOLS}")
    by = _by_what(changes)
    pfc, trust = by.get("pfc"), by.get("trust")
    if tool == "dcb":
        out = []
        if pfc:
            out.append(["dcb", "pfc", "set", "dev", netdev, "prio-pfc"]
                       + [f"{p}:{'on' if pfc['to'][p] else 'off'}" for p in PRIORITIES])
        if trust:
            out.append(["dcb", "apptrust", "set", "dev", netdev, "order", trust["to"]])
        return out
    argv = ["mlnx_qos", "-i", netdev]
    if trust:
        argv += ["--trust", trust["to"]]
    if pfc:
        argv += ["--pfc", ",".join("1" if pfc["to"][p] else "0" for p in PRIORITIES)]
    return [argv] if len(argv) > 3 else []


def ecn_writes(netdev: str, changes: list, sysfs: str = "/sys") -> list:
    """``[(path, value)]`` sysfs writes for the ``ecn_np`` / ``ecn_rp`` changes of ``plan``.

    One write per priority whose target differs from the current value:
    ``(<sysfs>/class/net/<IF>/ecn/roce_np/enable/<prio>, "1")`` (``"0"`` to turn off).
    Source: NVIDIA MLNX_OFED / DOCA ECN documentation.
    """
    out = []
    for change in changes:
        if change["what"] not in ECN_KINDS:
            continue
        base = ecn_dir(netdev, change["what"], sysfs)
        for prio in PRIORITIES:
            target = change["to"].get(prio)
            if target is not None and target != change["from"].get(prio):
                out.append((os.path.join(base, str(prio)), "1" if target else "0"))
    return out


def format_map(prio_map: dict | None) -> str:
    """``0:off 1:off 2:off 3:on ...`` (``?`` for an unknown priority); ``unknown`` for None."""
    if prio_map is None:
        return "unknown"
    words = {True: "on", False: "off", None: "?"}
    return " ".join(f"{p}:{words[prio_map.get(p)]}" for p in PRIORITIES)


def format_state(netdev: str, state: dict) -> str:
    """Lines ``<IF> pfc: 0:off ...``, ``<IF> trust: dscp``, ``<IF> ecn_np: ...`` for a diff."""
    lines = [f"{netdev} pfc: {format_map(state.get('pfc'))}",
             f"{netdev} trust: {state.get('trust') or 'unknown'}"]
    lines += [f"{netdev} {what}: {format_map(state.get(what))}" for what in ECN_KINDS]
    return "\n".join(lines) + "\n"
