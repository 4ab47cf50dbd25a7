"""What node_facts reads off a node: versions, interfaces, the data plane, limits, tracked sysctl
values, name resolution of every cluster name, port counters, GIDs, the training data and the
node's own tools (hostinfo). ``read_facts`` is the whole reading; library/node_facts.py runs it
as an Ansible module and ``ncclprep node check`` (module_utils/ncclprep/node/check.py) runs it
without Ansible, so both see the same node the same way. ``read_quick`` is the Slurm Prolog's
part of it: the data-plane interface and the members' names, within its few seconds.

Commands run through a ``run(argv, timeout_s) -> (rc, stdout, stderr)`` (hostinfo's
``subprocess_runner`` on a node) and tools are found with ``which(name) -> path | None``, so
tests pass fakes. Every step that may block (name look-ups, TCP connects, the torch import) has
a deadline. torch is imported only where the NVIDIA driver is loaded; elsewhere its version and
CUDA build are read from torch/version.py. Standard library only: this module runs on the nodes.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
from collections.abc import Collection

from ansible.module_utils.ncclprep import concerns
from ansible.module_utils.ncclprep.concerns import roce_qos
from ansible.module_utils.ncclprep.concerns.host_names import resolve
from ansible.module_utils.ncclprep.concerns.sysctl_tuning import proc_path, read_live
from ansible.module_utils.ncclprep.netutil import iface_for_cidr, parse_cidr
from ansible.module_utils.ncclprep.node.dataset import read_dataset
from ansible.module_utils.ncclprep.node.hostinfo import Runner, Which, subprocess_runner
from ansible.module_utils.ncclprep.node.hostinfo import collect as collect_hostinfo
from ansible.module_utils.ncclprep.node.versions import libnccl_version, parse_cuda_version, parse_nvidia_driver
from ansible.module_utils.ncclprep.options import coerce
from ansible.module_utils.ncclprep.parsers.ss import parse_ss_listen
from ansible.module_utils.ncclprep.portstate import read_counters, read_gids

#: Where tools live besides PATH (AnsibleModule.get_bin_path looks there too).
SBIN_DIRS = ("/sbin", "/usr/sbin", "/usr/local/sbin")

def find_tool(name: str) -> str | None:
    """``name``'s path on PATH or in SBIN_DIRS, as AnsibleModule.get_bin_path finds it; None: absent."""
    path = os.pathsep.join([os.environ.get("PATH", os.defpath), *SBIN_DIRS])
    return shutil.which(name, path=path)


#: The options of a node reading (node_facts' options but ``into``) and their defaults.
#: (an argument spec: read_facts converts them as Ansible would, options.coerce)
OPTIONS = {"cidr": {"type": "str"}, "interface": {"type": "str"},
           "sysctl_keys": {"type": "list", "elements": "str", "default": []},
           "names": {"type": "list", "elements": "dict", "default": []},
           "connect_port": {"type": "int", "default": 22}, "torch_python": {"type": "path"},
           "timeout": {"type": "float", "default": 5.0}, "dataset_path": {"type": "path"}}

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


def interfaces(run: Runner, timeout: float = 10.0) -> dict:
    """Interfaces from sysfs (mtu, operstate) and `ip -j addr` (addresses with prefix): name ->
    ``{mtu (bytes, None unreadable), operstate, addresses ["<ip>/<prefix>"]}``. Never raises."""
    out: dict = {}
    for name in sorted(os.listdir("/sys/class/net")):
        mtu = _read(f"/sys/class/net/{name}/mtu")
        out[name] = {
            "mtu": int(mtu) if mtu and mtu.isdigit() else None,
            "operstate": _read(f"/sys/class/net/{name}/operstate"),
            "addresses": [],
        }
    rc, stdout, _ = run(["ip", "-j", "addr", "show"], timeout)
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


def torch_versions(run: Runner, python: str, timeout: float, gpu_driver: bool = True) -> dict:
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
    rc, stdout, stderr = run([python, "-c", script], timeout)
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


