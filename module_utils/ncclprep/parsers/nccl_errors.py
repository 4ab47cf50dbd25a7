"""NCCL's error messages with a known cause, wherever they are printed: in an NCCL_DEBUG log, or as
the ``Last error:`` of a torch ``DistBackendError`` (NCCL 2.4 to 2.2x).

Each rule reads one message and names its cause and fix, from NCCL's own text and the threads
that settled it (cited per rule). ``scan_nccl_errors`` finds them in text; ``diagnose_nccl_errors``
turns them into findings; ``covered`` tells the NCCL log reader which WARN lines a rule explains
(they are not listed again as plain WARN lines).
"""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.parsers import finding

#: NCCL's own "debugging" variables that choose how collectives run (NVIDIA/nccl
# docs/userguide/source/env.rst, section "Debugging": they "should generally not be set for
# production code"; NCCL_PROTO=LL128 "on platforms that don't support it can lead to data
# corruption"). NCCL_IB_DISABLE and NCCL_SHM_DISABLE sit in that section too but switch a transport
# off, which a cluster without InfiniBand sets on purpose: not warned about.
DEBUG_CLASS = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_BUFFSIZE", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")

#: (id, severity, regex): the regexes run on each line.
RULES = [
    # NCCL init.cc: two ranks of one communicator on one GPU; pytorch/torchtitan#1224 (set_device first)
    ("nccl.duplicate_gpu", "FAIL",
     re.compile(r"Duplicate GPU detected\s*:\s*rank (\d+) and rank (\d+) both on CUDA device (\w+)")),
    # NCCL's CUDACHECK text for a kernel the library was not built for: NVIDIA/nccl#444 (sm_35)
    ("nccl.cuda_arch", "FAIL", re.compile(r"Cuda failure '(invalid device function|no kernel image is available)")),
    ("nccl.cuda_oom", "FAIL", re.compile(r"Cuda failure '(out of memory)'")),
    # shmutils.cc: the SHM transport's segment in /dev/shm; pytorch/torchtitan#853, pytorch/ci-infra#490
    ("nccl.shm_too_small", "FAIL",
     re.compile(r"(?:Error while creating shared memory segment|failed to extend) (/dev/shm/[\w.-]+)"
                r"(?: to (\d+) bytes| \(size (\d+)\))?")),
    # ibvwrap.cc / net_ib.cc: the verbs device is listed but cannot be opened (a container without
    # /dev/infiniband): NVIDIA/nccl#451, pytorch/pytorch#111424
    ("nccl.ib_open_failed", "FAIL",
     re.compile(r"NET/IB : Unable to open device (\S+)|Call to ibv_open_device failed")),
    # ibv_reg_mr under a small RLIMIT_MEMLOCK (a container's default 64 KiB)
    ("nccl.ib_memlock", "FAIL",
     re.compile(r"(?:Call to )?ibv_reg_mr(?:_iova2)? failed[^\n]*?(Cannot allocate memory)?")),
    # socket.cc: a connection over loopback closed by this very host (NVIDIA/nccl-tests#217, one GPU)
    ("nccl.loopback_closed", "FAIL",
     re.compile(r"Connection closed by remote peer (localhost|127\.0\.0\.1|::1)\b")),
    # no libibverbs at all: no IB/RoCE transport, sockets between hosts (NVIDIA/nccl#444: not a cause)
    ("nccl.no_verbs", "INFO", re.compile(r"Failed to open libibverbs\.so")),
    # bootstrap.cc after socket.cc: the TCP connect to the root or a peer never completed
    ("nccl.bootstrap_connect", "FAIL",
     re.compile(r"socket\.cc:\d+ -> \d+ \((Operation now in progress|Connection refused|Connection timed out|"
                r"No route to host|Network is unreachable)\)|Connect to (\S+?)<\d+> failed : (Connection \w+[\w ]*)")),
]
#: The bootstrap's own error stack (``bootstrap.cc:275 -> 2``): the INFO line ``Bootstrap : Using`` every
#: log prints does not count (a connect failing later, on the data path, is not the bootstrap's).
_BOOTSTRAP_RE = re.compile(r"bootstrap\.cc:\d+ -> \d+|bootstrap(?:Root|Connect|Net\w*) ")
_FALLBACK_RE = re.compile(r"NET/IB : No device found|Using network Socket|NET/Socket : Using")
#: Found by ``scan_nccl_errors`` in at most this many lines per rule (the count goes on).
MAX_LINES = 3


