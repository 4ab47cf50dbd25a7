"""torch's flight recorder dumps: which rank is stuck in which collective, read safely.

A process group of torch 2.2+ keeps a ring of its last collectives (TORCH_FR_BUFFER_SIZE, formerly
TORCH_NCCL_TRACE_BUFFER_SIZE) and writes it as a pickle, one file per rank, on a timeout
(TORCH_NCCL_DUMP_ON_TIMEOUT=1, files ``TORCH_FR_DUMP_TEMP_FILE<rank>``, by default
``/tmp/nccl_trace_rank_<rank>``) or when asked (``torch._C._distributed_c10d._dump_fr_trace()``).
A dump is ``{"version": "2.10", "pg_config": {pg: {"name", "desc", "ranks": "[0, 1, 2]"}},
"pg_status": {...}, "entries": [{"record_id", "pg_id", "process_group": (name, desc),
"collective_seq_id", "p2p_seq_id", "op_id", "profiling_name": "nccl:all_reduce", "input_sizes",
"input_dtypes", "output_sizes", "output_dtypes", "state": "scheduled" | "started" | "completed",
"retired": bool, "timeout_ms", "is_p2p", "time_created_ns", "frames": [...]}, ...]}``
(torch/csrc/distributed/c10d/FlightRecorder.hpp, the version 2.10 field names).

Reading: a pickle can run code when loaded; these dumps hold plain data only (dicts, lists, tuples,
strings, numbers, booleans, None), so ``load_dump`` uses an unpickler that refuses every class or
function a pickle names: a dump that names one is refused without running anything. A pickle can
also cost memory and time without running anything (memo references that repeat a part 10**30
times, numbers that all hash alike, nesting a million deep): the unpickler hashes nothing it has
not checked and stops after MAX_OPCODES, the loaded whole is weighed and its depth bounded, and only
the fields the analysis reads are kept, each of a fixed type and bounded length (security review
N8).

The rule (the same as torch's analysis, torch/distributed/flight_recorder/components/builder.py):
in each process group, the stuck collective is the lowest collective sequence number that some
rank entered and did not complete; the ranks that entered it wait; a member whose last collective
is before it never reached it (it is stopped, crashed or on another code path) and is the one to
look at; a member with no dump could not write one (dead or stopped); ranks that entered it with
another operation or other sizes are a mismatch (a code path that differs between ranks).
"""

from __future__ import annotations

import io
import os
import pickle
import re
from itertools import chain

from ansible.module_utils.ncclprep.parsers import finding, rank_list

#: The largest dump read (bytes): a ring of 2,000 entries with stack frames is a few MB.
MAX_DUMP_BYTES = 32 * 1024 * 1024
#: The most dump bytes read in one run, all files together: the pure-Python unpickler reads 3 to
#: 4 MB/s of a real dump (a minute for 256 MiB, 300 ranks' rings of 2,000 entries), and what is
#: kept of each dump stays in memory until all are read together.
MAX_TOTAL_DUMP_BYTES = 256 * 1024 * 1024
#: Opcodes read from one dump at most: each makes at most one object (an empty list, about 90
#: bytes with its place on the stack, from one byte), so this bounds the time (about 0.5 us each)
#: and memory (about 90 MB) one dump can cost. A ring of 2,000 entries with 80-frame stacks is
#: about 300,000 (each entry about 70 opcodes and one per frame; 0.25 s).
MAX_OPCODES = 1_000_000
#: A pickle's first byte: PROTO (protocol 2 and later); protocol 0/1 dumps are not torch's.
PICKLE_MAGIC = b"\x80"
#: Bounds on a dump's shape, checked right after it is loaded and before any of it is shown: the
#: ring holds TORCH_FR_BUFFER_SIZE entries (2,000 is the usual setting); a rank is a C int.
MAX_ENTRIES = 100_000
#: The entries and listed ranks kept from all dumps of one run together (an entry is about 200
#: bytes once read, a rank 36): a 500-rank job's rings of 2,000 entries.
MAX_TOTAL_ITEMS = 1_000_000
MAX_GROUPS = 10_000
#: Ranks listed by one dump's process groups together (a 100,000-GPU job lists its world a few times).
MAX_MEMBERS = 1_000_000
MAX_RANK = 2**31 - 1
MAX_SEQ = 2**63 - 1
MAX_VERSION_CHARS = 32
#: Nesting a dump never needs (dict > entries > entry > frames > frame > str is 6 deep).
MAX_DEPTH = 32
#: What the whole dump may weigh when read as a tree, every shared part counted each time it is
#: referred to (containers and numbers 1, text 1 per 16 characters): WEIGHT_PER_BYTE times its size
#: plus WEIGHT_FREE. torch writes each stack frame once and refers to it from every entry that has
#: it (about 12 units for 2 to 5 bytes); 30 levels of lists each holding 10 memo references to the
#: level below (under 1 KB) would weigh 10**30.
WEIGHT_PER_BYTE = 16
WEIGHT_FREE = 1_000_000
_CONTAINERS = (list, tuple, dict)


