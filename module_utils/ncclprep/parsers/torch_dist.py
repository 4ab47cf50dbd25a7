"""torch.distributed / torchrun logs: launch config, c10d socket errors, exception names.

Read from the text (several facts may share a line; ``[7 similar log lines]``
prefixes give ``similar``):

- torchrun's ``Starting elastic_operator with launch configs:`` block of ``key : value`` lines;
- c10d server bind failures ``failed to bind to [::]:29500 (errno: 98 - Address already in use)``, and
  the torch 2.x summary ``failed to listen on any local network address. port: 29510, ..., code: -98,
  name: EADDRINUSE, message: address already in use`` (host ``*``: every local address);
- c10d client connect failures ``failed to connect to [host]:port (errno: 22 - Invalid argument)``;
- client timeouts ``timed out after 60s while trying to connect to (10.0.0.1, 2222)``;
- name resolution failures ``addresses of (host, port) cannot be retrieved (gai error: -2 - ...)``;
- exception names such as ``DistNetworkError`` and ``RendezvousConnectionError``;
- ranks that did not arrive: ``[Rank 0]: Rank 1 failed to pass monitoredBarrier in 2000 ms`` (or
  ``Ranks 1, 2 failed ...`` with ``wait_all_ranks``), the store-based barrier of init_process_group
  ``Timed out initializing process group in store based barrier on rank: 0, for key: ...
  (world_size=2, worker_count=1, timeout=0:30:00)`` (``num_workers_joined=`` in newer torch, also its
  ``Waiting in store based barrier`` progress lines), and the TCPStore server's ``Timed out after
  901 seconds waiting for clients. 1/2 clients joined.``

Sources: PyTorch ``torch/csrc/distributed/c10d/socket.cpp`` (message formats) and
``torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py`` (the node whose
own host name or address equals the rendezvous endpoint hosts the c10d store).
"""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.parsers import finding, nccl_errors
from ansible.module_utils.ncclprep.parsers.torch_watchdog import (
    diagnose_torch_watchdog,
    is_watchdog_line,
    parse_torch_watchdog,
)

_SIMILAR_RE = re.compile(r"\[(\d+) similar log lines\]")
_CONFIG_START_RE = re.compile(r"Starting elastic_operator with launch configs:")
_CONFIG_RE = re.compile(r"^\s+(\w+)\s*:\s*(.*?)\s*$")
_BIND_RE = re.compile(r"failed to bind to (\[[^\]]*\]|[^\s:]+):(\d+) \(errno: (\d+) - ([^)]*)\)")
_LISTEN_RE = re.compile(r"failed to listen on any local network address\. port: (\d+), [^\n]*?code: -(\d+), "
                        r"name: \w+, message: ([^\n]*)")
_CONNECT_RE = re.compile(r"failed to connect to \[?([^\]\s]+?)\]?:(\d+) \(errno: (\d+) - ([^)]*)\)")
_TIMEOUT_RE = re.compile(r"timed out after (\d+(?:\.\d+)?)s while trying to connect to \(([^,]+), (\d+)\)")
_GAI_RE = re.compile(r"The (IPv4|IPv6)? ?network addresses of \(([^,]+), (\d+)\) cannot be retrieved "
                     r"\(gai error: (-?\d+) - ([^)]*)\)")
_EXC_RE = re.compile(r"\b([A-Z]\w*(?:Error|Exception))\b:")
_MONITORED_RE = re.compile(r"\bRanks? ((?:\d+,\s*)*\d+) failed to pass monitoredBarrier in (\d+) ms")
_STORE_BARRIER_RE = re.compile(r"\b(Timed out initializing process group|Waiting) in store based barrier.*?"
                               r"\(world_size=(\d+), (?:worker_count|num_workers_joined)=(\d+), timeout=([^,)\s]+)")
