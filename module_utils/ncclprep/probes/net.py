"""Node-to-node network probes over the data-plane interface: one worker per node.

``run_node`` is what one node executes (inside a deadline child, see
``deadline.run_with_deadline``). Every node starts a listener on its data-plane address,
joins a store on the first node (torch's TCPStore, bound to that node's data-plane address
only), and then, round after round of disjoint pairs (schedule.py), measures the pair in
both directions, one direction at a time (the lower rank first):

- latency: TCP ping-pong of 8-byte messages with TCP_NODELAY on one connection; p50 and
  p99 of ``latency_samples`` round trips, microseconds;
- bandwidth: one TCP stream from this node to the peer for ``bandwidth_seconds``; bytes
  counted by the receiver between its first and last byte; GB/s (1e9 bytes/s);
- path MTU: UDP datagrams with don't-fragment set (IP_PMTUDISC_PROBE: the kernel's path
  MTU cache is ignored) sized to the configured MTU (IPv4: 20-byte IP + 8-byte UDP header
  inside it); the peer echoes a short reply; when the full size does not pass, the largest
  size that passes (binary search, >= 576);
- ports: a TCP connect to each port of the peer's sample (the rendezvous ports and a sample
  of the ephemeral range, each listened on by the peer's worker); verdict ``open`` (our
  listener answered with this run's token), ``filtered`` (no answer: dropped), ``refused``
  (reset: rejected or nothing listening), ``no route`` (host or network unreachable), or
  ``hang`` (connected, then no answer: the peer's process is stuck).

After the scheduled rounds, the first node gathers every result, picks the suspects
(blame.py: a test that failed or hung, latency above the limit, slow bandwidth by the
robust rule) and pairs each with nodes that passed (``schedule.repair_rounds``): a second
phase, so that the report can tell a bad node from a bad link.

Listeners bind only to this node's data-plane address, answer only this run's peers (their
addresses and the per-run token) and close when the worker ends; the deadline child is
killed at the module's deadline. Every socket operation has a timeout.

The store's values are sealed with a key derived from the token and a salt the first node draws
(netutil.run_token); any process on a member node can still reach the store, delete a key or
write one (review N4). So the first node counts a node present, or done with a round, only once
it has read that node's sealed word, and keeps what it read; each node posts its own words again
when they go missing (netutil.Keeper), so a deletion delays the run and the node reports it.
A store found tampered with (a value not this run's, a word deleted, a decision of the first node
missing while the store answers) or lost is the result's ``store_state``; checks/network.py
blames no node for it.
"""

from __future__ import annotations

import errno
import json
import math
import random
import socket
import statistics
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.ncclprep.deadline import outcome_fields, run_with_deadline
from ansible.module_utils.ncclprep.netutil import (  # noqa: F401  (MAX_STORE_VALUE, seal, unseal: for the tests)
    MAX_STORE_VALUE,
    Keeper,
    Sealed,
    StoreTampered,
    await_one,
    await_values,
    bound_tcp_store,
    rendezvous,
    run_token,
    seal,
    unseal,
)
from ansible.module_utils.ncclprep.probes.blame import slow_bandwidth, slowest_per_direction
from ansible.module_utils.ncclprep.probes.schedule import pair_schedule, partner, repair_rounds

# linux/in.h, linux/in6.h (Python's socket module does not export them)
IP_MTU_DISCOVER = 10
IPV6_MTU_DISCOVER = 23
PMTUDISC_PROBE = 3
#: Smallest datagram the path-MTU search tries: the IPv4 minimum reassembly size (RFC 791).
MIN_MTU = 576
PING = 8  # bytes per latency message
CHUNK = 256 * 1024  # bytes per send of the bandwidth stream
VERDICTS = ("open", "filtered", "refused", "no route", "hang")
ROUND_CLOSE_SLACK_S = 10  # seconds a node waits for the first node's end of a round beyond the round's deadline
JOIN_SLACK_S = 10  # seconds a node waits for the first node's word on who arrived beyond the join


# ---------------------------------------------------------------- pure helpers

def header_bytes(address: str) -> int:
    """IP + UDP header bytes inside an MTU: 28 for IPv4, 48 for IPv6."""
    return 48 if ":" in address else 28