class DumpRefused(ValueError):
    """A file that is not a flight recorder dump, or names a class or function (refused unread), or
    is of a shape or size no dump has (refused before any of it is shown)."""


def _refuse_opcode(what: str):
    def load(self):
        raise DumpRefused(f"the pickle {what}: a flight recorder dump holds plain data only, so it was refused")
    return load


def _what(value) -> str:
    """``value``'s type and length, never its text (a crafted value may be huge or deep)."""
    n = len(value) if isinstance(value, (str, bytes, list, tuple, dict)) else None
    return f"of type {type(value).__name__}" + (f", length {n}" if n is not None else "")


def _key_ok(key) -> bool:
    """A key hashed in constant time that collides with no other: text, a 64-bit number, a bool or
    None (a tuple key is hashed through its whole depth, and crashes the interpreter at 10**6 deep;
    numbers k*(2**61-1) all hash alike, so a dict of them fills in quadratic time)."""
    return type(key) is str or key is None or type(key) is bool or (type(key) is int and -MAX_SEQ <= key <= MAX_SEQ)


class _PlainUnpickler(pickle._Unpickler):  # noqa: SLF001 (the pure-Python one, on purpose)
    """An unpickler of plain data only: every GLOBAL / STACK_GLOBAL (a class or function to import
    and call) and every persistent id is refused, so nothing in the file runs. The pure-Python
    unpickler keeps its memo in a dict: the C one grows an array to twice a memo index the file
    names (18 bytes could ask for gigabytes).

    Nothing is hashed or walked while reading: sets are refused (their items are hashed as they are
    read), dict keys must be text, 64-bit numbers, bools or None, and items go into lists and dicts
    only. Each opcode then takes time in its own bytes, and at most MAX_OPCODES are read; memo
    references may share parts, which ``_measure`` weighs once the whole is read."""

    dispatch = dict(pickle._Unpickler.dispatch)  # noqa: SLF001

    def load(self):
        """``pickle._Unpickler.load`` (unchanged since Python 3.8), reading at most MAX_OPCODES opcodes."""
        self._unframer = pickle._Unframer(self._file_read, self._file_readline)  # noqa: SLF001
        self.read = self._unframer.read
        self.readinto = self._unframer.readinto
        self.readline = self._unframer.readline
        self.metastack = []
        self.stack = []
        self.append = self.stack.append
        self.proto = 0
        read = self.read
        dispatch = self.dispatch
        try:
            for _ in range(MAX_OPCODES):
                key = read(1)
                if not key:
                    raise EOFError
                dispatch[key[0]](self)
        except pickle._Stop as stop:  # noqa: SLF001
            return stop.value
        raise DumpRefused(f"more than {MAX_OPCODES} opcodes: larger than a flight recorder dump's ring")

    def find_class(self, module, name):
        raise DumpRefused(f"the pickle names {module}.{name}: a flight recorder dump holds plain data only, so it "
                          "was refused unread (nothing in it ran)")

    def persistent_load(self, pid):
        raise DumpRefused("the pickle holds a persistent id: not a flight recorder dump; refused")

    @staticmethod
    def _not_a(kind: type, target) -> DumpRefused:
        return DumpRefused(f"the pickle adds items to a value {_what(target)}, not a {kind.__name__}: not a flight "
                           "recorder dump")

    @staticmethod
    def _checked_key(key):
        if not _key_ok(key):
            raise DumpRefused(f"the pickle has a dict key {_what(key)}: a flight recorder dump's keys are "
                              "text and numbers")
        return key

    def load_append(self):
        stack = self.stack
        value = stack.pop()
        if type(stack[-1]) is not list:
            raise self._not_a(list, stack[-1])
        stack[-1].append(value)

    def load_appends(self):
        items = self.pop_mark()
        if type(self.stack[-1]) is not list:
            raise self._not_a(list, self.stack[-1])
        self.stack[-1].extend(items)

    def load_setitem(self):
        stack = self.stack
        value = stack.pop()
        key = self._checked_key(stack.pop())
        if type(stack[-1]) is not dict:
            raise self._not_a(dict, stack[-1])
        stack[-1][key] = value

    def load_setitems(self):
        items = self.pop_mark()
        target = self.stack[-1]
        if type(target) is not dict:
            raise self._not_a(dict, target)
        for i in range(0, len(items), 2):
            target[self._checked_key(items[i])] = items[i + 1]

    def load_dict(self):
        items = self.pop_mark()
        self.append({self._checked_key(items[i]): items[i + 1] for i in range(0, len(items), 2)})

    dispatch[pickle.APPEND[0]] = load_append
    dispatch[pickle.APPENDS[0]] = load_appends
    dispatch[pickle.SETITEM[0]] = load_setitem
    dispatch[pickle.SETITEMS[0]] = load_setitems
    dispatch[pickle.DICT[0]] = load_dict
    for _code, _said in ((pickle.EMPTY_SET, "holds a set"), (pickle.ADDITEMS, "holds a set"),
                         (pickle.FROZENSET, "holds a set"), (pickle.REDUCE, "calls something"),
                         (pickle.BUILD, "sets an object's state"), (pickle.NEWOBJ, "makes an object"),
                         (pickle.NEWOBJ_EX, "makes an object"), (pickle.OBJ, "makes an object")):
        dispatch[_code[0]] = _refuse_opcode(_said)
    del _code, _said


