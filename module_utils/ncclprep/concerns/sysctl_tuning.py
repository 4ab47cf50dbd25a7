"""The sysctl_tuning concern: kernel parameters, checked against what the kernel accepts.

Names, /proc/sys paths and value rules (normalisation, ``sysctl -a`` and the doctor's reading:
parsers/sysctl.py). A sysctl value is a
string; multi-value keys (``net.ipv4.tcp_rmem``) are whitespace-separated integers, which the
kernel prints tab-separated. Values are compared after whitespace normalisation, as
ansible.posix.sysctl does. Reading: node.read_facts (facts ``sysctl_tuning``). Intent:
``intent``. Checks: ``sysctl.<key>``, one per intended key.
"""

from __future__ import annotations

import os
import re

from ansible.module_utils.ncclprep.model import (
    Check,
    Context,
    HostRecord,
    facts_of,
    intent_of,
    majority,
    make_check,
    verdict,
)
from ansible.module_utils.ncclprep.parsers.sysctl import INT_RE, KEY_RE, STRING_KEYS, normalize


def proc_path(key: str, root: str = "/proc/sys") -> str:
    """Return the /proc/sys file of ``key`` (``net.core.somaxconn`` -> ``/proc/sys/net/core/somaxconn``).

    Raises ValueError when ``key`` is not a dotted sysctl name.
    """
    if not isinstance(key, str) or not KEY_RE.match(key):
        raise ValueError(f"not a sysctl key: {key!r} (expected dotted name like net.core.somaxconn)")
    return os.path.join(root, *key.split("."))


def read_live(keys: list[str], root: str = "/proc/sys") -> dict[str, str | None]:
    """Read the live value of each key; None when the key is not visible here.

    A key is invisible when the kernel lacks it or, inside a container, when it
    is host-global rather than per network namespace (e.g. net.core.netdev_budget).
    """
    out: dict[str, str | None] = {}
    for key in keys:
        try:
            with open(proc_path(key, root), encoding="utf-8") as fh:
                out[key] = normalize(fh.read())
        except (FileNotFoundError, PermissionError, NotADirectoryError):
            out[key] = None
    return out


# Keys whose value is a word, not integers (everything else under net.* is numeric).
#: Host-global keys: linux net/core/sysctl_net_core.c's ``net_core_table`` (not its per-namespace
#: ``netns_core_table``), so a container's network namespace does not show them (or shows them
#: read-only). ``sysctl -N -a`` inside a container leaves them out; they are not unknown there.
HOST_GLOBAL = frozenset(f"net.core.{k}" for k in """
wmem_max rmem_max wmem_default rmem_default mem_pcpu_rsv dev_weight dev_weight_rx_bias dev_weight_tx_bias
netdev_max_backlog netdev_rss_key bpf_jit_enable bpf_jit_harden bpf_jit_kallsyms bpf_jit_limit
netdev_tstamp_prequeue message_cost message_burst busy_poll busy_read default_qdisc netdev_budget warnings
max_skb_frags netdev_budget_usecs fb_tunnels_only_for_init_net devconf_inherit_init_net high_order_alloc_disable
gro_normal_batch netdev_unregister_timeout_secs skb_defer_max rps_sock_flow_entries flow_limit_cpu_bitmap
flow_limit_table_len tstamp_allow_data rps_default_mask optmem_max
""".split())
_WORD_RE = re.compile(r"^[A-Za-z0-9_\-]+$")


