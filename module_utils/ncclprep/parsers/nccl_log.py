"""NCCL ``NCCL_DEBUG=INFO`` log lines: socket interfaces, env settings, WARNs, errors, ring transports.

Read from each line (prefix ``host:pid:tid [cudaDev]`` optional, anything before
it such as ``[trainer3]:`` ignored):

- the ``NET/Socket : Using [0]bond0:10.0.0.1<0> [1]...`` interface list, also when the
  entries are wrapped onto their own lines;
- ``NCCL_XXX set by environment to V`` / ``NCCL_XXX set to V``;
- ``NCCL WARN`` lines, and among them ``NET/IB : Got completion with error E, opcode O,
  len L, vendor err V`` (E is an ibv_wc_status, see IBV_WC_STATUS);
- ``nccl...Error: text`` lines and the socket "family N is neither AF_INET nor AF_INET6" error;
- ring/channel hops ``Ring 00 : 3[3] -> 2[2] via P2P/IPC`` (older NCCL) and
  ``Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0`` (newer);
- communicator init lines ``comm 0x55.. rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 1b000 commId 0x8f..
  - Init START`` (and ``- Init COMPLETE``; NCCL before 2.18 prints no nvmlDev/commId), one per rank;
- the library: ``NCCL version 2.5.6+cuda10.0`` (2.4-2.18 print it bare, later ones with the
  ``host:pid:tid [dev] NCCL INFO`` prefix), ``Using network IB`` (or Socket, or a plugin's
  name such as IBext_v8), the HCAs of ``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO];
  OOB bond0:10.0.0.1<0>`` (also the merged-NIC form ``[0]={[0] mlx5_2:1/RoCE, ...}``), the
  ``Bootstrap : Using eth0:10.0.0.1<0>`` interface, and GPUDirect RDMA (``GPU Direct RDMA
  Enabled/Disabled for ...`` lines, ``/GDRDMA`` on a NET hop).

Sources: NCCL's ``src/transport.cc`` and ``src/misc/socket.cc`` for the line formats,
rdma-core ``verbs.h`` for the completion status numbers.
"""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.parsers import finding, nccl_errors, number_ranges
from ansible.module_utils.ncclprep.parsers.ip_link import VIRTUAL_IFACE_PREFIXES

# Every pattern below runs on every line, also on hostile ones (a base64 line of 100 KB): each is
# anchored so that it is tried only where a token starts (a look-behind), never at each character
# inside one, which made them quadratic in the line's length (review F14).
_PREFIX_RE = re.compile(r"(?<![^\s:\[\]|])(?P<host>[^\s:\[\]|]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] ")
_SOCKET_LIST_RE = re.compile(r"NET/Socket : Using\b")
_IFACE_RE = re.compile(r"\[(\d+)\]([^:\s\[\]]+):(\S+?)<(\d+)>")
_ENV_RE = re.compile(r"\b(NCCL_[A-Z0-9_]+) set (?:by environment )?to (\S.*?)\s*$")
_WARN_RE = re.compile(r"NCCL WARN (.*?)\s*$")
_SRC_RE = re.compile(r"(?<!\S)(\S+\.(?:cc|cu|h|c):\d+) NCCL WARN")
# Old "with error 12, opcode 1, len 0, vendor err 129", newer "with status=12 opcode=1 len=0 vendor err 129"
# and newest "with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_RDMA_WRITE(1) vendor_err=129".
_IB_COMPLETION_RE = re.compile(r"NET/IB(?:/\w+)? ?: Got completion (?:from peer (\S+) )?with "
                               r"(?:error |status=(?:\w+\()?)(\d+)\)?,? opcode[ =](?:\w+\()?(\d+)\)?,?"
                               r"(?: len[ =](\d+),?)? vendor[ _]err[ =](\d+)")
_FAMILY_RE = re.compile(r"with family (\d+) is neither AF_INET")
_ERROR_RE = re.compile(r"\b(nccl[A-Za-z]*Error): ?(.*?)\s*$")
_HOP_RE = re.compile(r"\b(Ring|Channel) (\d+)(?:/\d+)? : (\d+)(?:\[(\d+)\])? -> (\d+)(?:\[(\d+)\])?"
                     r"(?: \[(send|receive)\])? via (\S+)")