def _weight(value) -> int:
    if isinstance(value, (str, bytes, bytearray)):
        return 1 + len(value) // 16
    return 1 + value.bit_length() // 64 if type(value) is int else 1


def _children(value):
    return chain.from_iterable(value.items()) if type(value) is dict else value


def _measure(root, budget: int) -> None:
    """Refuse ``root`` (DumpRefused) when it nests deeper than MAX_DEPTH, holds itself, or weighs more
    than ``budget`` read as a tree (``_weight`` per item, every shared part counted each time it is
    referred to: a few hundred bytes of memo references can stand for 10**30 items). Each container
    is weighed once, its weight kept by id, so this takes time in the objects the file made, not in
    the tree they stand for."""
    if type(root) not in _CONTAINERS:
        return
    weights: dict[int, int] = {}
    path = [(root, iter(_children(root)))]
    acc = [1]
    open_ids = {id(root)}
    while path:
        obj, items = path[-1]
        for item in items:
            if type(item) not in _CONTAINERS:
                acc[-1] += _weight(item)
                continue
            known = weights.get(id(item))
            if known is not None:
                acc[-1] += known
                if acc[-1] > budget:
                    break
                continue
            if id(item) in open_ids:
                raise DumpRefused("the pickle holds itself (a cycle): not a flight recorder dump")
            if len(path) >= MAX_DEPTH:
                raise DumpRefused(f"the pickle nests deeper than {MAX_DEPTH} levels: not a flight recorder dump")
            path.append((item, iter(_children(item))))
            acc.append(1)
            open_ids.add(id(item))
            break
        else:
            path.pop()
            open_ids.discard(id(obj))
            weights[id(obj)] = weight = acc.pop()
            if acc:
                acc[-1] += weight
        if (acc[-1] if acc else weight) > budget:
            raise DumpRefused(f"the pickle's parts, counted each time a memo reference repeats them, weigh more than "
                              f"{budget} (a memo bomb): not a flight recorder dump")


