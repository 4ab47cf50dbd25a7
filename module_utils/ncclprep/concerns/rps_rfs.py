"""The rps_rfs concern: RPS CPUs and RFS flow counts on every rx queue of the data-plane NIC.

Reading (``read``): the rx queues and the CPUs. Intent: ``intent``. Check:
``rps_rfs.queues``.
"""

from __future__ import annotations

import os

from ansible.module_utils.ncclprep.cpumask import cpus_to_mask, format_cpulist, mask_to_cpus, parse_cpulist
from ansible.module_utils.ncclprep.model import Check, Context, HostRecord, facts_of, intent_of, verdict
from ansible.module_utils.ncclprep.node.hostinfo import Runner
from ansible.module_utils.ncclprep.sysfs import read_text


def read_queues(interface: str | None, sysfs: str = "/sys") -> dict:
    """``{interface, exists, queues: {rx-N: {rps_cpus (CPU list), rps_flow_cnt}}, local_cpus,
    online_cpus, possible_cpus}`` (CPU lists as text, e.g. "0-15"; None when unreadable).
    exists is False when the interface has no queues folder.
    """
    base = os.path.join(sysfs, "class/net", interface or "-", "queues")
    queues = {}
    try:
        names = sorted(n for n in os.listdir(base) if n.startswith("rx-"))
        exists = True
    except OSError:
        names, exists = [], False
    for name in names:
        mask = read_text(os.path.join(base, name, "rps_cpus"))
        cnt = read_text(os.path.join(base, name, "rps_flow_cnt"))
        try:
            cpus = format_cpulist(mask_to_cpus(mask)) if mask is not None else None
        except ValueError:
            cpus = None
        queues[name] = {"rps_cpus": cpus, "rps_flow_cnt": int(cnt) if cnt and cnt.isdigit() else None}
    return {"interface": interface, "exists": bool(interface) and exists, "queues": queues,
            "local_cpus": read_text(os.path.join(sysfs, "class/net", interface or "-", "device/local_cpulist")) or None,
            "online_cpus": read_text(os.path.join(sysfs, "devices/system/cpu/online")),
            "possible_cpus": read_text(os.path.join(sysfs, "devices/system/cpu/possible"))}


def check(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """Every rx queue of the NIC has the intended RPS CPUs and RFS flow count.

    intent ``rps_rfs``: {interface, queues, cpus (CPU list, e.g. "0-15"), mask, flow_cnt
    (flows per queue)}, None when the role is off. facts ``rps_rfs``: {interface, exists,
    queues: {rx-N: {rps_cpus (CPU list), rps_flow_cnt}}} (``read_queues``). FAIL
    measures host -> the queues that differ (or "no rx queues"); no check when no host has
    both an intent and those facts.
    """
    problems, checked = {}, 0
    for host, rec in sorted(records.items()):
        want = intent_of(rec, "rps_rfs")
        live = facts_of(rec).get("rps_rfs")
        if not want or live is None:
            continue
        checked += 1
        queues = live.get("queues") or {}
        wrong = {q: v for q, v in sorted(queues.items())
                 if v.get("rps_cpus") != want["cpus"] or v.get("rps_flow_cnt") != int(want["flow_cnt"])}
        if wrong or not queues:
            problems[host] = wrong or "no rx queues"
    if not checked:
        return []
    want_any = next(intent_of(r, "rps_rfs") for r in records.values() if intent_of(r, "rps_rfs"))
    expected = {"rps_cpus": want_any["cpus"], "rps_flow_cnt": int(want_any["flow_cnt"])}
    hosts = ", ".join(problems)
    return [verdict("rps_rfs.queues", problems, expected=expected,
                    message=f"RPS/RFS differs from intent on {hosts}",
                    remediation=f"re-run site.yml (role rps_rfs) or run /usr/local/sbin/ncclprep-rps-rfs on {hosts}",
                    passed="RPS CPUs and RFS flow counts as intended on every rx queue",
                    passed_measured=f"{checked} hosts")]


# This concern's entry in the registry (concerns/__init__.py).
SWITCH = "rps_rfs_enabled"
DATA_PLANE = True
FACTS = True
IDS = ("rps_rfs.queues",)
OPTIONS = dict(interface=dict(type="str"))


def read(run: Runner, p: dict) -> dict:
    """``read_queues`` with the options of OPTIONS (checked, defaults filled)."""
    return read_queues(p["interface"])


#: The variables the intent is computed from (concerns.intent hands over these only):
#: sysctl_tuning's intent gives the size of the RFS flow table.
INTENT_VARS = ("rps_rfs_cpus", "rps_rfs_flow_cnt", "sysctl_tuning_intent")
#: The facts it takes from the node: the interface, the names of its rx queues (not their
#: settings, which are what it sets) and the CPUs.
INTENT_FACTS = ("interface", "queues:keys", "local_cpus", "online_cpus", "possible_cpus")
#: The kernel's RFS flow table size when sysctl_tuning sets none (net.core.rps_sock_flow_entries).
DEFAULT_FLOW_ENTRIES = 32768
#: rps_rfs_cpus for RPS and RFS off on every rx queue (mask 0, no flows: the kernel's scaling.rst,
#: "RPS is disabled" with an empty mask; RFS needs rps_flow_cnt > 0). `ncclprep tune` measures it
#: against RPS on: rps_rfs_enabled false would leave the masks as they are, not undo them.
RPS_OFF = "none"


def intent(v: dict, node: dict) -> dict:
    """``{interface, queues: [rx-0 ...], cpus (CPU list), mask (kernel hex mask), flow_cnt}``: the
    CPUs of ``rps_rfs_cpus``, else the NIC's local CPUs, else every online CPU, as a mask as wide as
    the possible CPUs; ``rps_rfs_flow_cnt`` flows per queue, else the flow table
    (net.core.rps_sock_flow_entries of sysctl_tuning's intent, 32768 without) split over the rx
    queues (the kernel's scaling.rst: rps_flow_cnt = rps_sock_flow_entries / N). ``rps_rfs_cpus``
    RPS_OFF (``none``): no CPUs and, unless rps_rfs_flow_cnt says otherwise, no flows: RPS and RFS off.
    Raises ValueError for a CPU list that does not parse."""
    nr_cpus = max(parse_cpulist(node["possible_cpus"])) + 1
    off = str(v["rps_rfs_cpus"]).strip().lower() == RPS_OFF if v["rps_rfs_cpus"] is not None else False
    cpus = "" if off else (v["rps_rfs_cpus"] or node["local_cpus"] or node["online_cpus"])
    mask = cpus_to_mask(cpus, nr_cpus)
    queues = node["queues"] or []
    table = int((v["sysctl_tuning_intent"] or {}).get("net.core.rps_sock_flow_entries", DEFAULT_FLOW_ENTRIES))
    flow_cnt = (v["rps_rfs_flow_cnt"] if v["rps_rfs_flow_cnt"] is not None
                else 0 if off else table // max(len(queues), 1))
    return {"interface": node["interface"], "queues": queues, "cpus": format_cpulist(mask_to_cpus(mask)),
            "mask": mask, "flow_cnt": flow_cnt}
