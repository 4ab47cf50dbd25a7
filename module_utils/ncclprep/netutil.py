"""Data-plane network helpers: which interface carries the cluster CIDR, and the probes' store
bound to the data-plane address, its values signed with the run's token.

Pure functions over plain data so that node_facts (on the nodes), the filter
plugins (on the controller) and the tests share them.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import ipaddress
import re
import socket
import time

#: A netdev name ncclprep writes into root scripts, systemd units and netplan: 1 to 15 (the
#: kernel's IFNAMSIZ less its NUL) of ASCII letters, digits, '_', '.' and '-', not starting with
#: '.' or '-'. The kernel also takes ';$()|&%' and more (only '/', ':' and white space are
#: refused, dev_valid_name), which a shell or systemd's '%' specifiers would act on.
SAFE_IFNAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$")
#: A netdev name as the kernel accepts it (dev_valid_name: at most 15 bytes, no '/', ':' or
#: white space), not starting with '-' so that a tool (ethtool) cannot read it as an option: what
#: a reader may pass to a command; SAFE_IFNAME_RE is what ncclprep writes.
KERNEL_IFNAME_RE = re.compile(r"^[^\s/:-][^\s/:]{0,14}$")


def parse_cidr(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """Return the network of ``cidr`` (host bits allowed, e.g. ``10.0.0.5/24``).

    Raises ValueError naming the value when it is not a CIDR.
    """
    try:
        return ipaddress.ip_network(str(cidr), strict=False)
    except ValueError as exc:
        raise ValueError(f"not a CIDR: {cidr!r} ({exc})") from None


def ifname_problem(name: object) -> str | None:
    """Why ``name`` may not be written into a script, a unit or netplan (``SAFE_IFNAME_RE``), or
    None when it may."""
    if isinstance(name, str) and SAFE_IFNAME_RE.match(name):
        return None
    return ("ncclprep writes its name into root scripts, unit files and netplan, and takes only 1 to 15 of "
            "A-Z a-z 0-9 _ . - (not starting with . or -)")


def iface_for_cidr(addresses: dict[str, list[str]], cidr: str) -> tuple[str, str] | None:
    """Find the interface with an address inside ``cidr``.

    ``addresses`` maps interface name -> list of addresses (``"10.0.0.5"`` or
    ``"10.0.0.5/24"``). Returns ``(interface, address)`` of the first match in
    sorted interface order, or None when no interface is in the CIDR.
    Raises ValueError when ``cidr`` is not a CIDR.
    """
    net = parse_cidr(cidr)
    for name in sorted(addresses):
        for addr in addresses[name] or []:
            try:
                ip = ipaddress.ip_interface(str(addr)).ip
            except ValueError:
                continue
            if ip.version == net.version and ip in net:
                return name, str(ip)
    return None


def ansible_facts_addresses(facts: dict) -> dict[str, list[str]]:
    """Map interface -> IPv4/IPv6 addresses from Ansible's gathered ``ansible_facts``.

    Reads ``facts['interfaces']`` and ``facts[<iface>]['ipv4'|'ipv4_secondaries'|'ipv6']``
    as ansible.builtin.setup returns them; missing keys give empty lists.
    """
    out: dict[str, list[str]] = {}
    for name in facts.get("interfaces", []) or []:
        info = facts.get(name.replace("-", "_"), {}) or {}
        addrs: list[str] = []
        ipv4 = info.get("ipv4")
        if isinstance(ipv4, dict) and ipv4.get("address"):
            addrs.append(ipv4["address"])
        for sec in info.get("ipv4_secondaries", []) or []:
            if sec.get("address"):
                addrs.append(sec["address"])
        for v6 in info.get("ipv6", []) or []:
            if v6.get("address"):
                addrs.append(v6["address"])
        out[name] = addrs
    return out


def bound_tcp_store(dist, rank: int, world: int, address: str, port: int, timeout_s: float):
    """torch's TCPStore for a probe: hosted by rank 0 at ``address`` (its data-plane address) and
    bound to that address only; torch binds every address unless handed a listening socket
    (review F9: a store any interface serves takes values from any host). ``dist`` is
    ``torch.distributed``; ``timeout_s`` seconds bound every store operation.

    Returns ``(store, socket or None)``: rank 0's caller keeps the socket object for as long as
    the store serves (its file descriptor is the store's listener). Raises OSError when the
    address cannot be bound (not this host's, the port taken) and whatever torch raises.
    """
    kw = dict(timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)
    if rank != 0:
        return dist.TCPStore(address, port, world, False, **kw), None
    sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    sock.listen(512)
    return dist.TCPStore(address, port, world, True, master_listen_fd=sock.fileno(), **kw), sock


class StoreTampered(RuntimeError):
    """A value in a probe's store that this run's nodes did not write (its MAC does not hold)."""


#: The largest value a probe writes (net_probe: a node's first-phase rows; torch's keys are
#: a few hundred bytes); more is not this run's.
MAX_STORE_VALUE = 4 << 20


def seal(token: str, key: str, value: bytes) -> bytes:
    """``value`` as stored under ``key``: ``<HMAC-SHA256 of key NUL value, keyed by token, hex>:<value>``
    (review F9: a host that reaches a store cannot write a value this run's nodes accept)."""
    return hmac.new(token.encode(), key.encode() + b"\0" + value, hashlib.sha256).hexdigest().encode() + b":" + value


def unseal(token: str, key: str, raw: bytes) -> bytes:
    """The value :func:`seal` stored under ``key``. Raises StoreTampered naming the key when the
    MAC does not hold or ``raw`` is over MAX_STORE_VALUE bytes."""
    if len(raw) > MAX_STORE_VALUE + 65:
        raise StoreTampered(f"{key}: a value of {len(raw)} bytes")
    mac, sep, data = raw.partition(b":")
    if not sep or not hmac.compare_digest(raw, seal(token, key, data)):
        raise StoreTampered(f"{key}: a value not signed with this run's token")
    return data


def signed_store(dist, store, token: str):
    """A ``torch.distributed.Store`` over ``store`` (a TCPStore) that seals every value written and
    unseals every value read, torch's own too: init_process_group's Gloo addresses and the NCCL
    unique id go through it (torch calls a Python Store subclass for each set and get; seen with
    Gloo on torch 2.13 here). ``dist`` is ``torch.distributed``. A read of a value this run did
    not write raises StoreTampered (a RuntimeError, so torch passes its message on); ``add``,
    ``check``, ``wait`` and the rest pass through: a key's presence or a counter decides nothing
    that a read value does not confirm.
    """
    class _Signed(dist.Store):
        def __init__(self):
            super().__init__()

        def set(self, key, value):
            store.set(key, seal(token, key, value.encode() if isinstance(value, str) else bytes(value)))

        def get(self, key):
            return unseal(token, key, store.get(key))

        def add(self, key, amount):
            return store.add(key, amount)

        def check(self, keys):
            return store.check(keys)

        def wait(self, keys, timeout=None):
            return store.wait(keys) if timeout is None else store.wait(keys, timeout)

        def compare_set(self, key, expected, desired):
            return store.compare_set(key, expected, desired)

        def delete_key(self, key):
            return store.delete_key(key)

        def num_keys(self):
            return store.num_keys()

        def set_timeout(self, timeout):
            return store.set_timeout(timeout)

    return _Signed()


def open_signed_store(rank: int, world: int, address: str, port: int, token: str, timeout_s: float):
    """A job's store (bound_tcp_store hosted by rank 0 at ``address``:``port``), every value sealed
    with ``token`` (signed_store): ``(store, keep)``; the caller holds ``keep`` for as long as the
    store serves (rank 0's listener). ``timeout_s`` bounds every store operation, the join too.
    Raises whatever torch raises (RuntimeError, OSError, DistStoreError) when it is not reached."""
    import torch.distributed as dist

    store, sock = bound_tcp_store(dist, rank, world, address, port, timeout_s)
    return signed_store(dist, store, token), (store, sock)


def missing_keys(store, keys: list[str], timeout_s: float) -> list[str]:
    """The keys of ``keys`` still missing from ``store`` after waiting up to ``timeout_s`` seconds
    for them (polled every 0.2 s: a store's own wait raises on its timeout, and the caller wants to
    know which are late)."""
    deadline = time.monotonic() + timeout_s
    missing = list(keys)
    while missing:
        missing = [k for k in missing if not store.check([k])]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return missing