def is_dump(data: bytes) -> bool:
    """True when ``data`` starts as a pickle of protocol 2 or later (a dump's first bytes)."""
    return data[:1] == PICKLE_MAGIC and len(data) > 2


def load_dump(data: bytes) -> dict:
    """The dump in ``data``, read with ``_PlainUnpickler``, measured (``_measure``) and reduced to the
    fields ``analyze`` reads, each of a fixed type and bounded length (``_checked``): ``{"version":
    str, "entries": [{"collective_seq_id": int, "process_group": (name, desc), "profiling_name":
    str, "state": str, "retired": bool, "input_sizes": [[int]] | None}], "pg_config": {name:
    {"ranks": [int]}}}`` (``pg_config`` only when the dump has one; a field of another type or
    length reads as absent; point-to-point entries and those without a sequence number are left
    out).

    Raises DumpRefused when the pickle names a class or function, holds a set, a key other than
    text or a number, is cut short or corrupt, is larger than MAX_DUMP_BYTES, has more than
    MAX_OPCODES opcodes, nests deeper than MAX_DEPTH, weighs more than WEIGHT_PER_BYTE times its
    size read as a tree, or is not a dict with ``entries`` (at most MAX_ENTRIES) and a ``version``
    of at most MAX_VERSION_CHARS characters, or its process groups list more than MAX_GROUPS
    groups, MAX_MEMBERS ranks, or a rank outside 0..MAX_RANK. Time and memory are linear in the
    opcodes read (at most MAX_OPCODES: under a second and 100 MB)."""
    if len(data) > MAX_DUMP_BYTES:
        raise DumpRefused(f"{len(data)} bytes: larger than the {MAX_DUMP_BYTES} a dump may be")
    try:
        raw = _PlainUnpickler(io.BytesIO(data)).load()
    except DumpRefused:
        raise
    except Exception as exc:  # a truncated or corrupt pickle raises any of several types
        raise DumpRefused(f"not a readable pickle ({type(exc).__name__}: {str(exc)[:200]})") from None
    _measure(raw, WEIGHT_PER_BYTE * len(data) + WEIGHT_FREE)
    return _checked(raw)


def _text(value, limit: int) -> str | None:
    return value[:limit] if type(value) is str else None


def _name(value) -> str:
    """A process group's name as text of at most 60 characters ("?" when it is neither text nor a number)."""
    if type(value) is int and abs(value) <= MAX_SEQ:
        return str(value)
    return value[:60] if type(value) is str else "?"


def _short_sizes(value) -> list | None:
    """A dump's ``input_sizes`` when it is a list of at most MAX_SIZES shapes of at most MAX_SIZES
    64-bit numbers (a copy), else None."""
    if type(value) is list and len(value) <= MAX_SIZES and all(
            type(v) is list and len(v) <= MAX_SIZES and all(type(x) is int and abs(x) <= MAX_SEQ for x in v)
            for v in value):
        return [list(v) for v in value]
    return None


def _entry(e: dict) -> dict | None:
    """The fields of one entry ``analyze`` reads, checked; None for a point-to-point entry or one
    without a sequence number (``analyze`` leaves both out)."""
    seq = e.get("collective_seq_id")
    if type(seq) is not int or not 0 <= seq <= MAX_SEQ or e.get("is_p2p") is True:
        return None
    out = {"collective_seq_id": seq, "retired": e.get("retired") is True}
    pg = e.get("process_group")
    if type(pg) in (list, tuple) and pg:
        out["process_group"] = (_name(pg[0]), (_text(pg[1], 60) or "") if len(pg) > 1 else "")
    for key, limit in (("profiling_name", 200), ("state", 32)):
        text = _text(e.get(key), limit)
        if text is not None:
            out[key] = text
    out["input_sizes"] = _short_sizes(e.get("input_sizes"))
    return out


