"""What node_facts reads off a node with the tools it may or may not have, through the parsers.

Each reading runs one read-only tool under a deadline and parses its text with the parser of
``parsers/``, adding that parser's findings:

- ``ib_ports``: ``ibstat`` (else ``ibstatus``, else the RDMA sysfs files) -> ``parsers.ibstat``
- ``ibv_devinfo``: ``ibv_devinfo`` -> ``parsers.ibv_devinfo``
- ``numactl``: ``numactl -H``, else plain ``lscpu`` -> ``parsers.numa_lscpu`` (one shape either way)
- ``gpu_topology``: ``nvidia-smi topo -m`` -> ``parsers.topo`` (absent on CPU nodes); its
  ``data["p2p"]`` holds ``nvidia-smi topo -p2p r`` (``parse_topo_p2p``, see ``gpu_topology``)
- ``ip_links``: ``ip addr show`` (text form), else ``ifconfig -a`` -> ``parsers.ip_link`` /
  ``parsers.ifconfig`` (one shape either way)
- ``netplan``: ``/etc/netplan/*.yaml`` -> ``parsers.netplan``, judged against the RoCE netdevs
- ``link``: ``ethtool <interface>`` and ``ethtool -i <interface>`` -> ``parsers.ethtool``, only
  when ``collect`` is given the data-plane interface (the key is absent otherwise)

Every reading is None when the tool (or the files) is not on the node: a missing tool is never
an error. Otherwise it is ``{"source": what was read (argv joined, or a path), "error": str |
None, "data": parsed dict | None, "findings": [finding dicts]}``; ``error`` says that the tool
ran past its deadline or exited non-zero (then ``data`` is None and ``findings`` []). Where a
fallback tool was read, ``source`` names it (``ifconfig -a``, ``lscpu``). A second command read
into a reading's ``data`` (``gpu_topology``'s ``p2p``, ``link``'s ``driver``) is a
``{"source", "error", "data"}`` dict of its own; its findings join the reading's.

Commands run through a ``runner(argv, timeout_s) -> (rc, stdout, stderr)`` and tools are found
with ``which(name) -> path | None`` (``AnsibleModule.get_bin_path`` on a node), so tests pass
fakes. ``subprocess_runner`` is the real runner: it kills a command at its deadline and
returns rc ``TIMEOUT_RC`` (124, as coreutils ``timeout``). Standard library only: this module
runs on the nodes.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
from collections.abc import Callable

from ansible.module_utils.ncclprep.netutil import KERNEL_IFNAME_RE
from ansible.module_utils.ncclprep.parsers.ethtool import diagnose_ethtool, parse_ethtool, parse_ethtool_driver
from ansible.module_utils.ncclprep.parsers.ibstat import diagnose_ib_ports, parse_ib_status
from ansible.module_utils.ncclprep.parsers.ibv_devinfo import diagnose_ibv_devinfo, parse_ibv_devinfo
from ansible.module_utils.ncclprep.parsers.ifconfig import parse_ifconfig
from ansible.module_utils.ncclprep.parsers.ip_link import diagnose_ip_link, parse_ip_link
from ansible.module_utils.ncclprep.parsers.netplan import diagnose_netplan, parse_netplan
from ansible.module_utils.ncclprep.parsers.numa_lscpu import diagnose_numa, parse_lscpu, parse_numactl_hardware
from ansible.module_utils.ncclprep.parsers.topo import diagnose_topo, diagnose_topo_p2p, parse_topo, parse_topo_p2p
from ansible.module_utils.ncclprep.sysfs import find_roce_ports, read_text

Runner = Callable[[list, float], tuple]
Which = Callable[[str], "str | None"]

#: rc of a command killed at its deadline (the value coreutils ``timeout`` uses).
TIMEOUT_RC = 124
#: Environment of every command: untranslated output, as the parsers expect.
COMMAND_ENV = {"LC_ALL": "C", "LANG": "C"}
_CODED_RE = re.compile(r"^\d+:\s*(\S+)$")          # sysfs "4: ACTIVE", "5: LinkUp"
_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*Gb/sec")  # sysfs "200 Gb/sec (4X HDR)"


def subprocess_runner(argv: list, timeout: float) -> tuple:
    """Run ``argv`` for at most ``timeout`` seconds; returns ``(rc, stdout, stderr)`` as text.

    A command still running at the deadline is killed and gives ``(TIMEOUT_RC, partial stdout
    or "", message)``; one that cannot be started gives ``(127, "", error)``. Never raises.
    """
    env = dict(os.environ, **COMMAND_ENV)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL, errors="replace", check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return TIMEOUT_RC, out, f"killed after {timeout:g} s"
    except OSError as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def _reading(source: str, error: str | None = None, data: dict | None = None,
             findings: list | None = None) -> dict:
    return {"source": source, "error": error, "data": data, "findings": findings or []}


def run_tool(runner: Runner, which: Which, argv: list, timeout: float) -> tuple:
    """Run a read-only tool: ``(None, None, None)`` when ``argv[0]`` is not found, else
    ``(source, stdout | None, error | None)``.

    ``source`` is argv joined with spaces (the bare tool name first). ``error`` names the
    command and the deadline it ran past (rc TIMEOUT_RC), or its exit status and the last line
    of stderr; stdout is None then.
    """
    path = which(argv[0])
    source = " ".join(str(a) for a in argv)
    if not path:
        return None, None, None
    rc, out, err = runner([path, *argv[1:]], timeout)
    if rc == TIMEOUT_RC:
        return source, None, f"{source} ran past its deadline of {timeout:g} s"
    if rc != 0:
        last = ([line.strip() for line in (err or "").splitlines() if line.strip()] or [""])[-1]
        return source, None, f"{source} exited {rc}" + (f": {last}" if last else "")
    return source, out or "", None


def _tool_reading(runner: Runner, which: Which, argv: list, timeout: float,
                  parse: Callable[[str], dict], diagnose: Callable[[dict], list]) -> dict | None:
    source, out, error = run_tool(runner, which, argv, timeout)
    if source is None:
        return None
    if error is not None:
        return _reading(source, error)
    data = parse(out)
    return _reading(source, data=data, findings=diagnose(data))


def _int(text: str | None) -> int | None:
    try:
        return int(text, 0) if text is not None else None
    except ValueError:
        return None


def read_ib_sysfs(sysfs: str = "/sys") -> list[dict]:
    """Every RDMA port from ``<sysfs>/class/infiniband/<dev>/ports/<n>/`` in the flat shape of
    ``parsers.ibstat``: ``{"device", "port", "state", "physical_state", "rate_gbps",
    "link_layer", "base_lid", "sm_lid"}``.

    Files (kernel Documentation/ABI/stable/sysfs-class-infiniband): ``state`` ``4: ACTIVE`` ->
    ``ACTIVE``; ``phys_state`` ``5: LinkUp`` -> ``LinkUp``; ``rate`` ``200 Gb/sec (4X HDR)`` ->
    200 (Gb/s); ``lid`` / ``sm_lid`` hex (``0x239``) -> int; ``link_layer`` as written. An
    unreadable file gives None; no ``class/infiniband`` gives []. Never raises.
    """
    root = os.path.join(sysfs, "class", "infiniband")
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return []
    ports = []
    for dev in devices:
        try:
            names = sorted((n for n in os.listdir(os.path.join(root, dev, "ports")) if n.isdigit()), key=int)
        except OSError:
            continue
        for name in names:
            base = os.path.join(root, dev, "ports", name)
            coded = {key: read_text(os.path.join(base, key)) for key in ("state", "phys_state")}
            for key, value in coded.items():
                m = _CODED_RE.match(value or "")
                coded[key] = m.group(1) if m else value
            rate = _RATE_RE.match(read_text(os.path.join(base, "rate")) or "")
            ports.append({"device": dev, "port": int(name), "state": coded["state"],
                          "physical_state": coded["phys_state"],
                          "rate_gbps": float(rate.group(1)) if rate else None,
                          "link_layer": read_text(os.path.join(base, "link_layer")) or None,
                          "base_lid": _int(read_text(os.path.join(base, "lid"))),
                          "sm_lid": _int(read_text(os.path.join(base, "sm_lid")))})
    return ports


def ib_ports(runner: Runner, which: Which, timeout: float, host: str | None = None,
             sysfs: str = "/sys") -> dict | None:
    """HCA ports: ``ibstat``, else ``ibstatus``, else sysfs (``read_ib_sysfs``).

    ``data`` is ``{"layout": "ibstat" | "ibstatus" | "sysfs", "ports": [flat port dicts],
    "unparsed": [lines]}`` and ``findings`` come from ``diagnose_ib_ports`` (a down port, an HCA
    short, no subnet manager on IB; never "no SM" on RoCE). None when no tool is found and sysfs
    shows no RDMA device. A tool that fails or runs past ``timeout`` seconds gives its error and
    the sysfs reading is not tried in its place (the error is the finding worth seeing).
    """
    for tool in ("ibstat", "ibstatus"):
        source, out, error = run_tool(runner, which, [tool], timeout)
        if source is None:
            continue
        if error is not None:
            return _reading(source, error)
        data = parse_ib_status(out)
        return _reading(source, data=data, findings=diagnose_ib_ports(data["ports"], host))
    ports = read_ib_sysfs(sysfs)
    if not ports:
        return None
    data = {"layout": "sysfs", "ports": ports, "unparsed": []}
    return _reading(os.path.join(sysfs, "class", "infiniband"), data=data, findings=diagnose_ib_ports(ports, host))


def ibv_devinfo(runner: Runner, which: Which, timeout: float, host: str | None = None) -> dict | None:
    """``ibv_devinfo`` (rdma-core): HCAs, port states, max/active MTU; findings from
    ``diagnose_ibv_devinfo`` (a port not active, a RoCE active_mtu capped by the netdev MTU).
    None without ibv_devinfo."""
    return _tool_reading(runner, which, ["ibv_devinfo"], timeout, parse_ibv_devinfo,
                         lambda d: diagnose_ibv_devinfo(d, host))


def numactl(runner: Runner, which: Which, timeout: float, host: str | None = None) -> dict | None:
    """``numactl -H``: NUMA nodes, CPUs, sizes (MiB) and distances; findings from
    ``diagnose_numa``. Without numactl, plain ``lscpu`` (``parse_lscpu``: the same shape with the
    node CPUs only, sizes and distances None, plus lscpu's counts). None without either
    (numa.read_topology reads sysfs either way). A numactl that fails gives its error; lscpu is
    not tried in its place (``No NUMA available`` is the answer worth seeing)."""
    return (_tool_reading(runner, which, ["numactl", "-H"], timeout, parse_numactl_hardware,
                          lambda d: diagnose_numa(d, host))
            or _tool_reading(runner, which, ["lscpu"], timeout, parse_lscpu, lambda d: diagnose_numa(d, host)))


def _sub_reading(runner: Runner, which: Which, argv: list, timeout: float,
                 parse: Callable[[str], dict]) -> dict:
    source, out, error = run_tool(runner, which, argv, timeout)
    return {"source": source, "error": error, "data": parse(out) if error is None and source else None}


def gpu_topology(runner: Runner, which: Which, timeout: float, host: str | None = None) -> dict | None:
    """``nvidia-smi topo -m``: GPU/NIC link matrix and CPU/NUMA affinity; findings from
    ``diagnose_topo``. None without nvidia-smi (CPU nodes). On a node whose driver is not
    loaded nvidia-smi exits non-zero: that is an ``error``, not a failure.

    When topo -m was read, ``nvidia-smi topo -p2p r`` is run too (under its own ``timeout``) and
    ``data["p2p"]`` is ``{"source": "nvidia-smi topo -p2p r", "error": str | None, "data":
    parse_topo_p2p dict (capability "r": P2P read) | None}``; its findings (``topo.p2p_*``, a GPU
    pair without P2P read) are added. A driver too old for ``-p2p`` gives that ``error`` only."""
    reading = _tool_reading(runner, which, ["nvidia-smi", "topo", "-m"], timeout, parse_topo,
                            lambda d: diagnose_topo(d, host))
    if reading is None or reading["error"] is not None:
        return reading
    p2p = _sub_reading(runner, which, ["nvidia-smi", "topo", "-p2p", "r"], timeout,
                       lambda text: parse_topo_p2p(text, "r"))
    reading["data"]["p2p"] = p2p
    if p2p["data"] is not None:
        reading["findings"] += diagnose_topo_p2p(p2p["data"], host)
    return reading


def ip_links(runner: Runner, which: Which, timeout: float, host: str | None = None) -> dict | None:
    """``ip addr show`` in its text form: links with flags, link type, state, MTU and addresses;
    findings from ``diagnose_ip_link`` (an IPoIB interface down, an unusual IPoIB MTU).
    Without ip, ``ifconfig -a`` (``parse_ifconfig``: the same link shape, with ``state`` derived
    from the RUNNING flag and no index, qdisc or master; plus ``layout``). None without either."""
    return (_tool_reading(runner, which, ["ip", "addr", "show"], timeout, parse_ip_link,
                          lambda d: diagnose_ip_link(d, host))
            or _tool_reading(runner, which, ["ifconfig", "-a"], timeout, parse_ifconfig,
                             lambda d: diagnose_ip_link(d, host)))


def link(runner: Runner, which: Which, timeout: float, interface: str, host: str | None = None) -> dict | None:
    """``ethtool <interface>``: speed (Mb/s), duplex, port, autonegotiation, link detected, link
    modes (``parse_ethtool``); findings from ``diagnose_ethtool`` (FAIL no link, WARN speed
    unknown on a link that is up). None without ethtool.

    ``data["driver"]`` is ``ethtool -i <interface>`` as ``{"source", "error", "data":
    parse_ethtool_driver dict | None}`` (driver, firmware-version, bus-info), run only when the
    settings were read. A name the kernel would not accept as a netdev (or one starting with
    ``-``) is not passed to ethtool: the reading's ``error`` names it.
    """
    if not which("ethtool"):
        return None
    if not isinstance(interface, str) or not KERNEL_IFNAME_RE.match(interface):
        return _reading(f"ethtool {interface}", f"ethtool: {interface!r} is not a network interface name "
                        "(1 to 15 characters, no '/', ':' or white space, not starting with '-')")
    reading = _tool_reading(runner, which, ["ethtool", interface], timeout, parse_ethtool,
                            lambda d: diagnose_ethtool(d, host))
    if reading is not None and reading["error"] is None:
        reading["data"]["driver"] = _sub_reading(runner, which, ["ethtool", "-i", interface], timeout,
                                                 parse_ethtool_driver)
    return reading


def netplan(netplan_dir: str = "/etc/netplan", roce_interfaces: list | None = None,
            host: str | None = None) -> dict | None:
    """Every ``<netplan_dir>/*.yaml`` parsed (``parse_netplan``), in file name order.

    ``data`` is ``{"files": {path: parsed}}``; ``findings`` are ``diagnose_netplan`` per file
    with ``roce_interfaces`` (the RoCE netdevs; None: not known). None when the folder has no
    YAML file (not a netplan host). An unreadable file is parsed as empty text and gets its
    ``error``. No deadline needed: local files only.
    """
    paths = sorted(glob.glob(os.path.join(netplan_dir, "*.yaml")))
    if not paths:
        return None
    files, findings = {}, []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as fh:
                parsed = parse_netplan(fh.read())
        except (OSError, UnicodeDecodeError) as exc:
            parsed = {"version": None, "renderer": None, "interfaces": [], "unparsed": [],
                      "error": f"unreadable: {exc}"}
        files[path] = parsed
        findings += [dict(f, file=path) for f in diagnose_netplan(parsed, roce_interfaces, host)]
    return _reading(netplan_dir, data={"files": files}, findings=findings)


def collect(runner: Runner, which: Which, timeout: float, host: str | None = None, sysfs: str = "/sys",
            netplan_dir: str = "/etc/netplan", interface: str | None = None) -> dict:
    """Every reading of this module: ``{"ib_ports", "ibv_devinfo", "numactl", "gpu_topology",
    "ip_links", "netplan"}``, plus ``"link"`` when ``interface`` (the data-plane netdev) is given;
    each None or a reading dict (module docstring).

    Each command gets ``timeout`` seconds and commands run one after another, so the whole takes
    at most 6 x ``timeout``, 8 x with ``interface`` (ibstat and ibstatus, ip and ifconfig,
    numactl and lscpu are never both run; nvidia-smi and ethtool run twice each). Never raises.
    """
    roce = sorted({p["netdev"] for p in find_roce_ports(sysfs) if p.get("netdev")})
    out = {
        "ib_ports": ib_ports(runner, which, timeout, host, sysfs),
        "ibv_devinfo": ibv_devinfo(runner, which, timeout, host),
        "numactl": numactl(runner, which, timeout, host),
        "gpu_topology": gpu_topology(runner, which, timeout, host),
        "ip_links": ip_links(runner, which, timeout, host),
        # Without a RoCE port the MTU rule has nothing to judge: [] rather than None ("unknown").
        "netplan": netplan(netplan_dir, roce, host),
    }
    if interface:
        out["link"] = link(runner, which, timeout, interface, host)
    return out
