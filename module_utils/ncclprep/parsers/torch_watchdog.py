"""PyTorch's NCCL watchdog (ProcessGroupNCCL): collective timeouts and stuck watchdogs, as torch 1.x
to 2.x print them, read from one rank's log or from several ranks' lines mixed.

Read from the text (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp; every line may carry the
prefixes of its version: ``[E ProcessGroupNCCL.cpp:737]`` in 1.x, ``[rank3]:[E1206 18:44:12.715
ProcessGroupNCCL.cpp:607]`` from 2.2, a launcher's ``[80746]`` or ``[default0]:`` before it):

- the timeout: ``[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808,
  OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600020
  milliseconds before timing out.`` (1.x: no SeqNum before 1.10, no Numel before 1.13); the same
  text again after ``NCCL watchdog thread terminated with exception:`` is the same timeout;
- the rank's progress (2.2+): ``[PG 1 Rank 0] Exception (either an error or timeout) detected by
  watchdog at work: 1580, last enqueued NCCL work: 1582, last completed NCCL work: 1579.`` and
  ``Timeout at NCCL work: 610, last enqueued ...``; the process group is ``PG 1``, ``PG 0
  (default_pg)`` or ``PG ID 2 PG GUID 9``;
- the watchdog itself stuck (2.2+): ``Heartbeat monitor timed out!`` and ``ProcessGroupNCCL's
  watchdog got stuck for 480 seconds without making progress``;
- the rank numbers a line's ``[rankN]:`` prefix or ``[Rank N]`` names: the ranks seen.

A collective completes only when every rank of its process group has launched it: the ranks that
time out in work SeqNum N wait for a rank that never launched N. That rank is behind (its last
enqueued work is below N, or its own timeout is at an earlier SeqNum), or stuck outside NCCL and
silent (no timeout of its own: its watchdog had nothing to time out). The same reading as torch's
flight-recorder analysis (torch/distributed/flight_recorder/components/builder.py: the first
collective not every rank entered, and the ranks missing from it).
"""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.parsers import finding, rank_list

_WATCHDOG_RE = re.compile(r"\[(?:PG[^\]]*?\s)?Rank\s*(\d+)\]\s*Watchdog\s*caught\s*collective\s*operation\s*timeout:\s*"
                          r"WorkNCCL\(((?:[^\[\]]|\[[^\[\]]*\])*?)\)\s*ran\s*for\s*(\d+)\s*milliseconds")
_FIELD_RE = re.compile(r"(SeqNum|OpType|NumelIn|NumelOut|Timeout\(ms\))=([^,\s)]+)")
#: ``[PG 1 Rank 0]``, ``[PG 0 (default_pg) Rank 0]``, ``[PG ID 2 PG GUID 9 Rank 4]``,
#: ``[PG ID 0 PG GUID 0(default_pg) Rank 6]``
_PG_RANK_RE = re.compile(r"\[PG (?:ID )?(\d+)(?: PG GUID (\d+))?\s*(?:\(([^)]*)\))? Rank (\d+)\]")
_PROGRESS_RE = re.compile(r"(?:detected\s*by\s*watchdog\s*at\s*work|Timeout\s*at\s*NCCL\s*work):\s*(-?\d+),\s*last\s*"
                          r"enqueued\s*NCCL\s*work:\s*(-?\d+),\s*last\s*completed\s*NCCL\s*work:\s*(-?\d+)"
                          r"|detected\s*by\s*watchdog\s*at\s*work\s*sequence\s*id:\s*(-?\d+)\s*PG\s*status:\s*last\s*"
                          r"enqueued\s*work:\s*(-?\d+),\s*last\s*completed\s*work:\s*(-?\d+)")
_HEARTBEAT_RE = re.compile(r"Heartbeat\s*monitor\s*timed\s*out")
_STUCK_RE = re.compile(r"watchdog\s*got\s*stuck\s*for\s*(\d+)\s*seconds")
#: A rank a line names: the launcher's global ``[rank13]:`` first (torch 2.2+), else the group's ``[Rank 1]``,
#: else a script's own ``Rank 4 completed`` at the start of a line.
_GLOBAL_RANK_RE = re.compile(r"\[rank(\d+)\]:")
_GROUP_RANK_RE = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]")
_SCRIPT_RANK_RE = re.compile(r"^\s*Rank (\d+)\b")
_TAKEN_DOWN_RE = re.compile(r"Some NCCL operations have failed or timed out|we are taking the entire process down")
#: The start of each kind of line, for joining a line a terminal wrapped (pasted at a fixed width)
_STARTS_RE = re.compile(r"Watchdog\s*caught|detected\s*by\s*watchdog|Timeout\s*at\s*NCCL\s*work|watchdog\s*got")
_COMPLETE = (_WATCHDOG_RE, _PROGRESS_RE, _STUCK_RE)
#: Physical lines joined at most to complete one wrapped line.
MAX_WRAPPED = 4
#: The highest rank whose missing neighbours are listed (a number past it in a text is not a job's rank).
MAX_RANK = 65536
#: A timeout reported this many times its limit late: the process, not the collective, was stalled.
LATE_FACTOR = 2