_VERSION_RE = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)(?:\+cuda(\S+))?")
_NETWORK_RE = re.compile(r"\bUsing network (\S+)")
_IB_LIST_RE = re.compile(r"\bNET/IB : Using (.*?)(?:; OOB (\S+?):(\S+?)<\d+>)?\s*$")
_IB_DEV_RE = re.compile(r"(?<![A-Za-z0-9_.-])([A-Za-z0-9_.-]+):(\d+)/(IB|RoCE)\b")
_BOOTSTRAP_RE = re.compile(r"\bBootstrap ?: Using (\S+?):(\S+?)<\d+>")
_GDR_RE = re.compile(r"\bGPU Direct RDMA (Enabled|Disabled)\b")
_PLUGIN_RE = re.compile(r"\b(NET/Plugin ?: .*?|Using (?:non-device )?net plugin version \d+|Plugin Path : \S+"
                        r"|P2P plugin \S+)\s*$")
_INIT_RE = re.compile(r"\bcomm (0x[0-9a-fA-F]+) rank (\d+) nranks (\d+) cudaDev (\d+)(.*?)- Init (START|COMPLETE)\b")
_BUSID_RE = re.compile(r"\bbusId ([0-9a-fA-F]+)")
_COMMID_RE = re.compile(r"\bcommId (0x[0-9a-fA-F]+)")
_NUMBERS_RE = re.compile(r"0x[0-9a-fA-F]+|\d+")
#: nccl.warn findings listed per log before the rest are counted in one
MAX_WARN_KINDS = 20
_NOISE_RE = re.compile(r"^\.\.\.$|(?:^|:)Last error:$")  # elision marks and the header of an error's text

#: ibv_wc_status numbers (rdma-core libibverbs/verbs.h) that NCCL prints as "completion error N".
IBV_WC_STATUS = {1: "IBV_WC_LOC_LEN_ERR", 2: "IBV_WC_LOC_QP_OP_ERR", 4: "IBV_WC_LOC_PROT_ERR",
                 5: "IBV_WC_WR_FLUSH_ERR", 8: "IBV_WC_LOC_ACCESS_ERR", 9: "IBV_WC_REM_INV_REQ_ERR",
                 10: "IBV_WC_REM_ACCESS_ERR", 11: "IBV_WC_REM_OP_ERR", 12: "IBV_WC_RETRY_EXC_ERR",
                 13: "IBV_WC_RNR_RETRY_EXC_ERR", 19: "IBV_WC_FATAL_ERR", 20: "IBV_WC_RESP_TIMEOUT_ERR",
                 21: "IBV_WC_GENERAL_ERR"}


def _prefix(line: str) -> dict:
    m = _PREFIX_RE.search(line)
    if not m:
        return {"host": None, "pid": None, "cuda_dev": None}
    return {"host": m.group("host"), "pid": int(m.group("pid")), "cuda_dev": int(m.group("dev"))}


def line_host(line: str) -> str | None:
    """The host of a log line's ``host:pid:tid [dev]`` prefix, None when it has none."""
    m = _PREFIX_RE.search(line)
    return m.group("host") if m else None


def _opt_int(text: str | None) -> int | None:
    return int(text) if text is not None else None