def scan_nccl_errors(text: str) -> list[dict]:
    """The rules' messages in ``text``: ``[{"id", "severity", "groups": [the first match's groups],
    "count": lines matched, "lines": [the first MAX_LINES lines]}]``, in RULES order, each rule once;
    also ``bootstrap`` (a bootstrap line is in the text) and ``fallback`` (the log shows NCCL on
    sockets) on each. Never raises."""
    found: dict[str, dict] = {}
    bootstrap = bool(_BOOTSTRAP_RE.search(text))
    fallback = bool(_FALLBACK_RE.search(text))
    for line in text.splitlines():
        for rid, severity, regex in RULES:
            m = regex.search(line)
            if not m:
                continue
            row = found.setdefault(rid, {"id": rid, "severity": severity, "groups": list(m.groups()), "count": 0,
                                         "lines": [], "bootstrap": bootstrap, "fallback": fallback})
            if rid == "nccl.ib_open_failed" and m.group(1) and not row["groups"][0]:
                row["groups"] = list(m.groups())  # the line naming the device beats ibvwrap's
            row["count"] += 1
            if len(row["lines"]) < MAX_LINES:
                row["lines"].append(line.strip())
    out = [found[rid] for rid, _s, _r in RULES if rid in found]
    if any(r["id"] == "nccl.bootstrap_connect" for r in out) and not bootstrap:
        out = [r for r in out if r["id"] != "nccl.bootstrap_connect"]  # a socket error of a later phase
    return out


def covered(message: str, found: list[dict] | None = None) -> bool:
    """True when a rule explains this (WARN) message; with ``found`` (``scan_nccl_errors``'s rows),
    only a rule that gave a finding counts (a connect error with no bootstrap stack stays a WARN)."""
    fired = None if found is None else {r["id"] for r in found}
    return any(regex.search(message) for rid, _s, regex in RULES if fired is None or rid in fired)


