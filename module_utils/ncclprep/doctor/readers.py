"""One reader per kind of input (``READERS``: kind -> reader): the project's parsers and rules
(parsers/*) on one text, returning what was read and the findings. Pure; a parser's exception
is the caller's to turn into an error (doctor.diagnose_text)."""

from __future__ import annotations

import ipaddress
import re
from collections import Counter

from ansible.module_utils.ncclprep.parsers.ethtool import diagnose_ethtool, parse_ethtool, parse_ethtool_driver
from ansible.module_utils.ncclprep.parsers.ibstat import (
    AN_DEVICE_RE,
    diagnose_ib_aborted,
    diagnose_ib_ports,
    link_rate_gbps,
    parse_ib_status,
)
from ansible.module_utils.ncclprep.parsers.ibv_devinfo import diagnose_ibv_devinfo, parse_ibv_devinfo
from ansible.module_utils.ncclprep.parsers.ifconfig import parse_ifconfig
from ansible.module_utils.ncclprep.parsers.ip_link import VIRTUAL_IFACE_PREFIXES, diagnose_ip_link, parse_ip_link
from ansible.module_utils.ncclprep.parsers.nccl_log import (
    _ranges,
    diagnose_nccl_log,
    line_host,
    parse_nccl_log,
    transports_used,
)
from ansible.module_utils.ncclprep.parsers.nccl_tests import busbw_values, diagnose_nccl_tests, parse_nccl_tests
from ansible.module_utils.ncclprep.parsers.netplan import diagnose_netplan, parse_netplan
from ansible.module_utils.ncclprep.parsers.numa_lscpu import diagnose_numa, parse_lscpu, parse_numactl_hardware
from ansible.module_utils.ncclprep.parsers.sysctl import diagnose_sysctl, parse_sysctl_a
from ansible.module_utils.ncclprep.parsers.topo import diagnose_topo, diagnose_topo_p2p, parse_topo, parse_topo_p2p
from ansible.module_utils.ncclprep.parsers.torch_dist import diagnose_torch_dist, parse_torch_dist
from ansible.module_utils.ncclprep.parsers.torch_watchdog import watchdog_census
from ansible.module_utils.ncclprep.parsers.ufw import diagnose_ufw, parse_ufw_status

_M = re.MULTILINE



def _host_default(host: str | None) -> str:
    return host or "host"


def _iface_summary(ifaces: list[dict]) -> str:
    groups: dict[str, list[dict]] = {}
    real: list[str] = []
    for i in ifaces:
        prefix = next((p for p in VIRTUAL_IFACE_PREFIXES if i["name"].startswith(p)), None)
        if prefix:
            groups.setdefault(prefix, []).append(i)
        else:
            real.append(f"{i['name']} ({i['address']})")
    parts = list(real)
    for prefix, members in groups.items():
        v6 = all(m["address"].lower().startswith("fe80") for m in members)
        parts.append(f"{len(members)} {prefix.rstrip('-')}{'-' if prefix.endswith('-') else ''}* "
                     f"{'with IPv6 link-local addresses' if v6 else 'container/virtual interfaces'}")
    return f"NCCL socket interfaces ({len(ifaces)}): " + ", ".join(parts)


def _split_hosts(text: str, default: str) -> dict[str, list[str]]:
    """Log lines grouped by their prefix host; a line without one goes with the host before it."""
    out: dict[str, list[str]] = {}
    current = default
    for line in text.splitlines():
        host = line_host(line)
        if host:
            current = host
        out.setdefault(current, []).append(line)
    return out


