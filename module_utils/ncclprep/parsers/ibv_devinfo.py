"""``ibv_devinfo`` (rdma-core): HCAs, their ports, port state and MTUs; RoCE MTU rule.

Output is tab-indented ``key:<tabs>value`` lines: ``hca_id:`` starts an HCA, a
``port:`` line starts one of its ports, and every later line until the next
``port:`` or ``hca_id:`` belongs to that port. ``ibv_devinfo -v`` adds more
keys (kept as strings) and ``GID[ 3]: <gid>, RoCE v2`` lines (read into ``gids``).

MTUs are IB MTUs in bytes (256..4096). On RoCE the kernel derives a port's
active_mtu from the netdev MTU (``roce_active_mtu``), so a small netdev MTU
caps active_mtu below max_mtu.
"""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.parsers import finding

_KV_RE = re.compile(r"^([A-Za-z_][\w]*):\s*(.*?)\s*$")
_GID_RE = re.compile(r"^GID\[\s*(\d+)\]:\s*([0-9A-Fa-f:.]+)(?:,\s*(.+?))?\s*$")
_CODED_RE = re.compile(r"^(\S+)\s+\((\d+)\)$")  # "PORT_ACTIVE (4)", "4096 (5)"

IB_MTUS = (256, 512, 1024, 2048, 4096)
#: Bytes the kernel takes off the netdev MTU before picking a RoCE IB MTU: GRH 40 + UDP 8 +
#: BTH 12 + XRC ext 4 + AtomicETH 28 + ICRC 4 (Linux include/rdma/ib_addr.h, iboe_get_mtu).
ROCE_HEADER_BYTES = 96
#: Netdev MTU recommended on RoCE ports for active_mtu 4096 (needs >= 4096 + 96 = 4192; 4200 is the
#: usual round figure in NVIDIA's RoCE guidance; 9000 works too).
ROCE_NETDEV_MTU_FOR_4096 = 4200

_INT_KEYS = ("vendor_part_id", "phys_port_cnt", "sm_lid", "port_lid")


def roce_active_mtu(netdev_mtu: int) -> int | None:
    """The IB MTU (bytes) a RoCE port gets from a netdev MTU of ``netdev_mtu`` bytes, None below 256.

    Rule of Linux ``iboe_get_mtu``: the largest of 256..4096 not above ``netdev_mtu - 96``.
    1500 -> 1024, 4096 -> 2048, 4200 -> 4096, 9000 -> 4096.
    """
    room = int(netdev_mtu) - ROCE_HEADER_BYTES
    fitting = [m for m in IB_MTUS if m <= room]
    return fitting[-1] if fitting else None


def _value(key: str, value: str):
    """Convert known numeric fields; keep everything else as printed."""
    coded = _CODED_RE.match(value)
    if key in ("max_mtu", "active_mtu"):
        try:
            return int(coded.group(1) if coded else value)
        except ValueError:
            return None
    if key == "state":
        return coded.group(1) if coded else value
    if key in _INT_KEYS:
        try:
            return int(value, 0)
        except ValueError:
            return None
    return value


#: libibverbs' lines when a device is there but cannot be used (libibverbs/device.c, init.c;
#: ibv_devinfo.c): the kernel's uverbs device has no user-space provider, or its /dev/infiniband
#: node cannot be opened; and ibv_devinfo's count.
_NO_PROVIDER_RE = re.compile(r"no userspace device-specific driver found for (\S+)")
_OPEN_FAILED_RE = re.compile(r"^\s*Failed to open device\s*$")
_FOUND_RE = re.compile(r"^\s*(\d+) HCAs? found:?\s*$|^\s*No IB devices found\s*$")


