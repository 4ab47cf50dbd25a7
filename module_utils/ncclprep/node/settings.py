"""The preflight's settings, defined once: every preflight_* variable that the engine
(``ncclprep node preflight``, which validate.yml, srun or any launcher starts) runs with, its place
in the engine's settings (a section and a key of the intent's job key and of ``--settings``), its
type, default, range and meaning.

Everything else is derived from this table or held to it:

- roles/preflight/meta/argument_specs.yml and defaults/main.yml: their block of these settings is
  written from it by scripts/role_docs.py (tests/unit/test_role_docs.py runs ``--check``), and the
  role's README table from the argument spec;
- the values of a run: lookup ``ncclprep_preflight_settings`` (``values``) builds the engine's
  sections from the host's variables (roles/preflight/vars/main.yml ``__preflight_run_settings``);
- the ranges: ``problems``, run by the role's first task (validate.yml), by site.yml's checking play
  before it records the settings in a node's intent, and by the engine on the intent's settings with
  ``--settings`` over them.

Each problem names the host, the variable (and the engine's key) and its value, and says what is
valid. Standard library only: this module runs on the nodes (the node-side core).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ansible.module_utils.ncclprep.probes.collectives import SUPPORTED
from ansible.module_utils.ncclprep.probes.net import ROUND_CLOSE_SLACK_S, min_deadline

#: The engine's sections in the order the role's files list them.
SECTIONS = ("net", "probe", "smoke", "ssh", "drift", "report", "node")

#: The kinds a setting may have, as the argument spec says them (type, elements).
KINDS = {"bool": ("bool", None), "int": ("int", None), "float": ("float", None), "str": ("str", None),
         "path": ("path", None), "list[int]": ("list", "int"), "list[str]": ("list", "str")}


@dataclass(frozen=True)
class Rule:
    """What a value must be beyond its kind: ``ok(value)`` for a value of the right kind (never
    None), and ``text``, what is valid, as a refusal says it ("an integer >= 1")."""

    ok: Callable[[object], bool]
    text: str


def at_least(low: float, what: str = "an integer") -> Rule:
    return Rule(lambda v: v >= low, f"{what} >= {low}")


def above(low: float, what: str = "a number") -> Rule:
    return Rule(lambda v: v > low, f"{what} > {low}")


PORT = Rule(lambda v: 1 <= v <= 65535, "a TCP port, 1..65535")
PORTS = Rule(lambda v: all(1 <= p <= 65535 for p in v), "a list of TCP ports, each 1..65535")
FRACTION = Rule(lambda v: 0 < v <= 1, "a fraction in (0, 1]")
SECONDS = above(0, "seconds")


@dataclass(frozen=True)
class Setting:
    """One preflight_* variable: ``var``; ``section`` and ``key``, its place in the engine's
    settings; ``kind`` (a KINDS key); ``default`` (None: null); ``meaning`` (one paragraph, the
    argument spec's description and the defaults file's comment); ``rule`` (None: any value of its
    kind); ``nullable`` (null is a valid value, with the meaning's "null: ..."); ``default_expr``: the
    role default's own Jinja2 expression where another role's variable sets it (its value without
    that role is ``default``)."""

    var: str
    section: str
    key: str
    kind: str
    default: object
    meaning: str
    rule: Rule | None = None
    nullable: bool = False
    default_expr: str | None = None

    def valid(self) -> str:
        """What is valid, in words: "null or an integer >= 1"."""
        base = self.rule.text if self.rule else {"bool": "true or false", "int": "an integer", "float": "a number",
                                                 "str": "a string", "path": "a path", "list[int]": "a list of integers",
                                                 "list[str]": "a list of strings"}[self.kind]
        return f"null or {base}" if self.nullable else base

    def description(self) -> str:
        """The argument spec's description: the meaning, then what is valid (not for a boolean)."""
        return self.meaning if self.kind == "bool" else f"{self.meaning} Valid: {self.valid()}."


def _s(var: str, section: str, key: str, kind: str, default: object, meaning: str, rule: Rule | None = None,
       nullable: bool = False, default_expr: str | None = None) -> Setting:
    return Setting(var, section, key, kind, default, " ".join(meaning.split()), rule, nullable, default_expr)


SETTINGS: tuple[Setting, ...] = (
    # how the node is read (node_facts' validate-time options)
    _s("preflight_name_timeout", "node", "timeout", "float", 5, "Seconds per name look-up or TCP connect.", SECONDS),
    _s("preflight_connect_port", "node", "connect_port", "int", 22, "Port that proves a resolved address answers.",
       PORT),
    _s("preflight_dataset_path", "node", "dataset_path", "path", None,
       """Training data (a folder or a file) every node must read (check dataset.path), read under a deadline of
       max(preflight_name_timeout, 10) seconds; a hung mount is reported as HANG. null: not checked.""",
       nullable=True),
    # ssh.trust's logins
    _s("preflight_ssh_enabled", "ssh", "enabled", "bool", True,
       "Log in from every node to its peers over SSH with the cluster key (check ssh.trust); false: SKIP."),
    _s("preflight_ssh_timeout", "ssh", "timeout", "float", 15,
       "Seconds per node-to-node SSH login (check ssh.trust).", SECONDS),
    _s("preflight_ssh_peers", "ssh", "peers", "int", 32,
       """At most this many peers each node logs in to (check ssh.trust): every peer on smaller clusters; beyond
       it, the ring neighbours plus a sample drawn anew every run. null: every peer.""", at_least(1), nullable=True),
    _s("preflight_ssh_parallel", "ssh", "parallel", "int", 4,
       """Peers each node logs in to at once; logins go in rounds (each node the target of about one per round), so
       a node's sshd sees about this many at once, below its MaxStartups (10).""", at_least(1)),
    # drift.files
    _s("preflight_drift_enabled", "drift", "enabled", "bool", True,
       """Compare every file a concern's role writes (whole files, copies, the hosts block, known_hosts lines) with
       what site.yml wrote, as it recorded them (check drift.files)."""),
    # the network probe
    _s("preflight_net_enabled", "net", "enabled", "bool", True,
       """Measure the network between the nodes over the data-plane addresses (the network probe, probes/net.py):
       in rounds of disjoint pairs, both directions, TCP latency, one TCP stream's bandwidth, path MTU with
       don't-fragment, port reachability."""),
    _s("preflight_net_store_port", "net", "store_port", "int", 29520,
       "TCP port of the network probe's store on the first node.", PORT),
    _s("preflight_net_listen_port", "net", "listen_port", "int", 29521,
       "TCP and UDP port of every node's probe listener (not preflight_net_store_port).", PORT),
    _s("preflight_net_ports", "net", "ports", "list[int]", [29400, 29500, 29510],
       """Ports every peer must reach (verdict open, filtered, refused, no route or hang): the rendezvous ports
       (firewall_rendezvous_ports); a sample of each node's ephemeral range is added. Only these ports are
       listened on: a live job may own others.""", PORTS,
       default_expr="{{ firewall_rendezvous_ports | default([29400, 29500, 29510]) }}"),
    _s("preflight_net_ephemeral_sample", "net", "ephemeral_sample", "int", 4,
       "Ports of each node's ephemeral range (net.ipv4.ip_local_port_range, where NCCL and Gloo listen) probed.",
       at_least(0)),
    _s("preflight_net_latency_samples", "net", "latency_samples", "int", 100,
       "TCP round trips timed per direction.", at_least(1)),
    _s("preflight_net_bandwidth_seconds", "net", "bandwidth_seconds", "float", 0.25,
       "Seconds of the bandwidth stream per direction.", SECONDS),
    _s("preflight_net_matchings", "net", "matchings", "int", 2,
       "Random matchings after the ring neighbours.", at_least(0)),
    _s("preflight_net_every_pair", "net", "every_pair", "bool", False, "Measure every pair (n-1 rounds) instead."),
    _s("preflight_net_repair", "net", "repair", "int", 2,
       "Good partners each suspect is re-paired with in a second pass; 0: no second pass.", at_least(0)),
    _s("preflight_net_max_latency_us", "net", "max_latency_us", "float", 50,
       """net.latency: TCP round-trip p50 limit in microseconds (50: the field's figure for multi-node training
       over a switched fabric). null: no limit.""", above(0, "microseconds"), nullable=True),
    _s("preflight_net_slow_z", "net", "slow_z", "float", -3.5,
       """net.bandwidth: a direction is slow below this modified z-score (median and MAD; -3.5 is Iglewicz and
       Hoaglin's cut) and preflight_net_slow_ratio of the median.""", Rule(lambda v: v < 0, "a number < 0")),
    _s("preflight_net_slow_ratio", "net", "slow_ratio", "float", 0.5,
       "A slow bandwidth is also below this fraction of the median.", FRACTION),
    _s("preflight_net_min_gbps", "net", "min_gbps", "float", None,
       "Bandwidth floor of every direction in GB/s (GB = 1e9 bytes). null: none.", above(0, "GB/s"), nullable=True),
    _s("preflight_net_link_floor_ratio", "report", "link_floor_ratio", "float", 0.1,
       """A direction is also slow below this fraction of the slower end's link speed (ethtool's, Gb/s / 8 = GB/s):
       one TCP stream rarely fills a fast link, hence 0.1. null: no floor from the link speed.""",
       Rule(lambda v: 0 < v <= 1, "a fraction of the link speed in (0, 1]"), nullable=True),
    _s("preflight_net_connect_timeout", "net", "connect_timeout", "float", 1,
       "Seconds a port connect may take before it is filtered.", SECONDS),
    _s("preflight_net_step_timeout", "net", "step_timeout", "float", 2,
       "Seconds each echo or reply may take before it is a hang.", SECONDS),
    _s("preflight_net_join_timeout", "net", "join_timeout", "int", 30,
       "Seconds to wait for every node to arrive (below preflight_net_timeout).", at_least(1)),
    _s("preflight_net_timeout", "net", "timeout", "int", 120,
       """Hard deadline of the network probe in seconds: at least preflight_net_join_timeout plus one round's
       deadline plus 10 s (89 s at the defaults and MTU 9000), refused below: under it a node lost mid-run gets
       every node's probe killed instead of named.""", at_least(1)),
    # the collectives and their blame
    _s("preflight_probe_enabled", "probe", "enabled", "bool", True, "Run the collective probe."),
    _s("preflight_probe_port", "probe", "port", "int", 29510,
       "TCP store port on rank 0 (the blame's rounds use the ports after it: + 1, + 2, ...).", PORT),
    _s("preflight_probe_ops", "probe", "ops", "list[str]", list(SUPPORTED["nccl"]), "Collectives to run.",
       Rule(lambda v: bool(v) and set(v) <= set(SUPPORTED["nccl"]),
            f"a list of collectives, each one of {', '.join(sorted(SUPPORTED['nccl']))}")),
    _s("preflight_probe_sizes", "probe", "sizes", "list[int]", [4096, 65536, 1048576, 16777216],
       "Buffer sizes in bytes.", Rule(lambda v: bool(v) and all(s > 0 for s in v), "a list of byte counts, each > 0")),
    _s("preflight_probe_warmup", "probe", "warmup", "int", 2, "Untimed runs per size.", at_least(0)),
    _s("preflight_probe_iters", "probe", "iters", "int", 5, "Timed runs per size.", at_least(1)),
    _s("preflight_probe_timeout", "probe", "timeout", "int", 120, "Hard deadline of the probe in seconds.",
       at_least(1)),
    _s("preflight_probe_join_timeout", "probe", "join_timeout", "int", 30,
       "Seconds to wait for every rank (below preflight_probe_timeout).", at_least(1)),
    _s("preflight_probe_local_ranks", "probe", "local_ranks", "int", None,
       """Ranks the collectives run on each node. null: one per GPU on GPU hosts (each on its own GPU and bound to
       its NUMA node's CPUs from the numa_pinning map, as the launcher binds) and one on CPU hosts.""",
       at_least(1), nullable=True),
    _s("preflight_probe_blame", "probe", "blame", "bool", True,
       """After collectives that failed, hung with every rank present or fell below preflight_min_busbw_gbps, run
       the op that went wrong at the largest size again in ring-neighbour pairs (a node bad in both of its
       pairings is named, a pair bad alone is the link), then in halves when every pair passes, down to groups of
       2-3 nodes (check collective.blame)."""),
    _s("preflight_probe_blame_timeout", "probe", "blame_timeout", "int", 60,
       "Deadline in seconds of each round of the blame.",
       Rule(lambda v: v >= 10, "an integer >= 10 (seconds of one blame round, half of them for the ranks to "
                               "arrive)")),
    _s("preflight_probe_expect_net", "report", "expect_net", "str", None,
       """collective.transport: the network NCCL must use, ib or socket (FAIL where NCCL fell back to another,
       read from its NCCL_DEBUG=INFO log); a SKIP under gloo. null: any.""",
       Rule(lambda v: v in ("ib", "socket"), "one of ib, socket"), nullable=True),
    _s("preflight_min_busbw_gbps", "report", "min_busbw_gbps", "float", None,
       "busbw floor in GB/s (GB = 1e9 bytes) at the largest size. null: none.", above(0, "GB/s"), nullable=True),
    # the torchrun smoke job
    _s("preflight_smoke_enabled", "smoke", "enabled", "bool", True,
       "Run the torchrun DDP smoke job through nccl_env's launcher."),
    _s("preflight_smoke_steps", "smoke", "steps", "int", 5, "Optimizer steps of the smoke job.", at_least(1)),
    _s("preflight_smoke_accumulation", "smoke", "accumulation", "int", 2, "Micro-batches per step.", at_least(1)),
    _s("preflight_smoke_timeout", "smoke", "timeout", "int", 120, "Hard deadline of the smoke job in seconds.",
       at_least(1)),
)

BY_VAR: dict[str, Setting] = {s.var: s for s in SETTINGS}
#: section -> key -> its variable: what ``--settings`` may change.
SETTABLE: dict[str, dict[str, str]] = {sec: {s.key: s.var for s in SETTINGS if s.section == sec} for sec in SECTIONS}


def show(value: object) -> str:
    """A value as a YAML user wrote it: a string bare, null, true and false, numbers and lists as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def coerce(setting: Setting, value: object) -> object:
    """``value`` as ``setting``'s kind where it converts without loss (a string "5" from ``-e`` to
    5, "true" to True, 3 to 3.0); None stays None. A value that does not convert is returned as it
    is, for ``problems`` to name."""
    if value is None:
        return None
    kind = setting.kind
    if kind.startswith("list["):
        if not isinstance(value, list):
            return value
        elem = Setting(setting.var, setting.section, setting.key, kind[5:-1], None, "")
        return [coerce(elem, v) for v in value]
    try:
        if kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            return {"true": True, "yes": True, "on": True, "1": True,
                    "false": False, "no": False, "off": False, "0": False}.get(text, value)
        if isinstance(value, bool):
            return value
        if kind == "int":
            number = float(value) if isinstance(value, str) else value
            return int(number) if isinstance(number, (int, float)) and float(number).is_integer() else value
        if kind == "float":
            number = float(value)
            return number if math.isfinite(number) else value
    except (TypeError, ValueError):
        return value
    return value


def _of_kind(kind: str, value: object) -> bool:
    if kind.startswith("list["):
        return isinstance(value, list) and all(_of_kind(kind[5:-1], v) for v in value)
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, int)
    if kind == "float":
        return isinstance(value, (int, float)) and math.isfinite(value)
    return isinstance(value, str)


def values(get: Callable[[str], object]) -> dict[str, dict[str, object]]:
    """The engine's sections ({section: {key: value}}, every SETTINGS key) from ``get(var)``, the
    host's value of each variable (KeyError: not set, the table's default), coerced to its kind."""
    out: dict[str, dict[str, object]] = {sec: {} for sec in SECTIONS}
    for s in SETTINGS:
        try:
            value = get(s.var)
        except KeyError:
            value = s.default
        out[s.section][s.key] = coerce(s, value)
    return out


def _named(s: Setting, value: object) -> str:
    return f"{s.var}={show(value)}"


def problems(sections: Mapping[str, Mapping[str, object] | None], host: str, mtu: int | None = None) -> list[str]:
    """Every invalid setting of ``sections`` ({section: {key: value}}; a section that is None or
    absent, e.g. ssh with the ssh_trust concern off, is not checked; a key that is absent neither),
    each as "<host>: <variable>=<value>: valid: <what>" in SETTINGS order, then the rules between
    settings (a join deadline below its whole deadline, the network probe's least deadline
    ``probes/net.py min_deadline`` at ``mtu`` bytes, the path-MTU search counted when not None,
    two different probe ports). [] when every setting is valid."""
    out = []
    good: dict[str, object] = {}
    for s in SETTINGS:
        section = sections.get(s.section)
        if section is None or s.key not in section:
            continue
        value = section[s.key]
        if value is None and s.nullable:
            good[s.var] = value
        elif value is None or not _of_kind(s.kind, value) or (s.rule is not None and not s.rule.ok(value)):
            out.append(f"{host}: {_named(s, value)}: valid: {s.valid()}")
        else:
            good[s.var] = value

    def pair(var: str, other: str, why: str) -> None:
        if var in good and other in good and good[var] >= good[other]:
            out.append(f"{host}: {_named(BY_VAR[var], good[var])}: valid: below {other} ({show(good[other])}){why}")

    pair("preflight_net_join_timeout", "preflight_net_timeout", "")
    pair("preflight_probe_join_timeout", "preflight_probe_timeout", "")
    net = [f"preflight_net_{k}" for k in ("join_timeout", "connect_timeout", "step_timeout", "bandwidth_seconds",
                                          "timeout")]
    if all(v in good for v in net) and good["preflight_net_join_timeout"] < good["preflight_net_timeout"]:
        join, connect, step, seconds, timeout = (good[v] for v in net)
        least = math.ceil(min_deadline(join, connect, step, seconds, mtu))
        if timeout < least:
            out.append(f"{host}: {_named(BY_VAR['preflight_net_timeout'], timeout)}: valid: at least {least} s, "
                       f"preflight_net_join_timeout ({show(join)} s) plus one round's deadline and "
                       f"{ROUND_CLOSE_SLACK_S} s; below it a node lost mid-run gets every node's probe killed "
                       "instead of named")
    ports = ("preflight_net_store_port", "preflight_net_listen_port")
    if all(v in good for v in ports) and good[ports[0]] == good[ports[1]]:
        out.append(f"{host}: {_named(BY_VAR[ports[1]], good[ports[1]])}: valid: a port other than "
                   f"preflight_net_store_port ({show(good[ports[0]])})")
    return out