def port_sample(port_range: tuple[int, int] | list[int] | None, count: int, seed: str,
                exclude: list[int] | tuple[int, ...] = ()) -> list[int]:
    """``count`` ports drawn from ``port_range`` (inclusive ``[low, high]``, e.g. the kernel's
    net.ipv4.ip_local_port_range, which NCCL's and Gloo's sockets use) with a generator seeded by
    ``seed``: the same sample on every node. ``exclude``: ports never drawn. None or count 0: [].
    Raises ValueError for a range outside 1..65535 or low > high."""
    if not port_range or count <= 0:
        return []
    low, high = int(port_range[0]), int(port_range[1])
    if not 1 <= low <= high <= 65535:
        raise ValueError(f"port range {list(port_range)!r}: want [low, high] within 1..65535, low <= high")
    pool = [p for p in range(low, high + 1) if p not in set(exclude)]
    return sorted(random.Random(f"{seed}:ports").sample(pool, min(count, len(pool))))


def percentile(samples: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``samples`` by the nearest-rank method. Raises ValueError when empty."""
    if not samples:
        raise ValueError("percentile of no samples")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def link_problems(links: list[dict], max_latency_us: float | None, slow_z: float = -3.5,
                  slow_ratio: float = 0.5, min_gbps: float | None = None) -> dict[tuple[str, str], list[str]]:
    """Every directed link with something wrong: ``(src, dst) -> [reason, ...]``.

    ``links``: the ``links`` rows of every node's result (see ``run_node``). Wrong: the
    direction hung or failed (``hang``, ``error``); latency p50 above ``max_latency_us``
    (None: no limit); path MTU not passing at the configured size; bandwidth slow by
    ``blame.slow_bandwidth`` (``slow_z``, ``slow_ratio``, floor ``min_gbps``): every direction
    a slow node sends (or receives), and every slow link. Port verdicts are not judged here
    (a port is a firewall matter of the receiving node, checks/network.py). When a direction
    was measured twice (second phase), any bad measurement counts.
    """
    out: dict[tuple[str, str], list[str]] = {}

    def add(key, why):
        out.setdefault(key, [])
        if why not in out[key]:
            out[key].append(why)

    for row in links:
        key = (row["src"], row["dst"])
        if row.get("hang"):
            add(key, f"hang: {row['hang']}")
        if row.get("error"):
            add(key, f"error: {row['error']}")
        lat = row.get("latency_us") or {}
        if max_latency_us is not None and lat.get("p50") is not None and lat["p50"] > max_latency_us:
            add(key, f"latency p50 {lat['p50']:.1f} us above {max_latency_us:g} us")
        pmtu = row.get("path_mtu") or {}
        if pmtu and not pmtu.get("ok"):
            add(key, f"path MTU: {pmtu.get('mtu')} B does not pass, largest {pmtu.get('largest')} B")
    rates = slowest_per_direction(links)
    slow = slow_bandwidth(rates, z=slow_z, ratio=slow_ratio, floor=min_gbps)
    for (src, dst), node in slow["explained"].items():
        add((src, dst), f"bandwidth {rates[(src, dst)]:.3g} GB/s: {node} {slow['nodes'][node]}")
    for key, why in slow["links"].items():
        add(key, f"bandwidth {why} GB/s")
    return out


# ---------------------------------------------------------------- listener (the peer side)

class Listener:
    """This node's side of every test: control (TCP) and echo (UDP) on ``port``, and one TCP
    listener per port of ``sample``, all bound to ``address``. Only connections from
    ``peers`` (addresses) that present ``token`` are answered. ``bound``: the sample ports
    listened on; ``in_use``: those another process holds (never probed). Daemon threads;
    ``close()`` stops them."""

    def __init__(self, address: str, port: int, token: str, peers: list[str], sample: list[int],
                 step_timeout: float) -> None:
        self.address, self.port, self.token = address, int(port), token.encode()
        self.peers = set(peers)
        self.step = float(step_timeout)
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self._socks: list[socket.socket] = []
        self.control = self._tcp(family, self.port)
        self.udp = socket.socket(family, socket.SOCK_DGRAM)
        self.udp.bind((address, self.port))
        self.udp.settimeout(0.5)
        self._socks.append(self.udp)
        self.bound: list[int] = []
        self.in_use: list[int] = []
        port_socks = []
        for p in sample:
            try:
                port_socks.append(self._tcp(family, p))
                self.bound.append(p)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                self.in_use.append(p)
        self._stop = threading.Event()
        self._spawn(self._accept, self.control, self._serve_control)
        self._spawn(self._echo)
        for s in port_socks:
            self._spawn(self._accept, s, self._serve_port)

    def _tcp(self, family: int, port: int) -> socket.socket:
        s = socket.socket(family, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((self.address, port))
        except OSError:
            s.close()
            raise
        s.listen(64)
        s.settimeout(0.5)
        self._socks.append(s)
        return s

    def _spawn(self, target, *args) -> None:
        threading.Thread(target=target, args=args, daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        for s in self._socks:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self, sock: socket.socket, serve) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if peer[0].removeprefix("::ffff:") not in self.peers:
                conn.close()
                continue
            conn.settimeout(self.step)
            self._spawn(self._guard, serve, conn)

    def _guard(self, serve, conn: socket.socket) -> None:
        try:
            with conn:
                serve(conn)
        except (OSError, ValueError):
            pass

    def _hello(self, conn: socket.socket) -> dict | None:
        line = _readline(conn)
        try:
            hello = json.loads(line)
        except ValueError:
            return None
        if not isinstance(hello, dict) or str(hello.get("token", "")).encode() != self.token:
            return None
        return hello

    def _serve_port(self, conn: socket.socket) -> None:
        if self._hello(conn) is not None:
            conn.sendall(b"ok\n")

    def _serve_control(self, conn: socket.socket) -> None:
        hello = self._hello(conn)
        if hello is None:
            return
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if hello.get("test") == "latency":
            conn.sendall(b"ok\n")
            while True:
                msg = _recv_exact(conn, PING)
                if not msg:
                    return
                conn.sendall(msg)
        elif hello.get("test") == "bandwidth":
            conn.sendall(b"ok\n")
            total, first, last = 0, None, None
            conn.settimeout(float(hello.get("seconds", 1)) + self.step)
            while True:
                data = conn.recv(CHUNK)
                if not data:
                    break
                now = time.perf_counter()
                first = now if first is None else first
                last = now
                total += len(data)
            conn.sendall((json.dumps({"bytes": total, "seconds": (last - first) if first else 0.0}) + "\n").encode())

    def _echo(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self.udp.recvfrom(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            if peer[0].removeprefix("::ffff:") in self.peers and data.startswith(self.token):
                try:
                    self.udp.sendto(data[:len(self.token) + 8], peer)
                except OSError:
                    pass


def _readline(conn: socket.socket, limit: int = 4096) -> str:
    buf = b""
    while not buf.endswith(b"\n") and len(buf) < limit:
        data = conn.recv(1)
        if not data:
            break
        buf += data
    return buf.decode(errors="replace").strip()


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        data = conn.recv(n - len(buf))
        if not data:
            return b""
        buf += data
    return buf


# ---------------------------------------------------------------- client tests (this node -> a peer)

class Hang(Exception):
    """A peer that accepted the connection and then never answered within the step's timeout."""


def _connect(source: str, address: str, port: int, timeout: float) -> socket.socket:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.bind((source, 0))
        s.connect((address, port))
    except BaseException:
        s.close()
        raise
    return s


def _open_test(source: str, address: str, port: int, token: str, rank: int, test: str, timeout: float,
               **extra) -> socket.socket:
    s = _connect(source, address, port, timeout)
    try:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall((json.dumps(dict(extra, token=token, rank=rank, test=test)) + "\n").encode())
        if _readline(s) != "ok":
            raise Hang(f"{test}: the peer's listener did not accept this run's token")
    except TimeoutError:
        s.close()
        raise Hang(f"{test}: connected, then no answer within {timeout:g} s") from None
    except BaseException:
        s.close()
        raise
    return s


def tcp_latency(source: str, address: str, port: int, token: str, rank: int, samples: int,
                timeout: float) -> dict:
    """``{"p50": us, "p99": us, "samples": n}``: TCP round trips of 8-byte messages (after 5
    untimed ones). Raises Hang when the peer stops answering, OSError when it cannot connect."""
    with _open_test(source, address, port, token, rank, "latency", timeout) as s:
        rtts = []
        msg = struct.pack("!Q", rank)
        try:
            for i in range(samples + 5):
                t0 = time.perf_counter_ns()
                s.sendall(msg)
                if _recv_exact(s, PING) != msg:
                    raise Hang("latency: the peer closed the connection")
                if i >= 5:
                    rtts.append((time.perf_counter_ns() - t0) / 1000.0)
        except TimeoutError:
            raise Hang(f"latency: no echo within {timeout:g} s") from None
    return {"p50": round(statistics.median(rtts), 1), "p99": round(percentile(rtts, 0.99), 1), "samples": len(rtts)}


def tcp_bandwidth(source: str, address: str, port: int, token: str, rank: int, seconds: float,
                  timeout: float) -> dict:
    """``{"gbps": GB/s, "bytes": n, "seconds": s}``: one TCP stream to the peer for ``seconds``,
    bytes and time as the receiver counted them. Raises Hang when the stream stalls."""
    payload = b"\0" * CHUNK
    with _open_test(source, address, port, token, rank, "bandwidth", timeout, seconds=seconds) as s:
        try:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(timeout + seconds)
            reply = json.loads(_readline(s) or "{}")
        except TimeoutError:
            raise Hang(f"bandwidth: the stream stalled for {timeout:g} s") from None
    n, t = int(reply.get("bytes", 0)), float(reply.get("seconds", 0.0))
    return {"gbps": round(n / t / 1e9, 4) if t > 0 else 0.0, "bytes": n, "seconds": round(t, 4)}


def path_mtu(source: str, address: str, port: int, token: str, mtu: int, wait: float = 0.2) -> dict:
    """``{"mtu": mtu, "ok": bool, "largest": bytes | None}``: does a don't-fragment datagram
    of ``mtu`` bytes (IP packet size) reach the peer's echo, and the largest size that does
    (``mtu`` when ok; None when not even 576 B passes). The full size gets 3 tries, each
    size of the search 2, ``wait`` seconds each: at most about 5 s for a 9000-byte MTU."""
    v6 = ":" in address
    hdr = header_bytes(address)
    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.IPPROTO_IPV6 if v6 else socket.IPPROTO_IP,
                     IPV6_MTU_DISCOVER if v6 else IP_MTU_DISCOVER, PMTUDISC_PROBE)
        s.bind((source, 0))
        s.connect((address, port))
        s.settimeout(wait)
        tok = token.encode()

        def passes(size: int, attempts: int = 2) -> bool:
            for attempt in range(attempts):
                nonce = struct.pack("!II", size, attempt)
                try:
                    s.send(tok + nonce + b"\0" * max(0, size - hdr - len(tok) - len(nonce)))
                except OSError as exc:  # EMSGSIZE: larger than this node's own interface MTU
                    if exc.errno == errno.EMSGSIZE:
                        return False
                    raise
                try:
                    while True:
                        if s.recv(256) == tok + nonce:
                            return True
                except TimeoutError:
                    continue
                except OSError:  # ICMP port or host unreachable: no echo there
                    return False
            return False

        if passes(mtu, attempts=3):
            return {"mtu": mtu, "ok": True, "largest": mtu}
        lo, hi, best = MIN_MTU, mtu - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            if passes(mid):
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        return {"mtu": mtu, "ok": False, "largest": best}
    finally:
        s.close()