def is_watchdog_line(line: str) -> bool:
    """True for a line this module reads (a timeout, a progress line, a stuck watchdog, the take-down),
    or the first part of one a terminal wrapped."""
    return bool(_STARTS_RE.search(line) or _HEARTBEAT_RE.search(line) or _TAKEN_DOWN_RE.search(line)
                or _PROGRESS_RE.search(line))


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and re.fullmatch(r"-?\d+", text) else None


#: A paste is wrapped at a fixed width when at least this many lines have that exact length (>= MIN_WRAP).
WRAPPED_LINES = 3
MIN_WRAP = 60


def _wrap_width(lines: list[str]) -> int | None:
    """The width a terminal wrapped the text at: the length WRAPPED_LINES or more lines share
    (padding included), at least MIN_WRAP; None when no such width."""
    counts: dict[int, int] = {}
    for line in lines:
        if len(line) >= MIN_WRAP:
            counts[len(line)] = counts.get(len(line), 0) + 1
    width = max(counts, key=lambda w: (counts[w], w), default=None)
    return width if width is not None and counts[width] >= WRAPPED_LINES else None


def _unwrap(lines: list[str]) -> list[str]:
    """Lines wrapped at a fixed width (``_wrap_width``) joined back: a line of exactly that width
    continues on the next, unless it ends in padding (two spaces or more: its record ends there) or
    the next starts a record (``_RECORD_START_RE``: same-width lines of one format are not wrapped)."""
    width = _wrap_width(lines)
    if width is None:
        return lines
    out: list[str] = []
    joining = False
    for line in lines:
        if joining and out and not _RECORD_START_RE.match(line):
            out[-1] += line
        else:
            out.append(line)
        # only torch's own records are joined (a script's lines of one width are not wrapped ones)
        joining = len(line) == width and not line.endswith("  ") and bool(_TORCH_RECORD_RE.search(out[-1])) \
            and not any(r.search(out[-1]) for r in _COMPLETE)
    return out


#: A record of torch's process group (what a wrapped paste of the watchdog holds).
_TORCH_RECORD_RE = re.compile(r"ProcessGroupNCCL|Watchdog\s*caught|watchdog\s*(?:at|got)|NCCL\s*work|"
                              r"Some NCCL operations")
#: The start of a log record (a prefix, a timestamp, a traceback line): never a wrapped line's rest.
_RECORD_START_RE = re.compile(r"^\s*(?:\[|\(|\d{4}-\d\d-\d\d|[EWIF]\d{4} |Traceback|File \"|[\w.-]+:\d+:\d+ \[|"
                              r"NCCL |terminate called|what\(\)|\w+Error\b)")


def _logical_lines(text: str):
    """The text's lines, lines a terminal wrapped joined back (``_unwrap``; else a watchdog line
    left incomplete joined with up to MAX_WRAPPED - 1 lines after it, their padding dropped)."""
    lines = _unwrap(text.splitlines())
    i = 0
    while i < len(lines):
        line = lines[i]
        used = 1
        if _STARTS_RE.search(line) and not any(r.search(line) for r in _COMPLETE):
            joined = line.rstrip()
            for k in range(1, MAX_WRAPPED):
                if i + k >= len(lines) or _RECORD_START_RE.match(lines[i + k]) or _GLOBAL_RANK_RE.search(lines[i + k]):
                    break  # the next line is a record of its own: this one was cut, not wrapped
                joined += lines[i + k].rstrip()
                if any(r.search(joined) for r in _COMPLETE):
                    line, used = joined, k + 1
                    break
        yield line
        i += used


def _pg(m: re.Match | None) -> tuple:
    """(pg id, pg guid, pg name) of a ``[PG ... Rank N]`` match; Nones without one."""
    if not m:
        return None, None, None
    return int(m.group(1)), _int(m.group(2)), m.group(3) or None


