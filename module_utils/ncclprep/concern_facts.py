"""What each concern reads off a node: the live state its check compares with the intent.

One reader per concern, each returning a JSON-safe dict that library/concern_facts.py
puts under ``ansible_facts.ncclprep.<concern>``. Readers never change anything, never
raise on a missing file or tool (the value is None and ``error`` says why), and every
command they run has a deadline (``run(argv, timeout)`` returns ``(rc, stdout, stderr)``).

Intent (roles/<concern>/tasks/intent.yml) is computed from variables and these
facts only; the check (module_utils/ncclprep/checks/<concern>.py) compares the two.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import stat
from collections.abc import Callable

from ansible.module_utils.ncclprep.cpumask import format_cpulist, mask_to_cpus
from ansible.module_utils.ncclprep.numa import read_affinity, read_topology
from ansible.module_utils.ncclprep.options import coerce
from ansible.module_utils.ncclprep.parsers.netplan import KINDS as NETPLAN_KINDS
from ansible.module_utils.ncclprep.parsers.ufw import parse_ufw_status, parse_ufw_user_rules
from ansible.module_utils.ncclprep.sysfs import read_text

Runner = Callable[[list, float], tuple]

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


def firewall(run: Runner, backend: str = "auto", timeout: float = 10.0, root: str = "",
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


def nic_mtu(run: Runner, interface: str | None, timeout: float = 10.0, sysfs: str = "/sys", persist: str = "auto",
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


def rps_rfs(interface: str | None, sysfs: str = "/sys") -> dict:
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


def numa_pinning(interface: str | None, map_file: str, sysfs: str = "/sys", procfs: str = "/proc") -> dict:
    """``{topology (numa.read_topology), irq_affinity: {irq: smp_affinity_list or None} of the
    interface's IRQs, installed_text (the installed binding map without comment lines, or None
    when absent)}``.
    """
    topo = read_topology(sysfs)
    nic = (topo.get("nics") or {}).get(interface or "") or {}
    text = read_text(map_file)
    installed = None
    if text is not None:
        installed = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    return {"topology": topo, "irq_affinity": read_affinity(procfs, nic.get("irqs") or []),
            "installed_text": installed}


def ssh_folder_problem(home: str, uid: int, names=()) -> str | None:
    """Why root may not write into ``<home>/.ssh`` for the account with ``uid``, or None.

    Refused: a ``.ssh`` that is a symbolic link or not a folder, one owned by another account,
    and a link among ``names`` inside it (the key pair, authorized_keys). The account owns its
    home, so it can point any of these at a folder or file of root's, which the role's chown and
    writes would then follow (review F5: ``~/.ssh -> /usr/local/bin`` made the account owner of
    /usr/local/bin). An absent ``.ssh`` or file is no problem: the role creates it.
    Looked at with ``lstat``, never following a link. Raises nothing."""
    folder = os.path.join(home, ".ssh")
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{folder} cannot be inspected: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"{folder} is a symbolic link (to {os.readlink(folder)})"
    if not stat.S_ISDIR(st.st_mode):
        return f"{folder} is not a folder"
    if st.st_uid != uid:
        return f"{folder} is owned by uid {st.st_uid}, not the account's uid {uid}"
    for name in names:
        path = os.path.join(folder, name)
        if os.path.islink(path):
            return f"{path} is a symbolic link (to {os.readlink(path)})"
    return None


def ssh_trust(user: str, host_key_types=(), root: str = "", key_name: str | None = None) -> dict:
    """``{user, home, host_keys, ssh_dir_problem}``: the account's home folder from the passwd
    database (None: no such user), this node's host public keys as ``"<type> <base64>"`` (the
    first two words of /etc/ssh/ssh_host_<type>_key.pub), one per type of ``host_key_types`` that
    has a readable file, in that order: the key lines every node's known_hosts records for this
    node; and why the account's ``.ssh`` may not be written (``ssh_folder_problem``, with the key
    pair ``key_name`` and authorized_keys; None: it may)."""
    try:
        entry = pwd.getpwnam(user)
        home, uid = entry.pw_dir, entry.pw_uid
    except KeyError:
        home = uid = None
    keys = []
    for kind in host_key_types or ():
        words = (read_text(f"{root}/etc/ssh/ssh_host_{kind}_key.pub") or "").split()
        if len(words) >= 2:
            keys.append(" ".join(words[:2]))
    names = [n for n in (key_name, f"{key_name}.pub" if key_name else None, "authorized_keys") if n]
    problem = ssh_folder_problem(root + home, uid, names) if home else None
    return {"user": user, "home": home, "host_keys": keys, "ssh_dir_problem": problem}


def nccl_env(procfs: str = "/proc", env_files: list[str] | None = None) -> dict:
    """``{gpus, files}``: NVIDIA GPUs the driver lists under /proc/driver/nvidia/gpus (0 without
    a driver), and each of ``env_files`` (nccl_env passes the launch env file, then
    /etc/nccl.conf; KEY=VALUE) as it is on the node, in that order: [{path, values}], values
    {KEY: VALUE}, None when the file is absent, or ``"unreadable: <why>"``.
    """
    from ansible.module_utils.ncclprep.envfile import read_env_file

    try:
        gpus = len([d for d in os.listdir(os.path.join(procfs, "driver/nvidia/gpus"))
                    if os.path.isdir(os.path.join(procfs, "driver/nvidia/gpus", d))])
    except OSError:
        gpus = 0
    files = []
    for path in env_files or []:
        try:
            values = read_env_file(path)
        except FileNotFoundError:
            values = None
        except (OSError, ValueError) as exc:
            values = f"unreadable: {exc}"
        files.append({"path": path, "values": values})
    return {"gpus": gpus, "files": files}


#: The options of one concern's reading, as Ansible argument specs (library/concern_facts.py
#: validates with them; ``reader_options`` fills the defaults where no Ansible runs).
READER_SPEC = dict(
    interface=dict(type="str"),
    map_file=dict(type="path"),
    backend=dict(type="str", default="auto"),
    user=dict(type="str", default="root"),
    host_key_types=dict(type="list", elements="str", default=[]),
    key_name=dict(type="str", no_log=False),
    persist=dict(type="str", default="auto", choices=list(PERSIST)),
    netplan_file=dict(type="path"),
    timeout=dict(type="float", default=10.0),
    listening=dict(type="list", elements="dict"),
    env_files=dict(type="list", elements="path", default=[]),
)


def reader_options(concern: str, options: dict | None) -> dict:
    """``options`` of ``concern``'s reading checked and converted against READER_SPEC as Ansible
    would (options.coerce: ``"a,b"`` a list, ``"10"`` a number), defaults filled in, for readings
    outside an argument spec (node.read_node: node_facts and ``ncclprep node check``). Raises
    ValueError naming the concern, option and value for an unknown concern or option, a wrong type
    or a ``persist`` outside PERSIST."""
    if concern not in READERS:
        raise ValueError(f"{concern!r} is not a concern read here (valid: {', '.join(sorted(READERS))})")
    return coerce(READER_SPEC, options, concern)


# concern -> reader: the concerns whose state concern_facts reads (roce_qos's reading is
# roce.survey, which node.read_node runs beside these). tests/unit/test_registry.py holds this
# against the registry's ``facts: true`` entries.
READERS = {
    "nic_mtu": lambda run, p: nic_mtu(run, p["interface"], p["timeout"], persist=p["persist"],
                                      netplan_file=p["netplan_file"]),
    "rps_rfs": lambda run, p: rps_rfs(p["interface"]),
    "numa_pinning": lambda run, p: numa_pinning(p["interface"], p["map_file"]),
    "firewall": lambda run, p: firewall(run, p["backend"], p["timeout"], listening=p.get("listening")),
    "ssh_trust": lambda run, p: ssh_trust(p["user"], p["host_key_types"], key_name=p.get("key_name")),
    "nccl_env": lambda run, p: nccl_env(env_files=p.get("env_files")),
}
