"""The nic_mtu concern: one MTU on every data-plane NIC, persisted where the interface is defined.

Reading (``read``): the interface's MTU, its limits and which manager defines it at boot
(netplan, ifupdown, NetworkManager). Intent: ``intent``. Check:
``data_plane.mtu`` (its id from before the concern had a module of its own).
"""

from __future__ import annotations

import json
import os
import re

from ansible.module_utils.ncclprep.model import (
    Check,
    Context,
    HostRecord,
    facts_of,
    intent_of,
    majority,
    verdict,
)
from ansible.module_utils.ncclprep.node.hostinfo import Runner
from ansible.module_utils.ncclprep.parsers.netplan import KINDS as NETPLAN_KINDS
from ansible.module_utils.ncclprep.sysfs import read_text

PERSIST = ("auto", "netplan", "ifupdown", "networkmanager", "none")
NETPLAN_DIR = "/etc/netplan"
IFUPDOWN_FILES = ("/etc/network/interfaces", "/etc/network/interfaces.d")


def _files_with_line(paths, pattern: re.Pattern, root: str = "") -> list[str]:
    """The files among ``paths`` (files, or folders searched recursively as ``grep -r`` does:
    symbolic links below a folder are not followed) with a line matching ``pattern``, as paths
    on the node (without ``root``), sorted. Unreadable files and absent paths are left out."""
    out = []
    for top in paths:
        here = root + top
        if os.path.isdir(here):
            found = []
            for folder, dirs, files in os.walk(here):
                dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
                found += [os.path.join(folder, f) for f in files if not os.path.islink(os.path.join(folder, f))]
        elif os.path.isfile(here):
            found = [here]
        else:
            continue
        for path in sorted(found):
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    if any(pattern.search(line.rstrip("\r\n")) for line in fh):
                        out.append(path[len(root):])
            except OSError:
                continue
    return out


def persist_manager(persist: str, netplan: list, ifupdown: list, nm_connection: str) -> str:
    """Which manager configures the interface at boot, so where nic_mtu persists the MTU: the first
    of netplan, ifupdown, networkmanager that defines it (only those ``persist`` allows were asked,
    so their lists are empty otherwise), else ``none``. ``netplan``/``ifupdown``: the files that
    define it (ncclprep's own drop-in left out); ``nm_connection``: the NetworkManager connection
    bound to it (nmcli prints ``--`` for none). Raises ValueError for a bad ``persist``."""
    if persist not in PERSIST:
        raise ValueError(f"nic_mtu_persist={persist!r}: valid: {', '.join(PERSIST)}")
    found = (["netplan"] if netplan else []) + (["ifupdown"] if ifupdown else []) + \
        (["networkmanager"] if nm_connection not in ("", "--") else [])
    return (found + ["none"])[0]


def netplan_netdef_type(text: str, interface: str) -> str | None:
    """The device type (one of parsers.netplan.KINDS: netplan's device types, from netplan's
    reference doc/netplan-yaml.md) under which netplan YAML ``text`` defines
    ``interface`` in block style (``<type>:`` then, indented below it, ``<interface>:``), or
    None when it does not. A drop-in must name the interface under that same type, or netplan
    refuses the whole configuration ("Updated definition '<id>' changes device type") and the
    node boots without its netplan network (review F4). Read line by line (the nodes need no
    YAML library); a device type is the nearest less-indented key above the interface's line.
    Raises nothing."""
    stack: list[tuple[int, str]] = []  # (indent, key) of the mappings the line is inside
    for line in text.splitlines():
        content = line.split("#", 1)[0].rstrip()
        body = content.lstrip()
        if not body or body.startswith("-") or ":" not in body:
            continue
        indent = len(content) - len(body)
        key = body.split(":", 1)[0].strip().strip("'\"")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if key == interface and stack and stack[-1][1] in NETPLAN_KINDS:
            return stack[-1][1]
        stack.append((indent, key))
    return None


def nic_persist(run: Runner, interface: str, persist: str = "auto", netplan_file: str | None = None,
                timeout: float = 10.0, root: str = "") -> dict:
    """``{manager, netplan, netplan_type, ifupdown, nm_connection}``: how ``interface`` is
    configured at boot.

    netplan: the files under /etc/netplan with a line ``<indent><interface>:`` (``netplan_file``,
    nic_mtu's own drop-in, left out); netplan_type: the device type the first of them defines it
    under (``netplan_netdef_type``: ethernets, bonds, vlans, bridges, ...; None: none found);
    ifupdown: /etc/network/interfaces and interfaces.d files with
    an ``iface``, ``auto`` or ``allow-hotplug`` line for it; nm_connection:
    ``nmcli --get-values GENERAL.CONNECTION device show <interface>`` (empty where nmcli is
    missing, fails or runs out of ``timeout`` seconds). Only the managers ``persist``
    (nic_mtu_persist) allows are asked; manager is persist_manager's choice. Raises ValueError
    for a bad ``persist``.
    """
    asked = {"auto": ("netplan", "ifupdown", "networkmanager")}.get(persist, (persist,))
    netplan = ifupdown = []
    nm_connection = ""
    name = re.escape(interface)
    if "netplan" in asked:
        netplan = [f for f in _files_with_line([NETPLAN_DIR], re.compile(rf"^\s+{name}:"), root) if f != netplan_file]
    if "ifupdown" in asked:
        ifupdown = _files_with_line(IFUPDOWN_FILES, re.compile(rf"^\s*(iface|auto|allow-hotplug)\s+{name}(\s|$)"), root)
    if "networkmanager" in asked:
        rc, stdout, _ = run(["nmcli", "--get-values", "GENERAL.CONNECTION", "device", "show", interface], timeout)
        nm_connection = (stdout or "").strip() if rc == 0 else ""
    types = [t for t in (netplan_netdef_type(read_text(root + f) or "", interface) for f in netplan) if t]
    return {"manager": persist_manager(persist, netplan, ifupdown, nm_connection), "netplan": netplan,
            "netplan_type": types[0] if types else None, "ifupdown": ifupdown, "nm_connection": nm_connection}