def mtu_search_s(mtu: int, wait: float = 0.2) -> float:
    """Longest ``path_mtu`` can take for ``mtu``: 3 tries at the full size, then 2 per step of
    the binary search down to 576, ``wait`` seconds each."""
    return wait * (3 + 2 * math.ceil(math.log2(max(2, mtu - MIN_MTU + 1))))


def probe_port(source: str, address: str, port: int, token: str, rank: int, timeout: float) -> str:
    """One verdict of VERDICTS for a TCP connect to ``address:port`` (see the module docstring)."""
    try:
        s = _connect(source, address, port, timeout)
    except TimeoutError:
        return "filtered"
    except ConnectionRefusedError:
        return "refused"
    except OSError as exc:
        if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return "no route"
        if exc.errno == errno.ETIMEDOUT:
            return "filtered"
        raise
    with s:
        try:
            s.sendall((json.dumps({"token": token, "rank": rank}) + "\n").encode())
            return "open" if _readline(s) == "ok" else "hang"
        except TimeoutError:
            return "hang"
        except ConnectionResetError:
            return "refused"


def measure(source: str, peer: str, port: int, token: str, rank: int, ports: list[int], mtu: int | None,
            samples: int, seconds: float, step_timeout: float, connect_timeout: float) -> dict:
    """Every test from this node to ``peer`` (address): ``{latency_us, bandwidth_gbps, bytes,
    path_mtu, ports, hang, error, retried}``; after a hang the remaining tests are skipped
    (each would wait out its own timeout).

    A transient failure is tried once more: a port that was not open is probed again, and
    after a hang or an error the tests run again from the start. What cleared on the second
    try is kept in ``retried`` as evidence ("port 29500: filtered, then open"; "tests:
    <error>, then passed"), the row holding the second try's figures; what failed twice is
    the row's verdict as before (a fault that persists stays a fault).
    """
    row: dict = {"latency_us": None, "bandwidth_gbps": None, "bytes": None, "path_mtu": None, "ports": {},
                 "hang": None, "error": None, "retried": []}
    with ThreadPoolExecutor(max_workers=max(1, len(ports))) as pool:
        # ports first and at once: a filtered port costs one connect timeout, not one each
        def probe(p):
            return p, probe_port(source, peer, p, token, rank, connect_timeout)

        verdicts = dict(pool.map(probe, ports))
        again = [p for p, v in verdicts.items() if v != "open"]
        for p, v in pool.map(probe, again):
            if v == "open":
                row["retried"].append(f"port {p}: {verdicts[p]}, then open")
                verdicts[p] = "open"
        row["ports"] = {str(p): v for p, v in verdicts.items()}
    first = None
    for _attempt in range(2):
        row.update(latency_us=None, bandwidth_gbps=None, bytes=None, path_mtu=None, hang=None, error=None)
        try:
            row["latency_us"] = tcp_latency(source, peer, port, token, rank, samples, step_timeout)
            bw = tcp_bandwidth(source, peer, port, token, rank, seconds, step_timeout)
            row["bandwidth_gbps"], row["bytes"] = bw["gbps"], bw["bytes"]
            if mtu:
                row["path_mtu"] = path_mtu(source, peer, port, token, mtu)
        except Hang as exc:
            row["hang"] = str(exc)
        except TimeoutError:
            row["hang"] = f"connect: no answer within {step_timeout:g} s"
        except OSError as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"
        failure = row["hang"] or row["error"]
        if not failure:
            if first:
                row["retried"].append(f"tests: {first}, then passed")
            break
        first = first or failure
    return row


