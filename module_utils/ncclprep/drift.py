"""Drift: a file site.yml manages, compared with what site.yml would write now.

Every role lists what it writes in ``<role>_managed_files`` (roles/<role>/vars/main.yml); the
role's own tasks loop over that list (``managed_entries`` picks an entry kind for them) and
validate.yml renders the same list on the controller and ships it to library/managed_files.py,
which holds each entry against the node's file (``check``). site.yml also records the rendered
list on each node (the preflight role's preflight_node_managed), and ``ncclprep node preflight``
holds the node's files against that record (``check_record``): what site.yml wrote, with no
Ansible. An entry's kind says what of the file site.yml owns:

- ``file``: the whole file, rendered from ``templates/<src>`` (ansible.builtin.template);
- ``copy``: the whole file, ``files/<src>`` or ``content`` byte for byte (ansible.builtin.copy);
- ``block``: only the lines between the markers (ansible.builtin.blockinfile: ``marker`` with
  ``{mark}`` for BEGIN and END); the rest of the file is other people's;
- ``lines``: each of ``lines`` must be in the file (ansible.builtin.lineinfile and known_hosts);
  lines other people added are not drift.

A row names what differs, with a unified-style diff (expected first: ``-`` what site.yml writes,
``+`` what the node has) cut to ``max_lines``.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import stat

from ansible.module_utils.ncclprep.atomic import write_atomic

STATES = ("ok", "differs", "absent", "missing", "mode", "unreadable", "stale")
KINDS = ("file", "copy", "block", "lines")
# Fields of a normalised manifest entry (managed_entries); absent ones are None.
FIELDS = ("kind", "src", "dest", "mode", "role", "vars", "when", "content", "block", "marker", "lines")


def managed_entries(entries: list | None, kind: str | None = None, concern: str | None = None) -> list[dict]:
    """The entries of a ``<role>_managed_files`` list that apply on this host, normalised.

    ``entries``: the rendered list, each ``{dest, mode, kind (default file), when (default
    true), ...}``; per kind: file ``src`` (a template of the role, or of ``role`` rendered with
    ``vars`` the way ``import_role`` would), copy ``src`` (under files/) or ``content``, block
    ``marker`` and ``block`` (the text between the markers), lines ``lines``. Every entry comes
    back with all of FIELDS (None where unset) and ``concern`` when given; entries whose ``when``
    is false are left out. ``kind``: only that kind, and only the entries the role writes with
    its own task (those with ``role`` are written by that role, imported with their ``vars``).
    Raises ValueError naming the entry and what would be valid.
    """
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind={kind!r}: valid: {', '.join(KINDS)}")
    out = []
    for i, raw in enumerate(entries or []):
        if not isinstance(raw, dict):
            raise ValueError(f"entry {i} is {raw!r}, not a dict with dest, mode and kind")
        entry = {f: raw.get(f) for f in FIELDS}
        entry["kind"] = entry["kind"] or "file"
        where = f"entry {i} ({raw.get('dest', '?')})"
        unknown = sorted(set(raw) - set(FIELDS))
        if unknown:
            raise ValueError(f"{where}: unknown keys {unknown}; valid: {', '.join(FIELDS)}")
        if entry["kind"] not in KINDS:
            raise ValueError(f"{where}: kind={entry['kind']!r}; valid: {', '.join(KINDS)}")
        if not entry["dest"] or "mode" not in raw:
            raise ValueError(f"{where}: needs dest and mode (mode null: not compared)")
        need = {"file": ["src"], "block": ["marker", "block"], "lines": ["lines"]}.get(entry["kind"], [])
        missing = [f for f in need if entry[f] is None]
        if entry["kind"] == "copy" and (entry["src"] is None) == (entry["content"] is None):
            missing = ["exactly one of src and content"]
        if missing:
            raise ValueError(f"{where}: kind {entry['kind']} needs {', '.join(missing)}")
        if entry["kind"] == "block" and "{mark}" not in entry["marker"]:
            raise ValueError(f"{where}: marker {entry['marker']!r} lacks {{mark}}")
        if entry["kind"] == "lines" and not isinstance(entry["lines"], list):
            raise ValueError(f"{where}: lines is {entry['lines']!r}, not a list")
        when = True if raw.get("when") is None else raw["when"]
        if isinstance(when, str) and when.strip().lower() in ("true", "false"):
            when = when.strip().lower() == "true"
        if not isinstance(when, bool):
            raise ValueError(f"{where}: when={when!r} is not a boolean (a rendered condition)")
        entry["when"] = when
        entry["vars"] = entry["vars"] or {}
        if concern is not None:
            entry["concern"] = concern
        if not when or (kind is not None and (entry["kind"] != kind or entry["role"])):
            continue
        out.append(entry)
    return out


def _cut(lines: list[str], max_lines: int) -> list[str]:
    if len(lines) > max_lines:
        return lines[:max_lines - 1] + [f"... {len(lines) - max_lines + 1} more diff lines"]
    return lines


def _read(path: str) -> tuple[bytes | None, str | None, dict]:
    """``(bytes, mode "0644", failure row fields)``: the bytes are None when the file cannot be read."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        return data, f"{stat.S_IMODE(os.stat(path).st_mode):04o}", {}
    except FileNotFoundError:
        return None, None, {"state": "missing"}
    except OSError as exc:
        return None, None, {"state": "unreadable", "error": str(exc)}


