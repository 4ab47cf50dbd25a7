"""``ufw status verbose`` (and ``ufw status [numbered]``): state, defaults and rules.

Header lines are ``Status: active``, ``Logging: on (low)``, ``Default: deny (incoming),
allow (outgoing), disabled (routed)`` and ``New profiles: skip``; the rule table
has ``To  Action  From`` columns, ``ALLOW IN``-style actions, ``(v6)`` markers and
optional ``# comment``. ufw applies the first matching rule, then the default policy.
NCCL and Gloo connect on ephemeral ports besides the rendezvous port, so peers need
every port open to each other, not just 29500.
"""

from __future__ import annotations

import ipaddress
import re

from ansible.module_utils.ncclprep.parsers import finding

# "to" and "from" end at a non-space, so a run of blanks is scanned once, not once per character
# before it (quadratic in the line's length: review F14)
_RULE_RE = re.compile(r"^(?:\[\s*(\d+)\]\s*)?(?P<to>.*?\S)\s{2,}(?P<action>ALLOW|DENY|REJECT|LIMIT)"
                      r"(?: (?P<dir>IN|OUT|FWD))?\s+(?P<from>.*?\S)(?:\s*#\s*(?P<comment>(?:.*\S)?))?\s*$")
_PORT_RE = re.compile(r"^(\d+(?:[:,]\d+)*)(?:/(tcp|udp))?$")
_DEFAULT_RE = re.compile(r"(?<!\w)(\w+) \((incoming|outgoing|routed)\)")
_V6 = "(v6)"


def _strip_v6(text: str) -> tuple[str, bool]:
    return (text.replace(_V6, "").strip(), True) if _V6 in text else (text.strip(), False)


def parse_ufw_status(text: str) -> dict:
    """Parse ``ufw status verbose`` into a dict.

    Returns ``{"status": "active" | "inactive" | None, "logging": str | None ("on", "off"),
    "logging_level": str | None ("low"), "default": {"incoming", "outgoing", "routed"} (None when
    not printed), "new_profiles": str | None, "rules": [{"to", "action", "direction", "from", "v6",
    "port", "proto", "comment"}], "unparsed": [lines]}``. ``to``/``from`` are as printed without the
    ``(v6)`` marker; ``port`` (str, may be a range ``6000:6007``) and ``proto`` are read from ``to``
    when it is a port spec, else None. Never raises.
    """
    out: dict = {"status": None, "logging": None, "logging_level": None,
                 "default": {"incoming": None, "outgoing": None, "routed": None}, "new_profiles": None,
                 "rules": [], "unparsed": []}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or re.match(r"^To\s+Action\s+From$", stripped) or re.match(r"^-+\s+-+\s+-+$", stripped):
            continue
        key, sep, value = stripped.partition(": ")
        value = value.strip()
        if sep and key == "Status":
            out["status"] = value
        elif sep and key == "Logging":
            m = re.match(r"^(\w+)(?: \((\w+)\))?$", value)
            out["logging"], out["logging_level"] = (m.group(1), m.group(2)) if m else (value, None)
        elif sep and key == "Default":
            for policy, chain in _DEFAULT_RE.findall(value):
                out["default"][chain] = policy
        elif sep and key == "New profiles":
            out["new_profiles"] = value
        else:
            m = _RULE_RE.match(stripped)
            if not m:
                out["unparsed"].append(line)
                continue
            to, v6_to = _strip_v6(m.group("to"))
            src, v6_from = _strip_v6(m.group("from"))
            port = _PORT_RE.match(to)
            out["rules"].append({"to": to, "action": m.group("action"), "direction": m.group("dir"), "from": src,
                                 "v6": v6_to or v6_from, "port": port.group(1) if port else None,
                                 "proto": port.group(2) if port else None, "comment": m.group("comment")})
    return out


def _covers(source: str, cidr) -> bool:
    """True when a rule's From (``Anywhere`` or an address/network) contains all of ``cidr``."""
    if source == "Anywhere":
        return True
    try:
        net = ipaddress.ip_network(source, strict=False)
    except ValueError:
        return False
    return net.version == cidr.version and cidr.subnet_of(net)


