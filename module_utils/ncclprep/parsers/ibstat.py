"""``ibstat`` and ``ibstatus`` (infiniband-diags): HCA ports, their state, rate and link layer.

Two layouts exist. ``ibstat`` prints ``CA 'mlx5_0'`` blocks with ``Port N:``
sub-blocks of ``Key: value`` lines (tab or space indented); ``ibstatus`` prints
``Infiniband device 'mlx5_0' port 1 status:`` blocks with ``state: 4: ACTIVE``
style values. Both parsers return ports in one flat shape so that
``diagnose_ib_ports`` works on either:

``{"device": str, "port": int, "state": str | None, "physical_state": str | None,
"rate_gbps": float | None, "link_layer": str | None, "base_lid": int | None,
"sm_lid": int | None, ...}``

``rate_gbps`` is the rate field as printed, in Gb/s (bits). A port that is not
up still prints a rate (often 10): that number is not a link speed, which is
why ``link_rate_gbps`` returns None for such a port. A port without a ``Rate``
or ``Link layer`` line gets None there.
"""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.parsers import finding

_CA_RE = re.compile(r"^CA '([^']+)'\s*$")
_PORT_RE = re.compile(r"^Port (\d+):\s*$")
_KV_RE = re.compile(r"^([A-Za-z][A-Za-z _]*?):\s*(.*?)\s*$")
_IBSTATUS_HEAD_RE = re.compile(r"^Infiniband device '([^']+)' port (\d+) status:\s*$")
_CODED_RE = re.compile(r"^(\d+):\s*(\S+)$")  # "4: ACTIVE"
_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(?:\s*Gb/sec)?(?:\s*\((\d+X)\s*([^)]*?)\s*\))?$")

# ibstat "Key" -> (CA field, converter); port keys separately.
_CA_KEYS = {"CA type": "ca_type", "Number of ports": "num_ports", "Firmware version": "firmware",
            "Hardware version": "hardware_version", "Node GUID": "node_guid",
            "System image GUID": "system_image_guid"}
_PORT_KEYS = {"State": "state", "Physical state": "physical_state", "Rate": "rate_gbps", "Base lid": "base_lid",
              "LMC": "lmc", "SM lid": "sm_lid", "Capability mask": "capability_mask", "Port GUID": "port_guid",
              "Link layer": "link_layer"}
_INT_FIELDS = ("num_ports", "base_lid", "lmc", "sm_lid")


def _int(text: str) -> int | None:
    """Decimal or 0x-hex integer, None when the text is neither."""
    try:
        return int(text, 0) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def _num(text: str) -> float | int | None:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


def _empty_port(device: str, port: int) -> dict:
    return {"device": device, "port": port, "state": None, "physical_state": None, "rate_gbps": None,
            "link_layer": None, "base_lid": None, "sm_lid": None}


def parse_ibstat(text: str) -> dict:
    """Parse ``ibstat`` output into ``{"cas": [...], "unparsed": [lines]}``.

    Each CA is ``{"name", "ca_type", "num_ports", "firmware", "hardware_version", "node_guid",
    "system_image_guid", "ports": [port dicts]}`` (missing lines give None). Port dicts have
    the flat shape of the module docstring plus ``lmc``, ``capability_mask`` and ``port_guid``;
    ``rate_gbps`` is the printed rate in Gb/s. Never raises; lines outside a CA block or
    not ``Key: value`` are returned unparsed.
    """
    cas: list[dict] = []
    unparsed: list[str] = []
    ca: dict | None = None
    port: dict | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        m = _CA_RE.match(stripped)
        if m:
            ca = {"name": m.group(1), "ports": [], **{f: None for f in _CA_KEYS.values()}}
            cas.append(ca)
            port = None
            continue
        m = _PORT_RE.match(stripped)
        if m and ca is not None:
            port = _empty_port(ca["name"], int(m.group(1)))
            port.update(lmc=None, capability_mask=None, port_guid=None)
            ca["ports"].append(port)
            continue
        m = _KV_RE.match(stripped)
        if not m or ca is None:
            unparsed.append(line)
            continue
        key, value = m.group(1), m.group(2)
        if port is not None and key in _PORT_KEYS:
            field = _PORT_KEYS[key]
            port[field] = _num(value) if field == "rate_gbps" else _int(value) if field in _INT_FIELDS else value
        elif port is None and key in _CA_KEYS:
            field = _CA_KEYS[key]
            ca[field] = _int(value) if field in _INT_FIELDS else value
        else:
            unparsed.append(line)
    return {"cas": cas, "unparsed": unparsed}


