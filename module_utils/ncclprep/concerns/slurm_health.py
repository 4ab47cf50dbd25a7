"""The slurm_health concern: ncclprep's health check, Prolog and Epilog wired into an existing Slurm.

Off by default (``slurm_health_enabled: false``); on, the role installs three wrappers,
``ncclprep-health`` (Slurm's HealthCheckProgram: ``ncclprep node health``, nodehealth.py),
``ncclprep-prolog`` (its Prolog: ``ncclprep node prolog``) and ``ncclprep-epilog`` (its Epilog:
``ncclprep node epilog``, root's network re-test, retest.py), the folder of the jobs' claims, and
sets in slurm.conf the lines that run them (``SETTINGS``), then has Slurm read its configuration
again (``scontrol reconfigure``). slurm.conf must say the same on every node: the role sets the
same lines on each.

Reading (``read``): slurm.conf's settings (``parse_slurm_conf``). Intent: ``intent``. Check:
``slurm.health``. Slurm's rules for these settings: ../shared/reviews/slurm.md (HealthCheckProgram
killed after 60 s; a Prolog expected within MessageTimeout, 10 s; a non-zero Prolog or Epilog
drains the node).
"""

from __future__ import annotations

import os

from ansible.module_utils.ncclprep.model import Check, Context, HostRecord, facts_of, intent_of, verdict
from ansible.module_utils.ncclprep.node.hostinfo import Runner

#: The slurm.conf settings this concern owns, in the order it writes them (slurm.conf(5)).
SETTINGS = ("HealthCheckProgram", "HealthCheckInterval", "HealthCheckNodeState", "Prolog", "Epilog")
#: HealthCheckNodeState values slurm.conf(5) accepts (a comma-separated list of them).
NODE_STATES = ("ALLOC", "ANY", "CYCLE", "IDLE", "NONDRAINED_IDLE", "MIXED")


def parse_slurm_conf(text: str) -> dict[str, str]:
    """slurm.conf's ``Key=Value`` settings (slurm.conf(5): one per line or several separated by
    blanks, ``#`` starts a comment, keys case-insensitive): key as first written -> its last value.
    Node and partition lines (``NodeName=``, ``PartitionName=``, ...) are left out. Raises nothing."""
    out: dict[str, str] = {}
    seen: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or "=" not in line:
            continue
        first = line.split("=", 1)[0].strip().lower()
        if first in ("nodename", "partitionname", "nodeset", "frontendname", "downnodes"):
            continue
        for part in line.split():
            key, sep, value = part.partition("=")
            if sep:
                name = seen.setdefault(key.lower(), key)
                out[name] = value
    return out


def read_conf(path: str) -> dict:
    """``{config, exists, settings: {key: value}}``: ``parse_slurm_conf`` of ``path``; ``exists``
    False (settings {}) where it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return {"config": path, "exists": True, "settings": parse_slurm_conf(fh.read())}
    except OSError:
        return {"config": path, "exists": False, "settings": {}}


def setting(settings: dict, key: str) -> str | None:
    """``key``'s value in ``settings`` (parse_slurm_conf's), matched without case; None if unset."""
    return next((v for k, v in settings.items() if k.lower() == key.lower()), None)


def check(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """slurm.health: slurm.conf runs ncclprep's health check, Prolog and Epilog as intended on every
    host.

    intent ``slurm_health``: {config, lines: {setting: value}}, None when the concern is off. facts
    ``slurm_health``: ``read_conf``'s. FAIL measures host -> {setting: what slurm.conf says (None:
    unset)} for the settings that differ, or "no <config>"; no check where no host has both.
    """
    problems, checked, expected = {}, 0, None
    for host, rec in sorted(records.items()):
        want = intent_of(rec, "slurm_health")
        live = facts_of(rec).get("slurm_health")
        if not want or live is None:
            continue
        checked += 1
        expected = want["lines"]
        if not live.get("exists"):
            problems[host] = f"no {want['config']}"
            continue
        wrong = {k: setting(live["settings"], k) for k, v in want["lines"].items()
                 if str(setting(live["settings"], k)) != str(v)}
        if wrong:
            problems[host] = wrong
    if not checked:
        return []
    hosts = ", ".join(problems)
    return [verdict("slurm.health", problems, expected=expected,
                    message=f"slurm.conf does not run ncclprep's health check, Prolog and Epilog as intended on "
                            f"{hosts}",
                    remediation="re-run site.yml (role slurm_health), then scontrol reconfigure",
                    passed="slurm.conf runs ncclprep's health check, Prolog and Epilog on every host",
                    passed_measured=f"{checked} hosts")]


# This concern's entry in the registry (concerns/__init__.py).
SWITCH = "slurm_health_enabled"
DATA_PLANE = False
FACTS = True
IDS = ("slurm.health",)
OPTIONS = dict(config=dict(type="path", default="/etc/slurm/slurm.conf"))


def read(run: Runner, p: dict) -> dict:
    """``read_conf`` of the options' ``config``."""
    return read_conf(p["config"])


