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
import json
import re
import secrets
import socket
import time
from collections.abc import Collection

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


#: The largest value a probe writes (the network probe: a node's first-phase rows; torch's keys are
#: a few hundred bytes); more is not this run's.
MAX_STORE_VALUE = 4 << 20
#: What compare_set(key, ABSENT, ABSENT) answers for a key the store does not hold: a read that
#: never waits (Sealed.read). No sealed value starts with a NUL byte.
ABSENT = b"\0absent"
#: Seconds between two looks at the store while a node waits for a key and keeps its own
#: (await_values): check and compare_set, which torch does not log; a timed-out wait it does.
POLL_S = 0.05


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


class Sealed:
    """A probe's store (torch's TCPStore, or anything with its set, get, check, wait and
    compare_set) with every value sealed with ``token`` (seal): ``set`` seals, ``get`` and
    ``read`` unseal (bytes); ``token`` None passes values as they are. ``add``, ``check``,
    ``wait``, ``compare_set``, ``delete_key``, ``num_keys`` and ``set_timeout`` pass through:
    a key's presence is not sealed, so the probes count only values read (review N4: a host that
    reaches the store can delete a key or write one; only the values are this run's).
    """

    def __init__(self, store, token: str | None):
        self._store, self._token = store, token

    def set(self, key: str, value) -> None:
        data = value.encode() if isinstance(value, str) else bytes(value)
        self._store.set(key, data if self._token is None else seal(self._token, key, data))

    def get(self, key: str) -> bytes:
        """The value under ``key``, waiting for it up to the store's timeout (torch's get).
        Raises StoreTampered (not this run's), RuntimeError (the store's timeout, or it stopped
        answering)."""
        raw = self._store.get(key)
        return raw if self._token is None else unseal(self._token, key, raw)

    def read(self, key: str) -> bytes | None:
        """The value under ``key``, or None when the store holds none, without waiting: a key seen
        by ``check`` can be gone by the ``get`` that follows (deleted), and torch's get would
        then wait out the store's timeout. Read through compare_set, which answers ABSENT for an
        absent key. Raises StoreTampered, RuntimeError (the store stopped answering)."""
        raw = self._store.compare_set(key, ABSENT, ABSENT)
        if raw == ABSENT:
            return None
        return raw if self._token is None else unseal(self._token, key, raw)

    def add(self, key, amount):
        return self._store.add(key, amount)

    def check(self, keys) -> bool:
        return self._store.check(keys)

    def wait(self, keys, timeout=None):
        return self._store.wait(keys) if timeout is None else self._store.wait(keys, timeout)

    def compare_set(self, key, expected, desired):
        return self._store.compare_set(key, expected, desired)

    def delete_key(self, key):
        return self._store.delete_key(key)

    def num_keys(self):
        return self._store.num_keys()

    def set_timeout(self, timeout):
        return self._store.set_timeout(timeout)


def signed_store(dist, store, token: str | None):
    """A ``torch.distributed.Store`` over ``store`` (a TCPStore) that seals every value written and
    unseals every value read (a Sealed with ``token``), torch's own too: init_process_group's Gloo
    addresses and the NCCL unique id go through it (torch calls a Python Store subclass for each
    set and get; seen with Gloo on torch 2.13 here). ``dist`` is ``torch.distributed``. A read of
    a value this run did not write raises StoreTampered (a RuntimeError, so torch passes its
    message on); ``read`` reads without waiting (Sealed.read); ``add``, ``check``, ``wait`` and
    the rest pass through: a key's presence or a counter decides nothing that a read value does
    not confirm. ``token`` None: values pass unsealed, through the same interface.
    """
    sealed = Sealed(store, token)

    class _Signed(dist.Store):
        def __init__(self):
            super().__init__()

        def set(self, key, value):
            sealed.set(key, value)

        def get(self, key):
            return sealed.get(key)

        def read(self, key):
            return sealed.read(key)

        def add(self, key, amount):
            return sealed.add(key, amount)

        def check(self, keys):
            return sealed.check(keys)

        def wait(self, keys, timeout=None):
            return sealed.wait(keys, timeout)

        def compare_set(self, key, expected, desired):
            return sealed.compare_set(key, expected, desired)

        def delete_key(self, key):
            return sealed.delete_key(key)

        def num_keys(self):
            return sealed.num_keys()

        def set_timeout(self, timeout):
            return sealed.set_timeout(timeout)

    return _Signed()


#: Where rank 0 posts the run's salt (run_token), sealed with the run's token itself.
SALT_KEY = "ncclprep/salt"
#: Seconds a salt's stamp may lie from a node's clock beyond the wait for it: the nodes' clocks
#: (NTP keeps a cluster's within a second; this allows a node whose time was stepped) and a
#: node that joins late. A salt stamped further off was posted by an earlier run.
SALT_SKEW_S = 120.0