def parse_nccl_log(text: str) -> dict:
    """Parse NCCL INFO/WARN log text into a dict of what it shows.

    Returns ``{"socket_interfaces": [{"index", "name", "address", "port"}], "env": {NAME: value},
    "warnings": [{"host", "pid", "cuda_dev", "source", "message"}], "ib_completion_errors":
    [{"host", "peer", "error", "status", "opcode", "len", "vendor_err"}], "errors": [{"error", "message"}],
    "socket_family_errors": [int], "hops": [{"host", "kind": "Ring" | "Channel", "channel", "src",
    "src_dev", "dst", "dst_dev", "direction", "transport"}], "versions": [version], "cuda": str | None,
    "network": str | None, "ib_devices": [{"device", "port", "link_layer"}], "oob": {"interface",
    "address"} | None, "bootstrap": {"interface", "address"} | None, "gdr": [bool], "net_plugin":
    [what the NET/Plugin lines said], "ranks": [{"host", "pid", "comm", "comm_id" (None before NCCL
    2.18), "rank", "nranks", "cuda_dev", "bus_id", "state": "START" | "COMPLETE"}], "known_errors":
    [nccl_errors.scan_nccl_errors rows], "unparsed": [lines]}``. Ranks and
    devices not printed in brackets are None. Lines that are only ``...`` or ``Last error:``
    are understood and skipped. Never raises.
    """
    out: dict = {"socket_interfaces": [], "env": {}, "warnings": [], "ib_completion_errors": [], "errors": [],
                 "socket_family_errors": [], "hops": [], "versions": [], "cuda": None, "network": None,
                 "ib_devices": [], "oob": None, "bootstrap": None, "gdr": [], "net_plugin": [], "ranks": [],
                 "unparsed": []}
    in_socket_list = False
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        ifaces = _IFACE_RE.findall(stripped)
        if _SOCKET_LIST_RE.search(stripped) or (in_socket_list and ifaces and stripped.startswith("[")):
            in_socket_list = True
            out["socket_interfaces"] += [{"index": int(i), "name": n, "address": a, "port": int(p)}
                                         for i, n, a, p in ifaces]
            continue
        in_socket_list = False
        if _library_line(stripped, out):
            continue
        pre = _prefix(stripped)
        init = _INIT_RE.search(stripped)
        if init:
            bus, comm_id = _BUSID_RE.search(init.group(5)), _COMMID_RE.search(init.group(5))
            out["ranks"].append({"host": pre["host"], "pid": pre["pid"], "comm": init.group(1),
                                 "comm_id": comm_id.group(1) if comm_id else None, "rank": int(init.group(2)),
                                 "nranks": int(init.group(3)), "cuda_dev": int(init.group(4)),
                                 "bus_id": bus.group(1) if bus else None, "state": init.group(6)})
            continue
        env = _ENV_RE.search(stripped)
        warn = _WARN_RE.search(stripped)
        hop = _HOP_RE.search(stripped)
        family = _FAMILY_RE.search(stripped)
        error = _ERROR_RE.search(stripped)
        if env:
            out["env"][env.group(1)] = env.group(2)
        elif warn:
            src = _SRC_RE.search(stripped)
            out["warnings"].append({**pre, "source": src.group(1) if src else None, "message": warn.group(1)})
            ib = _IB_COMPLETION_RE.search(stripped)
            if ib:
                code = int(ib.group(2))
                out["ib_completion_errors"].append({"host": pre["host"], "peer": ib.group(1), "error": code,
                                                    "status": IBV_WC_STATUS.get(code), "opcode": int(ib.group(3)),
                                                    "len": _opt_int(ib.group(4)), "vendor_err": int(ib.group(5))})
        elif hop:
            out["hops"].append({"host": pre["host"], "kind": hop.group(1), "channel": int(hop.group(2)),
                                "src": int(hop.group(3)), "src_dev": _opt_int(hop.group(4)),
                                "dst": int(hop.group(5)), "dst_dev": _opt_int(hop.group(6)),
                                "direction": hop.group(7), "transport": hop.group(8)})
        elif family:
            out["socket_family_errors"].append(int(family.group(1)))
        elif error:
            out["errors"].append({"error": error.group(1), "message": error.group(2)})
        elif not _NOISE_RE.search(stripped) and not nccl_errors.covered(stripped):
            out["unparsed"].append(line)
    out["known_errors"] = nccl_errors.scan_nccl_errors(text)
    return out


