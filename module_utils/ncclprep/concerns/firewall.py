"""The firewall concern: the rule set, checked before any change, and the live firewall.

Reading (``read``): the live rule set and the TCP listeners. Intent:
``intent`` (``ruleset``). Checks: ``firewall.rules`` and ``firewall.ports_free``.

``ruleset`` turns the role's variables into one list of allow rules that both
backends render (community.general.ufw tasks, the nftables template), and
``unsafe_rules`` finds what would be unsafe: a CIDR that does not parse, a
rule open to the whole Internet or most of it (a prefix shorter than /8, or /16 for IPv6,
such as 0.0.0.0/1 plus 128.0.0.0/1) unless allowed, a port out of range, a comment or
interface that would be read as more than a name by nft or ufw, and a rule set that would
cut the Ansible connection itself (the controller's SSH session must stay allowed once the
default policy is deny; over SSH an unknown controller address is refused, not skipped).
"""

from __future__ import annotations

import ipaddress
import os
import re

from ansible.module_utils.ncclprep.model import Check, Context, HostRecord, facts_of, intent_of, verdict
from ansible.module_utils.ncclprep.netutil import parse_cidr
from ansible.module_utils.ncclprep.node.hostinfo import Runner
from ansible.module_utils.ncclprep.parsers.nft import parse_nft_table
from ansible.module_utils.ncclprep.parsers.ufw import diagnose_ufw, parse_ufw_status, parse_ufw_user_rules
from ansible.module_utils.ncclprep.sysfs import read_text

UFW = "/usr/sbin/ufw"
NFT = "/usr/sbin/nft"
#: ufw's own rule files (IPv4, IPv6) and its defaults file (IPV6=yes|no)
UFW_USER_RULES = ("/etc/ufw/user.rules", "/etc/ufw/user6.rules")
UFW_DEFAULTS = "/etc/default/ufw"
BACKENDS = ("auto", "ufw", "nftables")


def choose_firewall_backend(requested: str, have_ufw: bool, have_nft: bool) -> str:
    """The firewall backend, decided in this one place for the role and the preflight.

    ``requested``: firewall_backend (auto, ufw, nftables). auto picks ufw where
    /usr/sbin/ufw exists (Ubuntu's default), else nftables. Raises ValueError for
    any other value.
    """
    if requested not in BACKENDS:
        raise ValueError(f"firewall_backend={requested!r}: valid: {', '.join(BACKENDS)}")
    if requested != "auto":
        return requested
    return "ufw" if have_ufw else "nftables"


def read_rules(run: Runner, backend: str = "auto", timeout: float = 10.0, root: str = "",
             listening: list[dict] | None = None) -> dict:
    """``{tools: {ufw, nft} (installed), backend, rc, stdout, listening, ufw_rules, ufw_ipv6,
    ufw_defaults}``:
    the live rule set of the chosen backend (``ufw status verbose``, or ``nft -j list table inet
    ncclprep``) and the TCP listeners; with ufw also its rules as it keeps them (the tuples of
    UFW_USER_RULES, ``parsers.ufw.parse_ufw_user_rules``; None: user.rules not readable) and IPV6=
    of UFW_DEFAULTS ("yes", "no"; None: not set or not readable), and ``ufw_defaults``: the
    default policies an active ufw prints ({incoming, outgoing}: "allow", "deny", "reject";
    ``parsers.ufw.parse_ufw_status``), None where ufw is inactive or its status unread (the role
    runs ``ufw default`` only for a policy that differs); all three None without ufw.

    rc is None when the backend's tool is not installed. ``listening``: the ``tcp_listen``
    facts of community.general.listen_ports_facts, or ss's (node.read_node), kept as [{port,
    address, pid, name}] (None: not read). Raises ValueError for a bad backend.
    """
    tools = {"ufw": os.path.exists(root + UFW), "nft": os.path.exists(root + NFT)}
    chosen = choose_firewall_backend(backend, tools["ufw"], tools["nft"])
    kept = None if listening is None else [
        {"port": int(s["port"]), "address": s.get("address"), "pid": s.get("pid"), "name": s.get("name")}
        for s in listening if isinstance(s, dict) and str(s.get("port", "")).isdigit()]
    out = {"tools": tools, "backend": chosen, "rc": None, "stdout": "", "listening": kept, "ufw_rules": None,
           "ufw_ipv6": None, "ufw_defaults": None}
    if not tools["ufw" if chosen == "ufw" else "nft"]:
        return out
    if chosen == "ufw":
        texts = [read_text(root + path) for path in UFW_USER_RULES]
        if texts[0] is not None:  # user6.rules may be absent where IPv6 was never on
            out["ufw_rules"] = parse_ufw_user_rules(texts[0]) + parse_ufw_user_rules(texts[1] or "", v6=True)
        found = re.search(r"^IPV6=\"?(\w+)\"?\s*$", read_text(root + UFW_DEFAULTS) or "", re.M)
        out["ufw_ipv6"] = found.group(1).lower() if found else None
    argv = ["ufw", "status", "verbose"] if chosen == "ufw" else ["nft", "-j", "list", "table", "inet", "ncclprep"]
    rc, stdout, _ = run(argv, timeout)
    out.update(rc=rc, stdout=stdout)
    if chosen == "ufw" and rc == 0:
        status = parse_ufw_status(stdout)
        if status["status"] == "active":
            out["ufw_defaults"] = {way: status["default"][way] for way in ("incoming", "outgoing")}
    return out


