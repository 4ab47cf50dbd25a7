"""The input lines that show a finding (``evidence``): per kind and finding, the lines a reader
needs to see it for themselves, at most MAX_EVIDENCE, each cut at MAX_LINE. Pure."""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.doctor.detect import MAX_EVIDENCE, MAX_LINE
from ansible.module_utils.ncclprep.parsers.nccl_errors import DEBUG_CLASS
from ansible.module_utils.ncclprep.parsers.nccl_errors import RULES as NCCL_ERROR_RULES


def _clip(line: str) -> str:
    line = line.rstrip()
    return line if len(line) <= MAX_LINE else line[:MAX_LINE - 3] + "..."


def _grep(lines: list[str], *needles: str, regex: re.Pattern | None = None, limit: int = MAX_EVIDENCE) -> list[str]:
    """The lines holding every needle (and matching ``regex``), at most ``limit``, plus a count of the rest."""
    hits = [ln for ln in lines if ln.strip() and all(n in ln for n in needles) and (regex is None or regex.search(ln))]
    out = [_clip(h) for h in hits[:limit]]
    if len(hits) > limit >= 3:
        out.append(f"... ({len(hits) - limit} more lines like these)")
    return out


def _block(lines: list[str], start: re.Pattern, end: re.Pattern) -> list[str]:
    """The lines from one matching ``start`` to before the next line matching ``end``."""
    out: list[str] = []
    inside = False
    for ln in lines:
        if inside and end.search(ln):
            break
        if not inside and start.search(ln):
            inside = True
        if inside:
            out.append(ln)
    return out


def _pick(block: list[str], keys: tuple[str, ...], limit: int = MAX_EVIDENCE) -> list[str]:
    out = [_clip(ln) for ln in block if any(ln.strip().lower().startswith(k) for k in keys)]
    return out[:limit]


def _union(*groups: list[str], limit: int = MAX_EVIDENCE) -> list[str]:
    seen: list[str] = []
    for g in groups:
        for ln in g:
            if ln not in seen:
                seen.append(ln)
    if len(seen) > limit:
        return seen[:limit] + [f"... ({len(seen) - limit} more lines)"]
    return seen


def _ib_block(lines: list[str], device: str, port) -> list[str]:
    """The device's block in either layout (both may be pasted together: ibstatus's first)."""
    block = _block(lines, re.compile(rf"^Infiniband device '{re.escape(device)}' port {port} status:"),
                   re.compile(r"^Infiniband device '|^CA '|^\S*\$ "))
    return block or _block(lines, re.compile(rf"^CA '{re.escape(device)}'"),
                           re.compile(r"^CA '|^Infiniband device '|^\S*\$ "))


_TOPO_ROW_RE = re.compile(r"^\s*GPU\d+\s+(?!GPU\d)\S")


def _iface_lines(lines: list[str], names) -> list[str]:
    """The lines listing one of the interfaces ``names`` (``[i]name:``): one pass, one regex."""
    if not names:
        return []
    regex = re.compile(r"\](?:" + "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True)) + r"):")
    return [ln for ln in lines if "]" in ln and regex.search(ln)]


_NCCL_ERROR_IDS = frozenset(rid for rid, _severity, _regex in NCCL_ERROR_RULES)