def _library_line(line: str, out: dict) -> bool:
    """Read a version, network, HCA, bootstrap or GPUDirect line into ``out``; True when it was one."""
    m = _VERSION_RE.search(line)
    if m:
        if m.group(1) not in out["versions"]:
            out["versions"].append(m.group(1))
        out["cuda"] = out["cuda"] or m.group(2)
        return True
    m = _NETWORK_RE.search(line)
    if m:
        out["network"] = m.group(1)
        return True
    m = _IB_LIST_RE.search(line)
    if m:
        for dev, port, layer in _IB_DEV_RE.findall(m.group(1)):
            entry = {"device": dev, "port": int(port), "link_layer": layer}
            if entry not in out["ib_devices"]:
                out["ib_devices"].append(entry)
        if m.group(2):
            out["oob"] = {"interface": m.group(2), "address": m.group(3)}
        return True
    m = _BOOTSTRAP_RE.search(line)
    if m:
        out["bootstrap"] = {"interface": m.group(1), "address": m.group(2)}
        return True
    m = _GDR_RE.search(line)
    if m:
        out["gdr"].append(m.group(1) == "Enabled")
        return True
    m = _PLUGIN_RE.search(line)
    if m:
        if m.group(1) not in out["net_plugin"]:
            out["net_plugin"].append(m.group(1))
        return True
    return False


def nccl_path(parsed: dict) -> dict:
    """What NCCL used, from ``parse_nccl_log`` output: ``{"version": str | None (None also when
    ranks printed different ones: see "versions"), "versions", "network" (IB, Socket or a
    plugin's name), "net": "ib" | "socket" | None (the family: a plugin name starting with IB
    counts as ib), "transports": transports_used(...), "socket_interfaces": [names],
    "ib_devices": ["mlx5_0:1/IB", ...], "gdr": True | False | None}``. GPUDirect RDMA is True
    when a NET hop ran /GDRDMA or NCCL said Enabled, False when it only said Disabled."""
    network = parsed.get("network")
    hops = parsed.get("hops") or []
    inter = [h["transport"] for h in hops if h["transport"].startswith("NET/")]
    if network is None and inter:
        network = inter[0].split("/")[1]
    net = None
    if network:
        net = "ib" if network.upper().startswith("IB") else ("socket" if network.lower() == "socket" else None)
    gdr_hops = any("GDRDMA" in t for t in inter)
    said = parsed.get("gdr") or []
    gdr = True if gdr_hops or any(said) else (False if said else None)
    versions = parsed.get("versions") or []
    return {"version": versions[0] if len(versions) == 1 else None, "versions": versions, "network": network,
            "net": net, "transports": transports_used(hops),
            "socket_interfaces": [i["name"] for i in parsed.get("socket_interfaces") or []],
            "ib_devices": [f"{d['device']}:{d['port']}/{d['link_layer']}" for d in parsed.get("ib_devices") or []],
            "gdr": gdr}


def transport_family(transport: str) -> str:
    """``P2P/IPC`` -> ``P2P/IPC``; ``NET/Socket/0`` -> ``NET/Socket``; ``NET/IB/0/GDRDMA`` -> ``NET/IB``."""
    parts = transport.split("/")
    return "/".join(parts[:2]) if parts[0] in ("NET", "P2P", "SHM") else parts[0]


def transports_used(hops: list[dict]) -> dict:
    """Transports of ring/channel hops: ``{"intra_host": [families], "inter_host": [families]}`` (sorted).

    NCCL uses its NET transports only for peers it cannot reach through P2P or SHM, i.e.
    between hosts (unless P2P and SHM are disabled), so a NET hop counts as inter-host
    and any other hop as intra-host.
    """
    intra = sorted({transport_family(h["transport"]) for h in hops if not h["transport"].startswith("NET/")})
    inter = sorted({transport_family(h["transport"]) for h in hops if h["transport"].startswith("NET/")})
    return {"intra_host": intra, "inter_host": inter}


def _is_virtual(name: str) -> bool:
    return name.startswith(VIRTUAL_IFACE_PREFIXES)


def _link_local(address: str) -> bool:
    """IPv6 fe80::/10 or IPv4 169.254/16: valid on its link only (another host's packets never reach it)."""
    a = address.lower()
    return a.startswith(("fe8", "fe9", "fea", "feb", "169.254."))