def _ranks(raw, group: str) -> list[int]:
    """A process group's ``ranks``: a list of numbers or torch's text ``"[0, 1, 2]"``. Raises
    DumpRefused for another type, more than MAX_MEMBERS ranks or one outside 0..MAX_RANK."""
    if raw is None:
        return []
    if type(raw) is str:
        text, raw = raw, []
        for m in re.finditer(r"\d+", text):
            if len(raw) == MAX_MEMBERS or len(m.group()) > 10:
                raise DumpRefused(f"process group {group}: more than {MAX_MEMBERS} ranks, or a rank of more than 10 "
                                  "digits")
            raw.append(int(m.group()))
    elif type(raw) not in (list, tuple) or len(raw) > MAX_MEMBERS or any(type(r) is not int for r in raw):
        raise DumpRefused(f"process group {group}: its ranks are {_what(raw)}: not a list of at most {MAX_MEMBERS} "
                          "ranks")
    if not all(0 <= r <= MAX_RANK for r in raw):
        raise DumpRefused(f"process group {group}: a rank outside 0 to {MAX_RANK}")
    return list(raw)


def _checked(raw) -> dict:
    """``load_dump``'s shape checks and reduction (see there) on the loaded object ``raw``."""
    if type(raw) is not dict or type(raw.get("entries")) is not list or "version" not in raw:
        raise DumpRefused("a pickle, but not a flight recorder dump (no version and entries)")
    version = raw["version"]
    if type(version) is not str or len(version) > MAX_VERSION_CHARS:
        raise DumpRefused(f"its version is {_what(version)}: not a version of at most {MAX_VERSION_CHARS} "
                          "characters: not a flight recorder dump")
    if len(raw["entries"]) > MAX_ENTRIES:
        raise DumpRefused(f"{len(raw['entries'])} entries: more than the {MAX_ENTRIES} a dump may hold")
    entries = [_entry(e) for e in raw["entries"] if type(e) is dict]
    out = {"version": version, "entries": [e for e in entries if e is not None]}
    config = raw.get("pg_config")
    if type(config) is dict:
        if len(config) > MAX_GROUPS:
            raise DumpRefused(f"{len(config)} process groups: more than the {MAX_GROUPS} a dump may list")
        out["pg_config"], listed = {}, 0
        for key, conf in config.items():
            name = _name(key)
            ranks = _ranks(conf.get("ranks") if type(conf) is dict else None, name)
            listed += len(ranks)
            if listed > MAX_MEMBERS:
                raise DumpRefused(f"its process groups list more than {MAX_MEMBERS} ranks together")
            out["pg_config"][name] = {"ranks": ranks}
    return out


#: The digits a rank in a file name may have (MAX_RANK has 10); a longer run is not a rank.
_RANK_RE = re.compile(r"(?<!\d)(\d{1,10})(?:\.\w{1,16})?$")


def dump_rank(name: str) -> int | None:
    """The rank a dump's file name ends with (``nccl_trace_rank_3`` -> 3), None without one or when
    the number there is longer than a rank (a name of 5,000 digits is no rank). Never raises."""
    m = _RANK_RE.search(os.path.basename(str(name))[-40:])
    return int(m.group(1)) if m and int(m.group(1)) <= MAX_RANK else None


def _members(dump: dict, pg: str) -> list[int]:
    conf = (dump.get("pg_config") or {}).get(pg)
    return conf["ranks"] if isinstance(conf, dict) else []


#: Collectives whose input sizes every rank must give alike (names without "_").
SIZED_OPS = frozenset({"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "allgatherbase",
                       "reducescatterbase", "allgatherintotensorcoalesced"})
#: The most of a sizes list shown (entries of a dump are data from a file: kept short and flat).
MAX_SIZES = 8