def parse_ibstatus(text: str) -> dict:
    """Parse ``ibstatus`` output into ``{"ports": [port dicts], "unparsed": [lines]}``.

    ``state: 4: ACTIVE`` gives ``state="ACTIVE"`` and ``state_code=4``; ``phys state: 5: LinkUp``
    gives ``physical_state="LinkUp"`` and ``physical_state_code=5``; ``rate: 25 Gb/sec (1X EDR)``
    gives ``rate_gbps=25`` (Gb/s), ``width="1X"`` and ``speed="EDR"``; LIDs are read as hex.
    Port dicts also carry ``default_gid``. Never raises.
    """
    ports: list[dict] = []
    unparsed: list[str] = []
    port: dict | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        m = _IBSTATUS_HEAD_RE.match(stripped)
        if m:
            port = _empty_port(m.group(1), int(m.group(2)))
            port.update(state_code=None, physical_state_code=None, width=None, speed=None, default_gid=None)
            ports.append(port)
            continue
        key, sep, value = stripped.partition(":")
        value = value.strip()
        if port is None or not sep:
            unparsed.append(line)
            continue
        if key in ("state", "phys state"):
            coded = _CODED_RE.match(value)
            name = "state" if key == "state" else "physical_state"
            port[name] = coded.group(2) if coded else value
            port[name + "_code"] = int(coded.group(1)) if coded else None
        elif key == "rate":
            rate = _RATE_RE.match(value)
            if rate:
                port["rate_gbps"] = _num(rate.group(1))
                port["width"] = rate.group(2)
                port["speed"] = rate.group(3) or None
            else:
                unparsed.append(line)
        elif key in ("base lid", "sm lid"):
            port[key.replace(" ", "_")] = _int(value)
        elif key == "link_layer":
            port["link_layer"] = value
        elif key == "default gid":
            port["default_gid"] = value
        else:
            unparsed.append(line)
    return {"ports": ports, "unparsed": unparsed}


#: ibstat's abort (infiniband-diags ibdiag_common.c ``IBPANIC``): ``ibpanic: [8371] main: stat of IB
#: device 'mlx5_an0' failed: No such file or directory``; the listing stops there.
_PANIC_RE = re.compile(r"ibpanic: (?:\[\d+\] )?[\w.]+: (.*?)\s*$")
_PANIC_DEVICE_RE = re.compile(r"IB device '([^']+)'")
#: Azure's Accelerated Networking function (an Ethernet VF the mlx5 driver also lists): not an HCA.
AN_DEVICE_RE = re.compile(r"_an\d+$")


def parse_ib_status(text: str) -> dict:
    """Parse either layout, or both pasted together: ``{"layout": "ibstat" | "ibstatus" | "ibstat and
    ibstatus", "ports": [flat port dicts], "aborted": [{"device", "error"}], "unparsed": [...]}``.

    A port both layouts print is taken from ``ibstatus``'s. ``aborted``: ibstat's ``ibpanic`` lines
    (the device it stopped at, None when the line names none, and the error as printed): the CAs
    before it were printed, the rest were not.
    """
    lines = text.splitlines()
    aborted = []
    for line in lines:
        m = _PANIC_RE.search(line)
        if m:
            dev = _PANIC_DEVICE_RE.search(m.group(1))
            aborted.append({"device": dev.group(1) if dev else None, "error": m.group(1)})
    ibstat = parse_ibstat(text)
    stat_ports = [p for ca in ibstat["cas"] for p in ca["ports"]]
    panics = {i for i, line in enumerate(lines) if _PANIC_RE.search(line)}
    if any(line.startswith("Infiniband device '") for line in lines):
        status = parse_ibstatus(text)
        have = {(p["device"], p["port"]) for p in status["ports"]}
        extra = [p for p in stat_ports if (p["device"], p["port"]) not in have]
        either = set(ibstat["unparsed"]) & set(status["unparsed"]) if extra else set(status["unparsed"])
        unparsed = [ln for i, ln in enumerate(lines) if ln in either and i not in panics]
        return {"layout": "ibstat and ibstatus" if extra else "ibstatus", "ports": status["ports"] + extra,
                "aborted": aborted, "unparsed": unparsed}
    unparsed = [ln for ln in ibstat["unparsed"] if not _PANIC_RE.search(ln)]
    return {"layout": "ibstat", "ports": stat_ports, "aborted": aborted, "unparsed": unparsed}