WORLD = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
PROTOS = ("tcp", "udp", "any")
# A source whose prefix is shorter than this opens the rule to a good part of the Internet
# (0.0.0.0/1 + 128.0.0.0/1 is all of it); like 0.0.0.0/0, only with firewall_allow_world.
NEAR_WORLD_PREFIX = {4: 8, 6: 16}
# What a comment and an interface may hold: they are written inside nft's double quotes and
# into ufw's command line (community.general.ufw joins its arguments into one string), so a
# quote, a newline or a ';' would start a rule of its own (review F6).
COMMENT_RE = re.compile(r"[\w .,:()/-]{0,74}\Z")  # 64 of the user's, "ncclprep: " before them
# Linux interface names: at most 15 bytes (IFNAMSIZ - 1); letters, digits, '_', '.', '-', '@'
INTERFACE_RE = re.compile(r"[A-Za-z0-9_.@-]{1,15}\Z")


def _net(value: str, var: str, host: str, errors: list) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return parse_cidr(str(value))
    except ValueError as exc:
        errors.append(f"{host}: {var}={value!r}: {exc}")
        return None


def ruleset(cluster: str | list, interface: str, rendezvous_ports: list, rendezvous_sources: list,
            admin_cidrs: list, ssh_port: int = 22, extra_rules: list | None = None) -> list[dict]:
    """The allow rules, in order: ``[{"from": CIDR, "port": int | None, "proto": "tcp"|"udp"|"any",
    "interface": str | None, "comment": str, "var": the role variable it comes from}]``; port None
    is every port.

    1. everything from the cluster on the data-plane interface (NCCL and Gloo use ephemeral
       ports, so no port list can hold them): ``cluster`` is either the members' data-plane
       addresses (a list: one rule each, var ``data_plane_members``; review F1/F9: a host
       that merely shares the network reaches no port of the job) or one CIDR (a string,
       firewall_cluster_cidr set);
    2. each rendezvous port (TCP) from each rendezvous source, on any interface;
    3. SSH from each admin CIDR, on any interface;
    4. extra rules ``{port, proto (default tcp), from}``.
    Values are passed through; ``unsafe_rules`` says which are bad.
    """
    if isinstance(cluster, (list, tuple)):
        rules = [{"from": str(address), "port": None, "proto": "any", "interface": interface,
                  "comment": "ncclprep: cluster node (NCCL, Gloo, rendezvous)", "var": "data_plane_members"}
                 for address in cluster]
    else:
        rules = [{"from": str(cluster), "port": None, "proto": "any", "interface": interface,
                  "comment": "ncclprep: cluster traffic (NCCL, Gloo, rendezvous)", "var": "firewall_cluster_cidr"}]
    for source in rendezvous_sources:
        for port in rendezvous_ports:
            rules.append({"from": str(source), "port": int(port), "proto": "tcp", "interface": None,
                          "comment": "ncclprep: torch.distributed rendezvous", "var": "firewall_rendezvous_sources"})
    for source in admin_cidrs:
        rules.append({"from": str(source), "port": int(ssh_port), "proto": "tcp", "interface": None,
                      "comment": "ncclprep: SSH from the admin network", "var": "firewall_admin_cidrs"})
    for rule in extra_rules or []:
        rules.append({"from": str(rule.get("from")), "port": None if rule.get("port") is None else int(rule["port"]),
                      "proto": str(rule.get("proto", "tcp")), "interface": rule.get("interface"),
                      "comment": owned_comment(rule.get("comment")), "var": "firewall_extra_rules"})
    return rules