def _read_nccl_log(text: str, host: str | None, opts: dict) -> dict:
    parsed = parse_nccl_log(text)
    # the same list printed again (several ranks of one host, a restarted job) is one list
    parsed["socket_interfaces"] = list({(i["name"], i["address"]): i for i in parsed["socket_interfaces"]}.values())
    prefix_hosts = Counter(h for h in (line_host(ln) for ln in text.splitlines()) if h)
    if len(prefix_hosts) == 1:
        host = next(iter(prefix_hosts))
    read: list[str] = []
    if prefix_hosts:
        read.append(f"log lines of {len(prefix_hosts)} host{'s' if len(prefix_hosts) > 1 else ''}: "
                    + ", ".join(sorted(prefix_hosts)))
    if parsed["versions"]:
        read.append(f"NCCL version {', '.join(parsed['versions'])}"
                    + (f" (CUDA {parsed['cuda']})" if parsed["cuda"] else ""))
    if parsed["network"]:
        read.append(f"network: {parsed['network']}")
    if parsed["socket_interfaces"]:
        read.append(_iface_summary(parsed["socket_interfaces"]))
    if parsed["ib_devices"]:
        read.append("NET/IB devices: " + ", ".join(f"{d['device']}:{d['port']}/{d['link_layer']}"
                                                   for d in parsed["ib_devices"]))
    if parsed["env"]:
        read.append("set in the environment: " + ", ".join(f"{k}={v}" for k, v in parsed["env"].items()))
    hops = parsed["hops"]
    if hops:
        used = transports_used(hops)
        channels = sorted({h["channel"] for h in hops})
        net = [f"{h['src']} -> {h['dst']}" for h in hops if h["transport"].startswith("NET/")]
        read.append(f"{len(hops)} {hops[0]['kind'].lower()} hops ({hops[0]['kind'].lower()}s "
                    f"{', '.join(f'{c:02d}' for c in channels)}): {', '.join(used['intra_host']) or 'none'} inside a "
                    f"host, {', '.join(used['inter_host']) or 'none'} between hosts"
                    + (f" ({', '.join(dict.fromkeys(net))})" if net else ""))
    if parsed["ranks"]:
        sizes = sorted({r["nranks"] for r in parsed["ranks"]})
        seen = sorted({r["rank"] for r in parsed["ranks"]})
        read.append(f"communicator init lines of ranks {_ranges(seen)} (nranks {', '.join(map(str, sizes))})")
    if parsed["warnings"]:
        read.append(f"{len(parsed['warnings'])} NCCL WARN line{'s' if len(parsed['warnings']) > 1 else ''}")
    if parsed["errors"]:
        read.append("errors: " + "; ".join(f"{e['error']}: {e['message']}" for e in parsed["errors"][:3]))
    findings = diagnose_nccl_log(parsed, host)
    by_host = {}
    for h, group in _split_hosts(text, _host_default(host)).items():
        p = parse_nccl_log("\n".join(group))
        by_host[h] = {"versions": p["versions"], "env": p["env"]}
    return {"parsed": parsed, "read": read, "findings": findings, "unparsed": parsed["unparsed"], "host": host,
            "facts": {"nccl_hosts": by_host, "ranks": parsed["ranks"]}}