def parse_torch_watchdog(text: str) -> dict:
    """Parse the watchdog's lines out of a torch log (other lines are ignored: the caller's parser
    reads them); a line a terminal wrapped at a fixed width is joined back first.

    Returns ``{"timeouts": [{"rank", "group_rank", "pg", "pg_guid", "seq", "op", "numel_in",
    "numel_out", "timeout_ms", "ran_ms"}], "progress": [{"rank", "group_rank", "pg", "pg_guid",
    "pg_name", "work", "last_enqueued", "last_completed"}], "stuck": [{"rank", "seconds"}],
    "taken_down": [ranks], "ranks_seen": [ranks]}``. ``rank`` is the global rank (the ``[rankN]:``
    prefix of torch 2.2+), else the group's rank the line names; times in milliseconds (``seconds``:
    seconds); works and SeqNums are ints; a field the line does not show is None (a timeout's process
    group is taken from the same rank's progress line at the same work). A timeout printed twice (the
    watchdog's exception repeats it) is listed once. Never raises."""
    out: dict = {"timeouts": [], "progress": [], "stuck": [], "taken_down": [], "ranks_seen": []}
    seen_timeouts, seen_progress = set(), set()
    ranks: set[int] = set()
    for line in _logical_lines(text):
        glob = _GLOBAL_RANK_RE.search(line)
        group = _GROUP_RANK_RE.search(line)
        script = _SCRIPT_RANK_RE.search(line)
        rank = int(glob.group(1)) if glob else int(group.group(1)) if group else \
            int(script.group(1)) if script and int(script.group(1)) <= MAX_RANK else None
        if rank is not None:
            ranks.add(rank)
        pg_match = _PG_RANK_RE.search(line)
        pg_id, guid, name = _pg(pg_match)
        for m in _WATCHDOG_RE.finditer(line):
            fields = dict(_FIELD_RE.findall(m.group(2)))
            row = {"rank": rank if rank is not None else int(m.group(1)), "group_rank": int(m.group(1)),
                   "pg": pg_id, "pg_guid": guid, "seq": _int(fields.get("SeqNum")), "op": fields.get("OpType"),
                   "numel_in": _int(fields.get("NumelIn")), "numel_out": _int(fields.get("NumelOut")),
                   "timeout_ms": _int(fields.get("Timeout(ms)")), "ran_ms": int(m.group(3))}
            key = (row["rank"], row["seq"], row["op"], row["ran_ms"])
            if key not in seen_timeouts:
                seen_timeouts.add(key)
                out["timeouts"].append(row)
        m = _PROGRESS_RE.search(line)
        if m:
            work, enq, done = (m.group(1), m.group(2), m.group(3)) if m.group(1) is not None else \
                (m.group(4), m.group(5), m.group(6))
            row = {"rank": rank, "group_rank": int(pg_match.group(4)) if pg_match else None, "pg": pg_id,
                   "pg_guid": guid,
                   "pg_name": name, "work": int(work), "last_enqueued": int(enq), "last_completed": int(done)}
            key = (row["rank"], row["pg"], row["pg_guid"], row["work"])
            if key not in seen_progress:
                seen_progress.add(key)
                out["progress"].append(row)
        m = _STUCK_RE.search(line)
        if m:
            out["stuck"].append({"rank": rank, "seconds": int(m.group(1))})
        elif _HEARTBEAT_RE.search(line):
            out["stuck"].append({"rank": rank, "seconds": None})
        if _TAKEN_DOWN_RE.search(line) and rank is not None and rank not in out["taken_down"]:
            out["taken_down"].append(rank)
    for t in out["timeouts"]:
        for p in out["progress"]:
            if p["rank"] == t["rank"] and p["work"] == t["seq"] and t["pg"] is None and t["pg_guid"] is None:
                t["pg"], t["pg_guid"] = p["pg"], p["pg_guid"]
                break
    out["ranks_seen"] = sorted(ranks)
    return out


def _group_key(row: dict):
    """The process group a row is in: its GUID (unique across ranks), else its id, else None (unnamed)."""
    if row.get("pg_guid") is not None:
        return ("guid", row["pg_guid"])
    return ("id", row["pg"]) if row.get("pg") is not None else None


