"""The nccl_env concern: the NCCL / Gloo / torch.distributed environment, its names and values.

Reading (``read``): the launch env file and /etc/nccl.conf as they are on the node, and the
GPUs. Intent: ``intent`` (``check_env`` checks it). Check: ``nccl_env.ifname``.

Source of the NCCL names and values: the NCCL User Guide, "Environment Variables"
(docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html), which also defines
the interface-list syntax of NCCL_SOCKET_IFNAME (comma-separated prefixes, ``^``
to exclude, ``=`` for an exact name). TORCH_NCCL_* names: PyTorch's
ProcessGroupNCCL; NCCL_ASYNC_ERROR_HANDLING and NCCL_BLOCKING_WAIT are the
deprecated spellings of TORCH_NCCL_ASYNC_ERROR_HANDLING / TORCH_NCCL_BLOCKING_WAIT.
"""

from __future__ import annotations

import difflib
import os
import re

from ansible.module_utils.ncclprep.model import Check, Context, HostRecord, facts_of, intent_of, make_check, verdict
from ansible.module_utils.ncclprep.node.hostinfo import Runner
from ansible.module_utils.ncclprep.parsers.nccl_errors import DEBUG_CLASS


def read_env(procfs: str = "/proc", env_files: list[str] | None = None) -> dict:
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