def _sizes(value) -> str:
    """A dump's ``input_sizes`` as short text: a list of at most MAX_SIZES shapes of ints, else "?"
    (nested or shared lists a crafted file holds are not walked)."""
    if isinstance(value, list) and len(value) <= MAX_SIZES and all(
            isinstance(v, list) and len(v) <= MAX_SIZES and all(type(x) is int for x in v) for v in value):
        return str(value)
    return "?"


def _done(e: dict) -> bool:
    """Completed: NCCL's state, or retired (Gloo's entries stay "scheduled" and retire when done)."""
    return e.get("state") == "completed" or bool(e.get("retired"))


def _op(e: dict) -> str:
    name = e.get("profiling_name")
    return name.split(":", 1)[-1][:60] if isinstance(name, str) and name else "?"


def analyze(dumps: dict[int, dict]) -> list[dict]:
    """Each process group's stuck collective across the ranks' dumps (``{rank: dump}``).

    Returns, per process group with a collective some rank entered and did not complete, ``{"pg",
    "desc", "seq", "op", "sizes", "members", "waiting": [ranks in it, not done], "done": [ranks that
    completed it], "behind": {rank: (last seq, last op) | None}, "no_dump": [members without a dump],
    "mismatch": {rank: (op, sizes)} (ranks in it with another op or sizes), "last": {rank: seq},
    "after_failure": bool}``, groups sorted by name. A Gloo entry (no state: retired once done or
    failed) that is its rank's last collective counts as waiting, not done. Dumps written after the
    collective failed
    (Gloo retires the failed work: every entry done) read as each rank standing at its last
    collective, the furthest being the one that failed (``after_failure``), when a member is
    behind it or left no dump. Point-to-point entries are left out (their own sequence). Never raises
    on a dump's shape: a field missing reads as absent."""
    per_pg: dict[str, dict[int, list[dict]]] = {}
    desc: dict[str, str] = {}
    members: dict[str, set[int]] = {}
    for rank, dump in dumps.items():
        for e in dump.get("entries") or []:
            if not isinstance(e, dict) or e.get("is_p2p") or type(e.get("collective_seq_id")) is not int:
                continue
            pg = e.get("process_group")
            pg = pg if isinstance(pg, (list, tuple)) and pg else ("?", "")
            name = str(pg[0])[:60] if isinstance(pg[0], (str, int)) else "?"
            desc[name] = str(pg[1])[:60] if len(pg) > 1 and isinstance(pg[1], str) else ""
            per_pg.setdefault(name, {}).setdefault(rank, []).append(e)
        config = dump.get("pg_config")
        for name in config if isinstance(config, dict) else {}:
            members.setdefault(str(name), set()).update(_members(dump, name))
    out = []
    for name in sorted(per_pg):
        ranks = per_pg[name]
        # Gloo's dumps (torch 2.13) file the default group's members under an empty name
        group = sorted(members.get(name) or (members.get("") if len(members) == 1 else None)
                       or set(ranks) | set(dumps))
        last = {r: max(e["collective_seq_id"] for e in es) for r, es in ranks.items()}
        stuck = [e for es in ranks.values() for e in es if not _done(e)]
        after_failure = False
        if stuck:
            seq = min(e["collective_seq_id"] for e in stuck)
        elif any(r not in dumps for r in group) or len(set(last.values())) > 1:
            # every entry retired: dumps written after the collective failed (Gloo retires the failed
            # work), so each rank stands at its last collective and the furthest is the one that failed
            seq, after_failure = max(last.values()), True
        else:
            continue
        # a coalesced group puts several entries under one number: the one not done is where it stands
        at = {r: min((e for e in es if e["collective_seq_id"] == seq), key=_done, default=None)
              for r, es in ranks.items()}
        # Gloo's entries carry no state: its last work is retired whether it completed or failed, so a
        # rank whose last collective is this one stood in it
        ended_there = {r for r, e in at.items() if e is not None and last[r] == seq
                       and str(e.get("profiling_name") or "").startswith("gloo:")}
        waiting = sorted(r for r, e in at.items() if e is not None
                         and (after_failure or not _done(e) or r in ended_there))
        done = sorted(r for r, e in at.items() if e is not None and r not in waiting)
        if not waiting:
            continue
        first = at[waiting[0]]
        op, sizes = _op(first), _sizes(first.get("input_sizes"))
        # sizes must agree only where every rank sends the same shape (torch's fr_trace: not for
        # all_to_all, scatter, gather, nor coalesced groups)
        same_sizes = op.replace("_", "") in SIZED_OPS
        mismatch = {r: (_op(e), _sizes(e.get("input_sizes"))) for r, e in at.items() if e is not None
                    and (_op(e) != op or (same_sizes and _sizes(e.get("input_sizes")) != sizes))}
        behind = {}
        for r in group:
            if r in ranks and at.get(r) is None and last[r] < seq:
                e = max(ranks[r], key=lambda e: e["collective_seq_id"])
                behind[r] = (e["collective_seq_id"], _op(e))
        no_dump = [r for r in group if r not in dumps]
        for r in group:
            if r in dumps and r not in ranks:  # a dump without any collective of this group
                behind[r] = None
        out.append({"pg": name, "desc": desc.get(name, ""), "seq": seq, "op": op, "sizes": sizes, "members": group,
                    "waiting": waiting, "done": done, "behind": behind, "no_dump": no_dump, "mismatch": mismatch,
                    "last": last, "after_failure": after_failure})
    return out