def _read_torch_dist(text: str, host: str | None, opts: dict) -> dict:
    parsed = parse_torch_dist(text)
    read: list[str] = []
    cfg = parsed["launch_config"]
    if cfg:
        keys = [k for k in ("rdzv_backend", "rdzv_endpoint", "min_nodes", "max_nodes", "nproc_per_node") if k in cfg]
        read.append("torchrun launch config: " + ", ".join(f"{k} {cfg[k]}" for k in keys))
    for b in parsed["bind_failures"]:
        read.append(f"bind to {b['host']}:{b['port']} failed (errno {b['errno']} - {b['reason']})")
    for c in parsed["connect_failures"][:3]:
        read.append(f"connect to {c['host']}:{c['port']} failed (errno {c['errno']} - {c['reason']})")
    for t in parsed["timeouts"][:3]:
        read.append(f"client timed out after {t['timeout_s']:g} s connecting to {t['host']}:{t['port']}")
    for r in parsed["resolve_failures"][:3]:
        read.append(f"{r['family'] or ''} addresses of {r['host']} cannot be retrieved (gai error {r['gai_error']})"
                    .strip())
    if parsed["barrier_failures"]:
        read.append("ranks that failed monitoredBarrier: " + ", ".join(map(str, parsed["barrier_failures"])))
    if parsed["store_barrier"]:
        b = parsed["store_barrier"]
        read.append(f"store-based barrier: {b['joined']} of {b['world_size']} workers joined "
                    f"({'timed out' if b['timed_out'] else 'waiting'}, timeout {b['timeout']})")
    if parsed["store_clients"]:
        c = parsed["store_clients"]
        read.append(f"TCPStore: {c['joined']} of {c['expected']} clients joined in {c['timeout_s']} s")
    census = watchdog_census(parsed["watchdog"])
    if census:
        work = f"work {census['seq']}" if census["seq"] is not None else "(no SeqNum printed)"
        read.append(f"NCCL watchdog: {len(census['waiting'])} rank(s) timed out in {census['op']} {work}"
                    + (f" (process group {census['pg']})" if census["pg"] is not None else "")
                    + f", timeout {census['timeout_ms']} ms; ranks in the text: "
                    + (", ".join(map(str, parsed["watchdog"]["ranks_seen"])) or "none named"))
        for p in parsed["watchdog"]["progress"][:4]:
            read.append(f"rank {p['rank']}: at work {p['work']}, last enqueued {p['last_enqueued']}, last completed "
                        f"{p['last_completed']}")
    if parsed["exceptions"]:
        read.append("exceptions: " + ", ".join(parsed["exceptions"]))
    notes = []
    if "Traceback (most recent call last)" in text:
        tail = [ln for ln in text.splitlines() if ln.strip()][-1:]
        if tail and (tail[0].startswith((" ", "\t")) or "Traceback" in tail[0]):
            notes.append("the traceback is cut short (it ends before its exception line)")
    return {"parsed": parsed, "read": read, "findings": diagnose_torch_dist(parsed, host),
            "unparsed": parsed["unparsed"], "host": host, "notes": notes,
            "facts": {"torch_missing": parsed["barrier_failures"], "watchdog": parsed["watchdog"]}}


def _read_topo(text: str, host: str | None, opts: dict) -> dict:
    is_matrix = bool(re.search(r"CPU Affinity|^\s*GPU\d+\s+(?:\S+\s+)*?(?:NV\d+|PIX|PXB|PHB|NODE|SYS)\b", text, _M))
    if not is_matrix and re.search(r"^\s*GPU\d+\s+(?:X|OK|CNS|GNS|TNS|NS|DR|U)\b", text, _M):
        parsed = parse_topo_p2p(text)
        read = [f"P2P matrix of {len(parsed['gpus'])} GPUs ({len(parsed['matrix'])} rows read)"
                + (f", capability {parsed['capability']}" if parsed["capability"] else "")]
        codes = Counter(c for row in parsed["matrix"].values() for c in row.values() if c != "X")
        if codes:
            read.append("codes: " + ", ".join(f"{c} x{n}" for c, n in codes.most_common()))
        return {"parsed": parsed, "read": read, "findings": diagnose_topo_p2p(parsed, host),
                "unparsed": parsed["unparsed"], "host": host}
    parsed = parse_topo(text)
    read = [f"{parsed['announced_gpus']} GPUs and {parsed['announced_nics']} NICs announced in the header; "
            f"{len(parsed['gpus'])} GPU rows and {len(parsed['nics'])} NIC rows read"]
    if parsed["nic_names"]:
        read.append("NIC legend: " + ", ".join(f"{k}={v}" for k, v in parsed["nic_names"].items()))
    groups: dict[tuple, list[str]] = {}
    for gpu, row in parsed["gpus"].items():
        groups.setdefault((row["cpu_affinity"], row["numa_affinity"]), []).append(gpu)
    for (cpus, numa), gpus in groups.items():
        read.append(f"{', '.join(gpus)}: CPU affinity {cpus or 'N/A'}, NUMA {numa if numa is not None else 'N/A'}")
    gpus = list(parsed["gpus"])
    nv = Counter(parsed["gpus"][a]["links"].get(b) for i, a in enumerate(gpus) for b in gpus[i + 1:]
                 if b in parsed["gpus"][a]["links"])
    if nv:
        read.append("GPU-GPU links: " + ", ".join(f"{c} x{n}" for c, n in nv.most_common()))
    return {"parsed": parsed, "read": read, "findings": diagnose_topo(parsed, host), "unparsed": parsed["unparsed"],
            "host": host}