def _split(text: str) -> list[str]:
    """Lines without their end, split as ansible's line modules split bytes (on \\n, \\r\\n, \\r)."""
    lines = re.split(r"\r\n|\r|\n", text)
    return lines[:-1] if lines and lines[-1] == "" else lines


def _text_lines(data: bytes) -> list[str]:
    return _split(data.decode("utf-8", errors="replace"))


def _mode_off(mode: str | None, found: str | None) -> bool:
    return mode is not None and found is not None and int(str(mode), 8) != int(found, 8)


def compare(path: str, expected: str, mode: str | None = None, max_lines: int = 40) -> dict:
    """``{path, state, diff, mode_expected, mode_found}`` for one whole managed file (kinds file, copy).

    ``expected``: the content site.yml would write (text, compared as its UTF-8 bytes with the
    node's bytes); ``mode``: its octal mode (``"0644"``) or None. state: ``ok``; ``differs``
    (content; ``diff`` holds the unified diff, ``--- expected`` / ``+++ <path>``, at most
    ``max_lines`` lines, the last one saying how many were left out); ``mode`` (content right,
    mode not); ``missing``; ``unreadable`` (``error``). Raises nothing.
    """
    out = {"path": path, "state": "ok", "diff": [], "mode_expected": mode, "mode_found": None}
    data, found_mode, failed = _read(path)
    if data is None:
        return dict(out, **failed)
    out["mode_found"] = found_mode
    if data != expected.encode("utf-8"):
        found = data.decode("utf-8", errors="replace")
        lines = list(difflib.unified_diff(expected.splitlines(), found.splitlines(), "expected", path, lineterm=""))
        if not lines:  # the same lines: only line ends or the last newline differ
            lines = ["--- expected", f"+++ {path}", "-(line ends or the final newline)", "+(as found)"]
        return dict(out, state="differs", diff=_cut(lines, max_lines))
    if _mode_off(mode, found_mode):
        return dict(out, state="mode")
    return out


def compare_block(path: str, block: str, marker: str, mode: str | None = None, max_lines: int = 40,
                  begin: str = "BEGIN", end: str = "END") -> dict:
    """A block ansible.builtin.blockinfile manages: only the lines between its markers count.

    ``block``: the text the role puts between the markers (blockinfile's ``block``); ``marker``:
    blockinfile's ``marker`` with ``{mark}``, ``begin``/``end`` its marker_begin/marker_end. The
    markers are found as blockinfile finds them (the last line equal to each). Row as
    ``compare`` plus ``block`` (the begin marker line); state ``absent`` when a marker is missing
    (or END comes before BEGIN), ``differs`` when the lines between them are not ``block``'s
    (diff of the block, markers included). An empty ``block`` means no markers at all (blockinfile
    removes the block then). Raises nothing.
    """
    first, last = marker.replace("{mark}", begin), marker.replace("{mark}", end)
    out = {"path": path, "state": "ok", "diff": [], "mode_expected": mode, "mode_found": None, "block": first}
    data, found_mode, failed = _read(path)
    if data is None:
        return dict(out, **failed)
    out["mode_found"] = found_mode
    lines = _text_lines(data)
    n0 = max((i for i, line in enumerate(lines) if line == first), default=None)
    n1 = max((i for i, line in enumerate(lines) if line == last), default=None)
    want = [first] + _split(block) + [last] if block else []
    if n0 is None or n1 is None or n1 < n0:
        if not want:
            return dict(out, state="mode") if _mode_off(mode, found_mode) else out
        found = [ln for ln in (lines[n0] if n0 is not None else None, lines[n1] if n1 is not None else None) if ln]
        diff = ["--- expected", f"+++ {path}"] + [f"-{ln}" for ln in want] + [f"+{ln}" for ln in found]
        return dict(out, state="absent", diff=_cut(diff, max_lines))
    got = lines[n0:n1 + 1]
    if got != want:
        diff = list(difflib.unified_diff(want, got, "expected", path, lineterm=""))
        return dict(out, state="differs", diff=_cut(diff, max_lines))
    if _mode_off(mode, found_mode):
        return dict(out, state="mode")
    return out