def run_token(store, rank: int, token: str, timeout_s: float, now=time.time) -> str:
    """This run's sealing key: HMAC-SHA256 of a salt that rank 0 draws (16 random bytes), keyed by
    ``token``, hex. Two runs with one token (a re-used run id, a job id that came round again)
    derive different keys, so values recorded in one do not verify in the other (review N15).

    ``store``: the raw store; rank 0 posts ``{"salt", "stamp": its time.time()}`` under SALT_KEY
    sealed with ``token``; the others read it, waiting up to ``timeout_s`` seconds, and refuse a
    stamp more than ``timeout_s + SALT_SKEW_S`` seconds from their own clock (a salt replayed
    from an earlier run). Raises StoreTampered (a salt not sealed with ``token``, replayed, or
    missing while the store answers: deleted), RuntimeError (the store stopped answering)."""
    sealed = Sealed(store, token)
    if rank == 0:
        salt = secrets.token_hex(16)
        sealed.set(SALT_KEY, json.dumps({"salt": salt, "stamp": now()}))
    else:
        doc = json.loads(await_one(sealed, SALT_KEY, timeout_s))
        salt, age = str(doc["salt"]), now() - float(doc["stamp"])
        if abs(age) > timeout_s + SALT_SKEW_S:
            raise StoreTampered(f"{SALT_KEY}: stamped {age:.0f} s from this node's clock, more than "
                                f"{timeout_s + SALT_SKEW_S:.0f} s: replayed from an earlier run (or the clocks differ)")
    return hmac.new(token.encode(), b"ncclprep-run\0" + salt.encode(), hashlib.sha256).hexdigest()


def open_signed_store(rank: int, world: int, address: str, port: int, token: str, timeout_s: float):
    """A job's store (bound_tcp_store hosted by rank 0 at ``address``:``port``), every value sealed
    with this run's key (run_token: ``token`` salted by rank 0, review N15; signed_store):
    ``(store, keep)``; the caller holds ``keep`` for as long as the store serves (rank 0's
    listener). ``timeout_s`` bounds every store operation, the join too. Raises StoreTampered
    (the salt, run_token) and whatever torch raises (RuntimeError, OSError, DistStoreError) when
    it is not reached."""
    import torch.distributed as dist

    store, sock = bound_tcp_store(dist, rank, world, address, port, timeout_s)
    return signed_store(dist, store, run_token(store, rank, token, timeout_s)), (store, sock)


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


class Keeper:
    """The keys this node posted to a probe's store that must stay there until the step that reads
    them is over (review N4). The probes never delete a key, so one gone missing was deleted by
    a host outside the run: ``keep`` posts it again, so that a deletion only delays the reader,
    and notes it in ``deleted`` (the evidence that the store was tampered with, ``tampered``).
    ``store``: a Sealed or signed_store (values are sealed as they are posted)."""

    def __init__(self, store):
        self.store = store
        self.kept: dict[str, object] = {}
        self.deleted: list[str] = []

    def post(self, key: str, value) -> None:
        """Set ``key`` to ``value`` and keep it."""
        self.store.set(key, value)
        self.kept[key] = value

    def release(self, *keys: str) -> None:
        """Stop keeping ``keys`` (their step is over)."""
        for key in keys:
            self.kept.pop(key, None)

    def keep(self) -> None:
        """Post again every kept key the store no longer holds (one check when all are there).
        Raises RuntimeError when the store stopped answering."""
        if not self.kept or self.store.check(list(self.kept)):
            return
        for key, value in list(self.kept.items()):
            if not self.store.check([key]):
                self.deleted.append(key)
                self.store.set(key, value)

    def tampered(self) -> str | None:
        """What was deleted under this node, as StoreTampered says it, or None."""
        if not self.deleted:
            return None
        return (f"{', '.join(sorted(set(self.deleted)))}: this node's values were deleted from the store "
                f"({len(self.deleted)} times) and posted again")


def await_values(store, keys: list[str], timeout_s: float, keeper: Keeper | None = None,
                 clock=time.monotonic) -> dict:
    """The values of ``keys`` that came within ``timeout_s`` seconds: ``{key: value}`` (every key
    unless the time ran out), each read (Sealed.read: verified) once it is there and kept from
    then on, so a key deleted after it was read still counts. Looks every POLL_S seconds and
    first has ``keeper`` post again what was deleted under this node. Raises StoreTampered (a
    value not this run's), RuntimeError (the store stopped answering)."""
    end = clock() + timeout_s
    got: dict = {}
    while True:
        if keeper is not None:
            keeper.keep()
        for key in keys:
            if key not in got:
                value = store.read(key)
                if value is not None:
                    got[key] = value
        if len(got) == len(keys) or clock() >= end:
            return got
        time.sleep(POLL_S)