def diagnose_ufw(parsed: dict, cluster_cidr: str, host: str | None = None, interface: str | None = None) -> list[dict]:
    """Findings for ``parse_ufw_status`` output: can peers in ``cluster_cidr`` reach every port?

    The first rule (in order) that applies to every port from all of ``cluster_cidr`` (``To`` is
    ``Anywhere``, or ``Anywhere on <interface>`` when the peers arrive on ``interface``, direction
    IN, same IP version) decides; without one the incoming default does.
    - INFO ``ufw.inactive`` when ufw is not active (nothing filtered).
    - INFO ``ufw.cluster_allowed`` when peers in the CIDR reach every port (a PASS for a cluster in
      that subnet), with ``rule`` (the deciding rule or None for the default).
    - FAIL ``ufw.cluster_blocked`` otherwise: rendezvous and NCCL/Gloo ephemeral ports are blocked.
    Raises ValueError when ``cluster_cidr`` is not a CIDR.
    """
    cidr = ipaddress.ip_network(cluster_cidr, strict=False)
    subject = host or "host"
    if parsed.get("status") != "active":
        return [finding("ufw.inactive", "INFO", subject, f"ufw is {parsed.get('status') or 'not reported'}: "
                        "nothing filtered", "", host=host)]
    anywhere = {"Anywhere"} | ({f"Anywhere on {interface}"} if interface else set())
    for rule in parsed["rules"]:
        if rule["to"] in anywhere and rule["direction"] in ("IN", None) and rule["v6"] == (cidr.version == 6) \
                and _covers(rule["from"], cidr):
            if rule["action"] == "ALLOW":
                return [finding("ufw.cluster_allowed", "INFO", cluster_cidr,
                                f"peers in {cluster_cidr} reach every port (rule: Anywhere ALLOW IN from "
                                f"{rule['from']}), rendezvous and NCCL/Gloo ephemeral ports included", "",
                                host=host, rule=rule)]
            break
    else:
        if parsed["default"]["incoming"] == "allow":
            return [finding("ufw.cluster_allowed", "INFO", cluster_cidr,
                            f"incoming default is allow: peers in {cluster_cidr} reach every port", "",
                            host=host, rule=None)]
    return [finding("ufw.cluster_blocked", "FAIL", cluster_cidr,
                    f"peers in {cluster_cidr} cannot reach every port: NCCL/Gloo ephemeral ports are blocked",
                    f"ufw allow from {cluster_cidr} (before any deny rule)", host=host)]


_TUPLE = "### tuple ### "


def parse_ufw_user_rules(text: str, v6: bool = False) -> list[dict]:
    """The rules of ufw's own rule file (/etc/ufw/user.rules, or user6.rules with ``v6``), read
    from its ``### tuple ###`` lines, in order.

    A tuple is ``ACTION PROTO DPORT DST SPORT SRC [DAPP SAPP] DIRECTION[_IFACE] [comment=HEX]``
    (ufw's ``UFWRule``, src/backend_iptables.py writes it; DAPP/SAPP only for application
    rules; ACTION may carry ``_log``/``_log-all``; route rules start ``route:``). Returns
    ``[{"action": "allow"|"deny"|"reject"|"limit", "route": bool, "proto": "any"|"tcp"|...,
    "port": str | None (DPORT; None for any; may be "80,443" or "6000:6007"), "to": DST,
    "from": SRC, "from_port": SPORT or None, "app": DAPP or None, "direction": "in"|"out",
    "interface": str | None, "comment": str | None, "v6": bool}]``. A line that is not a
    tuple, or a tuple of another length, is left out. Never raises.
    """
    rules = []
    for line in text.splitlines():
        if not line.startswith(_TUPLE):
            continue
        body, _, hexed = line[len(_TUPLE):].partition(" comment=")
        fields = body.split()
        if len(fields) not in (7, 9):
            continue
        action, proto, dport, dst, sport, src = fields[:6]
        app = fields[6] if len(fields) == 9 and fields[6] != "-" else None
        direction, _, interface = fields[-1].partition("_")
        route = action.startswith("route:")
        action = action.removeprefix("route:").split("_", 1)[0]
        try:
            comment = bytes.fromhex(hexed.strip()).decode("utf-8", "replace") if hexed else None
        except ValueError:
            comment = hexed
        rules.append({"action": action, "route": route, "proto": proto, "port": None if dport == "any" else dport,
                      "to": dst, "from": src, "from_port": None if sport == "any" else sport, "app": app,
                      "direction": direction, "interface": interface or None, "comment": comment, "v6": v6})
    return rules
