"""ncclprep's Jinja2 filters. One pure function per filter; the logic lives in
module_utils/ncclprep so that modules, CLI and tests share it.

Controller-side plugins cannot import custom module_utils through Ansible, so
this file puts the repository's src/ on sys.path and imports the ncclprep
package, which makes ``ansible.module_utils.ncclprep`` importable (the one
arrangement used by the CLI and the tests as well).
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import sys

_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

# ncclprep must be imported before ansible.module_utils.ncclprep: keep this order.
# isort: off
import ncclprep  # noqa: E402,F401  (extends ansible.module_utils.__path__)
from ansible.errors import AnsibleFilterError  # noqa: E402
from ansible.module_utils.ncclprep.cpumask import cpus_to_mask, format_cpulist, mask_to_cpus  # noqa: E402
from ansible.module_utils.ncclprep.cpumask import parse_cpulist  # noqa: E402
from ansible.module_utils.ncclprep.probes.collective_blame import deadline_s as blame_deadline_s  # noqa: E402
from ansible.module_utils.ncclprep.drift import managed_entries  # noqa: E402
from ansible.module_utils.ncclprep.concerns.firewall import unsafe_rules, ufw_unintended  # noqa: E402
from ansible.module_utils.ncclprep.concerns.firewall import ufw_to_add as firewall_ufw_to_add  # noqa: E402
from ansible.module_utils.ncclprep.concerns.host_names import others as hosts_others  # noqa: E402
from ansible.module_utils.ncclprep.concerns.nccl_env import check_env, resolve_env  # noqa: E402
from ansible.module_utils.ncclprep.concerns.numa_pinning import irqs_off  # noqa: E402
from ansible.module_utils.ncclprep.netutil import (  # noqa: E402
    ansible_facts_addresses,
    iface_for_cidr,
    ifname_problem,
    parse_cidr,
)
from ansible.module_utils.ncclprep.node import settings as preflight_settings  # noqa: E402
from ansible.module_utils.ncclprep.concerns.sysctl_tuning import HOST_GLOBAL, check_value, kernel_error  # noqa: E402
from ansible.module_utils.ncclprep.concerns.sysctl_tuning import keys_to_set, parse_trial, proc_path  # noqa: E402
from ansible.module_utils.ncclprep.parsers.sysctl import normalize  # noqa: E402
# isort: on


def data_plane(facts: dict, cidr: str, interface: str | None = None, host: str = "?") -> dict:
    """Find this host's data-plane interface and address from gathered ``ansible_facts``.

    With ``interface`` set, that interface must exist and hold an address in
    ``cidr``; otherwise the interface holding an address in ``cidr`` is chosen.
    Returns ``{"interface", "address", "cidr", "prefix", "mtu"}`` (mtu in bytes or None).
    Raises AnsibleFilterError naming host, variable and value when nothing fits.
    """
    if cidr is None or cidr == "":
        raise AnsibleFilterError(
            f"{host}: data_plane_cidr is not set; set it in the inventory to the CIDR of the "
            "data-plane network, e.g. data_plane_cidr: 10.0.0.0/24"
        )
    try:
        net = parse_cidr(cidr)
    except ValueError as exc:
        raise AnsibleFilterError(f"{host}: data_plane_cidr={cidr!r} is invalid: {exc}") from None
    addrs = ansible_facts_addresses(facts)
    if interface:
        if interface not in addrs:
            raise AnsibleFilterError(
                f"{host}: data_plane_interface={interface!r} does not exist; "
                f"interfaces here: {', '.join(sorted(addrs)) or 'none'}"
            )
        found = iface_for_cidr({interface: addrs[interface]}, str(net))
        if not found:
            raise AnsibleFilterError(
                f"{host}: data_plane_interface={interface!r} has no address in "
                f"data_plane_cidr={cidr!r} (it has {addrs[interface] or 'none'})"
            )
    else:
        found = iface_for_cidr(addrs, str(net))
        if not found:
            listing = "; ".join(f"{k}: {', '.join(v) or '-'}" for k, v in sorted(addrs.items()))
            raise AnsibleFilterError(
                f"{host}: no interface has an address in data_plane_cidr={cidr!r} ({listing})"
            )
    name, address = found
    problem = ifname_problem(name)
    if problem:
        raise AnsibleFilterError(f"{host}: data-plane interface {name!r}: {problem}; rename the interface "
                                 "(a udev rule or netplan set-name)")
    info = facts.get(name.replace("-", "_"), {}) or {}
    return {
        "interface": name,
        "address": address,
        "cidr": str(net),
        "prefix": net.prefixlen,
        "mtu": info.get("mtu"),
    }


def sysctl_value(value: object, key: str = "?", host: str = "?") -> str:
    """Normalise a sysctl value for the drop-in file; raise AnsibleFilterError for booleans."""
    try:
        return normalize(value)
    except TypeError as exc:
        raise AnsibleFilterError(f"{host}: sysctl {key}: {exc}") from None


def sysctl_to_set(keys: list, intent: dict, trial=None, host: str = "?") -> list[str]:
    """sysctl_tuning.keys_to_set: the keys of ``keys`` whose live value differs from ``intent``'s,
    the live values read from ``trial`` (the stdout of sysctl_trial.sh, read before any change);
    every key of ``keys`` when there is no trial output (None: the check did not run)."""
    if trial is None:
        return list(keys)
    try:
        return keys_to_set(list(keys), intent, parse_trial(trial)[0])
    except TypeError as exc:
        raise AnsibleFilterError(f"{host}: sysctl: {exc}") from None


def sysctl_errors(settings: dict, available_congestion_control=None, host: str = "?", known=None,
                  trial=None) -> list[str]:
    """Why each invalid setting is invalid: ``["node1: net.ipv4.tcp_congestion_control='brr': ..."]``.

    ``available_congestion_control`` is the node's tcp_available_congestion_control
    (a space-separated string or a list); ``known``: the names this kernel shows (``sysctl -N -a``,
    a list; None: not checked), a key outside it and outside sysctl.HOST_GLOBAL (hidden from a
    container's network namespace, not unknown) is unknown, with the closest name offered;
    ``trial``: the stdout of sysctl_tuning's sysctl_trial.sh on the node (its live values and
    what a throw-away network namespace made of each value; None: not run), so a value the
    kernel refuses or reads back differently fails here, before any change (sysctl.kernel_error).
    Host-global keys are held to sysctl.KERNEL_BOUNDS either way. [] when every value is valid.
    """
    import difflib

    if isinstance(available_congestion_control, str):
        available_congestion_control = available_congestion_control.split()
    known = set(known) if known else None
    live, tried, _ = parse_trial(trial) if trial is not None else ({}, {}, None)
    errors = []
    for key, value in sorted((settings or {}).items(), key=lambda kv: str(kv[0])):
        try:  # a dotted name of letters, digits, _ and -: a newline would end the drop-in's comment
            proc_path(key)
        except ValueError as exc:
            errors.append(f"{host}: {exc}")
            continue
        if known is not None and key not in known and key not in HOST_GLOBAL:
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
            errors.append(f"{host}: {key}={value!r}: no such sysctl on this kernel"
                          + (f"; did you mean {close[0]}?" if close else " (sysctl -a lists the names)"))
            continue
        why = check_value(key, value, available_congestion_control)
        if not why:
            why = kernel_error(key, value, live.get(key), tried.get(key))
        if why:
            errors.append(f"{host}: {key}={value!r}: {why}")
    return errors


def nccl_env_resolve(settings: dict, overrides: dict | None, interface: str | None) -> dict:
    """nccl_env's settings and overrides resolved as its intent takes them (concerns.nccl_env.resolve_env):
    what ``ncclprep_nccl_env_check`` checks, deprecated names still as written."""
    return resolve_env(settings, overrides, interface)


def nccl_env_check(env: dict, interfaces=None, host: str = "?", debug=None) -> dict:
    """Check an NCCL/Gloo/torch environment on ``host`` (see concerns.nccl_env.check_env), and the
    debug launch's additions ``debug`` (nccl_env_debug_settings, nulls dropped) the same way.

    Returns ``{"errors": [...], "warnings": [...], "effective": {...}}``; every message
    starts with the host name (a debug setting's also with ``nccl_env_debug_settings``);
    ``effective`` has deprecated names renamed.
    """
    errors, warnings, effective = check_env(env or {}, list(interfaces) if interfaces is not None else None)
    debug_errors, _, _ = check_env({k: v for k, v in (debug or {}).items() if v is not None})
    return {"errors": [f"{host}: {e}" for e in errors]
            + [f"{host}: nccl_env_debug_settings {e}" for e in debug_errors],
            "warnings": [f"{host}: {w}" for w in warnings], "effective": effective}


def cpulist_to_mask(cpus, nr_cpus: int) -> str:
    """CPU list (``"0-3,8"`` or a list of ints) -> kernel hex mask for ``nr_cpus`` CPUs."""
    try:
        return cpus_to_mask(cpus, int(nr_cpus))
    except (ValueError, TypeError) as exc:
        raise AnsibleFilterError(f"ncclprep_cpulist_to_mask({cpus!r}, {nr_cpus!r}): {exc}") from None


def mask_to_cpulist(mask: str) -> str:
    """Kernel hex mask (``"00,0000ffff"``) -> CPU list string (``"0-15"``)."""
    try:
        return format_cpulist(mask_to_cpus(mask))
    except ValueError as exc:
        raise AnsibleFilterError(f"ncclprep_mask_to_cpulist({mask!r}): {exc}") from None


def cpulist(text: str) -> list[int]:
    """CPU list string -> sorted list of CPU numbers."""
    try:
        return parse_cpulist(text)
    except ValueError as exc:
        raise AnsibleFilterError(f"ncclprep_cpulist: {exc}") from None


def firewall_errors(rules: list, host: str = "?", allow_world: bool = False, connection: str | None = None,
                    facts: dict | None = None, members: dict | None = None, over_ssh: bool = False) -> list[str]:
    """What makes the rule set unsafe (``unsafe_rules``); ``facts`` are the host's ansible_facts,
    ``connection`` its SSH_CONNECTION as the login account sees it, ``members`` the
    data_plane_members map (host -> {address, ...}); members without an address are left out;
    ``over_ssh``: Ansible reaches the host over SSH (an unknown connection is then refused)."""
    addresses = {h: m["address"] for h, m in (members or {}).items() if m.get("address")}
    return unsafe_rules(rules, host, bool(allow_world), (connection or "").strip() or None,
                          ansible_facts_addresses(facts) if facts else None, addresses or None, bool(over_ssh))


def ufw_stale(live: list | None, intended: list, unknown_in: str | None = None) -> list[dict]:
    """ncclprep's own ufw rules (by comment) that ``intended`` no longer holds, to delete:
    ``firewall.ufw_unintended(intended, live, unknown_in)["stale"]`` with ``to`` as
    community.general.ufw takes it (``any`` for every address). ``live``: facts
    ``firewall.ufw_rules`` (None: not read, nothing to delete)."""
    stale = ufw_unintended(intended or [], live or [], unknown_in)["stale"]
    return [dict(r, to="any" if r["to"] in ("0.0.0.0/0", "::/0") else r["to"]) for r in stale]


def ufw_to_add(live: list | None, intended: list) -> list[dict]:
    """The intended rules not yet live as written (``firewall.ufw_to_add``), for the role's
    loop of community.general.ufw. ``live``: facts ``firewall.ufw_rules`` (None: not read: all)."""
    return firewall_ufw_to_add(intended or [], live)


def cidr_errors(value, host: str = "?", var: str = "?") -> list[str]:
    """Errors for a CIDR or comma-separated CIDRs (``10.0.0.0/24,10.1.0.0/24``), naming host, variable, value."""
    errors = []
    parts = [p.strip() for p in str(value or "").split(",") if p.strip()]
    if not parts:
        return [f"{host}: {var}={value!r}: no CIDR given"]
    for part in parts:
        try:
            parse_cidr(part)
        except ValueError as exc:
            errors.append(f"{host}: {var}={value!r}: {exc}")
    return errors


def members(hostvars, hosts: list) -> dict:
    """The cluster membership map that data_plane publishes once, in inventory order.

    ``hostvars``: Ansible's hostvars (or any mapping host -> vars); ``hosts``: the cluster
    group's members. Returns ``{host: {"name": host name (gathered), "fqdn", "address"
    (data-plane address), "interface" (data-plane interface)}}``; values are None where the
    host's facts or data_plane fact are missing (a host that failed or is unreachable).
    """
    out = {}
    for host in hosts:
        hv = hostvars.get(host) or {}
        dp = hv.get("data_plane") or {}
        facts = hv.get("ansible_facts") or {}
        out[host] = {"name": facts.get("hostname"), "fqdn": facts.get("fqdn"),
                     "address": dp.get("address"), "interface": dp.get("interface")}
    return out


def in_cidr(address, cidr) -> bool:
    """True when ``address`` (an IPv4 or IPv6 address as text) lies inside ``cidr``
    (e.g. "10.77.29.0/24"); False for an empty or malformed address or a bad CIDR."""
    try:
        return ipaddress.ip_address(str(address)) in ipaddress.ip_network(str(cidr), strict=False)
    except ValueError:
        return False


def key_source(held: dict, alive: list, members) -> str:
    """The member the cluster key pair is read from (or made on), among the members still in the
    play (review F13: the first member may be dead, and a run_once task delegated to it fails
    every host).

    ``held``: {host: checksum of the public key it holds, or None}; ``alive``: the play's hosts
    that have not failed (``ansible_play_hosts``); ``members``: the cluster members in inventory
    order. The pair most alive members hold wins (ties: the one an earlier member holds), read
    from the first member holding it; no pair anywhere: the first alive member makes one. So a
    pair made while the first member was down stays once it is back. Raises ValueError when no
    member is alive."""
    live = [host for host in members if host in alive]
    if not live:
        raise ValueError(f"no cluster member is left in the play (members: {', '.join(members) or 'none'})")
    counts: dict = {}
    for host in live:
        if held.get(host):
            counts.setdefault(held[host], []).append(host)
    if not counts:
        return live[0]
    holders = max(counts.values(), key=lambda hosts: (len(hosts), -live.index(hosts[0])))
    return holders[0]


# RFC 1123 section 2.1 (with RFC 952): a host name is dot-separated labels of letters, digits
# and '-', each 1-63 long and not starting or ending with '-', at most 253 in all. Anything else
# (a space, '*', ',', '!') would mean something else in known_hosts, ssh_config or /etc/hosts.
_HOSTNAME_RE = re.compile(r"(?=.{1,253}\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                          r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?\Z")


def member_duplicates(members: dict) -> list[str]:
    """Why the membership map names one machine twice, or a name or address that two machines
    claim: a line per data-plane address that two or more members share, and per name (an
    inventory name, a host name or an FQDN a node reports about itself, compared without case)
    that more than one member is known by, and a line per reported name that is not an RFC 1123
    host name. None values are left out; [] when every member is its own machine.

    Ranks on one address would collide on the same rendezvous and Gloo ports; a name two
    machines claim goes into every node's known_hosts, ssh_config and /etc/hosts for both, so
    ssh to it accepts either's key, it resolves to two addresses, and torch's rendezvous takes
    both machines for its host (review F10: node2 reporting node1's host name or FQDN passed).

    A short name (a name's first label, without case) that names two members is refused too:
    Slurm knows a node by one name, and the job preflight and the re-test find its member by that
    name or its short form (node/preflight.py job_members), so node1.a and node1.b would let a Slurm
    node ``node1`` be measured, struck or resumed as the other (review N21).
    """
    out = []
    seen: dict = {}
    for host, m in (members or {}).items():
        value = (m or {}).get("address")
        if value:
            seen.setdefault(value, []).append(host)
    for value, hosts in seen.items():
        if len(hosts) > 1:
            out.append(f"{', '.join(hosts)} share the data-plane address {value}: one machine listed twice in the "
                       "inventory, or two machines with one address (fix the interface's address)")
    claims: dict = {}  # lower-case name -> {member: how it claims it}
    for host, m in (members or {}).items():
        for key, what in (("inventory", "inventory name"), ("name", "host name"), ("fqdn", "FQDN")):
            value = host if key == "inventory" else (m or {}).get(key)
            if not value:
                continue
            if key != "inventory" and not _HOSTNAME_RE.match(str(value)):
                out.append(f"{host} reports the {what} {value!r}, which is not a host name (RFC 1123: letters, "
                           "digits and '-' in dot-separated labels); fix it on the node (hostnamectl)")
                continue
            claims.setdefault(str(value).lower(), {}).setdefault(host, what)
    reported = set()
    shorts: dict = {}  # first label -> {member: the name of it that has this first label}
    for value, hosts in claims.items():
        shorts_of = shorts.setdefault(value.split(".")[0], {})
        for h in hosts:
            shorts_of.setdefault(h, value)
        if len(hosts) > 1:
            reported.add(frozenset(hosts))
            how = ", ".join(f"{h} ({w})" for h, w in hosts.items())
            out.append(f"{how} share the name {value}: one machine listed twice in the inventory, or two machines "
                       "with one name (rename one: hostnamectl set-hostname)")
    for short, hosts in shorts.items():
        if len(hosts) > 1 and frozenset(hosts) not in reported:  # one line per clash: the full name's, if any
            how = ", ".join(f"{h} ({n})" for h, n in hosts.items())
            out.append(f"{how} share the short name {short}: a Slurm node {short} would be taken for either by the "
                       "job preflight and the re-test, so the wrong node could be measured, struck or resumed "
                       "(give each member a first label of its own: inventory name, hostnamectl set-hostname)")
    return out


def irqs_to_pin(irq: dict | None, current: dict | None) -> list:
    """concerns.numa_pinning.irqs_off: the intended IRQs whose live affinity (``current``) is off their CPUs."""
    return irqs_off(irq, current or {})


def preflight_problems(run_settings, host, mtu=None) -> list:
    """node/settings.py problems: every invalid preflight setting of ``run_settings`` (lookup
    ncclprep_preflight_settings' sections) as "<host>: <variable>=<value>: valid: <what>"; ``mtu``
    (bytes, or None when nic_mtu is off) counts the path-MTU search in the network probe's least
    deadline."""
    if not isinstance(run_settings, dict):
        raise AnsibleFilterError(f"ncclprep_preflight_problems: {run_settings!r} is not the settings' sections")
    return preflight_settings.problems(run_settings, str(host), None if mtu is None else int(mtu))


def blame_deadline(hosts, round_timeout, probe_timeout, join_timeout) -> int:
    """collective_blame.deadline_s for the nodes ``hosts`` (a list), rounded up to whole seconds:
    the most the collective blame can add to the collectives' job (nccl_probe gathers the
    results for at most the collectives' deadline and their join, ``probe_timeout + join_timeout``)."""
    if isinstance(hosts, (str, bytes)) or not hasattr(hosts, "__len__"):
        raise AnsibleFilterError(f"ncclprep_blame_deadline: hosts={hosts!r} is not a list of hosts")
    return math.ceil(blame_deadline_s(len(hosts), float(round_timeout), float(probe_timeout) + float(join_timeout)))


def managed(entries: list | None, kind: str | None = None, concern: str | None = None) -> list[dict]:
    """drift.managed_entries: a ``<role>_managed_files`` list's entries that apply on this host.

    ``kind`` given (file, copy, block, lines): the entries of that kind the role writes with its
    own task, for its loop; none: every entry, for validate.yml's drift check (``concern`` stamps
    the rows). A bad entry becomes an AnsibleFilterError naming it and what would be valid.
    """
    try:
        return managed_entries(entries, kind, concern)
    except ValueError as exc:
        raise AnsibleFilterError(f"{concern or 'managed_files'}: {exc}") from None


class FilterModule:
    """ncclprep filters."""

    def filters(self) -> dict:
        return {
            "ncclprep_data_plane": data_plane,
            "ncclprep_members": members,
            "ncclprep_member_duplicates": member_duplicates,
            "ncclprep_key_source": key_source,
            "ncclprep_in_cidr": in_cidr,
            "ncclprep_irqs_to_pin": irqs_to_pin,
            "ncclprep_sysctl_value": sysctl_value,
            "ncclprep_sysctl_errors": sysctl_errors,
            "ncclprep_sysctl_to_set": sysctl_to_set,
            "ncclprep_nccl_env_check": nccl_env_check,
            "ncclprep_nccl_env_resolve": nccl_env_resolve,
            "ncclprep_cpulist_to_mask": cpulist_to_mask,
            "ncclprep_mask_to_cpulist": mask_to_cpulist,
            "ncclprep_cpulist": cpulist,
            "ncclprep_firewall_errors": firewall_errors,
            "ncclprep_ufw_stale": ufw_stale,
            "ncclprep_ufw_to_add": ufw_to_add,
            "ncclprep_cidr_errors": cidr_errors,
            "ncclprep_managed": managed,
            "ncclprep_preflight_problems": preflight_problems,
            "ncclprep_blame_deadline": blame_deadline,
            "ncclprep_hosts_others": hosts_others,
        }