def direction_seconds(connect_timeout: float, step_timeout: float, bandwidth_seconds: float, mtu: int | None) -> float:
    """Longest one direction can take in ``measure``: the ports twice (a retry), then the tests
    twice (latency and bandwidth each up to ``step_timeout``, the stream, the path-MTU search)."""
    tests = 2 * step_timeout + bandwidth_seconds + (mtu_search_s(mtu) if mtu else 0)
    return 2 * connect_timeout + 2 * tests


def round_seconds(connect_timeout: float, step_timeout: float, bandwidth_seconds: float, mtu: int | None) -> float:
    """The deadline of one round (seconds): the higher rank of a pair waits for the lower
    rank's direction, then measures its own (each up to ``direction_seconds``), plus 3 s for
    the store's round trips."""
    return 2 * direction_seconds(connect_timeout, step_timeout, bandwidth_seconds, mtu) + 3


def min_deadline(join_timeout: float, connect_timeout: float, step_timeout: float, bandwidth_seconds: float,
                 mtu: int | None) -> float:
    """The shortest whole-probe deadline (seconds) under which a node lost mid-run is named
    (gone) rather than every node's probe killed at the deadline: the join, one round that
    waits out its deadline for the lost node, and ``ROUND_CLOSE_SLACK_S`` for the rounds
    after it (on a healthy cluster each takes well under a second of store round trips plus
    the measuring). Seen on the local cluster (CI, 2026-12-02): at a 60 s deadline against
    20 + 45.6 + 10 s, a node frozen mid-run got every other node's probe killed."""
    return join_timeout + round_seconds(connect_timeout, step_timeout, bandwidth_seconds, mtu) + ROUND_CLOSE_SLACK_S