def find_data_plane(ifaces: dict, cidr: str, interface: str | None) -> dict | None:
    """The data-plane interface among ``ifaces`` (``interfaces``' shape): the one named
    ``interface`` when it has an address in ``cidr``, else (``interface`` None) the first with
    one; ``{interface, address, mtu (bytes), operstate}``, None when there is none."""
    addr_map = {name: info["addresses"] for name, info in ifaces.items()}
    if interface:
        found = iface_for_cidr({interface: addr_map.get(interface, [])}, cidr)
    else:
        found = iface_for_cidr(addr_map, cidr)
    if not found:
        return None
    name, address = found
    return {"interface": name, "address": address, "mtu": ifaces[name]["mtu"], "operstate": ifaces[name]["operstate"]}


def _options(options: dict) -> dict:
    """OPTIONS' values of ``options`` converted (options.coerce), the cidr and sysctl keys checked.
    Raises ValueError naming the option."""
    p = coerce(OPTIONS, options, "node")
    try:
        parse_cidr(p["cidr"])
    except (ValueError, TypeError) as exc:
        raise ValueError(f"cidr: {exc}") from exc
    for key in p["sysctl_keys"]:
        try:
            proc_path(key)
        except ValueError as exc:
            raise ValueError(f"sysctl_keys: {exc}") from exc
    return p


def read_facts(options: dict, run: Runner, which: Which) -> dict:
    """The node's facts (library/node_facts.py RETURN: hostname, versions, interfaces, limits,
    data_plane, cidr, sysctl_tuning, host_names, counters, rdma_gids, dataset, hostinfo).

    ``options``: OPTIONS' keys (absent ones take OPTIONS' defaults, each converted to its type):
    ``cidr`` of the data plane
    (required), ``interface`` (None: found from the cidr), ``sysctl_keys`` to read, ``names``
    (the host_names intent: ``[{host, address, names}]``), ``connect_port`` (TCP port that proves
    a resolved address reachable), ``torch_python``, ``timeout`` (seconds per look-up or
    connect), ``dataset_path`` (None: none). Raises ValueError naming the option for a bad cidr,
    sysctl key or type; never for what it finds on the node.
    """
    p = _options(options)
    me = socket.gethostname()
    ifaces = interfaces(run)
    data_plane = find_data_plane(ifaces, p["cidr"], p["interface"])
    live = read_live(p["sysctl_keys"])
    sysctl = {key: {"value": value, "writable": value is not None and os.access(proc_path(key), os.W_OK)}
              for key, value in live.items()}
    system = system_versions()
    timeout = p["timeout"]
    return {
        "hostname": me,
        "versions": dict(kernel=platform.release(), python=platform.python_version(), **system,
                         **torch_versions(run, p["torch_python"], max(timeout, 60),
                                          gpu_driver=system["driver"] is not None)),
        "interfaces": ifaces,
        "limits": limits(),
        "data_plane": data_plane,
        "cidr": p["cidr"],
        "sysctl_tuning": sysctl,
        "host_names": resolve(p["names"], p["connect_port"], timeout),
        "counters": read_counters("/sys", [data_plane["interface"]] if data_plane else []),
        "rdma_gids": read_gids("/sys"),
        "dataset": read_dataset(p["dataset_path"], max(timeout, 10.0)) if p["dataset_path"] else None,
        # read-only tools that may be absent (None then); each command under its own deadline
        "hostinfo": collect_hostinfo(run, which, max(timeout, 10.0), me,
                                     interface=data_plane["interface"] if data_plane else None),
    }