def diagnose_nccl_log(parsed: dict, host: str | None = None) -> list[dict]:
    """Findings for ``parse_nccl_log`` output.

    - FAIL ``nccl.socket_virtual_ifaces`` when NCCL's socket interface list holds container or
      virtual interfaces (VIRTUAL_IFACE_PREFIXES): it may route inter-host traffic over them.
      The remediation names the one real NIC when exactly one is listed (``suggested_ifname``).
      Source: NCCL's environment-variable docs, NCCL_SOCKET_IFNAME (a prefix list chooses the
      interfaces; ``^docker`` excludes, ``=eth0`` names one exactly).
      Interfaces with only a link-local address (fe80::, 169.254/16) are named: no other host reaches
      them (NVIDIA/nccl#529: ip6tnl0's fe80:: address, connects timed out); with no real NIC listed,
      the one interface with a routable address is suggested. When lo is the only interface,
      INFO ``nccl.socket_loopback_only`` instead (a one-host run).
    - WARN ``nccl.socket_over_ipoib`` when every socket interface is IPoIB and NCCL runs on sockets
      (NVIDIA/nccl-tests#188: make IB work rather than sockets over IPoIB); interfaces whose IPv4
      addresses share their first three octets are named (ARP flux).
    - FAIL ``nccl.socket_ifname_missing`` when the log shows a socket address-family error: with
      NCCL_SOCKET_IFNAME set, that interface does not exist on the host (the family number is
      only a symptom of an unset address); subject is the interface.
    - FAIL ``nccl.ib_completion_error`` per completion error; 12 (IBV_WC_RETRY_EXC_ERR) is a
      transport retry timeout: the IB/RoCE NICs cannot reach each other though the socket
      bootstrap worked; the remediation points at NCCL_IB_GID_INDEX (RoCE v2 GID, often 3). Source:
      the maintainer's explanation in NVIDIA/nccl#426 (error 12 is a timeout; right away it means
      the NICs cannot talk over RoCE although the connection, not made over RoCE, was set up; the
      thread's fix was NCCL_IB_GID_INDEX=3) and NCCL's env docs on NCCL_IB_GID_INDEX.
    - the findings of ``nccl_errors.diagnose_nccl_errors`` (NCCL messages with a known cause: a
      duplicate GPU, /dev/shm too small, an RDMA device that cannot be opened, a bootstrap connect
      that never completed, ...).
    - WARN ``nccl.warn`` for every other kind of WARN line (lines that differ only in their
      numbers are one kind), the first as printed with a count of the others (``count``,
      ``first``: the first line's message); at most MAX_WARN_KINDS kinds, then one finding
      counting the rest.
    - WARN ``nccl.debug_class`` when the log shows a variable of NCCL's debugging class set
      (``NCCL_ALGO set by environment to Ring``; parsers/nccl_errors.py DEBUG_CLASS). Source: NCCL's
      env.rst, whose "Debugging" section says these "should generally not be set for production
      code"; NCCL's tuner plugin (a CSV per size range) is the sanctioned way to choose them.
    - WARN ``nccl.nics_unused`` when NET/IB lists several devices but the channels between hosts go
      through fewer of them (``NET/IB/<index>`` of the hops), seen from at least as many sending
      ranks as devices (one rank's own log shows only its nearest NIC): the others carry nothing
      (an NCCL_IB_HCA naming one, the GPU-NIC topology, NCCL_CROSS_NIC).
    - INFO ``nccl.transports`` with the transports used inside and between hosts.
    """
    out: list[dict] = []
    subject_host = host or "host"
    ifaces = parsed.get("socket_interfaces", [])
    # a log of several ranks or hosts lists the same interfaces again: each name once, first seen first
    names = list(dict.fromkeys(i["name"] for i in ifaces))
    virtual = [n for n in names if _is_virtual(n)]
    real = [n for n in names if not _is_virtual(n)]
    address = {i["name"]: i["address"] for i in ifaces}
    local = [n for n in names if _link_local(address.get(n) or "")]
    if names == ["lo"]:
        out.append(finding("nccl.socket_loopback_only", "INFO", subject_host,
                           "NCCL's only socket interface is lo (127.0.0.1): fine inside one host, no other host can "
                           "reach it", "on a multi-node job set NCCL_SOCKET_IFNAME to the data-plane NIC", host=host))
    elif virtual:
        routable = [n for n in names if n not in local and not n.startswith("lo")]
        suggest = real[0] if len(real) == 1 else routable[0] if len(routable) == 1 else None
        unreachable = (f"; {', '.join(local)} ha{'ve' if len(local) > 1 else 's'} only a link-local address "
                       f"({address[local[0]]}), which no other host reaches") if local else ""
        out.append(finding("nccl.socket_virtual_ifaces", "FAIL", subject_host,
                           f"NCCL's socket transport uses {len(virtual)} container/virtual interfaces "
                           f"({', '.join(virtual)}) next to {', '.join(real) or 'no real NIC'}{unreachable}",
                           f"set NCCL_SOCKET_IFNAME={suggest or '<data-plane NIC>'} (the data-plane NIC) on every "
                           "node", host=host, virtual=virtual, real=real, suggested_ifname=suggest, link_local=local))
    ipoib = [n for n in names if n.startswith("ib")]
    if ipoib and ipoib == names and (parsed.get("network") == "Socket" or
                                     str((parsed.get("env") or {}).get("NCCL_IB_DISABLE")) == "1"):
        nets = {}
        for n in names:
            a = address.get(n) or ""
            if a.count(".") == 3:
                nets.setdefault(a.rsplit(".", 1)[0], []).append(f"{n} {a}")
        shared = next((v for v in nets.values() if len(v) > 1), None)
        out.append(finding("nccl.socket_over_ipoib", "WARN", subject_host,
                           f"NCCL runs its socket transport over IPoIB ({', '.join(names)}): the InfiniBand fabric "
                           "without RDMA, several times slower than NET/IB"
                           + (f"; {' and '.join(shared)} look like one subnet: replies may leave by either interface "
                              "(ARP flux)" if shared else ""),
                           "make NET/IB work (ibstat, ib_write_bw between the nodes; drop NCCL_IB_DISABLE=1); until "
                           f"then keep one interface: NCCL_SOCKET_IFNAME={names[0]}", host=host, interfaces=names))
    ifname = parsed.get("env", {}).get("NCCL_SOCKET_IFNAME")
    for family in parsed.get("socket_family_errors", []):
        if ifname:
            out.append(finding("nccl.socket_ifname_missing", "FAIL", ifname,
                               f"NCCL_SOCKET_IFNAME={ifname} names an interface that does not exist on this host "
                               f"(address family {family} is only a symptom of the missing address)",
                               "set NCCL_SOCKET_IFNAME to an interface every node has (ip -br addr), or to a "
                               "prefix list", host=host, family=family))
        else:
            out.append(finding("nccl.socket_no_iface", "FAIL", subject_host,
                               f"NCCL found no usable socket interface (address family {family})",
                               "set NCCL_SOCKET_IFNAME to the data-plane NIC", host=host, family=family))
    for err in parsed.get("ib_completion_errors", []):
        if err["error"] == 12:
            message = ("NET/IB completion error 12 (IBV_WC_RETRY_EXC_ERR): transport retry timeout, the IB/RoCE "
                       "NICs cannot reach each other although the socket bootstrap worked")
            fix = ("on RoCE set NCCL_IB_GID_INDEX to the RoCE v2 GID index (often 3; see show_gids) on every node; "
                   "check RDMA reachability with ib_write_bw")
        else:
            message = f"NET/IB completion error {err['error']} ({err['status'] or 'unknown status'})"
            fix = "check the HCAs and links with ibstat / ibv_devinfo and rerun with NCCL_DEBUG_SUBSYS=NET"
        out.append(finding("nccl.ib_completion_error", "FAIL", err["host"] or subject_host, message, fix, host=host,
                           error=err["error"], opcode=err["opcode"], vendor_err=err["vendor_err"]))
    # WARN lines that differ only in their numbers (ranks, addresses, sizes, pointers) are one
    # finding with a count, and at most MAX_WARN_KINDS of them are listed: a log of 20,000
    # WARN lines was 20,000 findings, each looked up in every line (review F14)
    kinds: dict[str, list[dict]] = {}
    out += nccl_errors.diagnose_nccl_errors(parsed.get("known_errors") or [], host)
    for warn in parsed.get("warnings", []):
        if not _IB_COMPLETION_RE.search(warn["message"]) and \
                not nccl_errors.covered(warn["message"], parsed.get("known_errors") or []):
            kinds.setdefault(_NUMBERS_RE.sub("#", warn["message"]), []).append(warn)
    for i, same in enumerate(kinds.values()):
        if i == MAX_WARN_KINDS:
            rest = list(kinds.values())[i:]
            out.append(finding("nccl.warn", "WARN", subject_host,
                               f"{len(rest)} more kinds of NCCL WARN ({sum(map(len, rest))} lines) not listed",
                               "", host=host, count=sum(map(len, rest)), first=None))
            break
        first = same[0]["message"]
        more = f" (and {len(same) - 1} more like it)" if len(same) > 1 else ""
        out.append(finding("nccl.warn", "WARN", same[0]["host"] or subject_host, first + more, "", host=host,
                           count=len(same), first=first))
    forced = {k: v for k, v in (parsed.get("env") or {}).items() if k in nccl_errors.DEBUG_CLASS}
    if forced:
        out.append(finding("nccl.debug_class", "WARN", subject_host,
                           "the job forces NCCL's own choices: " + ", ".join(f"{k}={v}" for k, v in forced.items())
                           + " (NCCL env.rst lists them among the debugging variables, which \"should generally not be "
                             "set for production code\")",
                           "unset them in the job's environment and /etc/nccl.conf; measure first, and to choose "
                           "algorithms and protocols per size give NCCL a tuner CSV (`ncclprep tune --nccl-tuner`, "
                           "docs/tuning.md)", host=host, forced=forced))
    listed = [f"{d['device']}:{d['port']}" for d in parsed.get("ib_devices") or []]
    net_hops = [(h, m) for h in parsed.get("hops") or [] for m in [re.match(r"NET/IB/(\d+)", h.get("transport") or "")]
                if m]
    nets = sorted({int(m.group(1)) for _h, m in net_hops})
    senders = {(h.get("host"), h.get("src")) for h, _m in net_hops}
    # one rank's log shows only its own nearest NIC: judged when as many ranks send as NICs are listed
    if len(listed) > 1 and nets and len(nets) < len(listed) and len(senders) >= len(listed):
        idle = [d for i, d in enumerate(listed) if i not in nets]
        out.append(finding("nccl.nics_unused", "WARN", subject_host,
                           f"NCCL lists {len(listed)} IB/RoCE devices ({', '.join(listed)}) but its channels between "
                           f"hosts use only {', '.join(f'NET/IB/{n} ({listed[n]})' for n in nets if n < len(listed))}: "
                           f"{', '.join(idle)} carry nothing", "check NCCL_IB_HCA (a list that names one device), the "
                           "GPU-NIC topology (nvidia-smi topo -m: each GPU uses its nearest NIC) and NCCL_CROSS_NIC; a "
                           "rail-optimised fabric needs every NIC cabled and up", host=host, listed=listed,
                           used=[listed[n] for n in nets if n < len(listed)], idle=idle))
    if parsed.get("hops"):
        used = transports_used(parsed["hops"])
        rdma = any(t.startswith("NET/IB") for t in used["inter_host"])
        out.append(finding("nccl.transports", "INFO", subject_host,
                           f"transports used: {', '.join(used['intra_host']) or 'none'} inside a host, "
                           f"{', '.join(used['inter_host']) or 'none'} between hosts"
                           + ("" if rdma or not used["inter_host"] else " (no IB/RDMA in use)"),
                           "", host=host, **used))
    return out