#: Every comment ncclprep writes starts so: a ufw rule with it is ncclprep's own, removed when
#: no longer intended (review F7); the rules of others are never removed, only reported.
OWNED_PREFIX = "ncclprep"


def owned_comment(comment: object) -> str:
    """An extra rule's comment as written: ``ncclprep: <comment>`` (``ncclprep: extra rule``
    when none), unless it starts with OWNED_PREFIX already."""
    text = "extra rule" if comment is None else str(comment)
    return text if text.startswith(OWNED_PREFIX) else f"{OWNED_PREFIX}: {text}"


def _key(source: str, port, proto: str, interface: str | None):
    """What makes two allow rules the same: (source network, port as text or None, protocol,
    interface or None); None when the source does not parse."""
    try:
        net = ipaddress.ip_network("0.0.0.0/0" if source in ("any", "Anywhere") else source, strict=False)
    except ValueError:
        return None
    return net, None if port is None else str(port), proto, interface or None


def _opening_key(rule: dict, actions: tuple[str, ...]):
    """A live ufw rule's ``_key`` when it is one the role's rules can match: incoming, not routed,
    its action among ``actions``, to any address (no app, no source port); else None."""
    if rule.get("route") or rule.get("action") not in actions or rule.get("direction") != "in":
        return None
    if rule.get("to") not in ("0.0.0.0/0", "::/0") or rule.get("app") or rule.get("from_port") is not None:
        return None
    return _key(rule["from"], rule.get("port"), rule.get("proto"), rule.get("interface"))


def ufw_rule_text(rule: dict) -> str:
    """A rule of ``parsers.ufw.parse_ufw_user_rules`` in ufw's own syntax (``ufw delete <this>``
    removes it): ``allow in on eth0 proto tcp from 10.0.0.1 to any port 22``."""
    parts = [rule["action"], rule.get("direction") or "in"]
    if rule.get("interface"):
        parts += ["on", rule["interface"]]
    if rule.get("proto") not in (None, "any") and not rule.get("app"):
        parts += ["proto", rule["proto"]]
    parts += ["from", "any" if rule["from"] in ("0.0.0.0/0", "::/0") else rule["from"]]
    parts += ["to", "any" if rule["to"] in ("0.0.0.0/0", "::/0") else rule["to"]]
    if rule.get("app"):
        parts += ["app", rule["app"]]
    elif rule.get("port"):
        parts += ["port", rule["port"]]
    return " ".join(parts)


def _unknown_member(source, unknown_in) -> bool:
    """Whether ``source`` is one host's address inside network ``unknown_in``: a rule that may be
    a member's whose address this run does not know (it could not be reached, review F13)."""
    if not unknown_in:
        return False
    try:
        net = ipaddress.ip_network(str(source), strict=False)
        return net.num_addresses == 1 and net.subnet_of(ipaddress.ip_network(str(unknown_in), strict=False))
    except (ValueError, TypeError):
        return False


