"""The firewall role's rule set, checked before any change.

``ruleset`` turns the role's variables into one list of allow rules that both
backends render (community.general.ufw tasks, the nftables template), and
``check_firewall`` finds what would be unsafe: a CIDR that does not parse, a
rule open to the whole Internet or most of it (a prefix shorter than /8, or /16 for IPv6,
such as 0.0.0.0/1 plus 128.0.0.0/1) unless allowed, a port out of range, a comment or
interface that would be read as more than a name by nft or ufw, and a rule set that would
cut the Ansible connection itself (the controller's SSH session must stay allowed once the
default policy is deny; over SSH an unknown controller address is refused, not skipped).
"""

from __future__ import annotations

import ipaddress
import re

from ansible.module_utils.ncclprep.netutil import parse_cidr

WORLD = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
PROTOS = ("tcp", "udp", "any")
# A source whose prefix is shorter than this opens the rule to a good part of the Internet
# (0.0.0.0/1 + 128.0.0.0/1 is all of it); like 0.0.0.0/0, only with firewall_allow_world.
NEAR_WORLD_PREFIX = {4: 8, 6: 16}
# What a comment and an interface may hold: they are written inside nft's double quotes and
# into ufw's command line (community.general.ufw joins its arguments into one string), so a
# quote, a newline or a ';' would start a rule of its own (review F6).
COMMENT_RE = re.compile(r"[\w .,:()/-]{0,64}\Z")
# Linux interface names: at most 15 bytes (IFNAMSIZ - 1); letters, digits, '_', '.', '-', '@'
INTERFACE_RE = re.compile(r"[A-Za-z0-9_.@-]{1,15}\Z")


def _net(value: str, var: str, host: str, errors: list) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return parse_cidr(str(value))
    except ValueError as exc:
        errors.append(f"{host}: {var}={value!r}: {exc}")
        return None


def ruleset(cluster_cidr: str, interface: str, rendezvous_ports: list, rendezvous_sources: list,
            admin_cidrs: list, ssh_port: int = 22, extra_rules: list | None = None) -> list[dict]:
    """The allow rules, in order: ``[{"from": CIDR, "port": int | None, "proto": "tcp"|"udp"|"any",
    "interface": str | None, "comment": str, "var": the role variable it comes from}]``; port None
    is every port.

    1. everything from the cluster CIDR on the data-plane interface (NCCL and Gloo use
       ephemeral ports, so no port list can hold them);
    2. each rendezvous port (TCP) from each rendezvous source, on any interface;
    3. SSH from each admin CIDR, on any interface;
    4. extra rules ``{port, proto (default tcp), from}``.
    Values are passed through; ``check_firewall`` says which are bad.
    """
    rules = [{"from": str(cluster_cidr), "port": None, "proto": "any", "interface": interface,
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
                      "comment": str(rule.get("comment", "ncclprep: extra rule")), "var": "firewall_extra_rules"})
    return rules


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


def check_firewall(rules: list[dict], host: str, allow_world: bool = False, connection: str | None = None,
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
            errors.append(f"{host}: {var} comment={rule['comment']!r}: only letters, digits, spaces and .,:()/- "
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