def read_mtu(run: Runner, interface: str | None, timeout: float = 10.0, sysfs: str = "/sys", persist: str = "auto",
            netplan_file: str | None = None, root: str = "") -> dict:
    """``{interface, mtu, min_mtu, max_mtu (bytes), roce (an RDMA device backs it), error, persist}``
    from ``ip -j -d link show dev <interface>``; the MTU before any change. error names
    what could not be read (no such interface); the numbers are then None. persist: nic_persist's
    ``{manager, netplan, ifupdown, nm_connection}`` for ``persist`` (nic_mtu_persist), the one
    place the role and validate.yml's drift check learn where the MTU is persisted.
    Raises ValueError for a bad ``persist``.
    """
    out = {"interface": interface, "mtu": None, "min_mtu": None, "max_mtu": None, "roce": False, "error": None,
           "persist": {"manager": persist_manager(persist, [], [], ""), "netplan": [], "ifupdown": [],
                       "nm_connection": ""}}
    if not interface:
        out["error"] = "no interface"
        return out
    out["persist"] = nic_persist(run, interface, persist, netplan_file, timeout, root)
    rc, stdout, stderr = run(["ip", "-j", "-d", "link", "show", "dev", interface], timeout)
    if rc != 0:
        out["error"] = (stderr or "").strip() or f"ip exited {rc}"
        return out
    try:
        link = json.loads(stdout)[0]
    except (ValueError, IndexError, TypeError):
        out["error"] = f"unreadable ip output: {stdout[:200]!r}"
        return out
    out.update(mtu=link.get("mtu"), min_mtu=link.get("min_mtu"), max_mtu=link.get("max_mtu"),
               roce=os.path.isdir(os.path.join(sysfs, "class/net", interface, "device/infiniband")))
    return out


def check(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """FAIL naming hosts whose data-plane MTU (bytes, facts ``data_plane.mtu``) differs.

    The expected MTU is the intended one (intent ``nic_mtu.mtu``) when every host that
    has one agrees, else the most common MTU. No check when no host has a data-plane
    interface (data_plane.interface names them).
    """
    mtus = {h: facts_of(r)["data_plane"].get("mtu") for h, r in records.items() if facts_of(r).get("data_plane")}
    if not mtus:
        return []
    intents = {(intent_of(r, "nic_mtu") or {}).get("mtu") for r in records.values()} - {None}
    want = intents.pop() if len(intents) == 1 else majority(mtus)
    odd = sorted(h for h, m in mtus.items() if m != want)
    return [verdict("data_plane.mtu", odd, measured=mtus, expected=want,
                    message=f"MTU differs on {', '.join(odd)} "
                            f"({', '.join(f'{h}={mtus[h]}' for h in odd)}; expected {want})",
                    remediation=f"set MTU {want} on the data-plane interface of {', '.join(odd)}",
                    passed=f"MTU {want} on every host", passed_measured=want)]


# This concern's entry in the registry (concerns/__init__.py).
SWITCH = "nic_mtu_enabled"
DATA_PLANE = True
FACTS = True
IDS = ("data_plane.mtu",)
OPTIONS = dict(
    interface=dict(type="str"),
    persist=dict(type="str", default="auto", choices=list(PERSIST)),
    netplan_file=dict(type="path"),
    timeout=dict(type="float", default=10.0),
)


def read(run: Runner, p: dict) -> dict:
    """``read_mtu`` with the options of OPTIONS (checked, defaults filled)."""
    return read_mtu(run, p["interface"], p["timeout"], persist=p["persist"], netplan_file=p["netplan_file"])


#: The variables the intent is computed from (concerns.intent hands over these only).
INTENT_VARS = ("nic_mtu_value", "data_plane")
#: The facts it takes from the node: none (the MTU now is what it sets).
INTENT_FACTS = ()


def intent(v: dict, node: dict) -> dict:
    """``{interface (the data-plane interface), mtu (bytes, nic_mtu_value)}``. Raises ValueError
    for an MTU that is not an integer."""
    return {"interface": (v["data_plane"] or {}).get("interface"), "mtu": int(v["nic_mtu_value"])}
