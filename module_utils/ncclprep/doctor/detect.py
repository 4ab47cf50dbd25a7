"""The doctor's first step: which kind of input a text is (``detect_kind``, from content
signatures and a weak file-name hint), and the input made safe to read (``decode_input``,
``cut_long_lines``). Pure; never raises on any text."""

from __future__ import annotations

import re

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
COMPANIONS = {"torch_dist": ("nccl_log",), "nccl_log": ("torch_dist", "nccl_tests"), "nccl_tests": ("nccl_log",)}
#: Score a companion kind needs to be read as well.
COMPANION_SCORE = 4
#: Characters of a long input's head and of its tail that kind detection reads (a kind's signature
#: lines are in the first and last screenfuls; a 50 MB log is not scanned 40 times).
SCORE_WINDOW = 1 << 18
#: Control characters that are not text (tab, newline, carriage return and form feed are).
_CONTROL_CHARS = tuple(chr(c) for c in range(32) if chr(c) not in "\t\n\r\f")


def kind_scores(text: str) -> dict[str, int]:
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
    scores = kind_scores(text)
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


def text_error(text) -> str | None:
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
