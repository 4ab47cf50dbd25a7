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
from collections.abc import Callable

from ansible.module_utils.ncclprep.cpumask import format_cpulist, mask_to_cpus
from ansible.module_utils.ncclprep.numa import read_affinity, read_topology
from ansible.module_utils.ncclprep.sysfs import read_text

Runner = Callable[[list, float], tuple]

UFW = "/usr/sbin/ufw"
NFT = "/usr/sbin/nft"
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


def firewall(run: Runner, backend: str = "auto", timeout: float = 10.0, root: str = "") -> dict:
    """``{tools: {ufw, nft} (installed), backend, rc, stdout}``: the live rule set of the
    chosen backend (``ufw status verbose``, or ``nft -j list table inet ncclprep``).

    rc is None when the backend's tool is not installed. Raises ValueError for a bad backend.
    """
    tools = {"ufw": os.path.exists(root + UFW), "nft": os.path.exists(root + NFT)}
    chosen = choose_firewall_backend(backend, tools["ufw"], tools["nft"])
    out = {"tools": tools, "backend": chosen, "rc": None, "stdout": ""}
    if not tools["ufw" if chosen == "ufw" else "nft"]:
        return out
    argv = ["ufw", "status", "verbose"] if chosen == "ufw" else ["nft", "-j", "list", "table", "inet", "ncclprep"]
    rc, stdout, _ = run(argv, timeout)
    out.update(rc=rc, stdout=stdout)
    return out


def nic_mtu(run: Runner, interface: str | None, timeout: float = 10.0, sysfs: str = "/sys") -> dict:
    """``{interface, mtu, min_mtu, max_mtu (bytes), roce (an RDMA device backs it), error}``
    from ``ip -j -d link show dev <interface>``; the MTU before any change. error names
    what could not be read (no such interface); the numbers are then None.
    """
    out = {"interface": interface, "mtu": None, "min_mtu": None, "max_mtu": None, "roce": False, "error": None}
    if not interface:
        out["error"] = "no interface"
        return out
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


def ssh_trust(user: str) -> dict:
    """``{user, home}``: the account's home folder from the passwd database (None: no such user)."""
    try:
        home = pwd.getpwnam(user).pw_dir
    except KeyError:
        home = None
    return {"user": user, "home": home}


def nccl_env(procfs: str = "/proc") -> dict:
    """``{gpus}``: NVIDIA GPUs the driver lists under /proc/driver/nvidia/gpus (0 without a driver)."""
    try:
        gpus = len([d for d in os.listdir(os.path.join(procfs, "driver/nvidia/gpus"))
                    if os.path.isdir(os.path.join(procfs, "driver/nvidia/gpus", d))])
    except OSError:
        gpus = 0
    return {"gpus": gpus}


# concern -> reader: the concerns whose state concern_facts reads (roce_qos reads its own,
# in check mode, with the same ``into`` convention). tests/unit/test_registry.py holds this
# against the registry's ``facts: true`` entries.
READERS = {
    "nic_mtu": lambda run, p: nic_mtu(run, p["interface"], p["timeout"]),
    "rps_rfs": lambda run, p: rps_rfs(p["interface"]),
    "numa_pinning": lambda run, p: numa_pinning(p["interface"], p["map_file"]),
    "firewall": lambda run, p: firewall(run, p["backend"], p["timeout"]),
    "ssh_trust": lambda run, p: ssh_trust(p["user"]),
    "nccl_env": lambda run, p: nccl_env(),
}