def ufw_unintended(intended: list[dict], live: list[dict], unknown_in: str | None = None) -> dict[str, list[dict]]:
    """Which live ufw rules are not the intended ones, and which intended ones are not live:
    ``{"stale": [...], "foreign": [...], "missing": [...]}``.

    ``intended``: ``ruleset``'s rules; ``live``: ``parsers.ufw.parse_ufw_user_rules`` of
    user.rules and user6.rules. Only ALLOW and LIMIT rules on incoming traffic are compared (a
    deny closes, it never opens). A live rule matches an intended one when source network,
    port, protocol and interface are equal and its destination is any address.
    ``stale``: ncclprep's own (comment starting with OWNED_PREFIX) that no longer match, for the
    role to delete; ``missing``: the intended rules no live rule matches; ``foreign``: the rules
    of others (a cloud image's ``allow OpenSSH``, a hand
    ``ufw allow 29400``) that open what the role does not intend, for firewall.rules to FAIL
    on. Each entry is the live rule with ``text`` (``ufw_rule_text``) added. ``unknown_in``: the
    cluster network when some member's address is not known this run (a member that cannot be
    reached): ncclprep's own rules from one address inside it are kept, not stale.
    """
    want = {_key(r["from"], r["port"], r["proto"], r.get("interface")): r for r in intended}
    have = set()
    out: dict[str, list[dict]] = {"stale": [], "foreign": [], "missing": []}
    for rule in live:
        if rule.get("route") or rule.get("action") not in ("allow", "limit") or rule.get("direction") != "in":
            continue
        key = _opening_key(rule, ("allow", "limit"))
        if key is not None and key in want:
            have.add(key)
            continue
        owned = str(rule.get("comment") or "").startswith(OWNED_PREFIX)
        if owned and _unknown_member(rule["from"], unknown_in):
            continue
        out["stale" if owned else "foreign"].append(dict(rule, text=ufw_rule_text(rule)))
    out["missing"] = [r for k, r in want.items() if k not in have]
    return out


def ufw_to_add(intended: list[dict], live: list[dict] | None) -> list[dict]:
    """The intended rules community.general.ufw would change: each one no live rule holds with
    the same source network, port, protocol and interface, to any address, and the same comment
    (ufw rewrites a rule whose comment differs). A rule from every address (0.0.0.0/0, ::/0) is
    always included: ufw writes it for IPv6 too, as IPV6= says. ``live``: as ``ufw_unintended``'s
    (None: not read, every intended rule). On a re-run with nothing to change this is empty, and
    the role runs no ufw command: one per rule cost about 0.8 s of wall time each (a dozen rules
    on the local cluster: 9.5 s of a 58 s re-run of site.yml).
    """
    if live is None:
        return list(intended)
    held = {(_opening_key(rule, ("allow",)), rule.get("comment")) for rule in live}
    out = []
    for rule in intended:
        key = _key(rule["from"], rule["port"], rule["proto"], rule.get("interface"))
        if key is None or key[0].prefixlen == 0 or (key, rule.get("comment")) not in held:
            out.append(rule)
    return out


def allows(rules: list[dict], client: str, port: int, interface: str | None) -> bool:
    """Whether a TCP connection from ``client`` to ``port`` arriving on ``interface`` is allowed."""
    addr = ipaddress.ip_address(client)
    for rule in rules:
        try:
            net = parse_cidr(rule["from"])
        except ValueError:
            continue
        if addr.version != net.version or addr not in net:
            continue
        if rule["interface"] and interface and rule["interface"] != interface:
            continue
        if rule["interface"] and not interface:
            continue
        if rule["port"] is None or (rule["port"] == port and rule["proto"] in ("tcp", "any")):
            return True
    return False