def _read_ibstat(text: str, host: str | None, opts: dict) -> dict:
    parsed = parse_ib_status(text)
    ports = parsed["ports"]
    # an Accelerated Networking function ibstat stopped at is Ethernet, not an HCA (ibstat.AN_DEVICE_RE)
    skipped = {a["device"] for a in parsed["aborted"] if a["device"] and AN_DEVICE_RE.search(a["device"])}
    hcas = [p for p in ports if p["device"] not in skipped]
    parts = []
    for p in ports:
        rate = link_rate_gbps(p)
        if rate is not None:
            speed = f"{rate:g} Gb/s"
        elif p.get("rate_gbps") is not None:
            speed = f"rate field {p['rate_gbps']:g} (not a link speed: the port is down)"
        else:
            speed = "rate not printed (unknown)"
        lids = ""
        if p.get("base_lid") is not None or p.get("sm_lid") is not None:
            lids = f", LID {p.get('base_lid')}, SM LID {p.get('sm_lid')}"
        parts.append(f"{p['device']} port {p['port']} {p.get('state')}/{p.get('physical_state')} {speed}"
                     f"{', ' + p['link_layer'] if p.get('link_layer') else ', link layer not printed'}{lids}")
    devices = sorted({p["device"] for p in ports})
    read = [f"{parsed['layout']} layout, {len(devices)} device{'s' if len(devices) != 1 else ''}: " + "; ".join(parts)]
    roce = [p for p in ports if str(p.get("link_layer") or "").lower() == "ethernet"]
    if roce:
        read.append("RoCE (Ethernet link layer) on " + ", ".join(sorted({p["device"] for p in roce}))
                    + ": LID 0 and SM LID 0 are normal for RoCE (a subnet manager is an InfiniBand matter)")
    notes = [] if ports else ["no HCA port read: the input may be cut before its first port"]
    return {"parsed": parsed, "read": read,
            "findings": diagnose_ib_aborted(parsed["aborted"], ports, host) + diagnose_ib_ports(hcas, host),
            "unparsed": parsed["unparsed"], "host": host, "notes": notes,
            "facts": {"ib_rate_gbit_s": sum(link_rate_gbps(p) or 0 for p in ports)}}


def _read_ibv_devinfo(text: str, host: str | None, opts: dict) -> dict:
    parsed = parse_ibv_devinfo(text)
    read = []
    for hca in parsed["hcas"]:
        ports = "; ".join(f"port {p['port']} {p['state']}, max_mtu {p['max_mtu']}, active_mtu {p['active_mtu']}, "
                          f"link layer {p['link_layer']}" for p in hca["ports"])
        read.append(f"{hca['hca_id']} (fw {hca['fw_ver']}, vendor part {hca['vendor_part_id']}): {ports or 'no port'}")
    if parsed.get("found") is not None:
        read.append(f"ibv_devinfo -l: {parsed['found']} HCA(s) found")
    notes = [] if parsed["hcas"] else ["no HCA read"]
    return {"parsed": parsed, "read": read, "findings": diagnose_ibv_devinfo(parsed, host),
            "unparsed": parsed["unparsed"], "host": host, "notes": notes}


def _links_read(parsed: dict) -> list[str]:
    return [f"{len(parsed['links'])} interfaces: " + "; ".join(
        f"{lk['name']} {lk['state']} mtu {lk['mtu']}"
        + (f" {', '.join(a['address'] for a in lk['addresses'][:2])}" if lk["addresses"] else "")
        for lk in parsed["links"])]


def _read_ip_link(text: str, host: str | None, opts: dict) -> dict:
    parsed = parse_ip_link(text)
    return {"parsed": parsed, "read": _links_read(parsed), "findings": diagnose_ip_link(parsed, host),
            "unparsed": parsed["unparsed"], "host": host}


def _read_ifconfig(text: str, host: str | None, opts: dict) -> dict:
    parsed = parse_ifconfig(text)
    return {"parsed": parsed, "read": [f"ifconfig layout {parsed['layout']}"] + _links_read(parsed),
            "findings": diagnose_ip_link(parsed, host), "unparsed": parsed["unparsed"], "host": host}