#: A launcher's command line: ``--master_addr=10.0.0.1`` / ``--master_addr 10.0.0.1`` (torchrun, deepspeed);
#: MASTER_ADDR=... in an environment dump.
_MASTER_ADDR_RE = re.compile(r"(?:--master[_-]addr[= ]|\bMASTER_ADDR=)([^\s'\",;]+)")
#: torch 1.x's TCPStore server bind failure: the message only (no port).
_ADDR_IN_USE_RE = re.compile(r"^(?:RuntimeError|torch\.distributed\.DistNetworkError): Address already in use\s*$")
#: torchrun's ChildFailedError table (torch/distributed/elastic/multiprocessing/errors): the
#: "Root Cause (first observed failure):" entry's ``time``, ``host``, ``rank : 3 (local_rank: 3)``,
#: ``exitcode : -9 (pid: 6774)``; and the agent's ``failed (exitcode: -9) local_rank: 0 (pid: 1322)``.
_ROOT_CAUSE_RE = re.compile(r"Root Cause \(first observed failure\):")
_FIELD_LINE_RE = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*?)\s*$")
_AGENT_FAILED_RE = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
#: What a worker's exit code says (a negative one is the signal that ended it: Linux signal(7)).
EXIT_MEANING = {
    -9: ("SIGKILL: killed from outside, most often by the kernel's OOM killer (host memory)",
         "dmesg -T | grep -i -e oom -e killed on that host; fewer DataLoader workers, a smaller batch or more host "
         "memory; a scheduler's memory limit kills the same way"),
    -6: ("SIGABRT: the process aborted itself, as torch's NCCL watchdog does after a collective timeout or an NCCL "
         "error", "read that rank's log above the abort (the watchdog's timeout or NCCL's error names the cause)"),
    -11: ("SIGSEGV: a crash in native code (a CUDA/NCCL library, an extension, a driver)",
          "run that rank with TORCH_SHOW_CPP_STACKTRACES=1 (or under gdb) and check the driver and library versions"),
    -7: ("SIGBUS: a memory-mapped file or /dev/shm ran out (a container's small /dev/shm)",
         "give the job a larger /dev/shm (--shm-size) and check the disk of mapped files"),
    -15: ("SIGTERM: stopped from outside (the launcher, after another rank failed, or the scheduler)",
          "this rank was ended because of another: look for the first rank that failed"),
    1: ("a Python exception in the worker: its traceback is in the rank's own log (or error_file)",
        "read that rank's traceback; @record on main() writes it to error_file"),
}
_CLIENTS_RE = re.compile(r"Timed out after (\d+) seconds waiting for clients\. (\d+)/(\d+) clients joined")


def _config_value(text: str):
    """Launch-config values: digits -> int, ``None`` -> None, else the printed string."""
    if re.match(r"^-?\d+$", text):
        return int(text)
    return None if text == "None" else text