# ---------------------------------------------------------------- the worker

def run_node(progress, rank: int, hosts: list[str], addresses: list[str], store_port: int, listen_port: int,
             token: str, ports: list[int], ephemeral_range: list[int] | None, ephemeral_sample: int, mtu: int | None,
             latency_samples: int, bandwidth_seconds: float, matchings: int, every_pair: bool, repair: int,
             seed: str, limits: dict, join_timeout: float, step_timeout: float, connect_timeout: float) -> None:
    """Measure this node's pairs, round by round, and send the result through ``progress``.

    ``hosts`` / ``addresses``: every node's inventory name and data-plane address in rank
    order; rank 0 hosts the store on ``store_port``. ``limits``: {max_latency_us, slow_z,
    slow_ratio, min_gbps} for picking the suspects to re-pair (``repair`` good partners each;
    0: no second phase). Result: ``{"status": PASS|HANG, "stage", "present": [host],
    "missing_hosts", "gone_hosts", "store_error", "store_state", "ports": [sample],
    "ports_in_use": [port], "links": [row]}`` with one row per direction this node measured as
    the sender: ``{src, dst, phase, round, latency_us: {p50, p99, samples}, bandwidth_gbps,
    bytes, path_mtu: {mtu, ok, largest}, ports: {port: verdict}, hang, error, retried}``
    (``measure``). HANG: a peer never arrived, left mid-run, or hung a test, or the store
    failed: ``store_state`` ``"tampered"`` (a value not this run's, one of this node's values
    deleted, or a decision of the first node missing while the store answers: its
    ``present``/``gone`` say what the store showed, and prove nothing), ``"lost"`` (it stopped
    answering), ``"unreached"`` (never reached), with ``store_error`` saying which; None when
    the store held. Raises OSError when rank 0 cannot bind the store's address (the deadline
    runner reports it).
    """
    import torch.distributed as dist

    world = len(hosts)
    me, my_addr = hosts[rank], addresses[rank]
    sample = sorted(set(int(p) for p in ports) | set(port_sample(ephemeral_range, ephemeral_sample, seed,
                                                                 exclude=[store_port, listen_port])))
    round_timeout = round_seconds(connect_timeout, step_timeout, bandwidth_seconds, mtu)
    progress.stage("listen", rank=rank)
    listener = Listener(my_addr, listen_port, token, [a for a in addresses if a != my_addr], sample, step_timeout)
    present: list[int] = []
    gone: set[int] = set()
    links: list[dict] = []
    store_error = store_state = keeper = None
    joined = False
    try:
        progress.stage("store", rank=rank)
        raw, _sock = bound_tcp_store(dist, rank, world, addresses[0], store_port, max(join_timeout, round_timeout))
        joined = True
        store = SignedStore(raw, run_token(raw, rank, token, join_timeout))
        keeper = Keeper(store)
        progress.stage("rendezvous", rank=rank)
        listening = _rendezvous(store, keeper, rank, world, join_timeout,
                                {"bound": listener.bound, "in_use": listener.in_use})
        present = sorted(listening)

        def run_rounds(phase: int, rounds: list[list[tuple[int, int]]]) -> None:
            for i, rnd in enumerate(rounds):
                if rank in gone:  # the first node gave up on this node: it leaves the run
                    return
                progress.stage(f"phase {phase} round {i + 1}/{len(rounds)}", rank=rank)
                started = time.monotonic()
                peer = partner(rnd, rank)
                tag = f"p{phase}/r{i}"
                if peer is not None and peer not in gone:
                    if rank > peer:  # the lower rank measures first (a late or deleted word only delays)
                        await_values(store, [f"{tag}/half/{peer}"], round_timeout / 2)
                    row = measure(my_addr, addresses[peer], listen_port, token, rank,
                                  listening[peer]["bound"], mtu, latency_samples, bandwidth_seconds,
                                  step_timeout, connect_timeout)
                    links.append(dict(row, src=me, dst=hosts[peer], phase=phase, round=i + 1))
                    keeper.post(f"{tag}/half/{rank}", "1")
                keeper.post(f"{tag}/done/{rank}", "1")
                gone.update(_close_round(store, keeper, tag, rank, [r for r in present if r not in gone],
                                         started + round_timeout))

        first = [[(present[a], present[b]) for a, b in rnd]
                 for rnd in pair_schedule(len(present), matchings, seed, every_pair)]
        if rank in present:
            run_rounds(1, first)
        if rank in present and rank not in gone:  # a node left out or gone is done with the run
            # second phase: the first node picks the suspects and pairs each with nodes that passed
            keeper.post(f"res1/{rank}", json.dumps(links))
            if rank == 0:
                store.set("phase2", json.dumps(_second_phase(store, keeper, hosts, present, gone, repair, seed,
                                                             limits)))
            second = [[tuple(p) for p in rnd]
                      for rnd in json.loads(await_one(store, "phase2", round_timeout * 2, keeper))]
            keeper.release(f"res1/{rank}")
            if second:
                run_rounds(2, second)
            progress.stage("done", rank=rank)
            store.set(f"final/{rank}", "1")
            if rank == 0:  # keep the store up until every node has read it (they post final right after)
                await_values(store, [f"final/{r}" for r in present if r and r not in gone], ROUND_CLOSE_SLACK_S,
                             keeper)
        if keeper.deleted:  # the run went on (a deletion only delayed it), but the store is not to be trusted
            raise StoreTampered(keeper.tampered())
    except StoreTampered as exc:  # a host outside this run wrote to the store or deleted from it
        store_state = "tampered"
        store_error = (f"the store on {hosts[0]} ({addresses[0]}:{store_port}) was tampered with: {exc} (a host "
                       f"other than this run's nodes wrote to it or deleted from it)")
    except RuntimeError as exc:  # torch's DistStoreError: the store on the first node stopped answering
        if keeper is not None and keeper.deleted:
            store_state = "tampered"
            store_error = (f"the store on {hosts[0]} ({addresses[0]}:{store_port}) was tampered with: "
                           f"{keeper.tampered()}, then it stopped answering: {str(exc).splitlines()[0][:200]}")
        else:
            store_state = "lost" if joined else "unreached"
            store_error = f"the store on {hosts[0]} ({addresses[0]}:{store_port}): {str(exc).splitlines()[0][:200]}"
    finally:
        listener.close()
    missing = [hosts[r] for r in range(world) if r not in present] if present else []
    hung = any(row.get("hang") for row in links)
    progress.result({
        "status": "HANG" if missing or gone or hung or store_error else "PASS",
        "stage": "done" if not store_error else "store",
        "present": [hosts[r] for r in present],
        "missing_hosts": missing,
        "gone_hosts": sorted(hosts[r] for r in gone),
        "store_error": store_error,
        "store_state": store_state,
        "ports": sample,
        "ports_in_use": listener.in_use,
        "links": links,
    })