def unsafe_rules(rules: list[dict], host: str, allow_world: bool = False, connection: str | None = None,
                   interfaces: dict | None = None, members: dict | None = None, over_ssh: bool = False) -> list[str]:
    """Errors that must stop the role before any change (empty when the rule set is safe).

    ``rules`` come from ``ruleset``; errors name the host, the rule's variable and the value.
    ``connection`` is the node's SSH_CONNECTION ("client_ip client_port server_ip server_port",
    sshd's environment variable, read as the login account: sudo drops it) or None; ``over_ssh``:
    Ansible reaches the host over SSH, so a missing ``connection`` is refused (review F3: the
    check was skipped under become). ``interfaces`` maps interface name -> its addresses, to
    find the interface the connection arrives on; a rule's interface must be one of them.
    ``members`` maps every cluster node -> its data-plane address: the cluster rule must hold them
    all, or the nodes could not reach each other's NCCL/Gloo ports.
    Rules: comments and interfaces are plain names (COMMENT_RE, INTERFACE_RE); every source
    parses as a CIDR; 0.0.0.0/0, ::/0 and prefixes shorter than NEAR_WORLD_PREFIX only with
    ``allow_world``; ports in 1..65535; protocols tcp, udp or any; the cluster rule holds every
    node; and the controller's connection stays allowed.
    """
    errors: list[str] = []
    for rule in rules:
        var = rule.get("var", "firewall rule")
        if not COMMENT_RE.match(str(rule.get("comment") or "")):
            given = str(rule["comment"]).removeprefix(f"{OWNED_PREFIX}: ") if var == "firewall_extra_rules" \
                else rule["comment"]
            errors.append(f"{host}: {var} comment={given!r}: only letters, digits, spaces and .,:()/- "
                          f"(at most 64), since nft and ufw would read a quote or a newline as a rule of its own")
            continue
        iface = rule.get("interface")
        if iface and not INTERFACE_RE.match(str(iface)):
            errors.append(f"{host}: {var} interface={iface!r} is not an interface name (letters, digits, _.@-, "
                          f"at most 15)")
            continue
        if iface and interfaces is not None and iface not in interfaces:
            errors.append(f"{host}: {var} interface={iface!r} does not exist on this host "
                          f"(interfaces: {', '.join(sorted(interfaces))})")
        net = _net(rule["from"], var, host, errors)
        what = rule['comment'].split(': ', 1)[-1]
        if net is not None and any(net == w for w in WORLD) and not allow_world:
            errors.append(f"{host}: {var} opens {what} to the whole Internet "
                          f"({rule['from']}); name the networks that need it, or set firewall_allow_world: true")
        elif net is not None and net.prefixlen < NEAR_WORLD_PREFIX[net.version] and not allow_world:
            errors.append(f"{host}: {var} opens {what} to {net.num_addresses} addresses ({rule['from']}, "
                          f"shorter than /{NEAR_WORLD_PREFIX[net.version]}): close to the whole Internet; name "
                          f"the networks that need it, or set firewall_allow_world: true")
        if rule["port"] is not None and not 1 <= int(rule["port"]) <= 65535:
            errors.append(f"{host}: {var} port={rule['port']} is not a TCP/UDP port (valid: 1..65535)")
        if rule["proto"] not in PROTOS:
            errors.append(f"{host}: {var} proto={rule['proto']!r} (valid: {', '.join(PROTOS)})")
    cluster = next((r for r in rules if r.get("var") == "firewall_cluster_cidr"), None)
    if members and cluster and not errors:
        net = parse_cidr(cluster["from"])
        outside = {h: a for h, a in sorted(members.items())
                   if a and (ipaddress.ip_address(a).version != net.version or ipaddress.ip_address(a) not in net)}
        if outside:
            errors.append(f"{host}: firewall_cluster_cidr={cluster['from']} does not hold the data-plane address of "
                          + ", ".join(f"{h} ({a})" for h, a in outside.items())
                          + ": those nodes could not reach the others' NCCL/Gloo ports; use a CIDR holding every node")
    if over_ssh and not connection and not errors:
        errors.append(f"{host}: cannot tell where the controller's SSH connection comes from (SSH_CONNECTION is "
                      f"empty for the login account), so whether these rules would lock it out is unknown; set "
                      f"firewall_controller_address to the address the nodes see it connect from")
    if connection and not errors:
        parts = connection.split()
        if len(parts) == 4:
            client, server, port = parts[0], parts[2], int(parts[3])
            arrives = next((name for name, addrs in (interfaces or {}).items() if server in addrs), None)
            if not allows(rules, client, port, arrives):
                errors.append(
                    f"{host}: the rules would lock the controller out: its SSH connection from {client} to "
                    f"{server}:{port} (interface {arrives or 'unknown'}) matches no allow rule; add a CIDR holding "
                    f"{client} to firewall_admin_cidrs")
    return errors