def parse_torch_dist(text: str) -> dict:
    """Parse torch.distributed / torchrun log text into a dict.

    Returns ``{"launch_config": {key: value}, "bind_failures": [{"host", "port", "errno", "reason",
    "similar"}], "connect_failures": [{"host", "port", "errno", "reason", "similar"}], "timeouts":
    [{"host", "port", "timeout_s", "similar"}], "resolve_failures": [{"host", "port", "family",
    "gai_error", "reason", "similar"}], "exceptions": [names, first seen first], "unparsed": [lines]}``.
    Ports are ints, ``timeout_s`` seconds; a bind address keeps its brackets (``[::]``).
    ``similar`` is the ``[N similar log lines]`` count or None. Also ``"barrier_failures": [int ranks]``
    (monitoredBarrier, first seen first), ``"store_barrier": {"world_size", "joined", "timeout",
    "timed_out": bool} | None`` (the last store-based barrier line; ``joined`` is worker_count) and
    ``"store_clients": {"joined", "expected", "timeout_s"} | None`` (TCPStore server) and ``"watchdog"``:
    ``"master_addrs"``: the master addresses a launcher's command line or environment gives,
    ``"first_failure"``: torchrun's "Root Cause (first observed failure)" entry as printed
    (``{"time", "host", "rank", "exitcode", "error_file", "traceback"}`` strings) or None,
    ``"worker_failures"``: ``[{"exitcode", "local_rank", "pid"}]`` from the agent's lines, and
    the NCCL watchdog's timeouts and progress (``torch_watchdog.parse_torch_watchdog``) and
    ``"nccl_errors"``: NCCL's messages with a known cause (``nccl_errors.scan_nccl_errors``). Never raises.
    """
    out: dict = {"launch_config": {}, "bind_failures": [], "connect_failures": [], "timeouts": [],
                 "resolve_failures": [], "exceptions": [], "barrier_failures": [], "store_barrier": None,
                 "store_clients": None, "master_addrs": [], "first_failure": None, "worker_failures": [],
                 "unparsed": []}
    in_config = False
    root: dict | None = None
    for line in text.splitlines():
        if _ROOT_CAUSE_RE.search(line):
            root = out["first_failure"] = {}
            continue
        if root is not None:
            field = _FIELD_LINE_RE.match(line)
            if field:
                root[field.group(1)] = field.group(2)
                continue
            if re.match(r"^\s*\[\d+\]:\s*$", line):
                continue
            root = None
        m = _AGENT_FAILED_RE.search(line)
        if m:
            out["worker_failures"].append({"exitcode": int(m.group(1)), "local_rank": int(m.group(2)),
                                           "pid": int(m.group(3))})
        if not line.strip():
            in_config = False
            continue
        if _CONFIG_START_RE.search(line):
            in_config = True
            continue
        m = _CONFIG_RE.match(line)
        if in_config and m:
            out["launch_config"][m.group(1)] = _config_value(m.group(2))
            continue
        in_config = False
        similar = _SIMILAR_RE.search(line)
        count = int(similar.group(1)) if similar else None
        found = False
        for host, port, errno, reason in _BIND_RE.findall(line):
            out["bind_failures"].append({"host": host, "port": int(port), "errno": int(errno), "reason": reason,
                                         "similar": count})
            found = True
        for port, errno, reason in _LISTEN_RE.findall(line):
            out["bind_failures"].append({"host": "*", "port": int(port), "errno": int(errno), "reason": reason.strip(),
                                         "similar": count})
            found = True
        for host, port, errno, reason in _CONNECT_RE.findall(line):
            out["connect_failures"].append({"host": host, "port": int(port), "errno": int(errno), "reason": reason,
                                            "similar": count})
            found = True
        for secs, host, port in _TIMEOUT_RE.findall(line):
            out["timeouts"].append({"host": host.strip(), "port": int(port), "timeout_s": float(secs),
                                    "similar": count})
            found = True
        for family, host, port, gai, reason in _GAI_RE.findall(line):
            out["resolve_failures"].append({"host": host.strip(), "port": int(port), "family": family or None,
                                            "gai_error": int(gai), "reason": reason, "similar": count})
            found = True
        for ranks, _ms in _MONITORED_RE.findall(line):
            found = True
            for r in re.findall(r"\d+", ranks):
                if int(r) not in out["barrier_failures"]:
                    out["barrier_failures"].append(int(r))
        m = _STORE_BARRIER_RE.search(line)
        if m:
            found = True
            timed_out = m.group(1) != "Waiting" or bool((out["store_barrier"] or {}).get("timed_out"))
            out["store_barrier"] = {"world_size": int(m.group(2)), "joined": int(m.group(3)), "timeout": m.group(4),
                                    "timed_out": timed_out}
        for addr in _MASTER_ADDR_RE.findall(line):
            found = True
            if addr not in out["master_addrs"]:
                out["master_addrs"].append(addr)
        if _ADDR_IN_USE_RE.match(line.strip()):
            found = True
            out["bind_failures"].append({"host": None, "port": None, "errno": 98, "reason": "Address already in use",
                                         "similar": count})
        m = _CLIENTS_RE.search(line)
        if m:
            found = True
            out["store_clients"] = {"joined": int(m.group(2)), "expected": int(m.group(3)),
                                    "timeout_s": int(m.group(1))}
        for name in _EXC_RE.findall(line):
            found = True
            if name not in out["exceptions"]:
                out["exceptions"].append(name)
        if not found and not is_watchdog_line(line):
            out["unparsed"].append(line)
    out["watchdog"] = parse_torch_watchdog(text)
    out["nccl_errors"] = nccl_errors.scan_nccl_errors(text)  # NCCL's "Last error:" inside DistBackendError
    return out