def diagnose_nccl_errors(found: list[dict], host: str | None = None) -> list[dict]:
    """Findings for ``scan_nccl_errors`` output.

    - FAIL ``nccl.duplicate_gpu``: two ranks of one communicator on one GPU (NCCL init.cc); the
      process did not select its GPU before the communicator was made (pytorch/torchtitan#1224:
      torch.cuda.set_device before the device mesh).
    - FAIL ``nccl.cuda_arch``: NCCL (or the framework's build of it) has no kernels for this GPU
      (NVIDIA/nccl#444: not compiled for sm_35).
    - FAIL ``nccl.cuda_oom``: NCCL could not allocate GPU memory for its buffers.
    - FAIL ``nccl.shm_too_small``: /dev/shm cannot hold the shared-memory transport's segment
      (a container's 64 MB or 16 MB default: pytorch/torchtitan#853, pytorch/ci-infra#490).
    - FAIL ``nccl.ib_open_failed``: the verbs device is listed but cannot be opened, so NCCL falls
      back to sockets (NVIDIA/nccl#451; pytorch/pytorch#111424: /dev/infiniband into the container).
    - FAIL ``nccl.ib_memlock``: memory registration failed (RLIMIT_MEMLOCK too small).
    - FAIL ``nccl.loopback_closed``: a TCP connection to localhost closed by the host itself
      (NVIDIA/nccl-tests#217: a one-GPU run that fails so is not a GPU or fabric problem).
    - INFO ``nccl.no_verbs``: no libibverbs, so no IB/RoCE transport; a cause only between hosts
      that have RDMA NICs (NVIDIA/nccl#444: a red herring on one node).
    - FAIL ``nccl.bootstrap_connect``: the bootstrap's TCP connect to the root or a peer did not
      complete (firewall, or an interface the nodes do not reach each other on).
    """
    subject = host or "host"
    out = []
    for r in found:
        g, n = r["groups"], r["count"]
        times = f" ({n} lines)" if n > 1 else ""
        if r["id"] == "nccl.duplicate_gpu":
            out.append(finding(r["id"], "FAIL", f"CUDA device {g[2]}",
                               f"ranks {g[0]} and {g[1]} of one communicator are on the same GPU (CUDA device {g[2]}): "
                               "a process did not select its own GPU before the communicator was made",
                               "call torch.cuda.set_device(local_rank) (or init_process_group(device_id=...)) before "
                               "creating process groups or a device mesh; check CUDA_VISIBLE_DEVICES per rank",
                               host=host, ranks=[int(g[0]), int(g[1])], device=g[2]))
        elif r["id"] == "nccl.cuda_arch":
            out.append(finding(r["id"], "FAIL", subject,
                               f"CUDA '{g[0]}' in NCCL{times}: this build of NCCL (or of the framework that "
                               "bundles it) has no kernels for this GPU's architecture",
                               "install a PyTorch/NCCL build compiled for the GPU's compute capability "
                               "(nvidia-smi --query-gpu=compute_cap); the libibverbs and socket lines around it are "
                               "not the cause", host=host))
        elif r["id"] == "nccl.cuda_oom":
            out.append(finding(r["id"], "FAIL", subject,
                               f"CUDA out of memory inside NCCL{times}: its buffers did not fit on the GPU",
                               "leave GPU memory for NCCL (a smaller batch, PYTORCH_CUDA_ALLOC_CONF, fewer "
                               "communicators) or lower NCCL_BUFFSIZE / NCCL_NCHANNELS_PER_NET_PEER", host=host))
        elif r["id"] == "nccl.shm_too_small":
            size = g[1] or g[2]
            out.append(finding(r["id"], "FAIL", "/dev/shm",
                               f"NCCL could not create its shared-memory segment {g[0]}"
                               + (f" ({int(size):,} bytes)" if size else "") + f"{times}: /dev/shm is too small "
                               "(a container's default is 64 MB, some runtimes give 16 MB)",
                               "run the container with --shm-size=1g (docker/podman), or mount a larger tmpfs at "
                               "/dev/shm (Kubernetes: an emptyDir with medium Memory); NCCL_SHM_DISABLE=1 only as a "
                               "stopgap", host=host, segment=g[0], size_bytes=int(size) if size else None))
        elif r["id"] == "nccl.ib_open_failed":
            dev = g[0]
            out.append(finding(r["id"], "FAIL", dev or subject,
                               f"NCCL could not open the RDMA device {dev or '(unnamed)'} (ibv_open_device failed)"
                               + (" and fell back to sockets" if r["fallback"] else "")
                               + ": in a container its /dev/infiniband node is not there",
                               "give the container the RDMA devices (--device=/dev/infiniband, or the RDMA device "
                               "plugin), --cap-add=IPC_LOCK and an unlimited memlock (--ulimit memlock=-1)",
                               host=host, device=dev, fallback=r["fallback"]))
        elif r["id"] == "nccl.ib_memlock":
            out.append(finding(r["id"], "FAIL", subject,
                               f"NCCL could not register memory with the RDMA NIC (ibv_reg_mr failed{times}): the "
                               "locked-memory limit is too small", "raise RLIMIT_MEMLOCK to unlimited for the job "
                               "(ulimit -l; --ulimit memlock=-1 in a container; LimitMEMLOCK=infinity for a service)",
                               host=host))
        elif r["id"] == "nccl.loopback_closed":
            out.append(finding(r["id"], "FAIL", subject,
                               f"a connection of NCCL to {g[0]} was closed by this host itself{times}: something on "
                               "the host (a firewall, an endpoint-security agent, a socket limit) cuts local TCP "
                               "connections; not the GPUs or the fabric", "check the host's firewall for rules on lo "
                               "(nft list ruleset, iptables -S), security agents and ulimit -n; the same run on "
                               "another host tells host from software", host=host, peer=g[0]))
        elif r["id"] == "nccl.no_verbs":
            out.append(finding(r["id"], "INFO", subject,
                               "NCCL found no libibverbs: no IB/RoCE transport, so sockets between hosts (inside one "
                               "host it does not matter)", "install rdma-core's libibverbs where the nodes have RDMA "
                               "NICs", host=host))
        elif r["id"] == "nccl.bootstrap_connect":
            why = g[0] or g[2] or "no answer"
            out.append(finding(r["id"], "FAIL", g[1] or subject,
                               f"NCCL's bootstrap could not connect to the root rank or a peer ({why}){times}: a "
                               "firewall between the nodes, or an interface they do not reach each other on",
                               "open the bootstrap and NCCL ports between the nodes (or the whole cluster subnet) and "
                               "set NCCL_SOCKET_IFNAME to the interface the nodes share", host=host, reason=why))
    return out