NCCL_KNOWN = frozenset("""
NCCL_SOCKET_IFNAME NCCL_SOCKET_FAMILY NCCL_SOCKET_RETRY_CNT NCCL_SOCKET_RETRY_SLEEP_MSEC NCCL_SOCKET_NTHREADS
NCCL_NSOCKS_PERTHREAD NCCL_CROSS_NIC NCCL_IB_HCA NCCL_IB_TIMEOUT NCCL_IB_RETRY_CNT NCCL_IB_GID_INDEX
NCCL_IB_ADDR_FAMILY NCCL_IB_ADDR_RANGE NCCL_IB_ROCE_VERSION_NUM NCCL_IB_SL NCCL_IB_TC NCCL_IB_FIFO_TC
NCCL_IB_RETURN_ASYNC_EVENTS NCCL_IB_DISABLE NCCL_IB_AR_THRESHOLD NCCL_IB_QPS_PER_CONNECTION
NCCL_IB_SPLIT_DATA_ON_QPS NCCL_IB_CUDA_SUPPORT NCCL_IB_PCI_RELAXED_ORDERING NCCL_IB_ADAPTIVE_ROUTING
NCCL_IB_ECE_ENABLE NCCL_IB_MERGE_NICS NCCL_IB_MERGE_VFS NCCL_IB_USE_INLINE NCCL_IB_OOO_RQ
NCCL_OOB_NET_ENABLE NCCL_OOB_NET_IFNAME NCCL_UID_STAGGER_THRESHOLD NCCL_UID_STAGGER_RATE NCCL_NET
NCCL_NET_PLUGIN NCCL_TUNER_PLUGIN NCCL_TUNER_CONFIG_FILE NCCL_PROFILER_PLUGIN NCCL_ENV_PLUGIN
NCCL_IGNORE_CPU_AFFINITY NCCL_CONF_FILE
NCCL_DEBUG NCCL_DEBUG_FILE NCCL_DEBUG_SUBSYS NCCL_DEBUG_TIMESTAMP_FORMAT NCCL_DEBUG_TIMESTAMP_LEVELS
NCCL_COLLNET_ENABLE NCCL_COLLNET_NODE_THRESHOLD NCCL_TOPO_FILE NCCL_TOPO_DUMP_FILE NCCL_SET_THREAD_NAME
NCCL_P2P_DISABLE NCCL_P2P_LEVEL NCCL_P2P_DIRECT_DISABLE NCCL_SHM_DISABLE NCCL_SHM_USE_CUDA_MEMCPY
NCCL_BUFFSIZE NCCL_NTHREADS NCCL_MAX_NCHANNELS NCCL_MIN_NCHANNELS NCCL_CHECKS_DISABLE NCCL_CHECK_POINTERS
NCCL_LAUNCH_MODE NCCL_NET_GDR_LEVEL NCCL_NET_GDR_READ NCCL_NET_GDR_C2C NCCL_NET_SHARED_BUFFERS
NCCL_NET_SHARED_COMMS NCCL_NET_DISABLE_INTRA NCCL_NET_FORCE_FLUSH NCCL_NET_OVERHEAD
NCCL_SINGLE_RING_THRESHOLD NCCL_LL_THRESHOLD NCCL_LL128_BUFFSIZE NCCL_TREE_THRESHOLD NCCL_ALGO NCCL_PROTO
NCCL_NVB_DISABLE NCCL_PXN_DISABLE NCCL_P2P_PXN_LEVEL NCCL_RUNTIME_CONNECT NCCL_GRAPH_REGISTER
NCCL_LOCAL_REGISTER NCCL_LEGACY_CUDA_REGISTER NCCL_SET_STACK_SIZE NCCL_CGA_CLUSTER_SIZE NCCL_MAX_CTAS
NCCL_MIN_CTAS NCCL_NVLS_ENABLE NCCL_NVLS_NCHANNELS NCCL_MNNVL_ENABLE NCCL_RAS_ENABLE NCCL_RAS_ADDR
NCCL_RAS_TIMEOUT_FACTOR NCCL_GRAPH_DUMP_FILE NCCL_GRAPH_FILE NCCL_COMM_BLOCKING NCCL_WORK_FIFO_DEPTH
NCCL_CUMEM_ENABLE NCCL_CUMEM_HOST_ENABLE NCCL_HOSTID NCCL_CTA_POLICY NCCL_NCHANNELS_PER_NET_PEER
NCCL_DMABUF_ENABLE NCCL_P2P_NET_CHUNKSIZE NCCL_P2P_NVL_CHUNKSIZE NCCL_P2P_PCI_CHUNKSIZE NCCL_P2P_LL_THRESHOLD
NCCL_ALLOC_P2P_NET_LL_BUFFERS NCCL_COMM_SPLIT_SHARE_RESOURCES NCCL_MAX_P2P_NCHANNELS NCCL_MIN_P2P_NCHANNELS
NCCL_NVLS_CHUNKSIZE NCCL_PROXY_APPEND_BATCH_SIZE NCCL_CREATE_THREAD_CONTEXT NCCL_WIN_ENABLE
""".split())
# Deprecated NCCL_* spellings of PyTorch settings -> their successors.
DEPRECATED = {
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_DESYNC_DEBUG": "TORCH_NCCL_DESYNC_DEBUG",
}
# Values accepted by the enumerated variables (case-insensitive; NCCL_ALGO/NCCL_PROTO
# take comma-separated lists, optionally starting with ^ to exclude).
ENUMS = {
    "NCCL_DEBUG": {"VERSION", "WARN", "INFO", "TRACE", "ABORT"},
    "NCCL_ALGO": {"RING", "TREE", "COLLNET", "COLLNETCHAIN", "COLLNETDIRECT", "NVLS", "NVLSTREE", "PAT"},
    "NCCL_PROTO": {"LL", "LL128", "SIMPLE"},
    "NCCL_DEBUG_SUBSYS": {"INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "CALL",
                          "PROXY", "NVLS", "BOOTSTRAP", "REG", "PROFILE", "RAS", "ALL"},
    "NCCL_SOCKET_FAMILY": {"AF_INET", "AF_INET6"},
    "NCCL_IB_ADDR_FAMILY": {"AF_INET", "AF_INET6"},
}
LIST_ENUMS = {"NCCL_ALGO", "NCCL_PROTO", "NCCL_DEBUG_SUBSYS"}
# The socket transport's threads times sockets per thread (env.rst: at most 64).
MAX_SOCKETS = 64
# Switches the NCCL User Guide documents as 0 (off) or 1 (on).
SWITCHES = frozenset("""
NCCL_IB_DISABLE NCCL_P2P_DISABLE NCCL_SHM_DISABLE NCCL_CUMEM_ENABLE NCCL_CHECKS_DISABLE NCCL_CHECK_POINTERS
NCCL_COLLNET_ENABLE NCCL_NET_GDR_READ NCCL_PXN_DISABLE NCCL_NVB_DISABLE NCCL_IB_CUDA_SUPPORT
NCCL_IGNORE_CPU_AFFINITY NCCL_SET_THREAD_NAME NCCL_GRAPH_REGISTER NCCL_LOCAL_REGISTER NCCL_DMABUF_ENABLE
""".split())
# Integers with the range (and, for NCCL_NTHREADS, the values) the NCCL User Guide gives: sizes
# in bytes, thread and channel counts, and the InfiniBand fields whose width the IB
# specification fixes (local ACK timeout 5 bits, retry count 3 bits, service level 4 bits,
# traffic class 8 bits).
INTS: dict[str, tuple[int, int | None, tuple[int, ...] | None]] = {
    "NCCL_BUFFSIZE": (1, None, None),
    "NCCL_LL128_BUFFSIZE": (1, None, None),
    "NCCL_NTHREADS": (64, 512, (64, 128, 256, 512)),
    "NCCL_MIN_NCHANNELS": (1, None, None),
    "NCCL_MAX_NCHANNELS": (1, None, None),
    "NCCL_SOCKET_NTHREADS": (1, 16, None),
    "NCCL_NSOCKS_PERTHREAD": (1, None, None),
    "NCCL_IB_TIMEOUT": (1, 31, None),
    "NCCL_IB_RETRY_CNT": (0, 7, None),
    "NCCL_IB_SL": (0, 15, None),
    "NCCL_IB_TC": (0, 255, None),
    "NCCL_IB_QPS_PER_CONNECTION": (1, None, None),
}