def _read_ethtool(text: str, host: str | None, opts: dict) -> dict:
    if not re.search(r"^Settings for ", text, _M):
        parsed = parse_ethtool_driver(text)
        read = ["driver info: " + ", ".join(f"{k} {parsed[k]}" for k in ("driver", "version", "firmware_version",
                                                                          "bus_info") if parsed.get(k))]
        return {"parsed": parsed, "read": read, "findings": [], "unparsed": parsed["unparsed"], "host": host}
    parsed = parse_ethtool(text)
    speed = f"{parsed['speed_mbps'] / 1000:g} Gb/s" if parsed["speed_mbps"] else "speed unknown"
    read = [f"{parsed['interface']}: {speed}, duplex {parsed['duplex']}, port {parsed['port']}, link detected "
            f"{ {True: 'yes', False: 'no', None: 'not printed'}[parsed['link_detected']] }"]
    return {"parsed": parsed, "read": read, "findings": diagnose_ethtool(parsed, host),
            "unparsed": parsed["unparsed"], "host": host}


def _read_numa(text: str, host: str | None, opts: dict) -> dict:
    numactl = bool(re.search(r"^available: \d+ nodes?|^node \d+ cpus:", text, _M))
    parsed = parse_numactl_hardware(text) if numactl else parse_lscpu(text)
    nodes = "; ".join(f"node{n['node']} CPUs {_ranges(n['cpus']) or 'none'}"
                      + (f", {n['size_mib']} MiB" if n["size_mib"] is not None else "") for n in parsed["nodes"])
    read = [f"{'numactl' if numactl else 'lscpu'}: {len(parsed['nodes'])} NUMA nodes: {nodes or 'none read'}"]
    if parsed.get("distances"):
        read.append(f"distances {parsed['distances']}")
    findings = diagnose_numa(parsed, host)
    if parsed["nodes"] and not findings:
        read.append("balanced: nothing to flag")
    return {"parsed": parsed, "read": read, "findings": findings, "unparsed": parsed["unparsed"], "host": host}


def _read_nccl_tests(text: str, host: str | None, opts: dict) -> dict:
    parsed = parse_nccl_tests(text)
    rows = parsed["rows"]
    read = []
    if rows:
        values = busbw_values(parsed)
        wrong = sum((r[h]["wrong"] or 0) for r in rows for h in ("out_of_place", "in_place"))
        read.append(f"{len(rows)} rows, sizes {rows[0]['size']} to {rows[-1]['size']} B"
                    + (f" ({parsed['elided']} elided)" if parsed["elided"] else "")
                    + (f"; busbw {min(values):g} to {max(values):g} GB/s" if values else "")
                    + f"; #wrong total {wrong}")
    if parsed["out_of_bounds"] is not None:
        read.append(f"out of bounds values: {parsed['out_of_bounds']}"
                    + (" OK" if parsed["out_of_bounds_ok"] else ""))
    if parsed["avg_busbw_gbps"] is not None:
        read.append(f"avg bus bandwidth {parsed['avg_busbw_gbps']:g} GB/s")
    notes = []
    if rows and parsed["avg_busbw_gbps"] is None and parsed["out_of_bounds"] is None:
        notes.append("no summary lines (# Out of bounds values, # Avg bus bandwidth): the output may be cut short")
    if not rows:
        notes.append("no result row read")
    findings = diagnose_nccl_tests(parsed, opts.get("line_rate_gbit_s"), host)
    return {"parsed": parsed, "read": read, "findings": findings, "unparsed": parsed["unparsed"], "host": host,
            "notes": notes}


def _candidate_cidrs(parsed: dict) -> list[str]:
    out = []
    for rule in parsed["rules"]:
        if rule["action"] != "ALLOW" or rule["from"] == "Anywhere":
            continue
        try:
            net = ipaddress.ip_network(rule["from"].split()[0], strict=False)
        except ValueError:
            continue
        if str(net) not in out:
            out.append(str(net))
    return out