def check_value(key: str, value: object, available_congestion_control: list[str] | None = None) -> str | None:
    """Return why ``value`` is not valid for ``key``, or None when it is.

    Rules: booleans and empty values are never valid (a YAML ``yes`` is a quoting
    mistake); a congestion control must be one the kernel offers
    (net.ipv4.tcp_available_congestion_control, when given); a word-valued key
    (STRING_KEYS) takes one identifier; every other key takes whitespace-separated
    integers. Raises nothing.
    """
    if isinstance(value, bool):
        return f"YAML boolean {value!r} is not a sysctl value (quote strings, use 0/1)"
    if value is None or normalize(value) == "":
        return "empty value"
    text = normalize(value)
    if key == "net.ipv4.tcp_congestion_control" and available_congestion_control is not None:
        if text not in available_congestion_control:
            import difflib

            close = difflib.get_close_matches(text, list(available_congestion_control) + ["bbr"], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            return (f"congestion control {text!r} is not offered by this kernel (available: "
                    f"{' '.join(available_congestion_control)}; load tcp_<name> with modprobe first){hint}")
        return None
    if key in STRING_KEYS:
        return None if _WORD_RE.match(text) else f"{text!r} is not a single word"
    bad = [tok for tok in text.split() if not INT_RE.match(tok)]
    if bad:
        return f"non-numeric {' '.join(bad)!r} for a numeric key"
    return None


#: A C ``int``: the type of every net.core value above (linux net/core/sysctl_net_core.c,
#: ``.maxlen = sizeof(int)``); a number outside it is refused with EINVAL (proc_dointvec).
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
#: Bounds of the host-global keys that a throw-away network namespace cannot try (they are
#: read-only or absent there): ``key -> (least, largest, why)``. Kernel rules from
#: linux net/core/sysctl_net_core.c and include/net/sock.h, checked on Linux 6.18 here:
#: rmem_* below SOCK_MIN_RCVBUF (2048 + the aligned size of struct sk_buff, 2304 bytes on
#: x86_64) and wmem_* below SOCK_MIN_SNDBUF (twice that) are refused, as is
#: rps_sock_flow_entries above 2**29 or a negative netdev_budget_usecs. netdev_budget and
#: netdev_max_backlog take any int, but a count of packets below 1 stops the receive path:
#: that floor is ncclprep's rule, not the kernel's.
KERNEL_BOUNDS: dict[str, tuple[int, int, str]] = {
    "net.core.rmem_max": (2304, INT_MAX, "the kernel's SOCK_MIN_RCVBUF to a C int"),
    "net.core.rmem_default": (2304, INT_MAX, "the kernel's SOCK_MIN_RCVBUF to a C int"),
    "net.core.wmem_max": (4608, INT_MAX, "the kernel's SOCK_MIN_SNDBUF to a C int"),
    "net.core.wmem_default": (4608, INT_MAX, "the kernel's SOCK_MIN_SNDBUF to a C int"),
    "net.core.netdev_budget": (1, INT_MAX, "a packet count: below 1 no packet is received"),
    "net.core.netdev_max_backlog": (1, INT_MAX, "a packet count: below 1 every packet is dropped"),
    "net.core.netdev_budget_usecs": (0, INT_MAX, "microseconds, 0 to a C int"),
    "net.core.rps_sock_flow_entries": (0, 2**29, "the kernel caps the RFS table at 2**29 entries"),
}
#: Keys the kernel stores rounded up to a power of two (rps_sock_flow_sysctl,
#: roundup_pow_of_two), so any other value reads back differently, and drift.sysctl would
#: flag it on every run.
POWER_OF_TWO = frozenset({"net.core.rps_sock_flow_entries"})


def parse_trial(text: str) -> tuple[dict[str, str], dict[str, tuple[str, str | None]], str | None]:
    """Parse sysctl_tuning's ``sysctl_trial.sh`` output.

    Returns ``(live, trial, unavailable)``: ``live`` maps a key to its value in the node's own
    network namespace (whitespace normalised), ``trial`` maps a key to ``(outcome, readback)``
    with outcome ``ok`` (readback the normalised value read back), ``refused``, ``readonly``
    or ``absent`` (readback None), and ``unavailable`` is why no throw-away namespace could be
    made, or None. Lines of another shape are ignored; raises nothing.
    """
    def key_of(path: str) -> str:
        return path[len("/proc/sys/"):].replace("/", ".") if path.startswith("/proc/sys/") else path

    live: dict[str, str] = {}
    trial: dict[str, tuple[str, str | None]] = {}
    unavailable = None
    for line in text.splitlines():  # a pty's "\r\n" too (ansible.builtin.script)
        f = line.rstrip("\r").split("\t")
        if f[0] == "live" and len(f) == 3:
            live[key_of(f[1])] = normalize(f[2])
        elif f[0] == "trial" and len(f) in (3, 4):
            trial[key_of(f[1])] = (f[2], normalize(f[3]) if len(f) == 4 else None)
        elif f[0] == "trial-unavailable":
            unavailable = f[1] if len(f) > 1 and f[1] else "unknown reason"
    return live, trial, unavailable


def keys_to_set(keys: list[str], intent: dict, live: dict[str, str]) -> list[str]:
    """The keys of ``keys`` (in their order) whose ``live`` value (parse_trial's, read before any
    change) is not ``intent``'s, compared as the kernel prints them (``normalize``); a key with no
    live value counts as differing. site.yml sets only these: a sysctl module run per key that
    already holds its value changed nothing and cost 3 s of a 4-node re-run. Raises TypeError for
    a boolean value (``normalize``)."""
    return [k for k in keys if k not in live or live[k] != normalize(intent[k])]


def kernel_error(key: str, value: object, live: str | None = None,
                 trial: tuple[str, str | None] | None = None) -> str | None:
    """Return why the kernel would refuse ``value`` for ``key`` or keep it otherwise, or None.

    ``live``: the key's value on the node now (its field count is the count the kernel takes:
    a short ``tcp_rmem`` keeps the old last field, a long one drops the extra, both silently);
    ``trial``: the outcome of writing ``value`` in a throw-away network namespace
    (:func:`parse_trial`). Host-global keys, which no namespace can try, are held to
    KERNEL_BOUNDS and POWER_OF_TWO. Assumes :func:`check_value` passed; raises nothing.
    """
    text = normalize(value)
    if key in STRING_KEYS:
        return None
    fields = text.split()
    if live is not None and live != "" and len(live.split()) != len(fields):
        n = len(live.split())
        return (f"takes {n} field{'s' if n != 1 else ''} (the kernel shows {live!r}), got {len(fields)}: "
                "the kernel would silently keep or drop the difference")
    if trial is not None and trial[0] == "refused":
        return "the kernel refuses it (tried in a throw-away network namespace): out of range or not a number"
    if trial is not None and trial[0] == "ok" and trial[1] != text:
        return f"the kernel reads it back as {trial[1]!r} (tried in a throw-away network namespace); set that"
    if key in KERNEL_BOUNDS:
        lo, hi, why = KERNEL_BOUNDS[key]
        bad = [int(f) for f in fields if not lo <= int(f) <= hi]
        if bad:
            return f"{bad[0]} is outside {lo}..{hi} ({why})"
    elif key in HOST_GLOBAL and key != "net.core.bpf_jit_limit":  # a C long, the rest C ints
        bad = [int(f) for f in fields if not INT_MIN <= int(f) <= INT_MAX]
        if bad:
            return f"{bad[0]} is outside a C int ({INT_MIN}..{INT_MAX}), which the kernel refuses"
    if key in POWER_OF_TWO:
        n = int(fields[0])
        if n > 0 and n & (n - 1):
            up = 1 << (n - 1).bit_length()
            return f"the kernel rounds {n} up to a power of two and reads it back as {up}; set {up}"
    return None


def check(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """One check per intended sysctl key (intent ``sysctl_tuning``: key -> value), sorted by key.

    FAIL names hosts whose writable live value (facts ``sysctl_tuning[key]``: {value (str | None),
    writable}, read by node_facts) differs from the intended value after ``normalize``. A key that is
    absent or read-only on a host (host-global, seen from a container's network namespace)
    is not applicable there; SKIP when it is so on every host. expected: the intended value,
    or host -> value when hosts intend different values.
    """
    keys = sorted({k for r in records.values() for k in (intent_of(r, "sysctl_tuning") or {})})
    out = []
    for key in keys:
        measured, bad, skipped, expected = {}, [], [], {}
        for host, rec in sorted(records.items()):
            intent = intent_of(rec, "sysctl_tuning") or {}
            if key not in intent:
                continue
            want = normalize(intent[key])
            expected[host] = want
            live = (facts_of(rec).get("sysctl_tuning") or {}).get(key) or {}
            value = live.get("value")
            measured[host] = value
            if value is None:
                skipped.append(host)
            elif normalize(value) != want:
                (bad if live.get("writable") else skipped).append(host)
        exp = majority(expected) if len(set(expected.values())) == 1 else expected
        if not bad and skipped and len(skipped) == len(measured):
            out.append(make_check(
                f"sysctl.{key}", "SKIP", skipped, measured=measured, expected=exp,
                message=f"{key} is host-global (absent or read-only in this network namespace) "
                        f"on {', '.join(skipped)}: not applicable here",
                remediation="set it on the physical host if it matters"))
            continue
        problems = {h: measured[h] for h in bad}
        detail = ", ".join(f"{h}={v}" for h, v in problems.items())
        hosts = ", ".join(bad)
        note = f"; not applicable (host-global) on {', '.join(skipped)}" if skipped else ""
        out.append(verdict(
            f"sysctl.{key}", problems, expected=exp,
            message=f"{key} differs from intent on {hosts} ({detail}; intended {want})",
            remediation=f"re-run site.yml (role sysctl_tuning) or on {hosts}: sysctl -w {key}='{want}'",
            passed=f"{key} as intended{note}", passed_measured=measured))
    return out


# This concern's entry in the registry (concerns/__init__.py).
SWITCH = None
DATA_PLANE = False
FACTS = False
IDS = ("sysctl.*",)


#: The variables the intent is computed from (concerns.intent hands over these only).
INTENT_VARS = ("sysctl_tuning_settings", "sysctl_tuning_overrides")
#: The facts it takes from the node: none (the live values are what it sets).
INTENT_FACTS = ()


def intent(v: dict, node: dict) -> dict:
    """``{key: value}``: sysctl_tuning_settings with sysctl_tuning_overrides over it (key by key)."""
    return {**(v["sysctl_tuning_settings"] or {}), **(v["sysctl_tuning_overrides"] or {})}