def read_quick(options: dict, names_filter: Collection[str] | None = None, run: Runner | None = None) -> dict:
    """The Slurm Prolog's reading (nodehealth.quick_rows): of ``read_facts``' facts only
    ``hostname``, ``interfaces``, ``data_plane``, ``cidr`` and ``host_names``, read as read_facts
    reads them, so that data_plane.interface and names.resolve judge them alike; but the names
    are looked up and not connected to (host_names.resolve with ``reach`` False: names.reachable
    is not the Prolog's, and one member that does not answer took 5.6 s of its 6; review N10),
    and only those of the members in ``names_filter`` (the intent's ``host`` of each entry; None:
    every member). No torch, no hostinfo tools, no dataset, no counters: one ``ip`` command and
    the look-ups (at most ``timeout * 2 + 1`` s, host_names.resolve). ``options``: read_facts'.
    Raises ValueError naming the option, as read_facts does."""
    p = _options(options)
    run = run or subprocess_runner
    ifaces = interfaces(run)
    names = p["names"] if names_filter is None else [e for e in p["names"] if e.get("host") in names_filter]
    return {
        "hostname": socket.gethostname(),
        "interfaces": ifaces,
        "data_plane": find_data_plane(ifaces, p["cidr"], p["interface"]),
        "cidr": p["cidr"],
        "host_names": resolve(names, p["connect_port"], p["timeout"], reach=False),
    }


def listening(run: Runner, which: Which, timeout: float = 10.0) -> list[dict] | None:
    """The TCP listeners ``[{port, address, pid, name}]`` (parsers.ss), None when ss is not here or
    failed (firewall.ports_free then leaves this host out, as validate.yml does)."""
    if not which("ss"):
        return None
    rc, out, _ = run(["ss", "-Htlnp"], timeout)
    return parse_ss_listen(out) if rc == 0 else None


class ReadError(ValueError):
    """A reading refused its options, or a command of roce_qos's failed; names what and where."""


def read_node(doc: dict, only: tuple[str, ...] | None = None, run: Runner | None = None,
              which: Which | None = None, warn=None) -> dict:
    """Everything validate.yml reads on a node, in one process (``ansible_facts.ncclprep``):
    ``read_facts`` with ``doc["node"]`` (None: not read; read whatever ``only`` says, since the
    concerns' checks judge against it too: nccl_env against the data-plane interface),
    each concern of ``doc["readers"]`` ({concern: options of its module's OPTIONS, concerns/<concern>.py}; the
    firewall's with the TCP listeners of ``listening``) and roce_qos through roce_qos.survey with
    ``doc["roce_qos"]`` (None: off). ``only``: the concerns whose readers run (None: all).
    ``run``/``which``: hostinfo.subprocess_runner and ``find_tool`` by default; ``warn(text)``
    gets roce_qos's warnings (a setting it cannot manage; None: dropped). The node command
    (node/check.py) and the node_facts module both read through here.

    Raises ReadError naming the concern whose options were refused or whose reading failed; a
    roce_qos refusal also names the role variables its options come from (roce_qos_<option>).
    """
    run = run or subprocess_runner
    which = which or find_tool
    readers = {c: o for c, o in (doc.get("readers") or {}).items() if only is None or c in only}
    facts: dict = {}
    if doc.get("node") is not None:
        try:
            facts.update(read_facts(doc["node"], run, which))
        except ValueError as exc:
            raise ReadError(str(exc) if str(exc).startswith("node: ") else f"node: {exc}") from None
    for concern, options in readers.items():
        try:
            opts = concerns.reader_options(concern, options)
            if concern == "firewall":
                opts["listening"] = listening(run, which, opts["timeout"])
            facts[concern] = concerns.READERS[concern].read(run, opts)
        except ValueError as exc:
            raise ReadError(f"{concern}: {exc}") from None
    survey = doc.get("roce_qos")
    if survey is not None and (only is None or "roce_qos" in only):
        try:
            result, _, _ = roce_qos.survey(survey, run, which, socket.gethostname(), warn=warn)
        except (roce_qos.RoceInputError, roce_qos.StepError) as exc:
            named = ", ".join(f"roce_qos_{k}={survey.get(k)}" for k in ("interfaces", "pfc_priority", "tool")
                              if k in survey)
            raise ReadError(f"roce_qos: {exc} (from {named})") from None
        facts["roce_qos"] = {k: result.get(k) for k in ("ports", "changes", "unsupported", "skipped", "skip_reason",
                                                        "tool")}
    return facts