def _read_ufw(text: str, host: str | None, opts: dict) -> dict:
    parsed = parse_ufw_status(text)
    d = parsed["default"]
    read = [f"ufw {parsed['status']}, logging {parsed['logging']}"
            + (f" ({parsed['logging_level']})" if parsed["logging_level"] else "")
            + f", default {d['incoming']} incoming / {d['outgoing']} outgoing"
            + (f" / {d['routed']} routed" if d["routed"] else "")]
    if parsed["rules"]:
        read.append(f"{len(parsed['rules'])} rules: " + "; ".join(
            f"{r['to']} {r['action']}{' ' + r['direction'] if r['direction'] else ''} from {r['from']}"
            f"{' (v6)' if r['v6'] else ''}" for r in parsed["rules"]))
    cidrs = opts.get("cluster_cidrs") or _candidate_cidrs(parsed)
    findings: list[dict] = []
    if parsed["status"] is None:
        return {"parsed": parsed, "read": read, "findings": [], "unparsed": parsed["unparsed"], "host": host,
                "notes": ["no Status line read"]}
    for cidr in cidrs or ["0.0.0.0/0"]:
        try:
            found = diagnose_ufw(parsed, cidr, host)
        except ValueError:
            continue
        for f in found:
            if not cidrs:
                f["message"] = "no rule names a peer subnet; for peers anywhere: " + f["message"]
            elif f["id"] == "ufw.cluster_allowed" and not opts.get("cluster_cidrs"):
                f["message"] += f": a PASS for a cluster in {cidr} (give --cluster-cidr to judge another subnet)"
        findings += [f for f in found if f not in findings]
    return {"parsed": parsed, "read": read, "findings": findings, "unparsed": parsed["unparsed"], "host": host}


#: Keys a ``sysctl -a`` reading summarises (the role's intent adds its own).
_SYSCTL_SHOWN = ("net.ipv4.ip_local_port_range", "net.ipv4.conf.all.rp_filter", "net.ipv4.conf.default.rp_filter",
                 "net.ipv4.conf.all.arp_filter")


def _read_sysctl(text: str, host: str | None, opts: dict) -> dict:
    values, unparsed = parse_sysctl_a(text)
    intent = opts.get("sysctl_intent")
    shown = [k for k in list(intent or {}) + list(_SYSCTL_SHOWN) if k in values]
    read = [f"{len(values)} keys" + (": " + ", ".join(f"{k} {values[k] or '(empty)'}" for k in dict.fromkeys(shown))
                                     if shown else "")]
    if not intent:
        read.append("no recommended values known (the sysctl_tuning role's defaults were not found): sizes not judged")
    return {"parsed": {"values": values}, "read": read, "findings": diagnose_sysctl(values, intent, host),
            "unparsed": unparsed, "host": host, "facts": {"sysctl": values}}


def _read_netplan(text: str, host: str | None, opts: dict) -> dict:
    parsed = parse_netplan(text)
    if parsed["error"]:
        return {"parsed": parsed, "read": [], "findings": [], "unparsed": parsed["unparsed"], "host": host,
                "error": f"netplan YAML not readable: {parsed['error'].splitlines()[0]}"}
    read = [f"{i['name']} ({i['kind']}): addresses {', '.join(i['addresses']) or 'none'}, mtu {i['mtu']}, "
            f"dhcp4 {i['dhcp4']}" + (f", members {', '.join(i['members'])}" if i["members"] else "")
            for i in parsed["interfaces"]]
    return {"parsed": parsed, "read": read or ["no interface read"],
            "findings": diagnose_netplan(parsed, opts.get("roce_interfaces"), host),
            "unparsed": parsed["unparsed"], "host": host}


READERS = {"nccl_log": _read_nccl_log, "torch_dist": _read_torch_dist, "topo": _read_topo, "ibstat": _read_ibstat,
            "ibv_devinfo": _read_ibv_devinfo, "ip_link": _read_ip_link, "ifconfig": _read_ifconfig,
            "ethtool": _read_ethtool, "numa_lscpu": _read_numa, "nccl_tests": _read_nccl_tests, "ufw": _read_ufw,
            "sysctl": _read_sysctl, "netplan": _read_netplan}