class SignedStore(Sealed):
    """The probe's TCPStore with every value authenticated (review F9): ``set`` writes the value
    sealed with the run's key (netutil.Sealed), ``get`` and ``read`` unseal it and return it
    (str); ``check`` and ``wait`` pass through (a key's presence alone decides nothing: its
    value is read, and checked, before it counts; review N4). Raises StoreTampered naming the key
    when a value is not this run's or is over MAX_STORE_VALUE bytes."""

    def get(self, key: str) -> str:
        return super().get(key).decode()

    def read(self, key: str) -> str | None:
        value = super().read(key)
        return None if value is None else value.decode()


def _close_round(store, keeper: Keeper, tag: str, rank: int, waiting: list[int], deadline: float) -> list[int]:
    """The end of round ``tag``, decided once by rank 0 so that every node sees the same nodes
    leave (the same schedule after it, the same ``gone_hosts``): rank 0 reads, until
    ``deadline`` (its ``time.monotonic()``: the round's start plus the round's deadline), the
    ``<tag>/done/<r>`` of every rank in ``waiting``, each verified and kept once read, and
    publishes the ranks whose value it has not read by then as ``<tag>/gone`` (review N4: a rank
    is gone only when its sealed word has not come; a deleted word is posted again by its
    node's ``keeper``, and a deletion after it was read changes nothing). The other ranks wait
    for that decision, which comes at most ``ROUND_CLOSE_SLACK_S`` after their own deadline
    (they started the round after rank 0 published the previous one). Every rank keeps its
    half and done words of the round until then. Returns the ranks that left in this round.
    Raises StoreTampered (a value not this run's, the decision missing while the store
    answers), RuntimeError (the store's host stopped answering)."""
    if rank == 0:
        keys = {r: f"{tag}/done/{r}" for r in waiting if r != 0}
        got = await_values(store, list(keys.values()), max(0.0, deadline - time.monotonic()), keeper)
        left = [r for r, key in keys.items() if key not in got]
        store.set(f"{tag}/gone", json.dumps(left))
    else:
        wait_s = max(0.0, deadline - time.monotonic()) + ROUND_CLOSE_SLACK_S
        left = json.loads(await_one(store, f"{tag}/gone", wait_s, keeper))
    keeper.release(f"{tag}/half/{rank}", f"{tag}/done/{rank}")
    return left