def nft_rule_text(rule: dict) -> str:
    """A rule of ``parsers.nft.parse_nft_table`` in nft's syntax, as near as its fields tell."""
    parts = []
    if rule.get("interface"):
        parts.append(f'iifname "{rule["interface"]}"')
    if rule.get("from"):
        parts.append(f"{'ip6' if ':' in rule['from'] else 'ip'} saddr {rule['from']}")
    if rule.get("port") is not None:
        parts.append(f"{'th' if rule.get('proto') == 'any' else rule.get('proto')} dport {rule['port']}")
    if rule.get("other"):
        parts.append(f"({len(rule['other'])} more statements)")
    return " ".join(parts + [rule.get("verdict") or "continue"])


def nft_unintended(intended: list[dict], table: dict, unknown_in: str | None = None) -> dict[str, list]:
    """The intended rules the live table lacks and the accepts it has beyond them:
    ``{"missing": [intended rule], "foreign": [live rule with "text"]}``.

    ``table``: ``parsers.nft.parse_nft_table``. The role's fixed rules (conntrack, loopback,
    ICMP: ``base``) are not compared; an accept with a statement the parser does not know, or
    with no source, is foreign (it may open anything). ``unknown_in``: as ``ufw_unintended``'s
    (an accept from one address inside it may be a member's that could not be reached)."""
    want = {_key(r["from"], r["port"], r["proto"], r.get("interface")): r for r in intended}
    have = set()
    foreign = []
    for rule in table.get("rules") or []:
        if rule.get("verdict") != "accept" or (rule.get("base") and not rule.get("from")):
            continue
        key = _key(rule["from"], rule.get("port"), rule.get("proto"), rule.get("interface")) \
            if rule.get("from") and not rule.get("other") else None
        if key is not None and key in want:
            have.add(key)
        elif key is not None and _unknown_member(rule["from"], unknown_in):
            continue
        else:
            foreign.append(dict(rule, text=nft_rule_text(rule)))
    return {"missing": [r for k, r in want.items() if k not in have], "foreign": foreign}


def firewall_problem(fw: dict, live: dict | None) -> str | None:
    """Why a host's live firewall does not hold the role's intent (one line), or None when it does.

    ``fw``: intent ``firewall``; ``live``: facts ``firewall`` (see ``check``).
    nftables: the table loaded, read from nft's JSON (parsers/nft.py), its input chain with a
    drop policy, every intended rule there and no accept beyond them (``firewall.nft_unintended``);
    ufw: active, incoming default deny, every intended rule in ufw's own rule files (where they
    were not read: no FAIL finding of parsers/ufw.py ``diagnose_ufw`` for the cluster CIDR), IPv6
    filtered (IPV6=no in /etc/default/ufw leaves every IPv6 port open) and no ALLOW beyond the
    intended rules (``firewall.ufw_unintended``, review F7: a rule ncclprep no longer intends, or
    anyone's, such as ``allow from any``).
    """
    live = live or {}
    if live.get("rc") is None and live.get("backend") is not None:
        tool = "ufw" if live["backend"] == "ufw" else "nft"
        return f"{live['backend']} is chosen but its tool ({tool}) is not installed"
    cluster = fw.get("cluster_cidr")
    interface = next((r.get("interface") for r in fw.get("rules") or []
                      if r.get("var") in ("firewall_cluster_cidr", "data_plane_members")), None)
    if fw.get("backend") == "nftables":
        if live.get("rc") != 0:
            return "nftables table inet ncclprep is not loaded"
        table = parse_nft_table(live.get("stdout") or "")
        if table["error"]:
            return f"table inet ncclprep not readable: {table['error']}"
        if table["policy"] != "drop":
            return f"table inet ncclprep's input policy is {table['policy']}, not drop"
        diff = nft_unintended(fw.get("rules") or [], table, fw.get("unknown_in"))
        problems = [f"no rule for {r['from']}" + (f" port {r['port']}" if r["port"] is not None else "")
                    + f" ({r['comment']})" for r in diff["missing"]]
        problems += [f"accepts what ncclprep does not intend: {r['text']}" for r in diff["foreign"]]
        return "; ".join(problems) or None
    parsed = parse_ufw_status(live.get("stdout") or "")
    if parsed.get("status") != "active":
        return f"ufw is {parsed.get('status') or 'not reported'}"
    if (parsed.get("default") or {}).get("incoming") != "deny":
        return f"ufw's incoming default is {(parsed.get('default') or {}).get('incoming')}, not deny"
    problems = []
    if live.get("ufw_rules") is None:  # ufw's own files not read: its status decides about the cluster
        findings = diagnose_ufw(parsed, cluster, interface=interface) if cluster else []
        problems = [f["message"] for f in findings if f["severity"] == "FAIL"][:1]
    if live.get("ufw_ipv6") == "no":
        problems.append("IPV6=no in /etc/default/ufw: ufw filters no IPv6 traffic, every port listening on [::] "
                        "is open over IPv6 (set IPV6=yes, then ufw reload)")
    if live.get("ufw_rules") is not None:
        diff = ufw_unintended(fw.get("rules") or [], live["ufw_rules"], fw.get("unknown_in"))
        problems += [f"no rule for {r['from']}" + (f" port {r['port']}" if r["port"] is not None else "")
                     + (f" on {r['interface']}" if r.get("interface") else "") + f" ({r['comment']})"
                     for r in diff["missing"]]
        problems += [f"allows what ncclprep does not intend: {r['text']}" + (" (v6)" if r["v6"] else "")
                     + (" (ncclprep's, no longer intended: re-run site.yml)" if r in diff["stale"] else
                        f" (remove it: ufw delete {r['text']}, or list it in firewall_extra_rules)")
                     for r in diff["stale"] + diff["foreign"]]
    return "; ".join(problems) or None


