"""The offline doctor: read what engineers paste from a failed job, say what it shows and what to do.

An input is the text of one tool's output or one job's log: NCCL_DEBUG logs (one rank's or many
ranks' together), torchrun / torch.distributed errors and tracebacks, ``nvidia-smi topo -m`` and
``-p2p``, ``ibstat`` / ``ibstatus``, ``ibv_devinfo``, ``ip`` / ``ifconfig`` / ``ethtool``,
``numactl -H`` / ``lscpu``, nccl-tests output, ``ufw status``, ``sysctl -a`` and netplan YAML.
``detect_kind`` finds which from the content (the file name is a weak hint); ``diagnose_text``
reads it with the parsers and rules validate.yml uses (``module_utils/ncclprep/parsers/*``,
``concerns/sysctl_tuning.py``) and returns what was read, the findings with the input lines that show them
(``evidence``) and a clear ``error`` for input it cannot read; ``compare`` sets several inputs
from several nodes against each other; ``render_text`` and ``as_json`` present the lot.

Every function here is pure and never raises on any text: a parser's exception becomes an
``error`` naming the input and the kind. Standard library only. The CLI entry is
``src/ncclprep/doctor_cmd.py`` (``ncclprep doctor``).
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections import Counter
from collections.abc import Callable

from ansible.module_utils.ncclprep.parsers import SEVERITIES, finding
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
from ansible.module_utils.ncclprep.parsers.nccl_errors import DEBUG_CLASS
from ansible.module_utils.ncclprep.parsers.nccl_errors import RULES as NCCL_ERROR_RULES
from ansible.module_utils.ncclprep.parsers.nccl_log import (
    _ranges,
    diagnose_nccl_log,
    diagnose_nccl_ranks,
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

SCHEMA_VERSION = 1
#: The kinds of input, with the tools that print them.
KINDS = {
    "nccl_log": "NCCL_DEBUG=INFO/WARN log, of one rank or many",
    "torch_dist": "torchrun / torch.distributed error output and tracebacks",
    "topo": "nvidia-smi topo -m or -p2p",
    "ibstat": "ibstat or ibstatus",
    "ibv_devinfo": "ibv_devinfo or ibv_devinfo -v",
    "ip_link": "ip link / ip addr",
    "ifconfig": "ifconfig -a",
    "ethtool": "ethtool DEV or ethtool -i DEV",
    "numa_lscpu": "numactl -H or lscpu",
    "nccl_tests": "nccl-tests output: all_reduce_perf and the other _perf tests",
    "ufw": "ufw status or ufw status verbose",
    "sysctl": "sysctl -a",
    "netplan": "netplan YAML, /etc/netplan/*.yaml",
    "flight_recorder": "torch's flight recorder dumps, one per rank (TORCH_NCCL_DUMP_ON_TIMEOUT, TORCH_FR_BUFFER_SIZE)",
}
#: Most evidence lines quoted per finding.
MAX_EVIDENCE = 6
#: Longest evidence line quoted, in characters (longer ones are cut with "...").
MAX_LINE = 200

_M = re.MULTILINE
#: Content signatures: (kind, regex, weight). A kind's score is the sum over its regexes of
#: weight x matches (at most 10 matches counted per regex).
_SIGNATURES = [
    ("nccl_log", re.compile(r"\bNCCL (?:INFO|WARN)\b"), 2),
    ("nccl_log", re.compile(r"\bNET/(?:Socket|IB|Plugin)\b"), 2),
    ("nccl_log", re.compile(r"\bnccl[A-Z]\w*Error\b"), 2),
    ("nccl_log", re.compile(r"\bNCCL_[A-Z0-9_]+ set (?:by environment )?to\b"), 3),
    ("nccl_log", re.compile(r"^\s*\[\d+\][\w.-]+:\S+<\d+>", _M), 1),
    ("nccl_log", re.compile(r"\bNCCL version \d+\.\d+"), 3),
    ("torch_dist", re.compile(r"\btorch\.distributed\b|\btorchrun\b|\[c10d\]|\bc10d\b"), 2),
    ("torch_dist", re.compile(r"\b(?:DistNetworkError|DistStoreError|DistBackendError|RendezvousConnectionError|"
                              r"RendezvousTimeoutError|RendezvousClosedError|ChildFailedError|ProcessGroupNCCL)\b"), 3),
    ("torch_dist", re.compile(r"\bsocket\.cpp:\d+\b|\bTCPStore\b"), 2),
    ("torch_dist", re.compile(r"failed to pass monitoredBarrier|store based barrier|waiting for clients\."), 3),
    ("torch_dist", re.compile(r"^\s+(?:rdzv_backend|rdzv_endpoint|nproc_per_node|min_nodes|max_nodes)\s*:", _M), 2),
    ("torch_dist", re.compile(r"\(errno: \d+ - "), 1),
    ("torch_dist", re.compile(r"--master[_-]addr[= ]|\bdeepspeed\.launcher\b|\bMASTER_ADDR="), 3),
    ("topo", re.compile(r"^\s*GPU0\s+(?:GPU1|NIC0|mlx5_\d+|CPU Affinity)\b", _M), 3),
    ("topo", re.compile(r"\bCPU Affinity\b"), 3),
    ("topo", re.compile(r"^\s*GPU\d+\s+(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|OK|CNS|GNS|TNS|NS)\s", _M), 2),
    ("topo", re.compile(r"^\s*NIC\d+:\s+\S+\s*$", _M), 1),
    ("topo", re.compile(r"\bnvidia-smi topo\b"), 3),
    ("ibstat", re.compile(r"^CA '[^']+'\s*$", _M), 3),
    ("ibstat", re.compile(r"^\s*(?:Physical state|Base lid|SM lid|Link layer|CA type|Port GUID):", _M), 2),
    ("ibstat", re.compile(r"^Infiniband device '[^']+' port \d+ status:", _M), 4),
    ("ibstat", re.compile(r"^\s*(?:phys state|link_layer|sm lid|base lid|default gid):", _M), 1),
    ("ibv_devinfo", re.compile(r"^\s*hca_id:", _M), 4),
    ("ibv_devinfo", re.compile(r"^\s*(?:fw_ver|node_guid|sys_image_guid|vendor_part_id|phys_port_cnt|active_mtu|"
                               r"max_mtu|port_lid|port_lmc):", _M), 2),
    ("ibv_devinfo", re.compile(r"\bPORT_(?:ACTIVE|DOWN|INIT|ARMED)\b"), 2),
    ("ibv_devinfo", re.compile(r"no userspace device-specific driver found|^\s*\d+ HCAs? found|^Failed to open device$|"
                               r"No IB devices found", _M), 3),
    ("ibstat", re.compile(r"^ibpanic: ", _M), 3),
    ("ip_link", re.compile(r"^\d+:\s+[\w.@-]+:\s+<[A-Z0-9_,-]*>\s+mtu\s+\d+", _M), 4),
    ("ip_link", re.compile(r"^\s+link/(?:ether|loopback|infiniband|none)\b", _M), 2),
    ("ip_link", re.compile(r"^\s+inet6?\s+[^\s/]+/\d+\b[^\n]*\bscope\b", _M), 2),
    ("ifconfig", re.compile(r"^[\w.:-]+:\s+flags=\d+<", _M), 4),
    ("ifconfig", re.compile(r"\bLink encap:"), 4),
    ("ifconfig", re.compile(r"^\s+inet addr:|^\s+inet \S+\s+netmask\b", _M), 2),
    ("ethtool", re.compile(r"^Settings for \S+:", _M), 4),
    ("ethtool", re.compile(r"^\s*(?:Supported link modes|Advertised link modes|Link detected|Auto-negotiation|"
                           r"Duplex|Speed):", _M), 2),
    ("ethtool", re.compile(r"^(?:driver|bus-info|firmware-version|supports-statistics):", _M), 2),
    ("numa_lscpu", re.compile(r"^available: \d+ nodes?\b", _M), 4),
    ("numa_lscpu", re.compile(r"^node \d+ (?:cpus|size|free):", _M), 2),
    ("numa_lscpu", re.compile(r"^node distances:", _M), 3),
    ("numa_lscpu", re.compile(r"^\s*(?:Architecture|CPU op-mode\(s\)|Model name|Socket\(s\)|Thread\(s\) per core|"
                              r"NUMA node\(s\)|NUMA node\d+ CPU\(s\)|Byte Order|Vendor ID):", _M), 2),
    ("nccl_tests", re.compile(r"^\s*\d+\s+\d+\s+(?:float|half|double|int8|uint8|int32|uint32|int64|uint64|bfloat16|"
                              r"fp8_e4m3|fp8_e5m2)\s+(?:sum|prod|max|min|avg|none|mulsum)\s", _M), 3),
    ("nccl_tests", re.compile(r"#\s*Avg bus bandwidth|#\s*Out of bounds values"), 4),
    ("nccl_tests", re.compile(r"out-of-place.*in-place|#\s*nThread \d+ nGpus|#\s*Using devices"), 3),
    ("ufw", re.compile(r"^Status: (?:active|inactive)\s*$", _M), 4),
    ("ufw", re.compile(r"^To\s+Action\s+From\s*$", _M), 4),
    ("ufw", re.compile(r"^Default: \w+ \(incoming\)", _M), 3),
    ("ufw", re.compile(r"^New profiles:", _M), 2),
    ("sysctl", re.compile(r"^[a-z][\w-]*(?:\.[\w-]+)+ = ", _M), 1),
    ("sysctl", re.compile(r"^(?:net|kernel|vm|fs|dev|user|abi|debug|crypto|sunrpc)\.[\w.-]+ = ", _M), 2),
    ("netplan", re.compile(r"^network:\s*$", _M), 4),
    ("netplan", re.compile(r"^\s+(?:ethernets|bonds|bridges|vlans|renderer|version):", _M), 2),
    ("netplan", re.compile(r"^\s+(?:dhcp4|dhcp6|addresses|mtu|nameservers|routes|gateway4):", _M), 1),
]
#: Lowest score a kind needs to be recognised from content.
MIN_SCORE = 3
#: File-name hints (substrings of the lower-cased name and its folder): a weak hint only.
_NAME_HINTS = {
    "nccl_tests": ("nccl_tests", "nccl-tests", "_perf", "allreduce", "all_reduce", "busbw"),
    "nccl_log": ("nccl_log", "nccl-log", "nccl_debug", "nccl"),
    "torch_dist": ("torch", "torchrun", "rdzv", "c10d", "traceback"),
    "topo": ("topo",),
    "ibv_devinfo": ("ibv_devinfo", "devinfo"),
    "ibstat": ("ibstat", "ibstatus"),
    "ifconfig": ("ifconfig",),
    "ip_link": ("ip_link", "ip-a", "ip_addr", "ip-addr", "iplink"),
    "ethtool": ("ethtool",),
    "numa_lscpu": ("numactl", "lscpu", "numa"),
    "ufw": ("ufw",),
    "sysctl": ("sysctl",),
    "netplan": ("netplan", ".yaml", ".yml"),
}
#: Kinds whose text often carries the other's lines (torchrun output with NCCL_DEBUG lines).
_COMPANIONS = {"torch_dist": ("nccl_log",), "nccl_log": ("torch_dist", "nccl_tests"), "nccl_tests": ("nccl_log",)}
#: Score a companion kind needs to be read as well.
COMPANION_SCORE = 4
#: Characters of a long input's head and of its tail that kind detection reads (a kind's signature
#: lines are in the first and last screenfuls; a 50 MB log is not scanned 40 times).
SCORE_WINDOW = 1 << 18
#: Control characters that are not text (tab, newline, carriage return and form feed are).
_CONTROL_CHARS = tuple(chr(c) for c in range(32) if chr(c) not in "\t\n\r\f")


def _scores(text: str) -> dict[str, int]:
    if len(text) > 2 * SCORE_WINDOW:
        text = text[:SCORE_WINDOW] + "\n" + text[-SCORE_WINDOW:]
    out: dict[str, int] = {}
    for kind, regex, weight in _SIGNATURES:
        hits = 0
        for _ in regex.finditer(text):
            hits += 1
            if hits >= 10:
                break
        if hits:
            out[kind] = out.get(kind, 0) + weight * hits
    return out


def _name_hint(name: str | None) -> str | None:
    if not name:
        return None
    low = name.lower().replace("\\", "/")
    tail = "/".join(low.split("/")[-2:])
    for kind, needles in _NAME_HINTS.items():
        if any(n in tail for n in needles):
            return kind
    return None


def detect_kind(text: str, name: str | None = None) -> str | None:
    """The kind of ``text`` (a key of KINDS), or None when no kind is recognised.

    Content decides: each kind's signature lines are counted (``_SIGNATURES``) and the best score
    of at least MIN_SCORE wins. The file ``name`` (its base name and folder) is a weak hint only:
    it adds 2 to a kind the content already shows and breaks ties; a name alone never makes a kind.
    Never raises.
    """
    if not isinstance(text, str) or not text.strip():
        return None
    scores = _scores(text)
    hint = _name_hint(name)
    if hint in scores:
        scores[hint] += 2
    if not scores:
        return None
    order = list(KINDS)
    best = max(scores, key=lambda k: (scores[k], k == hint, -order.index(k)))
    return best if scores[best] >= MIN_SCORE else None


def _control_count(text: str) -> int:
    return sum(text.count(c) for c in _CONTROL_CHARS)


def decode_input(data: bytes) -> tuple[str | None, str | None]:
    """``(text, None)`` for text bytes, ``(None, reason)`` for binary data.

    Binary: a NUL byte, or more than 10 % of the characters undecodable as UTF-8 or control
    characters other than tab, newline, carriage return and form feed. Never raises.
    """
    if b"\x00" in data:
        return None, "binary input (NUL bytes): not the text output of a tool"
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") + _control_count(text)
    if text and bad > 0.1 * len(text):
        return None, f"binary input ({bad} of {len(text)} characters are not text)"
    return text, None


#: Lines are cut to this many characters before any parser sees them: no tool's line the doctor
#: reads is longer, and a base64 blob or a binary dump in a log then costs no more than this.
MAX_INPUT_LINE = 4096
_LONG_LINE_RE = re.compile(rf"[^\n]{{{MAX_INPUT_LINE}}}[^\n]+")


def cut_long_lines(text: str) -> tuple[str, int]:
    """``(text with every line cut to MAX_INPUT_LINE characters, how many lines were cut)``; one
    linear pass. Raises nothing."""
    count = 0

    def cut(match: re.Match) -> str:
        nonlocal count
        count += 1
        return match.group(0)[:MAX_INPUT_LINE]

    return _LONG_LINE_RE.sub(cut, text), count


def _text_error(text) -> str | None:
    if not isinstance(text, str):
        return "no text given"
    if not text.strip():
        return "empty input: nothing to read"
    if "\x00" in text:
        return "binary input (NUL bytes): not the text output of a tool"
    bad = _control_count(text)
    if bad > 0.1 * len(text):
        return f"binary input ({bad} of {len(text)} characters are control characters)"
    return None


# --- evidence -----------------------------------------------------------------------------------------

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


def _evidence(kind: str, f: dict, lines: list[str]) -> list[str]:
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


# --- per-kind reading ----------------------------------------------------------------------------------

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


_READERS = {"nccl_log": _read_nccl_log, "torch_dist": _read_torch_dist, "topo": _read_topo, "ibstat": _read_ibstat,
            "ibv_devinfo": _read_ibv_devinfo, "ip_link": _read_ip_link, "ifconfig": _read_ifconfig,
            "ethtool": _read_ethtool, "numa_lscpu": _read_numa, "nccl_tests": _read_nccl_tests, "ufw": _read_ufw,
            "sysctl": _read_sysctl, "netplan": _read_netplan}


def _stem(name: str | None) -> str | None:
    if not name or name in ("-", "<stdin>"):
        return None
    base = os.path.basename(name.replace("\\", "/"))
    stem = base.split(".")[0] if not base.startswith(".") else base
    return stem or None


def _result(name: str, kind: str | None, host: str | None, error: str | None, **rest) -> dict:
    out = {"source": name, "kind": kind, "kind_description": KINDS.get(kind), "host": host, "read": [],
           "findings": [], "unparsed_count": 0, "notes": [], "error": error, "also": []}
    out.update(rest)
    return out


def diagnose_text(text: str, name: str = "<stdin>", host: str | None = None, *, kind: str | None = None,
                  line_rate_gbit_s: float | None = None, sysctl_intent: dict | None = None,
                  cluster_cidrs: list[str] | None = None, roce_interfaces: list[str] | None = None) -> dict:
    """Read one input and diagnose it.

    ``text`` is the input, ``name`` its file name (``"<stdin>"`` for standard input), ``host`` the
    host it came from when known (``--host``). ``kind`` forces a kind (a key of KINDS) instead of
    ``detect_kind``. Options: ``line_rate_gbit_s`` the per-node network line rate in Gb/s for
    nccl-tests (4 x 200 Gb/s -> 800), ``sysctl_intent`` the recommended sysctl values (the
    sysctl_tuning role's ``sysctl_tuning_settings``), ``cluster_cidrs`` the cluster subnets ufw is
    judged for (default: the subnets its ALLOW rules name), ``roce_interfaces`` the RoCE netdevs
    for netplan.

    Returns ``{"source": name, "kind": str | None, "kind_description", "host": str | None (the
    NCCL log prefix host when the log has exactly one, else ``host``, else the file name's stem),
    "read": [plain-word lines of what was read], "findings": [finding dicts (``parsers.finding``)
    each with "evidence": [quoted input lines]], "unparsed_count": int, "notes": [str] (input cut
    short, nothing read), "error": str | None, "also": [companion kinds read too], "facts": {...}
    (what ``compare`` needs: NCCL versions/env per host, ranks, sysctl values)}``. ``error`` is set
    for input that cannot be read: empty, binary, no recognisable kind, a parser's exception (named
    with the file and kind), unreadable YAML. Never raises.
    """
    fallback_host = host or _stem(name)
    try:
        problem = _text_error(text)
        if problem:
            return _result(name, None, fallback_host, f"{name}: {problem}")
        text, cut = cut_long_lines(text)
        if kind is not None and kind not in KINDS:
            return _result(name, None, fallback_host, f"{name}: unknown kind {kind!r}; kinds are {', '.join(KINDS)}")
        if kind == "flight_recorder":  # binary: read from the files (diagnose_dumps), never as text
            return _result(name, kind, fallback_host, f"{name}: flight recorder dumps are binary pickles: give the "
                                                      "dump files themselves")
        detected = kind or detect_kind(text, name)
        if detected is None:
            return _result(name, None, fallback_host,
                           f"{name}: not a kind of input the doctor knows (none of: {', '.join(KINDS)}); "
                           "give --kind KIND if it is one")
        opts = {"line_rate_gbit_s": line_rate_gbit_s, "sysctl_intent": sysctl_intent, "cluster_cidrs": cluster_cidrs,
                "roce_interfaces": roce_interfaces}
        kinds = [detected]
        if kind is None:
            scores = _scores(text)
            kinds += [c for c in _COMPANIONS.get(detected, ()) if scores.get(c, 0) >= COMPANION_SCORE]
        out = _result(name, detected, fallback_host, None, facts={})
        lines = text.splitlines()
        for k in kinds:
            try:
                got = _READERS[k](text, fallback_host, opts)
            except Exception as exc:  # a parser bug must not end the run: report it for this input
                out["error"] = (f"{name}: reading it as {k} failed inside the parser ({type(exc).__name__}: {exc}); "
                                "this is a bug in ncclprep, please report it with the input")
                return out
            if k != detected:
                out["also"].append(k)
            if got.get("host") and k == detected:
                out["host"] = got["host"]
            out["read"] += got["read"]
            for f in got["findings"]:
                if k != detected and any(f["id"] == o["id"] and f["subject"] == o["subject"] for o in out["findings"]):
                    continue  # read again by the companion kind (an NCCL error inside a torch traceback)
                f = dict(f)
                f["evidence"] = _evidence(k, f, lines)
                out["findings"].append(f)
            out["unparsed_count"] += len(got["unparsed"])
            out["notes"] += got.get("notes", [])
            out["facts"].update(got.get("facts", {}))
            if got.get("error"):
                out["error"] = f"{name}: {got['error']}"
            if k == detected and not text.endswith("\n") and got["unparsed"] and \
                    got["unparsed"][-1].strip() == lines[-1].strip() and lines[-1].strip():
                out["notes"].append("the last line looks cut off (no newline and not understood)")
        if cut:
            out["notes"].insert(0, f"{cut} line(s) longer than {MAX_INPUT_LINE} characters were cut to "
                                   f"{MAX_INPUT_LINE} before reading")
        if not out["read"] and not out["findings"] and out["error"] is None:
            out["notes"].append(f"nothing of a {detected} input was read")
        return out
    except Exception as exc:  # last resort: never a traceback
        return _result(name, kind, fallback_host, f"{name}: could not be read ({type(exc).__name__}: {exc})")


def diagnose_dumps(dumps: list[tuple[str, bytes | Callable[[], bytes]]], host: str | None = None,
                   forgive: list[str] | None = None) -> dict:
    """torch's flight recorder dumps (``[(file name, bytes or a function that reads them)]``, one per
    rank) read together: one result shaped as ``diagnose_text``'s, kind ``flight_recorder``. A dump
    refused (it names a class or function, is not a dump, or is of a shape or size no dump has:
    ``flight_recorder.load_dump``) or whose reading raises OSError is named in ``error`` and left
    out, and the others are still read; the rank of each is the number its file name ends with. A
    refused file named in ``forgive`` (found in a folder: a job's own pickle beside the dumps) is a
    note instead of an error.

    The dumps are read one at a time, and only their checked fields are kept: a function given
    instead of bytes is called when its turn comes, so one dump's bytes (at most MAX_DUMP_BYTES)
    are held at once. Past MAX_TOTAL_DUMP_BYTES read, or MAX_TOTAL_ITEMS entries and listed ranks
    kept, the remaining dumps are left out with an error. Never raises."""
    from ansible.module_utils.ncclprep.parsers import flight_recorder as fr

    name = f"flight recorder ({len(dumps)} dump{'s' if len(dumps) != 1 else ''})"
    try:
        return _diagnose_dumps(dumps, name, host, set(forgive or []), fr)
    except Exception as exc:  # last resort: never a traceback
        return _result(name, "flight_recorder", host, f"{name}: could not be read ({type(exc).__name__}: "
                                                      f"{str(exc)[:200]})", facts={})


def _load_each_dump(dumps: list, fr) -> tuple[dict[int, dict], dict[str, int], list[tuple[str, str]]]:
    """``({rank: checked dump}, {file name: rank}, [(file name, why it was left out)])``: the dumps
    read one at a time (``diagnose_dumps``), each file's bytes dropped once read."""
    loaded: dict[int, dict] = {}
    ranks: dict[str, int] = {}
    errors: list[tuple[str, str]] = []
    read_bytes = held = 0
    for path, data in dumps:
        if read_bytes >= fr.MAX_TOTAL_DUMP_BYTES or held >= fr.MAX_TOTAL_ITEMS:
            errors.append((path, f"left out: the dumps before it came to {read_bytes} bytes and {held} entries and "
                                 f"ranks, the most read in one run ({fr.MAX_TOTAL_DUMP_BYTES} bytes, "
                                 f"{fr.MAX_TOTAL_ITEMS} entries and ranks); give the dumps of fewer ranks"))
            continue
        rank = fr.dump_rank(path)
        try:
            raw = data() if callable(data) else data
            read_bytes += len(raw)
            dump = fr.load_dump(raw)
        except fr.DumpRefused as exc:
            errors.append((path, str(exc)))
            continue
        except OSError as exc:
            errors.append((path, f"cannot be read ({exc.strerror or exc})"))
            continue
        except Exception as exc:  # a dump no check foresaw: said for this file, the others still read
            errors.append((path, f"could not be read ({type(exc).__name__}: {str(exc)[:200]})"))
            continue
        finally:
            raw = None
        if rank is None or rank in loaded:
            errors.append((path, f"no rank at the end of its name (torch writes <prefix><rank>), or a second dump of "
                                 f"rank {rank}: left out"))
            continue
        loaded[rank] = dump
        ranks[path] = rank
        held += len(dump["entries"]) + sum(len(c["ranks"]) for c in dump.get("pg_config", {}).values())
    return loaded, ranks, errors


def _diagnose_dumps(dumps: list, name: str, host: str | None, forgive: set[str], fr) -> dict:
    out = _result(name, "flight_recorder", host, None, facts={})
    loaded, ranks, errors = _load_each_dump(dumps, fr)
    out["notes"] += [f"not read: {path}: {why}" for path, why in errors if path in forgive]
    errors = [f"{path}: {why}" for path, why in errors if path not in forgive]
    if errors:
        out["error"] = "; ".join(errors)
    if not loaded:
        return out
    versions = sorted({d["version"] for d in loaded.values()})
    out["read"].append(f"dumps of ranks {', '.join(map(str, sorted(loaded)))} (flight recorder version "
                       f"{', '.join(versions)}), {sum(len(d['entries']) for d in loaded.values())} entries")
    try:
        stuck = fr.analyze(loaded)
        found = fr.diagnose_flight_recorder(stuck, host)
    except Exception as exc:  # a dump of an odd shape (a field of another type): said, not raised
        out["error"] = "; ".join([*errors, f"the dumps could not be read together ({type(exc).__name__}: "
                                           f"{str(exc)[:200]})"])
        return out
    for g in stuck:
        out["read"].append(f"process group {g['pg']}: last collective per rank "
                           + ", ".join(f"{r}: #{s}" for r, s in sorted(g["last"].items())))
    for f in found:
        f = dict(f)
        shown = set(f.get("suspects") or []) | set(f.get("waiting") or [])
        f["evidence"] = [f"{path}: rank {r}" for path, r in ranks.items() if r in shown][:6]
        out["findings"].append(f)
    if not stuck:
        out["notes"].append("no collective is left uncompleted in these dumps: no rank was stuck when they were "
                            "written")
    return out


# --- comparison ----------------------------------------------------------------------------------------

#: sysctl keys compared between hosts: prefixes of the network keys NCCL/Gloo traffic depends on.
COMPARED_SYSCTL_PREFIXES = ("net.core.", "net.ipv4.tcp_", "net.ipv4.ip_local_port_range", "net.ipv4.conf.all.",
                            "net.ipv4.conf.default.", "net.ipv6.conf.all.", "net.ipv6.conf.default.")
#: Keys the kernel sizes from the host's memory or CPU count: different values are expected.
AUTOSIZED_SYSCTL = frozenset({"net.ipv4.tcp_mem", "net.ipv4.tcp_max_orphans", "net.ipv4.tcp_max_tw_buckets",
                              "net.ipv4.tcp_max_syn_backlog", "net.core.flow_limit_cpu_bitmap",
                              "net.ipv4.tcp_child_ehash_entries", "net.core.rps_default_mask"})


def compare(results: list[dict]) -> list[dict]:
    """Findings from setting several inputs (several nodes) against each other.

    ``results`` are ``diagnose_text`` results; inputs with an ``error`` are left out. Each finding
    (``parsers.finding``, subject the thing compared, ``host`` None) has ``evidence``: lines
    ``host (source): value``.

    - FAIL ``compare.nccl_version`` when hosts' NCCL logs print different NCCL versions. Every rank
      of a communicator must run the same NCCL; NVIDIA's maintainers ask about it first when ranks
      hang or disagree (NVIDIA/nccl#354, #1328: "a version or configuration mismatch between two
      ranks").
    - WARN ``compare.nccl_env`` per NCCL_* variable that NCCL printed as set (``set by environment
      to``) with different values on different hosts, or on some hosts and not on others whose logs
      print other NCCL_* settings (so the variable was unset there). Source: NVIDIA/nccl#394 and
      #1328, where the maintainer's advice is to check the log for variables set on one rank but
      not another; NCCL's env docs (NCCL_SOCKET_IFNAME, NCCL_IB_GID_INDEX...) describe settings
      each rank reads on its own.
    - WARN ``compare.sysctl`` per network key (COMPARED_SYSCTL_PREFIXES, not AUTOSIZED_SYSCTL) whose
      ``sysctl -a`` value differs between hosts: validate.yml's ``sysctl.<key>`` checks hold every
      node to one intent (roles/sysctl_tuning), so a difference is drift on one of them.
    - Ranks that never arrived: ``parsers.nccl_log.diagnose_nccl_ranks`` over the init lines of
      every NCCL log together (nranks says N, some rank indices never printed); ranks that torch
      output names as missing (monitoredBarrier) are added to its evidence.
    - FAIL ``compare.collective_timeout`` when the NCCL watchdog's lines of two or more inputs (a
      job's per-rank logs) read together name the collective the ranks wait in and the ranks behind
      it or silent (``torch_watchdog.watchdog_census``; evidence: the file of each rank).
    Never raises.
    """
    try:
        return _compare(results)
    except Exception as exc:
        return [finding("compare.error", "WARN", "inputs", f"the inputs could not be compared ({type(exc).__name__}: "
                        f"{exc})", "this is a bug in ncclprep, please report it", evidence=[])]


def _compare(results: list[dict]) -> list[dict]:
    ok = [r for r in results if not r.get("error")]
    out: list[dict] = []
    versions: dict[str, dict[str, str]] = {}
    envs: dict[str, dict] = {}
    for r in ok:
        for h, facts in (r.get("facts") or {}).get("nccl_hosts", {}).items():
            for v in facts["versions"]:
                versions.setdefault(v, {}).setdefault(h, r["source"])
            if facts["env"]:
                envs.setdefault(h, {"source": r["source"], "env": {}})["env"].update(facts["env"])
    if len(versions) > 1:
        per = "; ".join(f"{v} on {', '.join(sorted(hosts))}" for v, hosts in sorted(versions.items()))
        out.append(finding("compare.nccl_version", "FAIL", "NCCL version",
                           f"hosts run different NCCL versions: {per}",
                           "install one NCCL version on every node (the same torch wheel or libnccl2 package), "
                           "then rerun", versions={v: sorted(h) for v, h in versions.items()},
                           evidence=[f"{h} ({src}): NCCL version {v}" for v, hosts in sorted(versions.items())
                                     for h, src in sorted(hosts.items())]))
    if len(envs) > 1:
        names = sorted({k for e in envs.values() for k in e["env"]})
        for name in names:
            values = {h: e["env"].get(name) for h, e in envs.items()}
            if len(set(values.values())) > 1:
                said = "; ".join(f"{h}: {v if v is not None else 'not set'}" for h, v in sorted(values.items()))
                out.append(finding("compare.nccl_env", "WARN", name,
                                   f"{name} differs between hosts ({said})",
                                   f"set {name} the same way on every node (or unset it everywhere)",
                                   values=values, evidence=[f"{h} ({envs[h]['source']}): {name} "
                                                            f"{'set to ' + v if v is not None else 'not set'}"
                                                            for h, v in sorted(values.items())]))
    sysctls = {}
    for r in ok:
        values = (r.get("facts") or {}).get("sysctl")
        if values:
            sysctls[r["host"] or r["source"]] = (r["source"], values)
    if len(sysctls) > 1:
        keys = sorted({k for _, v in sysctls.values() for k in v
                       if k.startswith(COMPARED_SYSCTL_PREFIXES) and k not in AUTOSIZED_SYSCTL})
        for key in keys:
            seen = {h: v.get(key) for h, (_, v) in sysctls.items() if key in v}
            if len(seen) > 1 and len(set(seen.values())) > 1:
                said = "; ".join(f"{h}: {v}" for h, v in sorted(seen.items()))
                out.append(finding("compare.sysctl", "WARN", key, f"{key} differs between hosts ({said})",
                                   f"hold every node to one value (site.yml's sysctl_tuning role, or sysctl -w "
                                   f"{key}=... in /etc/sysctl.d)", values=seen,
                                   evidence=[f"{h} ({sysctls[h][0]}): {key} = {v}" for h, v in sorted(seen.items())]))
    ranks = [dict(x, source=r["source"]) for r in ok for x in (r.get("facts") or {}).get("ranks", [])]
    torch_missing = {r["source"]: (r.get("facts") or {}).get("torch_missing") for r in ok
                     if (r.get("facts") or {}).get("torch_missing")}
    for f in diagnose_nccl_ranks(ranks):
        f["id"] = "compare." + f["id"].split(".", 1)[1]
        f["subject"] = "ranks"
        sources = sorted({x["source"] for x in ranks if x["nranks"] == f["nranks"]})
        f["evidence"] = [f"{len(f['seen'])} of {f['nranks']} ranks printed an init line in "
                         f"{', '.join(sources)}: ranks {_ranges(f['seen'])}"]
        f["evidence"] += [f"{src}: torch names rank(s) {', '.join(map(str, m))} as missing"
                          for src, m in torch_missing.items()]
        out.append(f)
    out += _compare_watchdog(ok, results)
    return out


#: A per-rank file's rank: ``rank3.log`` / ``rank_3.txt``, torchrun's ``<log-dir>/<run>/attempt_0/3/stderr.log``.
_RANK_FILE_RE = re.compile(r"rank[_-]?(\d+)[^/]*$|/(\d+)/std(?:out|err)\.log$")


def _compare_watchdog(ok: list[dict], everything: list[dict]) -> list[dict]:
    """The NCCL watchdog's lines of every input read together (a job's per-rank logs): who waits in
    which collective and who is behind, across the files (torch_watchdog.watchdog_census)."""
    from ansible.module_utils.ncclprep.parsers.torch_watchdog import diagnose_torch_watchdog

    per = [(r["source"], (r.get("facts") or {}).get("watchdog")) for r in ok]
    per = [(src, w) for src, w in per if w and (w.get("timeouts") or w.get("progress"))]
    if len(per) < 2 or not any(w.get("timeouts") for _src, w in per):
        return []
    # a rank's own file that holds no watchdog line (a rank stuck elsewhere prints none): its rank
    # from the file name (rank3.log, torchrun's <log-dir>/.../attempt_0/3/stderr.log)
    quiet = {}
    for r in everything:
        m = _RANK_FILE_RE.search(str(r["source"]).replace("\\", "/"))
        if m and r["source"] not in {src for src, _w in per}:
            quiet[int(m.group(1) or m.group(2))] = r["source"]
    merged: dict = {"timeouts": [], "progress": [], "stuck": [], "taken_down": [], "ranks_seen": sorted(quiet)}
    where: dict[int, str] = dict(quiet)
    for src, w in per:
        for key in ("timeouts", "progress"):
            merged[key] += w.get(key) or []
        merged["ranks_seen"] = sorted(set(merged["ranks_seen"]) | set(w.get("ranks_seen") or []))
        for t in (w.get("timeouts") or []) + (w.get("progress") or []):
            if t.get("rank") is not None:
                where.setdefault(t["rank"], src)
    out = []
    for f in diagnose_torch_watchdog(merged):
        if f["id"] != "torch.collective_timeout":
            continue
        f = dict(f, id="compare.collective_timeout", host=None)
        f["message"] = f"across {len(per)} inputs: " + f["message"]
        f["evidence"] = [f"rank {r} ({where[r]}): waits in work {f['seq']}" for r in f["waiting"] if r in where][:4]
        f["evidence"] += [f"rank {r} ({where.get(r, 'no input of its own')}): to look at first"
                          for r in f["suspects"][:2]]
        out.append(f)
    return out


# --- presentation --------------------------------------------------------------------------------------

def _status(results: list[dict], comparisons: list[dict]) -> str:
    if any(r.get("error") for r in results):
        return "error"
    sev = {f["severity"] for r in results for f in r["findings"]} | {f["severity"] for f in comparisons}
    return "fail" if "FAIL" in sev else "warn" if "WARN" in sev else "ok"


def summary_counts(results: list[dict], comparisons: list[dict]) -> dict:
    """``{"FAIL": n, "WARN": n, "INFO": n, "errors": n, "inputs": n}`` over every finding and input."""
    counts = {s: 0 for s in SEVERITIES}
    for f in [f for r in results for f in r["findings"]] + list(comparisons):
        counts[f["severity"]] = counts.get(f["severity"], 0) + 1
    counts["errors"] = sum(1 for r in results if r.get("error"))
    counts["inputs"] = len(results)
    return counts


def _render_finding(f: dict) -> list[str]:
    out = [f"{f['severity']} {f['subject']}: {f['message']}"]
    out += [f"  > {ln}" for ln in f.get("evidence") or []]
    if f.get("remediation"):
        out.append(f"  fix: {f['remediation']}")
    return out


def render_text(results: list[dict], comparisons: list[dict]) -> str:
    """Plain words for a terminal: per input ``file: kind (description)``, what was read, each finding
    as ``FAIL|WARN|INFO subject: message`` with its evidence lines quoted (``  > ``) and ``  fix:
    remediation``; then the comparisons across inputs; last a one-line summary. Never raises."""
    out: list[str] = []
    for r in results:
        head = f"{r['source']}: {r['kind'] or 'unknown kind'}"
        if r.get("kind_description"):
            head += f" ({r['kind_description']}" + (f"; also read as {', '.join(r['also'])}" if r.get("also") else "") \
                + ")"
        if r.get("host") and r["kind"]:
            head += f" [host {r['host']}]"
        out.append(head)
        if r.get("error"):
            out.append(f"  error: {r['error']}")
        for line in r.get("read") or []:
            out.append(f"  read: {line}")
        for note in r.get("notes") or []:
            out.append(f"  note: {note}")
        if r.get("unparsed_count"):
            out.append(f"  note: {r['unparsed_count']} line{'s' if r['unparsed_count'] != 1 else ''} not understood "
                       "(kept out of the reading)")
        for f in r.get("findings") or []:
            out += ["  " + ln for ln in _render_finding(f)]
        if r["kind"] and not r.get("error") and not r.get("findings"):
            out.append("  nothing wrong found in this input")
        out.append("")
    if comparisons:
        out.append(f"across the {len(results)} inputs:")
        for f in comparisons:
            out += ["  " + ln for ln in _render_finding(f)]
        out.append("")
    c = summary_counts(results, comparisons)
    status = _status(results, comparisons)
    verdict = {"error": "some input could not be read", "fail": "something is wrong", "warn": "worth a look",
               "ok": "nothing wrong found"}[status]
    out.append(f"doctor: {c['inputs']} input{'s' if c['inputs'] != 1 else ''}, {c['FAIL']} FAIL, {c['WARN']} WARN, "
               f"{c['INFO']} INFO" + (f", {c['errors']} unreadable" if c["errors"] else "") + f": {verdict}")
    return "\n".join(out) + "\n"


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def as_json(results: list[dict], comparisons: list[dict]) -> dict:
    """The findings as data: ``{"schema_version": 1, "status": "ok" | "warn" | "fail" | "error",
    "summary": summary_counts(...), "inputs": [diagnose_text results without "facts"], "comparisons":
    [findings]}``; every value JSON-serialisable (sets become lists, other objects strings)."""
    inputs = [{k: v for k, v in r.items() if k != "facts"} for r in results]
    return _jsonable({"schema_version": SCHEMA_VERSION, "status": _status(results, comparisons),
                      "summary": summary_counts(results, comparisons), "inputs": inputs,
                      "comparisons": comparisons})


def exit_status(results: list[dict], comparisons: list[dict]) -> int:
    """2 when an input could not be read, 1 when some finding is FAIL, else 0."""
    status = _status(results, comparisons)
    return {"error": 2, "fail": 1}.get(status, 0)