_ranges = number_ranges  # the name the doctor imports


def rank_census(ranks: list[dict]) -> list[dict]:
    """Which ranks of each communicator printed their init line (``parse_nccl_log``'s ``ranks``).

    Communicators are told apart by ``commId`` (NCCL 2.18 on), else by their size alone. Returns
    ``[{"comm_id": str | None, "nranks": int, "seen": [ranks], "completed": [ranks], "missing":
    [ranks], "hosts": {rank: host}}]`` sorted by size, largest first; ``missing`` is every rank in
    ``0..nranks-1`` that printed no ``Init START``/``Init COMPLETE`` line.
    """
    groups: dict = {}
    for r in ranks:
        key = (r.get("comm_id"), r["nranks"]) if r.get("comm_id") else (None, r["nranks"])
        g = groups.setdefault(key, {"comm_id": key[0], "nranks": key[1], "seen": set(), "completed": set(),
                                    "hosts": {}})
        g["seen"].add(r["rank"])
        if r.get("state") == "COMPLETE":
            g["completed"].add(r["rank"])
        if r.get("host"):
            g["hosts"].setdefault(r["rank"], r["host"])
    out = []
    for g in groups.values():
        valid = {r for r in g["seen"] if 0 <= r < g["nranks"]}
        out.append({"comm_id": g["comm_id"], "nranks": g["nranks"], "seen": sorted(valid),
                    "completed": sorted(g["completed"] & valid),
                    "missing": sorted(set(range(g["nranks"])) - valid), "hosts": g["hosts"]})
    return sorted(out, key=lambda g: -g["nranks"])