def value_problem(name: str, text: str) -> str | None:
    """Why NCCL would not accept ``text`` for ``name`` (a switch, an integer with a range, an
    enumeration of ENUMS), as one line naming variable, value and what is valid; None when
    it would, or when the variable has no documented form here."""
    if name in SWITCHES and text.strip() not in ("0", "1"):
        return f"{name}={text}: not 0 or 1 (a switch)"
    if name in INTS:
        low, high, values = INTS[name]
        valid = (", ".join(map(str, values)) if values else
                 f"an integer {low}..{high}" if high is not None else f"an integer >= {low}")
        try:
            number = int(text.strip(), 0)
        except ValueError:
            return f"{name}={text}: not an integer (valid: {valid})"
        if number < low or (high is not None and number > high) or (values and number not in values):
            return f"{name}={text}: out of range (valid: {valid})"
    if name in ENUMS:
        items = [text.lstrip("^")] if name not in LIST_ENUMS else text.lstrip("^").split(",")
        bad = [i for i in items if i.strip().upper() not in ENUMS[name]]
        if bad:
            return f"{name}={text}: {', '.join(repr(b) for b in bad)} not one of {', '.join(sorted(ENUMS[name]))}"
    return None


# Launch environment names must start with one of these: the variables of NCCL, Gloo,
# PyTorch (torch.distributed, torchelastic), OpenMP, CUDA and UCX. Anything else (LD_PRELOAD,
# BASH_ENV, PATH, PYTHONPATH, ...) changes what every launch runs, not how it communicates.
NAME_PREFIXES = ("NCCL_", "GLOO_", "TORCH_", "TORCHELASTIC_", "PYTORCH_", "OMP_", "CUDA_", "UCX_")
_NAME_RE = re.compile(r"[A-Z_][A-Z0-9_]*\Z")
# A value needs no quoting in any reader (bash, systemd's EnvironmentFile, ``envfile``):
# no space, quote, ``$``, backtick, ``;``, ``|``, ``&``, ``<``, ``>``, ``\\`` or newline. This
# holds every form the NCCL User Guide documents (interface lists ``^=eth0,ib``, HCA lists
# ``mlx5_0:1``, paths, ``%h.%p`` in NCCL_DEBUG_FILE); ``{dir}`` is the debug launch's folder.
VALUE_CHARS = "A-Za-z0-9_.,:=^/%+@{}-"
_VALUE_RE = re.compile(f"[{VALUE_CHARS}]*\\Z")


def entry_problem(name: str, text: str) -> str | None:
    """Why ``name=text`` may not go into the launch env file, as one line naming the variable,
    the value and what is valid; None when it may. A name is upper case and starts with one of
    NAME_PREFIXES; a value uses only VALUE_CHARS, so that no reader runs any part of it."""
    if not _NAME_RE.match(name):
        return f"{name}={text}: not an environment variable name (A-Z, 0-9 and _, not starting with a digit)"
    if not name.startswith(NAME_PREFIXES):
        return (f"{name}={text}: not a variable of NCCL, Gloo, PyTorch, OpenMP, CUDA or UCX "
                f"(names start with {', '.join(NAME_PREFIXES)})")
    if not _VALUE_RE.match(text):
        bad = sorted({c for c in text if not re.match(f"[{VALUE_CHARS}]", c)})
        return (f"{name}={text!r}: {' '.join(repr(c) for c in bad)} not allowed in a launch value "
                f"(valid characters: {VALUE_CHARS})")
    return None


IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_OOB_NET_IFNAME")