def await_one(store, key: str, timeout_s: float, keeper: Keeper | None = None) -> bytes | str:
    """The value of ``key``, a decision another node posts by a deadline this node knows
    (await_values). Raises StoreTampered when it has not come within ``timeout_s`` seconds while
    the store answers (the poster is up, since it hosts the store or reads it, so the key was
    deleted), RuntimeError when the store stopped answering."""
    got = await_values(store, [key], timeout_s, keeper)
    if key not in got:
        raise StoreTampered(f"{key}: not in the store {timeout_s:.0f} s on, while the store answers (deleted, or its "
                            "poster stopped on a value not this run's)")
    return got[key]


def wait_read(store, key: str, end: float, clock=time.monotonic):
    """On the node that decides: the value of ``key`` once it comes, or None at ``end`` (``clock``
    time). Waits on the key (the store wakes a waiter on every write, even one deleted at once)
    and reads it at once; a key deleted before the read is waited for again (its poster's
    Keeper posts it again), so a deletion delays and does not hide it. Raises StoreTampered,
    RuntimeError (the store stopped answering)."""
    while True:
        value = store.read(key)
        if value is not None:
            return value
        left = end - clock()
        if left <= 0:
            return None
        try:
            store.wait([key], datetime.timedelta(seconds=left))
        except RuntimeError as exc:
            if "timeout" not in str(exc).lower():
                raise


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def rendezvous(store, keeper: Keeper, rank: int, world: int, name: str, value: str, join_timeout_s: float,
               slack_s: float, clock=time.monotonic, lost: Collection[int] = (),
               lost_wait_s: float = 0.0) -> dict[int, str]:
    """Who takes part, decided once by rank 0 so that every rank sees the same: ``{rank: the value
    it posted}`` for the ranks that arrived, rank order.

    Every rank posts ``value`` under ``<name>/<rank>`` and keeps it (``keeper``) until the
    decision. Rank 0 counts a rank present once it has read and verified its value (wait_read),
    and keeps what it read: deleting a key delays, it never makes a rank look absent once seen.
    When every rank is read, or ``join_timeout_s`` seconds have passed, rank 0 posts the values
    it read under ``<name>/present``; the others wait for that up to ``join_timeout_s +
    slack_s`` (rank 0's store was up before they joined, so its deadline is earlier), and count
    themselves in ``<name>/read`` once they read it (await_readers). ``store``:
    a Sealed or signed_store. Raises StoreTampered: a value not this run's; the decision missing
    while the store answers; this rank left out after its own value was deleted (review N4: it
    arrived, a host outside the run hid it). RuntimeError: the store stopped answering.

    ``lost``: ranks a step before this one already found gone (on rank 0, whose word decides):
    rank 0 waits for each of them at most ``lost_wait_s`` seconds from its start, not the whole
    ``join_timeout_s`` (a frozen node cost every later step its full deadline), after the others.
    One that comes within it takes part as any other."""
    mine = f"{name}/{rank}"
    keeper.post(mine, value)
    if rank == 0:
        start = clock()
        end = start + join_timeout_s
        present = {0: value}
        order = [r for r in range(1, world) if r not in lost] + [r for r in range(1, world) if r in lost]
        for r in order:
            got = wait_read(store, f"{name}/{r}", min(end, start + lost_wait_s) if r in lost else end, clock)
            if got is not None:
                present[r] = _text(got)
        present = dict(sorted(present.items()))
        store.set(f"{name}/present", json.dumps({str(r): v for r, v in present.items()}))
    else:
        decision = json.loads(await_one(store, f"{name}/present", join_timeout_s + slack_s, keeper))
        present = {int(r): v for r, v in sorted(decision.items(), key=lambda kv: int(kv[0]))}
        store.add(f"{name}/read", 1)
        if rank not in present and keeper.deleted:
            raise StoreTampered(f"{keeper.tampered()}: left out of the run, which it had joined")
    keeper.release(mine)
    return present


def await_readers(store, name: str, readers: int, timeout_s: float, clock=time.monotonic) -> None:
    """On rank 0 after ``rendezvous`` ``name``: wait up to ``timeout_s`` seconds until ``readers``
    ranks have read its decision, so that its store (which goes with rank 0's process) stays up for
    them when rank 0 has nothing else to serve (a run that stops on a missing rank). The count is
    not sealed: a stranger's add ends the wait early, and a rank that then finds the store gone
    says it was lost, which blames no rank. Raises nothing."""
    end = clock() + timeout_s
    try:
        while store.add(f"{name}/read", 0) < readers and clock() < end:
            time.sleep(POLL_S)
    except RuntimeError:
        pass