def diagnose_nccl_ranks(ranks: list[dict], host: str | None = None) -> list[dict]:
    """Findings on the ranks of one job's NCCL logs (``ranks`` of ``parse_nccl_log``, several logs merged).

    ``ncclCommInitRank`` synchronises with the other ranks (NCCL API docs, Communicator Creation:
    it "implicitly synchronizes with other ranks"), so no rank completes init until all ``nranks``
    have joined. Per communicator (``rank_census``) of which at least two ranks printed an init line
    (one rank's own log says nothing about the others) and some printed none:

    - INFO ``nccl.ranks_not_logged`` when some rank printed ``Init COMPLETE``: every rank did join,
      the silent ones only logged nothing (NCCL_DEBUG not passed to them, or their logs are not
      here; a maintainer's reading of such a log in NVIDIA/nccl#394).
    - FAIL ``nccl.rank_missing`` when no rank completed init and fewer ranks are missing than were
      seen: the missing ranks never arrived and the others wait for them in bootstrap.
    - WARN ``nccl.rank_missing`` when no rank completed and as many or more are missing than seen
      (the logs of whole nodes may simply not be here).
    Findings carry ``nranks``, ``missing``, ``seen`` (rank lists) and ``comm_id``.
    """
    out: list[dict] = []
    subject = host or "host"
    for g in rank_census(ranks):
        if not g["missing"] or len(g["seen"]) < 2:
            continue
        n = g["nranks"]
        miss = f"rank{'s' if len(g['missing']) > 1 else ''} {_ranges(g['missing'])}"
        details = {"nranks": n, "missing": g["missing"], "seen": g["seen"], "comm_id": g["comm_id"]}
        hosts = sorted(set(g["hosts"].values()))
        where = f" (seen on {', '.join(hosts)})" if hosts else ""
        if g["completed"]:
            out.append(finding("nccl.ranks_not_logged", "INFO", subject,
                               f"{len(g['seen'])} of {n} ranks printed their init line{where} and init completed, so "
                               f"every rank joined; {miss} only logged nothing",
                               "pass NCCL_DEBUG=INFO to every rank (mpirun -x, the launcher's env) and collect "
                               "every rank's log", host=host, **details))
        elif len(g["missing"]) < len(g["seen"]):
            out.append(finding("nccl.rank_missing", "FAIL", subject,
                               f"{miss} (of {n} ranks) never started ncclCommInitRank{where}; no rank completed "
                               "init: the others wait for them in bootstrap",
                               f"find why {miss} did not start (their node, launcher or an earlier crash in "
                               "their log)", host=host, **details))
        else:
            out.append(finding("nccl.rank_missing", "WARN", subject,
                               f"only ranks {_ranges(g['seen'])} of {n} appear in these logs{where} and none "
                               f"completed init: if these are all the job's logs, {miss} never arrived",
                               "collect the logs of every node; a node whose ranks print nothing never started "
                               "the job", host=host, **details))
    return out