def ifname_matches(spec: str, interfaces: list[str], exact_only: bool = False) -> list[str]:
    """Interfaces selected by an NCCL interface list ``spec`` (``eth``, ``=eth0``, ``^docker``, ``^=docker0``).

    ``exact_only`` (GLOO_SOCKET_IFNAME): the spec is a comma-separated list of exact names.
    Returns the matching interface names in ``interfaces`` order.
    """
    spec = str(spec).strip()
    if exact_only:
        wanted = [s.strip() for s in spec.split(",") if s.strip()]
        return [i for i in interfaces if i in wanted]
    exclude = spec.startswith("^")
    if exclude:
        spec = spec[1:]
    exact = spec.startswith("=")
    if exact:
        spec = spec[1:]
    parts = [p.strip() for p in spec.split(",") if p.strip()]

    def hit(name: str) -> bool:
        return any(name == p if exact else name.startswith(p) for p in parts)

    return [i for i in interfaces if hit(i) != exclude]


def check_env(env: dict, interfaces: list[str] | None = None) -> tuple[list[str], list[str], dict]:
    """Check an NCCL/Gloo/torch environment. Returns ``(errors, warnings, effective)``.

    - an unknown ``NCCL_*`` name is an error naming the closest known name;
    - a name outside NAME_PREFIXES, or a value with a character outside VALUE_CHARS, is an
      error (``entry_problem``): the launcher and the preflight engine read the file literally, and no
      value may mean anything to a shell;
    - a deprecated name is a warning and is renamed to its successor in ``effective``;
    - a switch (SWITCHES) must be 0 or 1, an integer (INTS) inside its range, an enumerated
      variable (ENUMS) one of its values (``value_problem``);
    - an interface variable must select at least one interface of ``interfaces`` (when given);
      an exclusion list (``^...``) must leave at least one;
    - NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD above MAX_SOCKETS is an error;
    - a debugging-class variable (DEBUG_CLASS) is a warning quoting NCCL's documentation.
    Messages name the variable and value. Raises nothing.
    """
    errors: list[str] = []
    warnings: list[str] = []
    effective: dict = {}
    for name, value in sorted(env.items()):
        text = str(value)
        entry = entry_problem(name, text)
        if entry:
            errors.append(entry)
            continue
        if name in DEPRECATED:
            new = DEPRECATED[name]
            warnings.append(f"{name}={text} is deprecated: written as {new}={text}")
            effective[new] = text
            continue
        if name.startswith("NCCL_") and name not in NCCL_KNOWN:
            close = difflib.get_close_matches(name, sorted(NCCL_KNOWN) + sorted(DEPRECATED), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
            errors.append(f"{name}={text}: unknown NCCL variable{hint}")
            continue
        problem = value_problem(name, text)
        if problem:
            errors.append(problem)
        if name in IFNAME_VARS and interfaces is not None:
            chosen = ifname_matches(text, interfaces, exact_only=(name == "GLOO_SOCKET_IFNAME"))
            if not chosen:
                errors.append(f"{name}={text} selects no interface on this host "
                              f"(interfaces: {', '.join(interfaces) or 'none'})")
        if name in DEBUG_CLASS:
            warnings.append(f"{name}={text}: NCCL's documentation lists it among the debugging variables, which "
                            "\"should generally not be set for production code\" (NCCL env.rst): keep it only for a "
                            "measured reason")
        effective[name] = text
    try:
        sockets = int(effective["NCCL_SOCKET_NTHREADS"]) * int(effective["NCCL_NSOCKS_PERTHREAD"])
    except (KeyError, ValueError):
        sockets = 0
    if sockets > MAX_SOCKETS:
        errors.append(f"NCCL_SOCKET_NTHREADS={effective['NCCL_SOCKET_NTHREADS']} x NCCL_NSOCKS_PERTHREAD="
                      f"{effective['NCCL_NSOCKS_PERTHREAD']} = {sockets} sockets: valid: at most {MAX_SOCKETS} "
                      "(NCCL env.rst)")
    return errors, warnings, effective


#: The interface variables this check reads: (name, exact names only, who reads it).
IFNAME_READERS = (("NCCL_SOCKET_IFNAME", False, "NCCL"), ("GLOO_SOCKET_IFNAME", True, "Gloo"))


def _var_problem(var: str, exact: bool, reader: str, spec, data_plane: str, candidates: list[str]) -> str | None:
    """Why one interface variable's value ``spec`` does not pin ``reader``'s sockets to ``data_plane``."""
    if spec is None or str(spec).strip() == "":
        others = [i for i in candidates if i != data_plane]
        return (f"{var} is unset and this host also has {', '.join(others)}: {reader} picks an interface itself"
                if others else None)
    chosen = ifname_matches(str(spec), candidates, exact_only=exact)
    if data_plane not in chosen:
        return (f"{var}={spec} does not select the data-plane interface {data_plane} "
                f"(selects {', '.join(chosen) or 'nothing'})")
    if len(chosen) > 1:
        return (f"{var}={spec} also selects {', '.join(i for i in chosen if i != data_plane)}, "
                f"not only the data-plane interface {data_plane}")
    return None


def ifname_problems(env: dict, data_plane: str, interfaces: list[str]) -> list[str]:
    """Why ``env`` does not send NCCL's and Gloo's sockets over ``data_plane`` only: [] when it does.

    ``interfaces``: every interface of the host with an address, loopback excluded (the
    candidates NCCL and Gloo choose from). A variable that is set must select
    ``data_plane`` and no other candidate (NCCL interface-list syntax: ``eth``, ``=eth0``,
    ``^docker``; GLOO_SOCKET_IFNAME exact names, see ifname_matches). An unset
    variable is a problem only where the host has another candidate, since NCCL and Gloo
    then pick one themselves. Messages name the variable, its value and the interfaces.
    """
    candidates = sorted(set(interfaces) | {data_plane})
    found = (_var_problem(var, exact, reader, env.get(var), data_plane, candidates)
             for var, exact, reader in IFNAME_READERS)
    return [p for p in found if p]


def live_values(files: list[dict] | None) -> dict[str, tuple[str, str]]:
    """The interface variables a launch gets on the node: var -> (value, the file it came from).

    ``files``: facts ``nccl_env.files``, [{path, values}]: the launch env file first, then
    /etc/nccl.conf (``read_env``). The env file is sourced into the environment,
    which NCCL reads before /etc/nccl.conf (NCCL's environment documentation: the file only
    supplies what the environment leaves unset); Gloo reads the environment only.
    """
    out: dict[str, tuple[str, str]] = {}
    files = [f for f in files or [] if isinstance(f, dict)]
    for var, _exact, reader in IFNAME_READERS:
        for f in files[:2] if reader == "NCCL" else files[:1]:
            if isinstance(f.get("values"), dict) and var in f["values"]:
                out[var] = (f["values"][var], f["path"])
                break
    return out


def check(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """nccl_env.ifname: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME of intent ``nccl_env`` (the
    effective launch environment, name -> value) select the data-plane interface that
    node_facts found (facts ``data_plane.interface``), and no other interface with an address
    (facts ``interfaces{name: {addresses}}``, loopback excluded).

    The files a launch reads on the node count too (facts ``nccl_env.files``, ``live_values``):
    a value there that differs from the intent (a hand edit, an interface renamed since
    provisioning) is judged as well, naming its file. FAIL measures host -> the problems
    (``ifname_problems``); PASS measures host -> {variable: value}. Hosts without a data-plane
    interface are left to data_plane.interface; no check when no host has both an nccl_env
    intent and a data-plane interface.
    """
    problems: dict[str, list[str]] = {}
    values: dict[str, dict] = {}
    for host, rec in sorted(records.items()):
        env = intent_of(rec, "nccl_env")
        dp = (facts_of(rec).get("data_plane") or {}).get("interface")
        if env is None or not dp:
            continue
        values[host] = {var: env.get(var) for var, _, _ in IFNAME_READERS}
        ifaces = [name for name, info in (facts_of(rec).get("interfaces") or {}).items()
                  if name != "lo" and (info or {}).get("addresses")]
        found = ifname_problems(env, dp, ifaces)
        live = live_values((facts_of(rec).get("nccl_env") or {}).get("files"))
        candidates = sorted(set(ifaces) | {dp})
        for var, exact, reader in IFNAME_READERS:
            if var in live and live[var][0] != env.get(var):
                why = _var_problem(var, exact, reader, live[var][0], dp, candidates)
                if why:
                    found.append(f"{why}, set in {live[var][1]}")
        if found:
            problems[host] = found
    if not values:
        return []
    return [verdict("nccl_env.ifname", problems,
                    expected="NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME select the data-plane interface only",
                    message="NCCL/Gloo sockets not pinned to the data plane: "
                            + "; ".join(f"{h}: {', '.join(p)}" for h, p in problems.items()),
                    remediation="re-run site.yml (role nccl_env) with NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME "
                                "left null (they default to the data-plane interface) or naming it, on "
                                + ", ".join(problems),
                    passed=f"NCCL and Gloo sockets on the data-plane interface on {len(values)} hosts",
                    passed_measured=values),
            *debug_class_check(records)]


def debug_class_check(records: dict[str, HostRecord]) -> list[Check]:
    """nccl_env.debug_class: WARN per host whose managed launch environment (intent ``nccl_env``) or
    launch files on the node (facts ``nccl_env.files``) set a variable of NCCL's debugging class
    (DEBUG_CLASS), which NCCL's env.rst says "should generally not be set for production code":
    a forced algorithm, protocol, buffer size or channel count outlives the version and topology it
    was chosen for. measured: host -> ["NAME=value (where)"]. PASS otherwise; no check when no host
    has an nccl_env intent."""
    found: dict[str, list[str]] = {}
    hosts = 0
    for host, rec in sorted(records.items()):
        env = intent_of(rec, "nccl_env")
        if env is None:
            continue
        hosts += 1
        seen = {name: f"{name}={env[name]} (ncclprep's nccl_env)" for name in DEBUG_CLASS if env.get(name) is not None}
        for f in (facts_of(rec).get("nccl_env") or {}).get("files") or []:
            values = f.get("values") if isinstance(f, dict) else None
            for name in DEBUG_CLASS:
                if isinstance(values, dict) and name in values and name not in seen:
                    seen[name] = f"{name}={values[name]} ({f.get('path')})"
        if seen:
            found[host] = sorted(seen.values())
    if not hosts:
        return []
    expected = f"none of {', '.join(DEBUG_CLASS)}"
    if not found:
        return [make_check("nccl_env.debug_class", "PASS", (), measured={}, expected=expected,
                           message=f"no debugging-class NCCL variable in the launch environment of {hosts} hosts")]
    return [make_check("nccl_env.debug_class", "WARN", found, measured=found, expected=expected,
                       message="debugging-class NCCL variables set for every job: " + "; ".join(
                           f"{h}: {', '.join(v)}" for h, v in found.items()) + " (NCCL env.rst: they \"should "
                           "generally not be set for production code\")",
                       remediation="remove them from nccl_env_overrides (and the files named) and re-run site.yml; "
                                   "to choose algorithms and protocols per size, give NCCL a tuner CSV "
                                   "(`ncclprep tune --nccl-tuner`, docs/tuning.md)")]


# This concern's entry in the registry (concerns/__init__.py).
SWITCH = None
DATA_PLANE = True
FACTS = True
IDS = ("nccl_env.ifname", "nccl_env.debug_class")
OPTIONS = dict(env_files=dict(type="list", elements="path", default=[]))


def read(run: Runner, p: dict) -> dict:
    """``read_env`` with the options of OPTIONS (checked, defaults filled)."""
    return read_env(env_files=p["env_files"])

#: The variables the intent is computed from (concerns.intent hands over these only).
INTENT_VARS = ("nccl_env_settings", "nccl_env_overrides", "data_plane")
#: The facts it takes from the node: none (the env files are what it writes).
INTENT_FACTS = ()
#: The interface variables that default to the data-plane interface when set to null.
AUTO_IFNAME = {"NCCL_SOCKET_IFNAME": "={}", "GLOO_SOCKET_IFNAME": "{}"}


def resolve_env(settings: dict | None, overrides: dict | None, interface: str | None) -> dict:
    """nccl_env_settings with nccl_env_overrides over them, key by key, every value as text: a null
    interface variable (AUTO_IFNAME) becomes the data-plane interface (NCCL_SOCKET_IFNAME as
    ``=<interface>``, NCCL's exact-name form), any other null is dropped."""
    out = {}
    for name, value in {**(settings or {}), **(overrides or {})}.items():
        if value is None and name in AUTO_IFNAME:
            out[name] = AUTO_IFNAME[name].format(interface)
        elif value is not None:
            out[name] = str(value)
    return out


def intent(v: dict, node: dict) -> dict:
    """The effective environment ``{NAME: value}``: ``resolve_env`` with the deprecated names
    renamed to their successors (``check_env``'s effective). Entries ``check_env`` refuses are left
    out; the role's validate.yml fails on them, with this host's interfaces, before any change."""
    env = resolve_env(v["nccl_env_settings"], v["nccl_env_overrides"], (v["data_plane"] or {}).get("interface"))
    return check_env(env)[2]
