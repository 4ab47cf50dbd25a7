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
- exception names such as ``DistNetworkError`` and ``RendezvousConnectionError``.

Sources: PyTorch ``torch/csrc/distributed/c10d/socket.cpp`` (message formats) and
``torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py`` (the node whose
own host name or address equals the rendezvous endpoint hosts the c10d store).
"""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.parsers import finding

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
    ``similar`` is the ``[N similar log lines]`` count or None. Never raises.
    """
    out: dict = {"launch_config": {}, "bind_failures": [], "connect_failures": [], "timeouts": [],
                 "resolve_failures": [], "exceptions": [], "unparsed": []}
    in_config = False
    for line in text.splitlines():
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
        for name in _EXC_RE.findall(line):
            found = True
            if name not in out["exceptions"]:
                out["exceptions"].append(name)
        if not found:
            out["unparsed"].append(line)
    return out


def diagnose_torch_dist(parsed: dict, host: str | None = None) -> list[dict]:
    """Findings for ``parse_torch_dist`` output.

    - FAIL ``torch.port_in_use`` per port that failed to bind with errno 98 (EADDRINUSE): another
      job or a stale process holds the rendezvous/master port on this host.
    - FAIL ``torch.master_unresolvable`` per host name whose addresses cannot be retrieved (gai error);
      connect failures to that name are its symptom and give no finding of their own.
    - FAIL ``torch.rdzv_store_unreachable`` per client timeout when the launch config uses the c10d
      rendezvous backend (no node hosted the store, or the port is blocked); without that config,
      FAIL ``torch.connect_timeout``.
    - FAIL ``torch.connect_failed`` per other host and port that could not be connected to.
    """
    out: list[dict] = []
    subject = host or "host"
    for port in sorted({b["port"] for b in parsed["bind_failures"] if b["errno"] == 98}):
        out.append(finding("torch.port_in_use", "FAIL", subject,
                           f"port {port} is already in use on this host (another job or a stale process)",
                           f"pick a free port (ss -ltnp 'sport = :{port}' shows the holder) or let torchrun "
                           "choose one (--standalone on a single node)", host=host, port=port))
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
    seen = set()
    for c in parsed["connect_failures"]:
        if c["host"] in unresolved or (c["host"], c["port"]) in seen:
            continue
        seen.add((c["host"], c["port"]))
        out.append(finding("torch.connect_failed", "FAIL", f"{c['host']}:{c['port']}",
                           f"cannot connect to {c['host']}:{c['port']} (errno {c['errno']} - {c['reason']})",
                           "check the address, that the master listens, and the firewall", host=host,
                           errno=c["errno"]))
    return out