def _rendezvous(store, keeper: Keeper, rank: int, world: int, join_timeout: float, listening: dict) -> dict[int, dict]:
    """The ranks taking part and the ports each listens on, ``{rank: {"bound", "in_use"}}``: those
    whose sealed word (``listening``, this rank's) rank 0 read within ``join_timeout``, as rank 0
    saw them (netutil.rendezvous: one decision, published in the store, so that every node
    computes the same schedule). Raises as netutil.rendezvous."""
    present = rendezvous(store, keeper, rank, world, "arrived", json.dumps(listening), join_timeout, JOIN_SLACK_S)
    return {r: json.loads(value) for r, value in present.items()}


def _second_phase(store, keeper: Keeper, hosts: list[str], present: list[int], gone: set[int], repair: int,
                  seed: str, limits: dict) -> list[list[tuple[int, int]]]:
    """On rank 0: every node's first-phase rows (those that come within ROUND_CLOSE_SLACK_S: the
    nodes post them as they leave their last round), the suspects (nodes of a problem link) and
    their re-pairing with nodes that had no problem (``schedule.repair_rounds``)."""
    keys = [f"res1/{r}" for r in present if r not in gone]
    rows = []
    for value in await_values(store, keys, ROUND_CLOSE_SLACK_S, keeper).values():
        rows.extend(json.loads(value))
    rank_of = {h: r for r, h in enumerate(hosts)}
    # a direction to a node that left is that node's (net.run names it), not a suspect link
    bad = [pair for pair in link_problems(rows, **limits) if not {rank_of[h] for h in pair} & gone]
    if not repair or not bad:
        return []
    suspects = {rank_of[h] for pair in bad for h in pair} - gone
    good = [r for r in present if r not in suspects and r not in gone]
    met = [(rank_of[x["src"]], rank_of[x["dst"]]) for x in rows]
    return repair_rounds(sorted(suspects), good, met, repair, seed)