def parse_ibv_devinfo(text: str) -> dict:
    """Parse ``ibv_devinfo [-v]`` output into ``{"hcas": [...], "unparsed": [lines]}``.

    An HCA is ``{"hca_id", "transport", "fw_ver", "node_guid", "sys_image_guid", "vendor_id",
    "vendor_part_id": int, "hw_ver", "board_id", "phys_port_cnt": int, "ports": [...]}`` (other
    keys kept as printed strings). A port is ``{"port": int, "state": "PORT_ACTIVE",
    "state_code": 4, "max_mtu": 4096, "active_mtu": 1024, "sm_lid": int, "port_lid": int,
    "port_lmc": str, "link_layer": str, "gids": [{"index", "gid", "type"}]}`` with MTUs in bytes;
    a field not printed is None (``gids`` empty). Also ``"no_provider": [uverbs sysfs paths]``
    (libibverbs found no user-space driver for them), ``"open_failed"``: the count of ``Failed to
    open device`` lines, and ``"found"``: the count ``ibv_devinfo -l`` printed (``N HCAs found``;
    0 for ``No IB devices found``), else None. Never raises.
    """
    hcas: list[dict] = []
    unparsed: list[str] = []
    hca: dict | None = None
    port: dict | None = None
    extra: dict = {"no_provider": [], "open_failed": 0, "found": None}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        m = _NO_PROVIDER_RE.search(stripped)
        if m:
            extra["no_provider"].append(m.group(1))
            continue
        if _OPEN_FAILED_RE.match(stripped):
            extra["open_failed"] += 1
            continue
        m = _FOUND_RE.match(stripped)
        if m:
            extra["found"] = int(m.group(1)) if m.group(1) else 0
            continue
        gid = _GID_RE.match(stripped)
        if gid and port is not None:
            port["gids"].append({"index": int(gid.group(1)), "gid": gid.group(2), "type": gid.group(3)})
            continue
        m = _KV_RE.match(stripped)
        if not m:
            unparsed.append(line)
            continue
        key, value = m.group(1), m.group(2)
        if key == "hca_id":
            hca = {"hca_id": value, "transport": None, "fw_ver": None, "node_guid": None, "sys_image_guid": None,
                   "vendor_id": None, "vendor_part_id": None, "hw_ver": None, "board_id": None,
                   "phys_port_cnt": None, "ports": []}
            hcas.append(hca)
            port = None
        elif hca is None:
            unparsed.append(line)
        elif key == "port":
            number = value if value.isdigit() else None
            port = {"port": int(number) if number else None, "state": None, "state_code": None, "max_mtu": None,
                    "active_mtu": None, "sm_lid": None, "port_lid": None, "port_lmc": None, "link_layer": None,
                    "gids": []}
            hca["ports"].append(port)
        elif port is not None:
            port[key] = _value(key, value)
            if key == "state":
                coded = _CODED_RE.match(value)
                port["state_code"] = int(coded.group(2)) if coded else None
        else:
            hca[key] = _value(key, value)
    return {"hcas": hcas, "unparsed": unparsed, **extra}


def diagnose_ibv_devinfo(parsed: dict, host: str | None = None) -> list[dict]:
    """Findings for ``parse_ibv_devinfo`` output of one host.

    - FAIL ``ibv.no_provider`` when libibverbs found no user-space driver for the kernel's devices
      and no HCA was listed (a container without the provider library: NCCL sees no IB device).
    - WARN ``ibv.open_failed`` when devices could not be opened, with the HCAs that could (``usable``).

    - WARN ``ibv.port_not_active`` per port whose state is not PORT_ACTIVE.
    - WARN ``ibv.roce_mtu_capped`` per active RoCE (Ethernet link layer) port whose active_mtu
      is below max_mtu: the netdev MTU is too small; the finding carries ``active_mtu``,
      ``max_mtu`` and ``netdev_mtu_needed`` (4200 for active_mtu 4096, see
      ``ROCE_NETDEV_MTU_FOR_4096``; smaller max_mtu values need max_mtu + 96).
    """
    out: list[dict] = []
    subject = host or "host"
    missing = parsed.get("no_provider") or []
    if missing and not parsed.get("hcas"):
        out.append(finding("ibv.no_provider", "FAIL", subject,
                           f"libibverbs found no user-space driver for {len(missing)} RDMA device"
                           f"{'s' if len(missing) > 1 else ''} the kernel exposes ({', '.join(missing[:3])}"
                           f"{', ...' if len(missing) > 3 else ''}), so no verbs program sees an HCA "
                           f"({parsed.get('found') if parsed.get('found') is not None else 'none'} found): NCCL falls "
                           "back to sockets", "install the provider library matching the kernel driver (rdma-core's "
                           "ibverbs-providers, or the OFED user space) in this host or image", host=host,
                           devices=missing))
    if parsed.get("open_failed"):
        usable = [h["hca_id"] for h in parsed.get("hcas") or []]
        out.append(finding("ibv.open_failed", "WARN", subject,
                           f"{parsed['open_failed']} RDMA device(s) could not be opened here; usable: "
                           f"{', '.join(usable) or 'none'}: in a container, only the devices mapped into it "
                           "(/dev/infiniband) open",
                           (f"name the usable ones to NCCL (NCCL_IB_HCA={','.join(usable)}) and to MPI" if usable else
                            "map /dev/infiniband (the device plugin's devices) into the container"), host=host,
                           usable=usable, failed=parsed["open_failed"]))
    for hca in parsed.get("hcas", []):
        for p in hca["ports"]:
            subject = hca["hca_id"]
            name = f"{subject} port {p['port']}"
            if p["state"] != "PORT_ACTIVE":
                out.append(finding("ibv.port_not_active", "WARN", subject, f"{name} is {p['state']}",
                                   "bring the port up (cable, switch port; on IB a subnet manager)", host=host,
                                   port=p["port"]))
                continue
            active, most = p.get("active_mtu"), p.get("max_mtu")
            roce = str(p.get("link_layer") or "").lower() == "ethernet"
            if roce and active and most and active < most:
                needed = ROCE_NETDEV_MTU_FOR_4096 if most == 4096 else most + ROCE_HEADER_BYTES
                out.append(finding("ibv.roce_mtu_capped", "WARN", subject,
                                   f"{name} (RoCE) runs active_mtu {active} although {most} is possible: "
                                   f"the netdev MTU is too small",
                                   f"set the MTU of the port's netdev (and the switch ports) to >= {needed} "
                                   f"for active_mtu {most}", host=host, port=p["port"], active_mtu=active,
                                   max_mtu=most, netdev_mtu_needed=needed))
    return out