def diagnose_flight_recorder(stuck: list[dict], host: str | None = None) -> list[dict]:
    """Findings for ``analyze`` output.

    - FAIL ``fr.stuck_collective`` per process group with a stuck collective: the collective
      (sequence number, operation, sizes), the ranks that wait in it, and the ranks to look at
      (``suspects``): those that never reached it (their last collective named), else those that
      left no dump; the subject names them.
    - FAIL ``fr.mismatch`` when ranks entered that collective with another operation or sizes.
    """
    out = []
    for g in stuck:
        where = f"process group {g['pg']}" + (f" ({g['desc']})" if g["desc"] else "")
        what = f"collective #{g['seq']} ({g['op']}, input sizes {g['sizes']}) of {where}"
        msg = f"{what}: {rank_list(g['waiting'])} " + (
            "got as far as it (the last collective in their dumps, written after it failed)" if g.get("after_failure")
            else "entered it and wait")
        if g["done"]:
            msg += f"; {rank_list(g['done'])} completed it"
        suspects = sorted(g["behind"]) or list(g["no_dump"])
        parts = []
        for r, last in sorted(g["behind"].items()):
            parts.append(f"rank {r} never reached it (its last collective: #{last[0]} {last[1]})" if last else
                         f"rank {r} never reached it (no collective of this group in its dump)")
        if g["no_dump"]:
            parts.append(f"{rank_list(g['no_dump'])} left no dump (stopped, dead, or it could not write one)")
        if parts:
            msg += "; " + "; ".join(parts)
        elif not g["done"]:
            msg += "; every member entered it: the hang is inside the collective (the network or a GPU)"
        first = f"rank {suspects[0]}" if suspects else "the network between the members"
        out.append(finding("fr.stuck_collective", "FAIL", rank_list(suspects) if suspects else where, msg,
                           f"look at {first} first: its own log, its process (py-spy dump; a stopped process "
                           "shows state T in ps), its node (ncclprep node check)", host=host, pg=g["pg"], seq=g["seq"],
                           op=g["op"], waiting=g["waiting"], suspects=suspects, no_dump=g["no_dump"]))
        if g["mismatch"]:
            shown = "; ".join(f"rank {r}: {op} {sizes}" for r, (op, sizes) in sorted(g["mismatch"].items()))
            out.append(finding("fr.mismatch", "FAIL", rank_list(g["mismatch"]),
                               f"at collective #{g['seq']} of {where} ranks issue different collectives: "
                               f"{g['op']} {g['sizes']} on rank {g['waiting'][0]}, {shown}",
                               "the ranks' code paths differ (a condition on the rank, uneven data): every rank must "
                               "issue the same collectives in the same order", host=host, pg=g["pg"], seq=g["seq"]))
    return out