# ---------------------------------------------------------------- the module's options and run

#: The net probe's options (``probe``'s ``p``): node/preflight.py options builds them from the members and
#: the preflight's settings, whose types, defaults and ranges are node/settings.py's; ``token`` and
#: ``seed`` are the run's, ``ephemeral_range`` None reads the node's own.
OPTIONS = ("rank", "hosts", "addresses", "store_port", "listen_port", "token", "ports", "ephemeral_range",
           "ephemeral_sample", "mtu", "latency_samples", "bandwidth_seconds", "matchings", "every_pair", "repair",
           "seed", "max_latency_us", "slow_z", "slow_ratio", "min_gbps", "join_timeout", "step_timeout",
           "connect_timeout", "timeout")


def torch_missing(error: str) -> str:
    """The error a probe reports when this interpreter cannot import torch: ``error`` (Ansible's
    missing_required_lib text) with the interpreter and the fix. The probes return it as their
    result, not as a task error: the other hosts report this one missing."""
    return f"{error} (interpreter {sys.executable}; run site.yml so torch_runtime installs it)"


def bad_input(p: dict) -> str | None:
    """The first invalid option of ``p`` (OPTIONS) that is not a preflight setting (those
    are node/settings.py's, checked by its ``problems`` first): the rank, the addresses, the ephemeral
    range and the MTU, as a message naming the host (``hosts[rank]``), option and value; None when
    they are valid."""
    n = len(p["hosts"])
    if not 0 <= p["rank"] < n:
        return f"rank={p['rank']} is outside 0..{n - 1} (hosts={p['hosts']})"
    host = p["hosts"][p["rank"]]
    if len(p["addresses"]) != n:
        return f"{host}: addresses has {len(p['addresses'])} entries for {n} hosts ({p['addresses']})"
    rng = p["ephemeral_range"]
    if rng is not None and (len(rng) != 2 or not 1 <= rng[0] <= rng[1] <= 65535):
        return f"{host}: ephemeral_range={rng}: want [low, high] within 1..65535"
    if p["mtu"] is not None and not MIN_MTU <= p["mtu"] <= 65535:
        return f"{host}: mtu={p['mtu']} is outside {MIN_MTU}..65535"
    return None


def probe(p: dict, torch_error: str | None = None) -> dict:
    """Run this node's part of the net probe with the options ``p`` (OPTIONS, valid by
    ``bad_input``) in a child under the hard deadline ``p["timeout"]`` seconds, and return the
    ``net`` result (``{status, host, hosts, links: [{src, dst, phase, round, latency_us: {p50, p99,
    samples}, bandwidth_gbps, path_mtu: {mtu, ok, largest}, ports: {port: verdict}, hang, error}],
    missing_hosts, gone_hosts, elapsed_s, error}``). ``torch_error``: why torch cannot be imported here
    (the result is then FAIL at stage start, and the other nodes report this one missing).
    Raises nothing: every failure is a status in the result."""
    base = {"host": p["hosts"][p["rank"]], "hosts": p["hosts"], "links": [], "missing_hosts": [], "gone_hosts": []}
    if torch_error:
        return dict(base, status="FAIL", stage="start", error=torch_error)
    kwargs = {k: p[k] for k in ("rank", "hosts", "addresses", "store_port", "listen_port", "token", "ports",
                                "ephemeral_range", "ephemeral_sample", "mtu", "latency_samples", "bandwidth_seconds",
                                "matchings", "every_pair", "repair", "seed", "join_timeout", "step_timeout",
                                "connect_timeout")}
    if kwargs["ephemeral_range"] is None and kwargs["ephemeral_sample"]:
        try:
            with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as fh:
                kwargs["ephemeral_range"] = [int(x) for x in fh.read().split()[:2]]
        except (OSError, ValueError):
            kwargs["ephemeral_range"] = None
    kwargs["limits"] = {k: p[k] for k in ("max_latency_us", "slow_z", "slow_ratio", "min_gbps")}
    run = run_with_deadline(run_node, kwargs, timeout_s=p["timeout"])
    net = dict(base, elapsed_s=run["elapsed_s"], error=None)
    net.update(outcome_fields(run, p["timeout"]))
    return net