#: A host name or an address (IPv4, IPv6 in or out of brackets): what a master address must be.
_HOSTLIKE_RE = re.compile(r"^(?:\[?[0-9A-Fa-f:.]+\]?|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)$")
#: What a connect errno says about the path to the master (Linux errno(3)).
_CONNECT_ERRNO = {
    113: (": this node has no route to that address: it is on a network this node is not on (a launcher took the "
          "master's first interface), or a firewall rejects with host-prohibited",
          "set MASTER_ADDR (--master_addr, or the launcher's main process IP) to the master's address on the network "
          "the nodes share; ip route get <addr> on this node shows the path"),
    111: (": nothing listens there: the master's store is not up (yet), or the port is wrong",
          "start the master first or raise the rendezvous timeout; check MASTER_PORT on every node"),
    110: (": no answer: a firewall drops the packets or the address is wrong",
          "open the port from every node to the master (the firewall role's rendezvous ports)"),
}


def _first_failure(first: dict | None, workers: list[dict], host: str | None) -> dict:
    """FAIL ``torch.first_failure``: the first rank torchrun saw fail, its host, time and exit code."""
    if first:
        rank = re.match(r"(-?\d+)(?:\s*\(local_rank:\s*(\d+)\))?", first.get("rank") or "")
        code = re.match(r"(-?\d+)", first.get("exitcode") or "")
        exitcode = int(code.group(1)) if code else None
        who = (f"rank {rank.group(1)}" + (f" (local rank {rank.group(2)})" if rank.group(2) else "")) if rank else \
            "a rank"
        where = (f" on {first['host']}" if first.get("host") else "") + (f" at {first['time']}" if first.get("time")
                                                                          else "")
    else:
        w = workers[0]
        exitcode, who, where, rank = w["exitcode"], f"local rank {w['local_rank']} (pid {w['pid']})", "", None
    meaning, fix = EXIT_MEANING.get(exitcode, ("", "read that rank's own log"))
    return finding("torch.first_failure", "FAIL", who, f"torchrun's first failure: {who}{where}, exit code {exitcode}"
                   + (f" ({meaning})" if meaning else ""), fix, host=host, exitcode=exitcode,
                   rank=int(rank.group(1)) if rank else None)


