"""``sysctl -a`` output and its reading (the doctor's ``sysctl`` kind; the sysctl_tuning concern
compares values by the same rules): value normalisation, parsing, and the findings of one host's
values against an intent. A sysctl value is a string; multi-value keys (``net.ipv4.tcp_rmem``)
are whitespace-separated integers, which the kernel prints tab-separated. Values are compared after
whitespace normalisation, as ansible.posix.sysctl does."""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.parsers import finding

#: A sysctl name: dotted words (``net.core.somaxconn``).
KEY_RE = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)+$")


def normalize(value: object) -> str:
    """Return ``value`` as the kernel would print it, whitespace collapsed to one space.

    Raises TypeError for booleans: YAML ``yes``/``true`` is never a valid sysctl
    value and almost always a quoting mistake.
    """
    if isinstance(value, bool):
        raise TypeError(f"boolean {value!r} is not a sysctl value; quote it or use 0/1")
    if isinstance(value, (list, tuple)):
        return " ".join(normalize(v) for v in value)
    return " ".join(str(value).split())


def parse_sysctl_a(text: str) -> tuple[dict[str, str], list[str]]:
    """Parse ``sysctl -a`` output into ``({key: normalised value}, unparsed lines)``.

    Lines are ``key = value``; the value may be empty or a tab-separated list.
    Blank lines are skipped; any other line that is not ``key = value`` is
    returned in the unparsed list, never raised on.
    """
    values: dict[str, str] = {}
    unparsed: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not KEY_RE.match(key):
            unparsed.append(line)
            continue
        values[key] = normalize(value)
    return values, unparsed


# Keys whose value is a word, not integers (everything else under net.* is numeric).
STRING_KEYS = frozenset({
    "net.ipv4.tcp_congestion_control",
    "net.core.default_qdisc",
    "net.ipv4.tcp_allowed_congestion_control",
})
#: One integer token of a value.
INT_RE = re.compile(r"^-?\d+$")


def _ints(text: str) -> list[int] | None:
    """The whitespace-separated integers of a value, None when any token is not one."""
    tokens = normalize(text).split()
    return [int(t) for t in tokens] if tokens and all(INT_RE.match(t) for t in tokens) else None


def below_intent(value: str, want: object) -> bool | None:
    """True when a live ``value`` is smaller than the intended ``want`` in some position, None when
    either is not integers or their lengths differ (``"4096 87380 6291456"`` against
    ``"4096 131072 268435456"`` -> True). Equal or larger values give False."""
    have, need = _ints(value), _ints(normalize(want))
    if have is None or need is None or len(have) != len(need):
        return None
    return any(h < n for h, n in zip(have, need, strict=True))


def diagnose_sysctl(values: dict[str, str], intent: dict | None, host: str | None = None) -> list[dict]:
    """Findings for ``parse_sysctl_a`` values of one host against ``intent`` (key -> value, the
    sysctl_tuning role's ``sysctl_tuning_settings``, which validate.yml's ``sysctl.<key>`` checks hold
    the nodes to; None or {} when no intent is known).

    - WARN ``sysctl.untuned`` when intended integer keys shown in ``values`` are below their intent
      (``below_intent``; a word-valued key counts when it differs): an untuned host for multi-node
      NCCL/Gloo over TCP. ``keys`` is ``{key: {"value", "intended"}}``; the message says "RFS off"
      when net.core.rps_sock_flow_entries is 0 (the kernel's scaling.rst: RFS is disabled at 0).
      Keys the text does not show are not judged (never invented).
    - WARN ``sysctl.rp_filter_strict`` when ``net.ipv4.conf.all.rp_filter`` or ``.default.rp_filter``
      is 1 (strict reverse-path filtering; the kernel uses the larger of all and the interface's
      value) while ``arp_ignore`` and ``arp_announce`` are still their defaults 0: on a multi-NIC host
      with one subnet per NIC, a packet or ARP reply arriving on another NIC than the route back is
      dropped. Source: the kernel's Documentation/networking/ip-sysctl.rst (rp_filter: loose mode 2 is
      recommended for asymmetric routing; arp_ignore / arp_announce).
    Requires nothing; never raises on the values.
    """
    out: list[dict] = []
    subject = host or "host"
    low: dict[str, dict] = {}
    for key, want in (intent or {}).items():
        if key not in values or isinstance(want, bool) or want is None:
            continue
        below = below_intent(values[key], want)
        if below or (below is None and key in STRING_KEYS and normalize(values[key]) != normalize(want)):
            low[key] = {"value": values[key], "intended": normalize(want)}
    if low:
        rfs = " RFS off (net.core.rps_sock_flow_entries 0);" if values.get("net.core.rps_sock_flow_entries") == "0" \
            else ""
        listed = ", ".join(f"{k} {v['value']} (recommended {v['intended']})" for k, v in low.items())
        out.append(finding("sysctl.untuned", "WARN", subject,
                           f"untuned host: {len(low)} network settings below what multi-node NCCL/Gloo needs;{rfs} "
                           f"{listed}",
                           "apply the sysctl_tuning role (site.yml), or sysctl -w each key to its recommended value "
                           "in a drop-in under /etc/sysctl.d", host=host, keys=low))
    strict = [k for k in ("net.ipv4.conf.all.rp_filter", "net.ipv4.conf.default.rp_filter") if values.get(k) == "1"]
    arp_default = all(values.get(f"net.ipv4.conf.all.{k}") == "0" for k in ("arp_ignore", "arp_announce"))
    if strict and arp_default:
        out.append(finding("sysctl.rp_filter_strict", "WARN", subject,
                           f"strict reverse-path filter ({', '.join(f'{k} = 1' for k in strict)}) with default ARP "
                           "settings (arp_ignore 0, arp_announce 0): risky on a multi-NIC host, where a reply "
                           "arriving on another NIC than the route back is dropped",
                           "on multi-NIC (one subnet per rail) hosts set rp_filter = 2 (loose) and arp_ignore = 1, "
                           "arp_announce = 2", host=host, rp_filter={k: values[k] for k in strict}))
    return out
