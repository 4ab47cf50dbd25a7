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
function a pickle names: a dump that names one is refused without running anything.

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

from ansible.module_utils.ncclprep.parsers import finding, rank_list

#: The largest dump read (bytes): a ring of 2,000 entries with stack frames is a few MB.
MAX_DUMP_BYTES = 32 * 1024 * 1024
#: A pickle's first byte: PROTO (protocol 2 and later); protocol 0/1 dumps are not torch's.
PICKLE_MAGIC = b"\x80"
_RANK_RE = re.compile(r"(\d+)(?:\.\w+)?$")


class DumpRefused(ValueError):
    """A file that is not a flight recorder dump, or names a class or function (refused unread)."""


class _PlainUnpickler(pickle._Unpickler):  # noqa: SLF001 (the pure-Python one, on purpose)
    """An unpickler of plain data only: every GLOBAL / STACK_GLOBAL (a class or function to import
    and call) and every persistent id is refused, so nothing in the file runs. The pure-Python
    unpickler keeps its memo in a dict: the C one grows an array to twice a memo index the file
    names (18 bytes could ask for gigabytes)."""

    def find_class(self, module, name):
        raise DumpRefused(f"the pickle names {module}.{name}: a flight recorder dump holds plain data only, so it "
                          "was refused unread (nothing in it ran)")

    def persistent_load(self, pid):
        raise DumpRefused("the pickle holds a persistent id: not a flight recorder dump; refused")


def is_dump(data: bytes) -> bool:
    """True when ``data`` starts as a pickle of protocol 2 or later (a dump's first bytes)."""
    return data[:1] == PICKLE_MAGIC and len(data) > 2


def load_dump(data: bytes) -> dict:
    """The dump in ``data``, read with ``_PlainUnpickler``. Raises DumpRefused when the pickle names
    a class or function, is cut short or corrupt, is larger than MAX_DUMP_BYTES, or is not a dict
    with ``entries`` and ``version``."""
    if len(data) > MAX_DUMP_BYTES:
        raise DumpRefused(f"{len(data)} bytes: larger than the {MAX_DUMP_BYTES} a dump may be")
    try:
        dump = _PlainUnpickler(io.BytesIO(data)).load()
    except DumpRefused:
        raise
    except Exception as exc:  # a truncated or corrupt pickle raises any of several types
        raise DumpRefused(f"not a readable pickle ({type(exc).__name__}: {exc})") from None
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list) or "version" not in dump:
        raise DumpRefused("a pickle, but not a flight recorder dump (no version and entries)")
    return dump


def dump_rank(name: str) -> int | None:
    """The rank a dump's file name ends with (``nccl_trace_rank_3`` -> 3), None without one."""
    m = _RANK_RE.search(os.path.basename(name))
    return int(m.group(1)) if m else None


def _members(dump: dict, pg: str) -> list[int]:
    conf = (dump.get("pg_config") or {}).get(pg)
    raw = conf.get("ranks") if isinstance(conf, dict) else None
    if isinstance(raw, (list, tuple)):
        return [int(r) for r in raw if isinstance(r, int)]
    return [int(r) for r in re.findall(r"\d+", str(raw or ""))]


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
