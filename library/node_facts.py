#!/usr/bin/python
# Copyright: ncclprep contributors
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_facts
short_description: Read what validate.yml checks on a node (read-only)
description:
  - Returns C(ansible_facts.ncclprep) with versions, network interfaces, the data-plane
    interface, tracked sysctl values and host name resolution of every cluster name.
  - Never changes anything; runs in check mode too and always returns C(changed=false).
  - Every step that may block (name look-ups, TCP connects, the torch import) has a deadline.
  - torch is imported only where the NVIDIA driver is loaded; elsewhere its version and CUDA build
    are read from torch/version.py (no GPU, NCCL or cuDNN to ask torch about).
options:
  cidr: {type: str, required: true, description: CIDR of the data-plane network.}
  interface: {type: str, description: Data-plane interface name; null finds it from O(cidr).}
  sysctl_keys: {type: list, elements: str, default: [], description: Sysctl keys to read.}
  names:
    type: list
    elements: dict
    default: []
    description:
      - "Host name entries to resolve: C({host, address, names}) (the host_names intent). Each
        name must resolve to C(address), and C(address):O(connect_port) must accept TCP."
  connect_port: {type: int, default: 22, description: TCP port used to prove a resolved address is reachable.}
  torch_python: {type: path, description: Python of the torch venv whose torch and NCCL versions to read.}
  timeout: {type: float, default: 5.0, description: Deadline in seconds for each look-up or connect.}
  dataset_path:
    type: path
    description:
      - The training data (a folder or a file) every node must read; null reads none. Stat, listing and
        a one-byte read of one file run under max(O(timeout), 10) s (a hung network mount is reported, not waited on).
  into:
    type: dict
    default: {}
    description:
      - The current C(ansible_facts.ncclprep) (the concerns' facts from concern_facts), returned with
        these keys added.
author: ncclprep contributors
"""

EXAMPLES = r"""
- name: Read the node's facts
  node_facts:
    cidr: 10.0.0.0/24
    sysctl_keys: [net.core.somaxconn]
    names: "{{ host_names_intent }}"
    torch_python: /opt/ncclprep/venv/bin/python
"""

RETURN = r"""
ansible_facts:
  description: Facts under the key C(ncclprep).
  returned: always
  type: dict
  contains:
    ncclprep:
      description: "hostname, versions{kernel, python, driver, cuda, libnccl, torch, torch_cuda, torch_nccl,
        cudnn}, interfaces{name: {mtu, operstate, addresses}}, data_plane{interface, address, mtu, operstate} or null,
        limits{memlock (bytes, null unlimited), shm_bytes, rdma_devices}, sysctl_tuning{key: {value, writable}},
        host_names[{host, name, expected, addresses, reachable, error, retried}] (retried: the first
        connect's error when only the second, after a pause, reached the address),
        counters (the RDMA ports' and the data-plane netdev's error counters when the run starts, as
        port_counters returns them), rdma_gids{'<dev>/<port>': [{index, type, gid, netdev}]} (populated GIDs),
        dataset{path, exists, kind, readable, entries, sample, error, hung} or null (module_utils/ncclprep/dataset.py),
        hostinfo (below)"
      type: dict
      contains:
        hostinfo:
          description:
            - "What the node's own tools show, read through module_utils/ncclprep/hostinfo.py and the parsers:
              C(ib_ports) (ibstat, else ibstatus, else /sys/class/infiniband), C(ibv_devinfo), C(numactl)
              (numactl -H, else lscpu: same shape, node CPUs only), C(gpu_topology) (nvidia-smi topo -m; its
              C(data.p2p) is C({source, error, data}) of nvidia-smi topo -p2p r, the P2P read matrix),
              C(ip_links) (ip addr show, text form, else ifconfig -a: same link shape), C(netplan)
              (/etc/netplan/*.yaml, judged against the RoCE netdevs), C(link) (ethtool and ethtool -i of the
              data-plane interface; present only when a data-plane interface was found)."
            - "Each is null when the tool (or the files) is not on the node, else C({source, error, data,
              findings}): C(error) when the tool exited non-zero or ran past its deadline
              (max(O(timeout), 10) s per command, at most 8 commands in a row), C(data) the parser's dict,
              C(findings) its diagnosis."
          type: dict
"""

import json
import os
import platform
import socket
import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ncclprep.dataset import read_dataset
from ansible.module_utils.ncclprep.hostinfo import collect as collect_hostinfo
from ansible.module_utils.ncclprep.hostinfo import subprocess_runner
from ansible.module_utils.ncclprep.netutil import iface_for_cidr, parse_cidr
from ansible.module_utils.ncclprep.portstate import read_counters, read_gids
from ansible.module_utils.ncclprep.sysctl import proc_path, read_live
from ansible.module_utils.ncclprep.versions import libnccl_version, parse_cuda_version, parse_nvidia_driver

_TORCH_PROBE = (
    "import json, torch\n"
    "nccl = None\n"
    "try:\n"
    "    nccl = '.'.join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None\n"
    "except Exception:\n"
    "    pass\n"
    "cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None\n"
    "print(json.dumps({'torch': torch.__version__, 'torch_cuda': torch.version.cuda, 'torch_nccl': nccl,\n"
    "                  'cudnn': str(cudnn) if cudnn else None,\n"
    "                  'gpus': torch.cuda.device_count() if torch.cuda.is_available() else 0}))\n"
)
# On a node without the NVIDIA driver torch can see no GPU, NCCL or cuDNN: its version and
# CUDA build are read from torch/version.py (the assignments torch.__version__ and
# torch.version.cuda come from) without importing torch, which costs seconds of CPU on every
# node. The collectives import torch in the same run, so a torch that cannot load still fails.
_TORCH_VERSION_FILE = (
    "import ast, importlib.util, json, os\n"
    "spec = importlib.util.find_spec('torch')\n"
    "if spec is None or not spec.submodule_search_locations:\n"
    "    raise SystemExit(\"ModuleNotFoundError: No module named 'torch'\")\n"
    "path = os.path.join(list(spec.submodule_search_locations)[0], 'version.py')\n"
    "v = {}\n"
    "for node in ast.parse(open(path, encoding='utf-8').read()).body:\n"
    "    target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, 'target', None)\n"
    "    if isinstance(target, ast.Name) and isinstance(getattr(node, 'value', None), ast.Constant):\n"
    "        v[target.id] = node.value.value\n"
    "if not isinstance(v.get('__version__'), str):\n"
    "    raise SystemExit(f'no __version__ in {path}')\n"
    "print(json.dumps({'torch': v['__version__'], 'torch_cuda': v.get('cuda'), 'torch_nccl': None,\n"
    "                  'cudnn': None, 'gpus': 0}))\n"
)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


def interfaces(module: AnsibleModule) -> dict:
    """Interfaces from sysfs (mtu, operstate) and `ip -j addr` (addresses with prefix)."""
    out: dict = {}
    for name in sorted(os.listdir("/sys/class/net")):
        mtu = _read(f"/sys/class/net/{name}/mtu")
        out[name] = {
            "mtu": int(mtu) if mtu and mtu.isdigit() else None,
            "operstate": _read(f"/sys/class/net/{name}/operstate"),
            "addresses": [],
        }
    rc, stdout, _ = module.run_command(["ip", "-j", "addr", "show"])
    if rc == 0:
        try:
            for link in json.loads(stdout):
                entry = out.setdefault(link.get("ifname"), {"mtu": link.get("mtu"), "operstate": None,
                                                            "addresses": []})
                entry["addresses"] = [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", [])
                                      if "local" in a]
        except (ValueError, KeyError, TypeError):
            pass
    return out


#: Pause (seconds) before the one retry of a failed connect: a transient refusal or reset (a
#: peer's sshd or firewall busy for a moment) clears; a port that is closed or filtered fails twice.
RETRY_PAUSE_S = 0.5


def connect(address: str, port: int, timeout: float, pause: float = RETRY_PAUSE_S) -> dict:
    """TCP connect to ``address:port`` under ``timeout`` seconds, once more after ``pause`` when
    the first fails. Returns ``{"reachable": bool, "error": str | None, "retried": [first error]
    when the second try reached it, else []}``."""
    errors = []
    for attempt in range(2):
        if attempt:
            time.sleep(pause)
        try:
            with socket.create_connection((address, port), timeout=timeout):
                return {"reachable": True, "error": None, "retried": errors}
        except OSError as exc:
            errors.append(f"{address}:{port} unreachable: {exc}")
    return {"reachable": False, "error": errors[-1], "retried": []}


def resolve(entries: list, port: int, timeout: float) -> list:
    """Resolve every name of every entry and connect to the expected address, each under a deadline.

    A connect that fails is tried once more after RETRY_PAUSE_S: when that one reaches the address
    the row is reachable with ``retried`` holding the first error (names.reachable then warns
    instead of failing); a second failure keeps the second error. The whole look-up of one name
    stays under ``timeout * 2 + 1`` s."""
    jobs = [(e.get("host"), name, e.get("address")) for e in entries for name in e.get("names", [])]

    def one(job):
        host, name, expected = job
        row = {"host": host, "name": name, "expected": expected, "addresses": [],
               "reachable": None, "error": None, "retried": []}
        try:
            infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
            # in the resolver's order: the first is what torch.distributed and Gloo take
            row["addresses"] = list(dict.fromkeys(i[4][0] for i in infos))
        except socket.gaierror as exc:
            row["error"] = f"cannot resolve: {exc}"
            return row
        target = expected if expected in row["addresses"] else row["addresses"][0]
        row.update(connect(target, port, timeout / 2))
        return row

    if not jobs:
        return []
    # daemon threads, not a ThreadPoolExecutor: the interpreter joins an executor's threads at
    # exit, so a getaddrinfo stuck in NSS (sssd, LDAP) kept the module alive past the deadline
    done: dict[int, dict] = {}
    todo = list(enumerate(jobs))
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                i, job = todo.pop(0)
            done[i] = one(job)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(32, len(jobs)))]
    for t in threads:
        t.start()
    end = time.monotonic() + timeout * 2 + 1
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    rows = []
    for i, job in enumerate(jobs):
        rows.append(done.get(i) or {
            "host": job[0], "name": job[1], "expected": job[2], "addresses": [], "reachable": None,
            "error": f"look-up did not finish within {timeout * 2 + 1:.0f} s", "retried": []})
    return rows


def torch_versions(module: AnsibleModule, python: str, timeout: float, gpu_driver: bool = True) -> dict:
    """torch, CUDA and NCCL versions from the venv's python (None values when absent).

    ``gpu_driver``: whether the NVIDIA driver is loaded here; without it torch is not imported
    and only ``torch`` and ``torch_cuda`` are read, from torch/version.py (``gpus`` 0, ``torch_nccl``
    and ``cudnn`` None). ``timeout``: seconds the python may run. A python that fails gives the
    last line of its stderr in ``torch_error``.
    """
    empty = {"torch": None, "torch_cuda": None, "torch_nccl": None, "cudnn": None, "gpus": 0, "torch_error": None}
    if not python or not os.path.exists(python):
        return dict(empty, torch_error=f"{python} does not exist")
    script = _TORCH_PROBE if gpu_driver else _TORCH_VERSION_FILE
    rc, stdout, stderr = module.run_command(["timeout", str(int(timeout)), python, "-c", script])
    if rc != 0:
        return dict(empty, torch_error=(stderr.strip().splitlines() or [f"exit {rc}"])[-1])
    try:
        return dict(empty, **json.loads(stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return dict(empty, torch_error=f"unreadable output: {stdout[:200]!r}")


# Where the system's libnccl and CUDA toolkit live on Ubuntu (the NVIDIA packages' paths).
LIBNCCL_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/local/cuda/lib64", "/usr/lib64")
CUDA_FILES = ("/usr/local/cuda/version.json", "/usr/local/cuda/version.txt")


def system_versions() -> dict:
    """NVIDIA driver, CUDA toolkit and system libnccl versions (None where absent)."""
    driver = parse_nvidia_driver(_read("/proc/driver/nvidia/version"))
    cuda = next((v for v in (parse_cuda_version(_read(f)) for f in CUDA_FILES) if v), None)
    nccl = None
    for folder in LIBNCCL_DIRS:
        link = os.path.join(folder, "libnccl.so.2")
        if os.path.exists(link):
            nccl = libnccl_version(os.path.basename(os.path.realpath(link)))
            break
    return {"driver": driver, "cuda": cuda, "libnccl": nccl}


def limits() -> dict:
    """What limits a job's ranks here: ``memlock`` (soft RLIMIT_MEMLOCK in bytes, None for
    unlimited; RDMA registers memory under it), ``shm_bytes`` (size of /dev/shm, where NCCL's
    SHM transport and DataLoader workers put their buffers; None when absent) and
    ``rdma_devices`` (/sys/class/infiniband: IB and RoCE HCAs)."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    try:
        st = os.statvfs("/dev/shm")
        shm = st.f_blocks * st.f_frsize
    except OSError:
        shm = None
    try:
        rdma = sorted(os.listdir("/sys/class/infiniband"))
    except OSError:
        rdma = []
    return {"memlock": None if soft == resource.RLIM_INFINITY else soft, "shm_bytes": shm, "rdma_devices": rdma}


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            cidr=dict(type="str", required=True),
            interface=dict(type="str"),
            sysctl_keys=dict(type="list", elements="str", default=[]),
            names=dict(type="list", elements="dict", default=[]),
            connect_port=dict(type="int", default=22),
            torch_python=dict(type="path"),
            timeout=dict(type="float", default=5.0),
            into=dict(type="dict", default={}),
            dataset_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    me = socket.gethostname()
    try:
        parse_cidr(p["cidr"])
    except ValueError as exc:
        module.fail_json(msg=f"{me}: cidr: {exc}")
    for key in p["sysctl_keys"]:
        try:
            proc_path(key)
        except ValueError as exc:
            module.fail_json(msg=f"{me}: sysctl_keys: {exc}")

    ifaces = interfaces(module)
    addr_map = {name: info["addresses"] for name, info in ifaces.items()}
    if p["interface"]:
        found = iface_for_cidr({p["interface"]: addr_map.get(p["interface"], [])}, p["cidr"])
    else:
        found = iface_for_cidr(addr_map, p["cidr"])
    data_plane = None
    if found:
        name, address = found
        data_plane = {"interface": name, "address": address, "mtu": ifaces[name]["mtu"],
                      "operstate": ifaces[name]["operstate"]}

    live = read_live(p["sysctl_keys"])
    sysctl = {key: {"value": value,
                    "writable": value is not None and os.access(proc_path(key), os.W_OK)}
              for key, value in live.items()}
    system = system_versions()
    facts = {
        "hostname": me,
        "versions": dict(kernel=platform.release(), python=platform.python_version(), **system,
                         **torch_versions(module, p["torch_python"], max(p["timeout"], 60),
                                          gpu_driver=system["driver"] is not None)),
        "interfaces": ifaces,
        "limits": limits(),
        "data_plane": data_plane,
        "cidr": p["cidr"],
        "sysctl_tuning": sysctl,
        "host_names": resolve(p["names"], p["connect_port"], p["timeout"]),
        "counters": read_counters("/sys", [data_plane["interface"]] if data_plane else []),
        "rdma_gids": read_gids("/sys"),
        "dataset": read_dataset(p["dataset_path"], max(p["timeout"], 10.0)) if p["dataset_path"] else None,
        # read-only tools that may be absent (None then); each command under its own deadline
        "hostinfo": collect_hostinfo(subprocess_runner, module.get_bin_path, max(p["timeout"], 10.0), me,
                                     interface=data_plane["interface"] if data_plane else None),
    }
    # Ansible replaces a top-level fact wholesale: keep what concern_facts read before.
    module.exit_json(changed=False, ansible_facts={"ncclprep": dict(p["into"] or {}, **facts)})


if __name__ == "__main__":
    main()