def diagnose_torch_dist(parsed: dict, host: str | None = None) -> list[dict]:
    """Findings for ``parse_torch_dist`` output.

    - FAIL ``torch.port_in_use`` per port that failed to bind with errno 98 (EADDRINUSE): another
      job or a stale process holds the rendezvous/master port on this host.
    - FAIL ``torch.master_unresolvable`` per host name whose addresses cannot be retrieved (gai error);
      connect failures to that name are its symptom and give no finding of their own.
    - FAIL ``torch.rdzv_store_unreachable`` per client timeout when the launch config uses the c10d
      rendezvous backend (no node hosted the store, or the port is blocked); without that config,
      FAIL ``torch.connect_timeout``.
    - FAIL ``torch.connect_failed`` per other host and port that could not be connected to, with what
      the errno says (113 no route: the master's address on a network this node is not on,
      huggingface/accelerate#2468 and microsoft/DeepSpeed#5136; 111 refused; 110 timed out).
    - FAIL ``torch.port_in_use`` also for torch 1.x's ``RuntimeError: Address already in use`` from
      the TCPStore (no port printed: MASTER_PORT; Lightning-AI/pytorch-lightning#401).
    - FAIL ``torch.first_failure``: torchrun's "Root Cause (first observed failure)" (else the agent's
      first ``failed (exitcode: N) local_rank: L``): the rank, host, time and what its exit code says
      (EXIT_MEANING: -9 the OOM killer, -6 the watchdog's abort, -11 a native crash, 1 a Python
      exception).
    - FAIL ``torch.master_addr_invalid`` for a launcher's master address that is neither a host name
      nor an address (huggingface/accelerate#2249: a .bashrc's echo taken as DeepSpeed's master_addr).
    - FAIL ``torch.ranks_missing`` when ranks did not arrive: the ranks monitoredBarrier names (rank 0
      reports each rank that did not reach the barrier in time: PyTorch docs, torch.distributed,
      "Debugging torch.distributed applications", monitored_barrier); or the store-based barrier of
      init_process_group timed out with fewer workers joined than world_size (every rank adds one
      to a counter in the store and waits for world_size: PyTorch distributed_c10d.py
      ``_store_based_barrier``, explained in facebookresearch/pytext#1567); or the TCPStore server
      saw fewer clients than expected. ``missing`` lists rank numbers where the text names them,
      else None with ``joined``/``expected`` counts. A store counter above world_size (the same
      store reused by a restarted job) gives WARN ``torch.store_barrier_stale`` instead.
    """
    out: list[dict] = []
    subject = host or "host"
    for port in sorted({b["port"] for b in parsed["bind_failures"] if b["errno"] == 98},
                       key=lambda p: (p is None, p or 0)):
        if port is None:
            out.append(finding("torch.port_in_use", "FAIL", subject,
                               "the rendezvous store could not bind its port: Address already in use (another job on "
                               "this host already holds MASTER_PORT, 29500 by default)",
                               "give each concurrent job its own MASTER_PORT (--master_port), or let torchrun choose "
                               "one (--rdzv-endpoint host:0 / --standalone)", host=host, port=None))
            continue
        out.append(finding("torch.port_in_use", "FAIL", subject,
                           f"port {port} is already in use on this host (another job or a stale process)",
                           f"pick a free port (ss -ltnp 'sport = :{port}' shows the holder) or let torchrun "
                           "choose one (--standalone on a single node)", host=host, port=port))
    for addr in parsed.get("master_addrs") or []:
        if addr.startswith(("$", "%", "{")) or "`" in addr:
            continue  # a shell or batch variable, expanded when the script runs
        if not _HOSTLIKE_RE.match(addr):
            out.append(finding("torch.master_addr_invalid", "FAIL", addr,
                               f"the master address is {addr!r}: not a host name or an address; a launcher that reads "
                               "it from a remote command's output (DeepSpeed's runner: ssh <first host> hostname -I) "
                               "took a line the remote shell's startup files printed",
                               "make the shell quiet for non-interactive ssh (no echo in .bashrc before its "
                               "interactive check) or give the master address explicitly (--master_addr)",
                               host=host, master_addr=addr))
    unresolved = []
    for r in parsed["resolve_failures"]:
        if r["host"] not in unresolved:
            unresolved.append(r["host"])
            out.append(finding("torch.master_unresolvable", "FAIL", r["host"],
                               f"the master host name {r['host']} is not resolvable here (gai error {r['gai_error']}:"
                               f" {r['reason']})", "make every node's host name resolve on every other node to its "
                               "data-plane address (DNS or /etc/hosts), or use an address", host=host,
                               port=r["port"]))
    c10d = parsed["launch_config"].get("rdzv_backend") == "c10d"
    for t in parsed["timeouts"]:
        endpoint = f"{t['host']}:{t['port']}"
        if c10d:
            out.append(finding("torch.rdzv_store_unreachable", "FAIL", endpoint,
                               f"client timed out after {t['timeout_s']:g} s connecting to the c10d store at "
                               f"{endpoint}: no node hosted it (the endpoint host did not recognise {t['host']} as "
                               "its own address) or the port is blocked",
                               f"use one of the endpoint host's own names/addresses as --rdzv-endpoint and open port "
                               f"{t['port']} to every node", host=host, timeout_s=t["timeout_s"]))
        else:
            out.append(finding("torch.connect_timeout", "FAIL", endpoint,
                               f"client timed out after {t['timeout_s']:g} s connecting to {endpoint}",
                               f"check that a process listens on {endpoint} and the port is reachable", host=host,
                               timeout_s=t["timeout_s"]))
    if parsed.get("barrier_failures"):
        ranks = parsed["barrier_failures"]
        names = ", ".join(str(r) for r in ranks)
        out.append(finding("torch.ranks_missing", "FAIL", subject,
                           f"rank{'s' if len(ranks) > 1 else ''} {names} did not reach monitoredBarrier in time: "
                           "that rank never arrived or is stuck elsewhere",
                           f"read the log of rank {ranks[0]} (its node, its last collective, a crash) and py-spy "
                           "dump its process", host=host, missing=ranks))
    barrier = parsed.get("store_barrier")
    if barrier and barrier["joined"] < barrier["world_size"] and barrier["timed_out"]:
        gone = barrier["world_size"] - barrier["joined"]
        out.append(finding("torch.ranks_missing", "FAIL", subject,
                           f"init_process_group timed out in the store-based barrier: only {barrier['joined']} of "
                           f"{barrier['world_size']} ranks joined ({gone} never arrived; timeout {barrier['timeout']})",
                           "check that every node started the job with the same world size and master address, "
                           "and that each reaches the master's store port", host=host, missing=None,
                           joined=barrier["joined"], expected=barrier["world_size"]))
    elif barrier and barrier["joined"] > barrier["world_size"]:
        out.append(finding("torch.store_barrier_stale", "WARN", subject,
                           f"store-based barrier counts {barrier['joined']} workers for world_size "
                           f"{barrier['world_size']}: the store is shared with another or an earlier run",
                           "use a fresh master port (or store) per job and one init_process_group per process",
                           host=host, joined=barrier["joined"], expected=barrier["world_size"]))
    clients = parsed.get("store_clients")
    if clients and clients["joined"] < clients["expected"]:
        out.append(finding("torch.ranks_missing", "FAIL", subject,
                           f"the TCPStore server waited {clients['timeout_s']} s and only {clients['joined']} of "
                           f"{clients['expected']} clients joined: {clients['expected'] - clients['joined']} never "
                           "arrived", "check that every node started, resolves and reaches the master address and "
                           "port; the missing node's own log names its error", host=host, missing=None,
                           joined=clients["joined"], expected=clients["expected"]))
    first = parsed.get("first_failure")
    if first or parsed.get("worker_failures"):
        out.append(_first_failure(first, parsed.get("worker_failures") or [], host))
    out += diagnose_torch_watchdog(parsed.get("watchdog") or {}, host)
    out += nccl_errors.diagnose_nccl_errors(parsed.get("nccl_errors") or [], host)
    seen = set()
    for c in parsed["connect_failures"]:
        if c["host"] in unresolved or (c["host"], c["port"]) in seen:
            continue
        seen.add((c["host"], c["port"]))
        why, fix = _CONNECT_ERRNO.get(c["errno"], ("", "check the address, that the master listens, and the firewall"))
        out.append(finding("torch.connect_failed", "FAIL", f"{c['host']}:{c['port']}",
                           f"cannot connect to {c['host']}:{c['port']} (errno {c['errno']} - {c['reason']})" + why,
                           fix, host=host, errno=c["errno"]))
    return out


# A rank that failed only because another rank went away or never answered: the c10d store's
# ``wait timeout after 90000ms, keys: ...`` (torch/csrc/distributed/c10d/TCPStore.cpp), Gloo's
# ``Timed out waiting 90000ms for recv operation to complete`` (gloo/transport/tcp/unbound_buffer.cc)
# and ``Connection closed by peer`` / ``Connection reset by peer`` (gloo/transport/tcp/pair.cc), and the
# store client's ``Failed to recv, got 0 bytes. Connection was likely closed`` (c10d/Utils.hpp, the store
# went away with the rank that hosted it).
_WAITED_RE = re.compile(r"wait timeout after \d+ ?ms|Timed out waiting \d+ ?ms for (?:recv|send) operation"
                        r"|Connection (?:closed|reset) by peer|Connection was likely closed")


def waited_on_peer(text: str | None) -> bool:
    """True when a rank's error says only that it waited for, or lost, another rank (a
    consequence, not the cause: the rank that failed on its own is the one to name)."""
    return bool(_WAITED_RE.search(text or ""))