#: The variables the intent is computed from (concerns.intent hands over these only).
INTENT_VARS = ("slurm_health_config", "slurm_health_program", "slurm_health_interval", "slurm_health_node_state",
               "slurm_health_prolog", "slurm_health_prolog_enabled", "slurm_health_epilog",
               "slurm_health_epilog_enabled", "slurm_health_retest_interval", "slurm_health_max_drained",
               "slurm_health_strike_window")
#: The facts it takes from the node: none (slurm.conf's lines are what it sets).
INTENT_FACTS = ()


def intent(v: dict, node: dict) -> dict:
    """``{config, program, prolog, epilog (None: not set), retest_interval, max_drained, strike_window,
    lines: {setting: value}}``:
    the slurm.conf lines that run ``slurm_health_program`` every ``slurm_health_interval`` seconds
    on nodes in ``slurm_health_node_state``, ``slurm_health_prolog`` as the Prolog and
    ``slurm_health_epilog`` as the Epilog unless their ``_enabled`` is false. Raises ValueError
    naming the variable and value for an interval below 1 or above Slurm's 65535, a re-test
    interval outside 0-86400 s, a breaker cap below 1, a strike window outside 60 s to 30 days,
    a node state slurm.conf(5) does not know, or a relative path."""
    for name in ("slurm_health_config", "slurm_health_program", "slurm_health_prolog", "slurm_health_epilog"):
        if not os.path.isabs(str(v[name] or "")):
            raise ValueError(f"{name}={v[name]}: valid: an absolute path")
    try:
        interval = int(v["slurm_health_interval"])
    except (TypeError, ValueError):
        interval = -1
    if not 1 <= interval <= 65535:
        raise ValueError(f"slurm_health_interval={v['slurm_health_interval']}: valid: seconds, 1 to 65535")
    states = str(v["slurm_health_node_state"] or "").split(",")
    bad = [s for s in states if s.upper() not in NODE_STATES]
    if bad:
        raise ValueError(f"slurm_health_node_state={v['slurm_health_node_state']}: valid: a comma-separated list of "
                         f"{', '.join(NODE_STATES)}")
    lines = {"HealthCheckProgram": v["slurm_health_program"], "HealthCheckInterval": interval,
             "HealthCheckNodeState": ",".join(s.upper() for s in states)}
    try:
        retest = int(v["slurm_health_retest_interval"])
    except (TypeError, ValueError):
        retest = -1
    if not 0 <= retest <= 86400:
        raise ValueError(f"slurm_health_retest_interval={v['slurm_health_retest_interval']}: valid: seconds, 0 to "
                         "86400")
    rules = {}
    for name, key, low, high, unit in (("slurm_health_max_drained", "max_drained", 1, 100000, "nodes"),
                                       ("slurm_health_strike_window", "strike_window", 60, 2592000, "seconds")):
        try:
            rules[key] = int(v.get(name, 8 if key == "max_drained" else 86400))
        except (TypeError, ValueError):
            rules[key] = low - 1
        if not low <= rules[key] <= high:
            raise ValueError(f"{name}={v.get(name)}: valid: {unit}, {low} to {high}")
    prolog = v["slurm_health_prolog"] if v["slurm_health_prolog_enabled"] else None
    if prolog:
        lines["Prolog"] = prolog
    epilog = v["slurm_health_epilog"] if v["slurm_health_epilog_enabled"] else None
    if epilog:
        lines["Epilog"] = epilog
    return {"config": v["slurm_health_config"], "program": v["slurm_health_program"], "prolog": prolog,
            "epilog": epilog, "retest_interval": retest, **rules, "lines": lines}