def _norm(line: str) -> str:
    return " ".join(line.split())


def compare_lines(path: str, lines: list[str], mode: str | None = None, max_lines: int = 40) -> dict:
    """Lines that must be in a file (ansible.builtin.lineinfile, known_hosts); others may be there too.

    A line counts as present when the file has a line with the same words (runs of white space
    are one space, as ssh and nft read them). Row as ``compare`` plus ``lines`` (how many are
    expected); state ``differs`` when any is missing: ``diff`` lists each missing line as
    ``-line`` followed by the file's unexpected lines that start with the same word as
    ``+line`` (in known_hosts: the host's key that replaced it). Lines other people added are
    never drift. Raises nothing.
    """
    out = {"path": path, "state": "ok", "diff": [], "mode_expected": mode, "mode_found": None, "lines": len(lines),
           "missing": 0}
    data, found_mode, failed = _read(path)
    if data is None:
        return dict(out, **failed)
    out["mode_found"] = found_mode
    found = [_norm(ln) for ln in _text_lines(data)]
    have, want = set(found), {_norm(ln) for ln in lines}
    missing = [ln for ln in lines if _norm(ln) not in have]
    if missing:
        diff = ["--- expected", f"+++ {path}"]
        shown = set()
        for line in missing:
            diff.append(f"-{_norm(line)}")
            head = _norm(line).split(" ")[0]
            for other in found:
                if other.split(" ")[0] == head and other not in want and other not in shown:
                    shown.add(other)
                    diff.append(f"+{other}")
        return dict(out, state="differs", diff=_cut(diff, max_lines), missing=len(missing))
    if _mode_off(mode, found_mode):
        return dict(out, state="mode")
    return out


def check(entry: dict, max_lines: int = 40) -> dict:
    """Compare one entry as library/managed_files.py receives it: ``{path, kind (default file),
    mode, content (file, copy: the whole text; block: the text between the markers), marker
    (block), lines (lines)}``. Returns the row of compare / compare_block / compare_lines with
    ``kind`` added. Raises ValueError for an unknown kind or a missing field."""
    kind = entry.get("kind") or "file"
    path, mode = str(entry["path"]), entry.get("mode")
    if kind in ("file", "copy"):
        if entry.get("content") is None:
            raise ValueError(f"{path}: kind {kind} needs content")
        row = compare(path, str(entry["content"]), mode, max_lines)
    elif kind == "block":
        if entry.get("content") is None or not entry.get("marker"):
            raise ValueError(f"{path}: kind block needs content and marker")
        row = compare_block(path, str(entry["content"]), str(entry["marker"]), mode, max_lines)
    elif kind == "lines":
        if not isinstance(entry.get("lines"), list):
            raise ValueError(f"{path}: kind lines needs lines (a list)")
        row = compare_lines(path, [str(ln) for ln in entry["lines"]], mode, max_lines)
    else:
        raise ValueError(f"{path}: kind={kind!r}; valid: {', '.join(KINDS)}")
    return dict(row, kind=kind)


def check_all(entries: list[dict], max_lines: int = 40) -> list[dict]:
    """``check`` for each of ``entries`` (library/managed_files.py's ``files``: each with its
    ``concern``), one row each with ``concern`` added, in order. Raises ValueError naming the entry
    (its index and concern) that lacks a field or has an unknown kind."""
    rows = []
    for i, entry in enumerate(entries):
        missing = [k for k in ("concern", "path") if k not in entry]
        if missing:
            raise ValueError(f"files[{i}] lacks {missing}: {sorted(entry)}")
        try:
            rows.append(dict(check(entry, max_lines), concern=entry["concern"]))
        except ValueError as exc:
            raise ValueError(f"files[{i}] ({entry['concern']}): {exc}") from None
    return rows


#: The most a record of managed files may hold (bytes): known_hosts lines for thousands of members
#: fit many times over; a larger file is not this record.
RECORD_MAX = 64 << 20


