"""The NCCL / Gloo / torch.distributed environment: known names, enumerated values, checks.

Source of the NCCL names and values: the NCCL User Guide, "Environment Variables"
(docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html), which also defines
the interface-list syntax of NCCL_SOCKET_IFNAME (comma-separated prefixes, ``^``
to exclude, ``=`` for an exact name). TORCH_NCCL_* names: PyTorch's
ProcessGroupNCCL; NCCL_ASYNC_ERROR_HANDLING and NCCL_BLOCKING_WAIT are the
deprecated spellings of TORCH_NCCL_ASYNC_ERROR_HANDLING / TORCH_NCCL_BLOCKING_WAIT.
"""

from __future__ import annotations

import difflib
import re

NCCL_KNOWN = frozenset("""
NCCL_SOCKET_IFNAME NCCL_SOCKET_FAMILY NCCL_SOCKET_RETRY_CNT NCCL_SOCKET_RETRY_SLEEP_MSEC NCCL_SOCKET_NTHREADS
NCCL_NSOCKS_PERTHREAD NCCL_CROSS_NIC NCCL_IB_HCA NCCL_IB_TIMEOUT NCCL_IB_RETRY_CNT NCCL_IB_GID_INDEX
NCCL_IB_ADDR_FAMILY NCCL_IB_ADDR_RANGE NCCL_IB_ROCE_VERSION_NUM NCCL_IB_SL NCCL_IB_TC NCCL_IB_FIFO_TC
NCCL_IB_RETURN_ASYNC_EVENTS NCCL_IB_DISABLE NCCL_IB_AR_THRESHOLD NCCL_IB_QPS_PER_CONNECTION
NCCL_IB_SPLIT_DATA_ON_QPS NCCL_IB_CUDA_SUPPORT NCCL_IB_PCI_RELAXED_ORDERING NCCL_IB_ADAPTIVE_ROUTING
NCCL_IB_ECE_ENABLE NCCL_IB_MERGE_NICS NCCL_IB_MERGE_VFS NCCL_IB_USE_INLINE NCCL_IB_OOO_RQ
NCCL_OOB_NET_ENABLE NCCL_OOB_NET_IFNAME NCCL_UID_STAGGER_THRESHOLD NCCL_UID_STAGGER_RATE NCCL_NET
NCCL_NET_PLUGIN NCCL_TUNER_PLUGIN NCCL_PROFILER_PLUGIN NCCL_ENV_PLUGIN NCCL_IGNORE_CPU_AFFINITY NCCL_CONF_FILE
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
      error (``entry_problem``): the launcher and nccl_probe read the file literally, and no
      value may mean anything to a shell;
    - a deprecated name is a warning and is renamed to its successor in ``effective``;
    - a switch (SWITCHES) must be 0 or 1, an integer (INTS) inside its range, an enumerated
      variable (ENUMS) one of its values (``value_problem``);
    - an interface variable must select at least one interface of ``interfaces`` (when given);
      an exclusion list (``^...``) must leave at least one.
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
        effective[name] = text
    return errors, warnings, effective