def check(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """firewall.rules: intent ``firewall`` (None: role off) against facts ``firewall``.

    intent ``firewall``: {backend (ufw, nftables), cluster_cidr, rules [{from, port, proto,
    interface, comment, var}]}. facts ``firewall``: {tools{ufw, nft}, backend, rc (None: the
    tool is not installed), stdout} of ``ufw status verbose`` or ``nft -j list table inet
    ncclprep`` (``read_rules``). FAIL measures host -> why (``firewall_problem``);
    PASS measures host -> backend.
    """
    rows = {h: (intent_of(r, "firewall"), facts_of(r).get("firewall")) for h, r in sorted(records.items())
            if intent_of(r, "firewall")}
    if not rows:
        return []
    problems = {h: p for h, (fw, live) in rows.items() if (p := firewall_problem(fw, live))}
    out = [verdict("firewall.rules", problems, expected="active, default deny incoming, cluster CIDR allowed",
                    message="firewall not as intended: " + "; ".join(f"{h}: {p}" for h, p in sorted(problems.items())),
                    remediation=f"re-run site.yml (role firewall) on {', '.join(sorted(problems))}",
                    passed=f"default deny incoming with the cluster allowed on {len(rows)} hosts",
                    passed_measured={h: fw.get("backend") for h, (fw, _) in rows.items()}, passed_expected=None)]
    return out + check_ports_free(rows)


def job_ports(fw: dict) -> list[int]:
    """The TCP ports of the rendezvous rules of intent ``firewall`` (firewall_rendezvous_ports), sorted."""
    return sorted({int(r["port"]) for r in fw.get("rules") or []
                   if r.get("var") == "firewall_rendezvous_sources" and r.get("port") is not None})


def check_ports_free(rows: dict[str, tuple[dict, dict | None]]) -> list[Check]:
    """firewall.ports_free: no process listens on a job port (``job_ports``) before the job starts.

    ``rows``: host -> (intent ``firewall``, facts ``firewall``); facts ``listening`` are the
    TCP listeners [{port, address, pid, name}] read from ``ss -Htlnp`` (parsers/ss.py; the
    role's own facts.yml: community.general.listen_ports_facts) (None: not read; that host is
    left out). A job's torchrun then fails to bind the
    port (EADDRINUSE, errno 98) on whichever node is its rendezvous host or MASTER_ADDR, so
    a holder on any node is a FAIL naming host, port and process. No check when no host
    has both job ports and listeners read.
    """
    held: dict[str, dict[str, str]] = {}
    seen = []
    for host, (fw, live) in sorted(rows.items()):
        listening, ports = (live or {}).get("listening"), job_ports(fw)
        if listening is None or not ports:
            continue
        seen.append(host)
        for sock in sorted(listening, key=lambda s: (s.get("port") or 0, str(s.get("pid")))):
            if sock.get("port") in ports:
                held.setdefault(host, {})[str(sock["port"])] = (f"{sock.get('name') or 'unknown process'} "
                                                                f"(pid {sock.get('pid') or '?'}) on "
                                                                f"{sock.get('address') or '*'}")
    if not seen:
        return []
    ports = sorted({p for h in seen for p in job_ports(rows[h][0])})
    return [verdict("firewall.ports_free", held, expected=f"TCP {', '.join(map(str, ports))} free",
                    message="job ports already taken: " + "; ".join(f"{h}:{port} held by {who}" for h, by in
                                                                   held.items() for port, who in by.items()),
                    remediation="stop the process holding the port (ss -ltnp) on " + ", ".join(held)
                                + ", or give the job other ports (nccl_env_rendezvous_port, firewall_rendezvous_ports)",
                    passed=f"TCP {', '.join(map(str, ports))} free on {len(seen)} hosts",
                    passed_measured=ports, passed_expected=None)]


# This concern's entry in the registry (concerns/__init__.py).
SWITCH = "firewall_enabled"
DATA_PLANE = True
FACTS = True
IDS = ("firewall.rules", "firewall.ports_free")
OPTIONS = dict(
    backend=dict(type="str", default="auto"),
    timeout=dict(type="float", default=10.0),
    listening=dict(type="list", elements="dict"),
)


def read(run: Runner, p: dict) -> dict:
    """``read_rules`` with the options of OPTIONS (checked, defaults filled)."""
    return read_rules(run, p["backend"], p["timeout"], listening=p["listening"])


#: The variables the intent is computed from (concerns.intent hands over these only).
INTENT_VARS = ("firewall_cluster_cidr", "firewall_rendezvous_ports", "firewall_rendezvous_sources",
               "firewall_admin_cidrs", "firewall_ssh_port", "firewall_extra_rules", "data_plane",
               "data_plane_cidr", "data_plane_members")
#: The facts it takes from the node: the backend chosen for it (ufw where installed, else nftables).
INTENT_FACTS = ("backend",)


def intent(v: dict, node: dict) -> dict:
    """``{backend, cluster_cidr, unknown_in, rules}``: the cluster is firewall_cluster_cidr, else the
    members' own addresses (review F1/F9: not the whole data-plane network); ``unknown_in``: the
    data-plane CIDR when a member has no address and no cluster CIDR is named (its rules cannot
    name it); ``rules``: ``ruleset`` of the role's variables. Raises ValueError for bad values
    (``unsafe_rules`` names them before any change)."""
    named = v["firewall_cluster_cidr"]
    members = (v["data_plane_members"] or {}).values()
    sources = named if named else list(dict.fromkeys(m.get("address") for m in members if m.get("address")))
    cluster = named or v["data_plane_cidr"]
    rendezvous = v["firewall_rendezvous_sources"]
    if rendezvous is None:
        rendezvous = [sources] if isinstance(sources, str) else sources
    rules = ruleset(str(sources) if isinstance(sources, str) else list(sources),
                    (v["data_plane"] or {}).get("interface"), list(v["firewall_rendezvous_ports"] or []),
                    list(rendezvous or []), list(v["firewall_admin_cidrs"] or []), int(v["firewall_ssh_port"]),
                    list(v["firewall_extra_rules"] or []))
    unknown_in = cluster if not named and any(not m.get("address") for m in members) else None
    return {"backend": node["backend"], "cluster_cidr": cluster, "unknown_in": unknown_in, "rules": rules}