def evidence(kind: str, f: dict, lines: list[str]) -> list[str]:
    """The input lines that show finding ``f`` (quoted as printed, at most MAX_EVIDENCE and a count)."""
    fid = f["id"]
    if fid == "nccl.socket_virtual_ifaces":
        real, virtual = _iface_lines(lines, f.get("real")), _iface_lines(lines, f.get("virtual"))
        head = _grep(lines, "NET/Socket : Using", limit=1)
        out = _union(head, real[:2], virtual[:3], limit=MAX_EVIDENCE)
        if len(virtual) > 3:
            out.append(f"... ({len(virtual) - 3} more container/virtual interfaces)")
        return out
    if fid == "nccl.nics_unused":
        return _union(_grep(lines, "NET/IB : Using", limit=1), _grep(lines, "via NET/IB", limit=3))
    if fid == "nccl.socket_loopback_only":
        return _grep(lines, "NET/Socket : Using", limit=1)
    if fid == "nccl.socket_over_ipoib":
        return _union(_grep(lines, "NET/Socket : Using", limit=1), _grep(lines, "NCCL_IB_DISABLE", limit=1),
                      _grep(lines, "Using network Socket", limit=1))
    if fid in ("nccl.socket_ifname_missing", "nccl.socket_no_iface"):
        return _union(_grep(lines, "NCCL_SOCKET_IFNAME", limit=2), _grep(lines, f"family {f.get('family')}"))
    if fid == "nccl.ib_completion_error":
        return _grep(lines, "completion", regex=re.compile(rf"(?:error |status=(?:\w+\()?){f.get('error')}\b"))
    if fid == "nccl.warn":
        return _grep(lines, f["first"][:80]) if f.get("first") else []
    if fid in _NCCL_ERROR_IDS:
        regex = next(r for i, _s, r in NCCL_ERROR_RULES if i == fid)
        out = _grep(lines, regex=regex, limit=3)
        if fid == "nccl.ib_open_failed":
            out = _union(out, _grep(lines, regex=re.compile(r"NET/IB : No device found|Using network Socket"), limit=2))
        return out
    if fid == "nccl.debug_class":
        forced = re.compile(r"\b(?:" + "|".join(DEBUG_CLASS) + r") set (?:by environment )?to ")
        return _grep(lines, " to ", regex=forced)
    if fid == "nccl.transports":
        return _grep(lines, "via NET/") or _grep(lines, " via ", limit=3)
    if fid.startswith("nccl.rank") or fid == "nccl.ranks_not_logged":
        return _grep(lines, f"nranks {f.get('nranks')} ", limit=3)
    if fid == "torch.port_in_use":
        if f.get("port") is None:
            return _union(_grep(lines, "TCPStore(", limit=1), _grep(lines, "Address already in use", limit=1))
        return _grep(lines, f":{f.get('port')}", regex=re.compile(r"errno: 98|EADDRINUSE|port: \d+"))
    if fid == "torch.first_failure":
        block = _block(lines, re.compile(r"Root Cause \(first observed failure\)"), re.compile(r"^=+\s*$"))
        return _union(block[:1], _pick([ln.strip() for ln in block], ("host", "rank", "exitcode", "traceback"))) or \
            _grep(lines, "failed (exitcode:", limit=2)
    if fid == "torch.master_addr_invalid":
        return _grep(lines, str(f.get("master_addr")), limit=3)
    if fid == "torch.master_unresolvable":
        return _union(_grep(lines, f["subject"], "cannot be retrieved", limit=2), _grep(lines, f["subject"], limit=2))
    if fid in ("torch.rdzv_store_unreachable", "torch.connect_timeout"):
        host, _, port = f["subject"].rpartition(":")
        return _union(_grep(lines, regex=re.compile(r"^\s+(?:rdzv_backend|rdzv_endpoint|min_nodes|max_nodes)\s*:")),
                      _grep(lines, "timed out", host, port, limit=2),
                      _grep(lines, regex=re.compile(r"Rendezvous\w*Error:"), limit=1))
    if fid == "torch.connect_failed":
        host, _, port = f["subject"].rpartition(":")
        return _grep(lines, "failed to connect", host, f":{port}")
    if fid == "torch.collective_timeout":
        seq = f.get("seq")
        waits = _grep(lines, "Watchdog caught", f"SeqNum={seq}" if seq is not None else "", limit=2)
        where = _grep(lines, regex=re.compile(rf"work: {seq}, last enqueued" if seq is not None else r"last enqueued"),
                      limit=2)
        suspect = [ln for r in (f.get("suspects") or [])[:2]
                   for ln in _grep(lines, regex=re.compile(rf"\[rank{r}\]:|\[(?:PG [^\]]*?)?Rank {r}\]"), limit=1)]
        return _union(waits, where, suspect)
    if fid == "torch.watchdog_stuck":
        return _grep(lines, regex=re.compile(r"Heartbeat monitor timed out|watchdog got stuck"), limit=3)
    if fid in ("torch.ranks_missing", "torch.store_barrier_stale"):
        return _grep(lines, regex=re.compile(r"monitoredBarrier|store based barrier|waiting for clients"))
    if fid in ("ib.port_down", "ib.no_subnet_manager"):
        block = _ib_block(lines, f["subject"], f.get("port"))
        return _union(block[:1], _pick(block, ("state", "physical state", "phys state", "rate", "link layer",
                                               "link_layer")))
    if fid == "ib.usable_hcas":
        heads = _grep(lines, regex=re.compile(r"^CA '|^Infiniband device '"))
        return _union(heads, _grep(lines, regex=re.compile(r"^\s*State:|^\s*state:")))
    if fid == "ibv.no_provider":
        return _grep(lines, regex=re.compile(r"no userspace device-specific driver|HCAs? found"), limit=3)
    if fid == "ibv.open_failed":
        return _union(_grep(lines, "Failed to open device", limit=1), _grep(lines, regex=re.compile(r"^\s*hca_id:")))
    if fid == "ib.listing_aborted":
        return _grep(lines, "ibpanic", limit=2)
    if fid.startswith("ibv."):
        block = _block(lines, re.compile(rf"^\s*hca_id:\s*{re.escape(f['subject'])}\s*$"), re.compile(r"^\s*hca_id:"))
        return _union(block[:1], _pick(block, ("port:", "state:", "max_mtu:", "active_mtu:", "link_layer:")))
    if fid.startswith("ip."):
        return _grep(lines, regex=re.compile(rf"^\d+:\s+{re.escape(f['subject'])}[:@]|^{re.escape(f['subject'])}[:\s]"))
    if fid.startswith("ethtool."):
        return _grep(lines, regex=re.compile(r"^Settings for|Link detected:|Speed:"))
    if fid == "netplan.roce_mtu":
        block = _block(lines, re.compile(rf"^\s+{re.escape(f['subject'])}:\s*$"), re.compile(r"^\s{0,3}\S"))
        return _union(block[:1], _pick(block, ("mtu:",)))
    if fid.startswith("numa."):
        return _grep(lines, regex=re.compile(r"^node \d+ (?:cpus|size):|^\s*\d+:\s|NUMA node\d+ CPU"))
    if fid == "nccl_tests.wrong_results":
        sizes = [w["size"] for w in f.get("wrong") or []]
        return _union(_grep(lines, "#wrong", limit=1),
                      [_clip(ln) for ln in lines if ln.split()[:1] and ln.split()[0] in {str(s) for s in sizes}])
    if fid == "nccl_tests.out_of_bounds":
        return _grep(lines, "Out of bounds")
    if fid in ("nccl_tests.healthy", "nccl_tests.low_busbw", "nccl_tests.peak_busbw"):
        peak = f.get("peak_busbw_gbps")
        return [_clip(ln) for ln in lines if peak is not None and f"{peak:.2f}" in ln.split()][:2]
    if fid == "nccl_tests.independent_runs":
        return _grep(lines, "Avg bus bandwidth", limit=4)
    if fid == "nccl_tests.no_rows":
        return _union(_grep(lines, regex=re.compile(r"nThread \d+ nGpus|bytes\s+N\s+type|size\s+count\s+type"),
                            limit=2), _grep(lines, regex=re.compile(r"Rank\s+\d+\s.*device\s+\d+\s+\[0x"), limit=4))
    if fid == "nccl_tests.avg_busbw":
        return _grep(lines, "Avg bus bandwidth")
    if fid in ("topo.truncated", "topo.p2p_truncated"):
        rows = [_clip(ln) for ln in lines if _TOPO_ROW_RE.match(ln)]
        return _grep(lines, regex=re.compile(r"^\s*GPU0\s+GPU1\b"), limit=1) + rows[-1:]
    if fid in ("topo.nic_far", "topo.nic_near"):
        return _grep(lines, regex=re.compile(rf"^\s*{re.escape(f['subject'])}\s+(?!GPU\d)\S"), limit=1) + \
            _grep(lines, regex=re.compile(r"^\s*NIC\d+:\s"), limit=4)
    if fid == "topo.p2p_unsupported":
        return _grep(lines, regex=re.compile(rf"^\s*(?:{'|'.join(map(re.escape, f.get('pair') or []))})\s"))
    if fid.startswith("ufw."):
        rule = f.get("rule") or {}
        deciding = _grep(lines, rule.get("from", "\0"), "ALLOW", limit=1) if rule else []
        return _union(_grep(lines, regex=re.compile(r"^Status:|^Default:")), deciding)
    if fid == "sysctl.untuned":
        return _union(*[_grep(lines, regex=re.compile(rf"^{re.escape(k)}\s*=")) for k in f.get("keys") or {}],
                      limit=MAX_EVIDENCE)
    if fid == "sysctl.rp_filter_strict":
        return _grep(lines, regex=re.compile(r"^net\.ipv4\.conf\.(?:all|default)\.(?:rp_filter|arp_ignore|"
                                             r"arp_announce)\s*="))
    subject = f.get("subject")
    return _grep(lines, subject) if subject and subject not in ("host", f.get("host")) else []