def port_is_up(port: dict) -> bool:
    """True when the port's logical state is Active and its physical state LinkUp (case-insensitive)."""
    return (str(port.get("state") or "").upper() == "ACTIVE"
            and str(port.get("physical_state") or "").upper() == "LINKUP")


def link_rate_gbps(port: dict) -> float | None:
    """The port's link speed in Gb/s, or None when the port is not up or printed no rate.

    A down port still prints a rate field (``Rate: 10`` on a disabled HDR port); that is
    not a link speed and must not be counted as one.
    """
    return port.get("rate_gbps") if port_is_up(port) else None


def diagnose_ib_aborted(aborted: list[dict], ports: list[dict], host: str | None = None) -> list[dict]:
    """WARN ``ib.listing_aborted`` per device ibstat stopped at (``parse_ib_status``'s ``aborted``):
    the listing is partial, the ports read before it stand. A device named ``mlx5_an<N>`` is Azure's
    Accelerated Networking (Ethernet) function, which ibstat cannot read (Azure/azhpc-images#213):
    not a missing HCA."""
    out = []
    for a in aborted:
        dev = a["device"] or "a device"
        an = bool(a["device"] and AN_DEVICE_RE.search(a["device"]))
        why = (f"{dev} is an Accelerated Networking (Ethernet) function that ibstat cannot read, not a missing HCA"
               if an else f"{dev} is listed by the kernel but could not be read (its device node is missing or it "
               "went away)")
        out.append(finding("ib.listing_aborted", "WARN", a["device"] or (host or "host"),
                           f"ibstat stopped at {dev} ({a['error']}): the listing is partial ({len(ports)} port"
                           f"{'s' if len(ports) != 1 else ''} read); {why}",
                           "run `ibstat <device>` for each InfiniBand device (ls /sys/class/infiniband) or ibstatus, "
                           "which reads every device", host=host, device=a["device"], accelerated_networking=an))
    return out


def diagnose_ib_ports(ports: list[dict], host: str | None = None) -> list[dict]:
    """Findings for flat port dicts (from ``parse_ib_status``) of one host.

    - WARN ``ib.port_down`` per port that is not Active/LinkUp, subject the device, with
      ``rate_gbps=None`` (the printed rate of a down port is not a speed, and the message says so).
    - INFO ``ib.usable_hcas`` when some HCA has no port up, with ``usable`` (device names) and
      ``total_rate_gbps``, the sum of ``link_rate_gbps`` over the up ports (Gb/s).
    - FAIL ``ib.no_subnet_manager`` for an InfiniBand port whose link is up (LinkUp) but
      whose state is still Initializing: no subnet manager has configured it. RoCE
      (Ethernet link layer) ports have LID 0 and SM LID 0 by design and are never
      reported for that.
    """
    subject_host = host or "host"
    out: list[dict] = []
    devices = sorted({p["device"] for p in ports})
    usable = sorted({p["device"] for p in ports if port_is_up(p)})
    for p in ports:
        name = f"{p['device']} port {p['port']}"
        ib = str(p.get("link_layer") or "").lower() == "infiniband"
        if ib and str(p.get("physical_state") or "").upper() == "LINKUP" and \
                str(p.get("state") or "").upper() in ("INITIALIZING", "INIT"):
            out.append(finding("ib.no_subnet_manager", "FAIL", p["device"],
                               f"{name}: link up but state {p['state']}: no subnet manager configured the port",
                               "start a subnet manager (opensm or the switch's SM) on this fabric", host=host,
                               port=p["port"]))
        elif not port_is_up(p):
            rate = (f"; its printed rate {p['rate_gbps']:g} is not a link speed" if p.get("rate_gbps") is not None
                    else "; it prints no rate (unknown)")
            out.append(finding("ib.port_down", "WARN", p["device"],
                               f"{name} is down (state {p.get('state')}, physical state {p.get('physical_state')});"
                               f" NCCL cannot use it{rate}",
                               "enable and cable the port, or leave it out of NCCL_IB_HCA", host=host,
                               port=p["port"], rate_gbps=None))
    if len(usable) < len(devices):
        total = sum(link_rate_gbps(p) or 0 for p in ports)
        out.append(finding("ib.usable_hcas", "INFO", subject_host,
                           f"only {len(usable)} of {len(devices)} HCAs usable ({', '.join(usable) or 'none'}), "
                           f"{total:g} Gb/s in total", "", host=host, usable=usable, total_rate_gbps=total))
    return out
