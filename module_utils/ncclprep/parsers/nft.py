"""``nft -j list table inet ncclprep``: the table's input chain read from nft's JSON, rule by rule.

nft's JSON (libnftables-json(5)): ``{"nftables": [{"metainfo": ...}, {"table": ...},
{"chain": {"name", "hook", "policy", ...}}, {"rule": {"chain", "comment", "expr": [...]}}]}``;
a rule's ``expr`` is a list of statements: ``{"match": {"op", "left", "right"}}`` and a verdict
(``{"accept": null}``, ``{"drop": null}``). Parsed, not searched as text: a comment or a wider
network that holds the cluster's address no longer passes for the cluster's rule (review F7).
"""

from __future__ import annotations

import json

#: Statements of the role's own fixed rules (templates/ncclprep.nft.j2): conntrack state, the
#: loopback interface, ICMP, DHCPv6 replies. A rule made of these alone is not an allow rule to
#: compare.
_BASE_ICMP = {"icmp", "ipv6-icmp"}
#: The DHCPv6 reply rule: from a link-local server or relay (udp 547) to the client (udp 546).
_DHCPV6 = ("fe80::/10", 546, "udp")


def _address(right) -> str | None:
    if isinstance(right, str):
        return right
    if isinstance(right, dict) and isinstance(right.get("prefix"), dict):
        return f"{right['prefix'].get('addr')}/{right['prefix'].get('len')}"
    return None


def _rule(expr: list) -> dict:
    """One rule's statements as ``{from, port, proto, interface, verdict, base, other}``."""
    out = {"from": None, "port": None, "proto": "any", "interface": None, "verdict": None, "base": False,
           "other": []}
    dhcpv6_sport = None
    for stmt in expr if isinstance(expr, list) else []:
        if not isinstance(stmt, dict):
            out["other"].append(stmt)
            continue
        for verdict in ("accept", "drop", "reject", "jump", "goto", "return", "continue"):
            if verdict in stmt:
                out["verdict"] = verdict
                break
        else:
            match = stmt.get("match")
            if not isinstance(match, dict) or match.get("op") not in ("==", "in"):
                out["other"].append(stmt)
                continue
            left, right = match.get("left") or {}, match.get("right")
            meta, payload = (left.get("meta") or {}).get("key"), left.get("payload") or {}
            if "ct" in left and (left["ct"] or {}).get("key") == "state":
                out["base"] = True
            elif meta == "iif" and right == "lo":
                out["base"] = True
            elif meta == "iifname" and isinstance(right, str):
                out["interface"] = right
            elif meta == "l4proto" and isinstance(right, dict) and set(right.get("set") or []) == _BASE_ICMP:
                out["base"] = True
            elif meta == "l4proto" and isinstance(right, dict) and set(right.get("set") or []) == {"tcp", "udp"}:
                out["proto"] = "any"
            elif payload.get("field") == "saddr" and payload.get("protocol") in ("ip", "ip6"):
                out["from"] = _address(right)
            elif payload.get("field") == "sport" and payload.get("protocol") == "udp" and right == 547:
                dhcpv6_sport = stmt
            elif payload.get("field") == "dport" and payload.get("protocol") in ("tcp", "udp", "th") \
                    and isinstance(right, int):
                out["port"] = right
                out["proto"] = "any" if payload["protocol"] == "th" else payload["protocol"]
            else:
                out["other"].append(stmt)
    if dhcpv6_sport is not None:
        if (out["from"], out["port"], out["proto"]) == _DHCPV6 and not out["other"] and not out["interface"]:
            out.update({"from": None, "port": None, "proto": "any", "base": True})
        else:
            out["other"].append(dhcpv6_sport)
    return out


def parse_nft_table(text: str, chain: str = "input") -> dict:
    """Read ``chain`` of the table nft printed as JSON.

    Returns ``{"error": str | None, "policy": str | None (the chain's, e.g. "drop"), "rules":
    [{"from": CIDR or address | None, "port": int | None, "proto": "tcp"|"udp"|"any",
    "interface": str | None, "comment": str | None, "verdict": "accept"|"drop"|... | None,
    "base": bool (a conntrack, loopback or ICMP rule), "other": [statements not understood]}]}``.
    ``error`` says why nothing could be read (not JSON, no such chain). Never raises.
    """
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return {"error": f"not nft JSON ({exc})", "policy": None, "rules": []}
    items = doc.get("nftables") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        return {"error": "not nft JSON (no nftables list)", "policy": None, "rules": []}
    policy, found, rules = None, False, []
    for item in items:
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("chain"), dict) and item["chain"].get("name") == chain:
            found, policy = True, item["chain"].get("policy")
        rule = item.get("rule")
        if isinstance(rule, dict) and rule.get("chain") == chain:
            rules.append(dict(_rule(rule.get("expr")), comment=rule.get("comment")))
    return {"error": None if found else f"no chain {chain!r} in the table", "policy": policy, "rules": rules}