def watchdog_census(parsed: dict) -> dict | None:
    """Who waits on whom, from ``parse_torch_watchdog``'s output; None without a timeout.

    Each rank's first stuck work is the lowest SeqNum it timed out in (or its progress line's work).
    The process group read is the one with the most such ranks (unnamed groups count as one, and as
    the named one when the text names only one: torch names it on progress lines only); in it,
    the work is the most common first stuck SeqNum (ties: the lowest). Returns ``{"seq", "op", "pg",
    "timeout_ms", "ran_ms", "numel_in", "waiting": [ranks stuck in that work], "behind": {rank: why}
    (stuck at an earlier work of the group, or its last enqueued work is earlier), "ahead": {rank:
    work} (timed out at a later work: it issued collectives the others did not), "group_named":
    bool (the group is named on the lines of every rank behind or ahead), "silent": [ranks the
    text shows that printed no timeout], "unseen": [ranks below the highest shown that the text
    never names], "other": [first timeouts in other process groups],
    "late": bool (ran for LATE_FACTOR x its timeout or more: the process was stalled, the watchdog
    reported late)}``. SeqNums compare only within one group: the census says when the text does
    not name it (``group_named`` False)."""
    timeouts = parsed.get("timeouts") or []
    progress = parsed.get("progress") or []
    if not timeouts:
        return None
    first: dict = {}  # rank -> (group key, seq, row)
    for t in sorted(timeouts, key=lambda t: (t["seq"] is None, t["seq"] or 0)):
        key = _group_key(t)
        if t["rank"] not in first:
            first[t["rank"]] = (key, t["seq"], t)
    for p in progress:
        if p["rank"] is not None and p["rank"] not in first:
            first[p["rank"]] = (_group_key(p), p["work"], None)
    explicit = {r: key for r, (key, _seq, _row) in first.items()}
    named_keys = {key for key in explicit.values() if key is not None}
    if len(named_keys) == 1:  # torch prints the group on progress lines only: one group named is theirs
        only = next(iter(named_keys))
        first = {r: (only if key is None else key, seq, row) for r, (key, seq, row) in first.items()}
    groups: dict = {}
    for rank, (key, _seq, _row) in first.items():
        groups.setdefault(key, []).append(rank)
    main_key = max(groups, key=lambda k: (len(groups[k]), k is None))
    members = groups[main_key]
    counts: dict = {}
    for r in members:
        counts[first[r][1]] = counts.get(first[r][1], 0) + 1
    seq = min(counts, key=lambda k: (-counts[k], k if k is not None else -1))
    waiting = sorted(r for r in members if first[r][1] == seq)
    rows = [first[r][2] for r in waiting if first[r][2] is not None] or \
        [t for t in timeouts if _group_key(t) == main_key][:1] or timeouts[:1]
    behind: dict[int, str] = {}
    ahead: dict[int, int] = {}
    for r in members:
        s = first[r][1]
        if r in waiting or s is None or seq is None:
            continue
        if s < seq:
            row = first[r][2]
            behind[r] = f"stuck at work {s}" + (f" ({row['op']})" if row and row["op"] else "") + f", before {seq}"
        else:
            ahead[r] = s
    for p in progress:
        if p["rank"] in first and first[p["rank"]][0] == main_key and p["rank"] not in waiting \
                and p["rank"] not in behind and seq is not None and p["last_enqueued"] < seq:
            behind[p["rank"]] = f"its last enqueued work is {p['last_enqueued']}, before {seq}"
    named = set(first)
    seen = set(parsed.get("ranks_seen") or []) | named
    row = rows[0]
    late = bool(row["timeout_ms"]) and max(r["ran_ms"] for r in rows) >= LATE_FACTOR * row["timeout_ms"]
    return {"seq": seq, "op": row["op"], "pg": row["pg"], "timeout_ms": row["timeout_ms"],
            "ran_ms": max(r["ran_ms"] for r in rows), "numel_in": row["numel_in"], "waiting": waiting,
            "behind": behind, "ahead": ahead,
            "group_named": main_key is not None and all(explicit[r] is not None for r in [*behind, *ahead]),
            "silent": sorted(r for r in seen if r not in named),
            "unseen": [r for r in range(max(seen) + 1) if r not in seen] if seen and max(seen) <= MAX_RANK else [],
            "other": [first[r][2] for k, rs in groups.items() if k != main_key for r in sorted(rs)
                      if first[r][2] is not None],
            "late": late}