def check_record(path: str, max_lines: int = 40) -> tuple[list[dict] | None, str | None]:
    """The node's managed files against the record site.yml wrote at ``path`` (the preflight role's
    preflight_node_managed: ``{"version": 1, "files": [library/managed_files.py's entries, as the
    ncclprep_managed_files lookup rendered them]}``), for ``ncclprep node preflight``'s drift.files.
    Returns ``(check_all's rows, None)``, or ``(None, why)`` when the record cannot be used: absent
    (site.yml of an older ncclprep), unreadable (a job's user: the files it names are root's to
    read), over RECORD_MAX or not such a document. Never raises for the record's content."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(RECORD_MAX + 1)
    except FileNotFoundError:
        return None, f"no record of the managed files at {path}: run site.yml with this ncclprep"
    except OSError as exc:
        return None, f"the record of the managed files {path} cannot be read: {exc}"
    if len(data) > RECORD_MAX:
        return None, f"{path} is over {RECORD_MAX} bytes: not a record of managed files"
    try:
        doc = json.loads(data)
        files = doc["files"]
        if not isinstance(files, list):
            raise TypeError(f"files is {type(files).__name__}, not a list")
        return check_all(files, max_lines), None
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"{path} is not a record of managed files: {exc}"


def inventory_row(recorded: str | None, given: str | None) -> dict | None:
    """The row that says the inventory changed since site.yml last wrote this node's files (state
    ``stale``): ``recorded`` is the inventory digest site.yml put in the node's intent, ``given``
    the launcher's (validate.yml's lookup ncclprep_inventory_digest). None when either is unknown
    or they agree: the files were written from this inventory."""
    if not recorded or not given or recorded == given:
        return None
    return {"concern": "site.yml", "kind": "inventory", "path": "the inventory", "state": "stale", "diff": [],
            "mode_expected": None, "mode_found": None, "recorded": recorded, "given": given}


def ensure(entry: dict, check_mode: bool = False, max_lines: int = 40) -> dict:
    """Make a whole managed file (kinds file, copy) what ``entry`` says; site.yml's side of ``check``.

    ``entry`` as ``check`` takes it, with ``mode`` required (octal text, ``"0644"``). A file that
    differs or is missing is written whole and atomically (atomic.write_atomic: a temp file in the
    same folder, then a rename) with that mode, owned by root (uid and gid 0); a missing parent
    folder is made first (0755; an existing folder is left as it is); a file whose text is right
    gets its mode and owner set where they are not. ``check_mode``: nothing is touched, the row
    says what would be. Returns ``check``'s row (as it was before) with ``changed`` (bool) and
    ``owner_found`` (``"uid:gid"`` or None). Raises ValueError for another kind or no mode, and
    OSError when the file cannot be read or written.
    """
    kind = entry.get("kind") or "file"
    if kind not in ("file", "copy") or entry.get("mode") is None:
        raise ValueError(f"{entry.get('path')}: only whole files (kinds file, copy) with a mode are written; "
                         f"got kind {kind!r}, mode {entry.get('mode')!r}")
    row = check(entry, max_lines)
    if row["state"] == "unreadable":
        raise OSError(f"{row['path']}: {row.get('error')}")
    path, mode = row["path"], int(str(entry["mode"]), 8)
    owner = None
    if row["state"] in ("ok", "mode"):
        st = os.stat(path)
        owner = f"{st.st_uid}:{st.st_gid}"
    changed = row["state"] != "ok" or owner != "0:0"
    if changed and not check_mode:
        if row["state"] in ("differs", "missing"):
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder):
                os.makedirs(folder, 0o755)
            write_atomic(path, str(entry["content"]), mode)
        else:
            os.chmod(path, mode)
        os.chown(path, 0, 0)
    return dict(row, changed=changed, owner_found=owner)


def _changed(diff: list[str]) -> str:
    return " ".join([ln for ln in diff if ln[:1] in "+-" and not ln.startswith(("+++", "---"))][:6])[:300]


def summary(result: dict) -> str:
    """One line for a report: ``/etc/nccl.conf differs: +NCCL_DEBUG=TRACE -NCCL_DEBUG=WARN``,
    ``/etc/hosts block "# BEGIN ncclprep host_names" differs: ...``, ``/etc/ssh/ssh_known_hosts
    lacks 1 of 6 lines: -node2 ssh-ed25519 AAAA...``."""
    state, path = result["state"], result["path"]
    what = f"{path} block \"{result['block']}\"" if result.get("block") else path
    if state == "differs" and result.get("lines") is not None:
        return f"{path} lacks {result['missing']} of {result['lines']} lines: " + _changed(result["diff"])
    if state == "differs":
        return f"{what} differs: " + _changed(result["diff"])
    if state == "absent":
        return f"{what} is not there"
    if state == "mode":
        return f"{path} has mode {result['mode_found']}, expected {result['mode_expected']}"
    if state == "unreadable":
        return f"{path} unreadable: {result.get('error')}"
    if state == "stale":
        return (f"the inventory changed since site.yml last wrote these files (its digest {result.get('recorded')}, "
                f"now {result.get('given')})")
    return f"{path} {state}"