def diagnose_torch_watchdog(parsed: dict, host: str | None = None) -> list[dict]:
    """Findings for ``parse_torch_watchdog`` output.

    - FAIL ``torch.collective_timeout``: ranks timed out in one collective (``watchdog_census``); the
      message names the ranks to read first (``suspects``): those behind (stuck at an earlier work
      of the group), else those at a later work (a desync when the group is named; the text says
      when it is not), else those the text shows with no timeout, else those below the highest rank
      it never names ([] when every rank shown waits: the one that did not join is in another log).
      A timeout reported LATE_FACTOR x its limit late says the process itself was stalled.
    - FAIL ``torch.watchdog_stuck``: the watchdog or its heartbeat monitor was stuck (a CUDA or NCCL
      call that does not return, or a thread holding the GIL: torch's own text, ProcessGroupNCCL.cpp).
    """
    out: list[dict] = []
    census = watchdog_census(parsed)
    if census:
        work = f"work {census['seq']}" if census["seq"] is not None else "a collective"
        group = f", process group {census['pg']}" if census["pg"] is not None else ""
        waiting = census["waiting"]
        msg = (f"NCCL watchdog timeout: {rank_list(waiting)} waited in {census['op'] or 'a collective'} "
               f"({work}{group}) for {census['ran_ms']} ms (timeout {census['timeout_ms']} ms)")
        if census["behind"]:
            suspects = sorted(census["behind"])
            msg += "; behind: " + "; ".join(f"rank {r} ({why})" for r, why in sorted(census["behind"].items()))
        elif census["ahead"]:
            suspects = sorted(census["ahead"])
            at = ", ".join(f"rank {r} at work {s}" for r, s in sorted(census["ahead"].items()))
            if census["group_named"]:
                msg += (f"; {at}: a desync, {rank_list(suspects)} issued collectives the others did not (a code path "
                        "only some ranks take)")
            else:
                msg += (f"; {at}: the works differ and the text does not name their process groups: within one "
                        "group it is a desync, else compare each group's ranks")
        elif census["silent"]:
            suspects = census["silent"]
            msg += (f"; {rank_list(suspects)} printed no timeout: never launched it (stuck before it, finished, or "
                    "issued another collective), or its lines are not here")
        elif census["unseen"]:
            suspects = census["unseen"]
            msg += f"; {rank_list(suspects)} not in this text: the one that never launched it is among them"
        else:
            suspects = []
            msg += "; every rank in this text waits: the rank that never launched it is in another log"
        if census["other"]:
            msg += "; also " + ", ".join(f"rank {t['rank']} in work {t['seq']} ({t['op']}) of another process group"
                                         for t in census["other"][:3])
        if census["late"] and census["timeout_ms"]:
            msg += (f"; reported {census['ran_ms'] / census['timeout_ms']:.0f}x its timeout late: the process itself "
                    "was stalled (host side), not only the collective")
        first = f"rank {suspects[0]}" if len(suspects) == 1 else rank_list(suspects) if suspects else \
            "the rank missing from these lines"
        remedy = (f"read the log of {first} first (a crash, an exception, a data-loader stall, uneven batches or a "
                  "code path only some ranks take) and py-spy dump its process; TORCH_NCCL_DUMP_ON_TIMEOUT=1 writes "
                  "every rank's flight recorder (ncclprep doctor reads the dumps); a longer timeout only hides a hang")
        out.append(finding("torch.collective_timeout", "FAIL", rank_list(suspects) if suspects else (host or "job"),
                           msg, remedy, host=host, seq=census["seq"], op=census["op"], pg=census["pg"],
                           waiting=waiting, suspects=suspects, timeout_ms=census["timeout_ms"],
                           ran_ms=census["ran_ms"], late=census["late"]))
    stuck = parsed.get("stuck") or []
    if stuck:
        ranks = sorted({s["rank"] for s in stuck if s["rank"] is not None})
        secs = [s["seconds"] for s in stuck if s["seconds"] is not None]
        out.append(finding("torch.watchdog_stuck", "FAIL", rank_list(ranks) if ranks else (host or "job"),
                           "the NCCL watchdog " + (f"of {rank_list(ranks)} " if ranks else "") + "made no progress"
                           + (f" for {max(secs)} s" if secs else "") + ": a CUDA or NCCL call did not return (a wedged "
                           "GPU or driver, or a thread holding the GIL): a host-side hang, not the network",
                           "py-spy dump (or gdb) the process and look at the node's GPU (nvidia-smi, dmesg for Xid "
                           "errors); TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC only sets how long the monitor waits", host=host,
                           ranks=ranks))
    return out
