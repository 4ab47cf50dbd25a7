"""The offline doctor: read what engineers paste from a failed job, say what it shows and what to do.

An input is the text of one tool's output or one job's log: NCCL_DEBUG logs (one rank's or many
ranks' together), torchrun / torch.distributed errors and tracebacks, ``nvidia-smi topo -m`` and
``-p2p``, ``ibstat`` / ``ibstatus``, ``ibv_devinfo``, ``ip`` / ``ifconfig`` / ``ethtool``,
``numactl -H`` / ``lscpu``, nccl-tests output, ``ufw status``, ``sysctl -a`` and netplan YAML.
``detect_kind`` finds which from the content (the file name is a weak hint); ``diagnose_text``
reads it with the parsers and rules validate.yml uses (``module_utils/ncclprep/parsers/*``,
``concerns/sysctl_tuning.py``) and returns what was read, the findings with the input lines that show them
(``evidence``) and a clear ``error`` for input it cannot read; ``compare`` sets several inputs
from several nodes against each other; ``render_text`` and ``as_json`` present the lot.

The package: detect.py (which kind, the input made safe), readers.py (one reader per kind),
evidence.py (the lines that show a finding), compare.py (nodes against each other); here the
reading of one input or dump (``diagnose_text``, ``diagnose_dumps``) and the presentation.

Every function here is pure and never raises on any text: a parser's exception becomes an
``error`` naming the input and the kind. Standard library only. The CLI entry is
``src/ncclprep/doctor_cmd.py`` (``ncclprep doctor``).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ansible.module_utils.ncclprep.doctor.compare import compare
from ansible.module_utils.ncclprep.doctor.detect import (
    COMPANION_SCORE,
    COMPANIONS,
    KINDS,
    MAX_INPUT_LINE,
    SCHEMA_VERSION,
    cut_long_lines,
    decode_input,
    detect_kind,
    kind_scores,
    text_error,
)
from ansible.module_utils.ncclprep.doctor.evidence import evidence
from ansible.module_utils.ncclprep.doctor.readers import READERS
from ansible.module_utils.ncclprep.parsers import SEVERITIES

#: What the doctor offers (src/ncclprep/doctor_cmd.py, checks/explain.py and the tests use these):
#: detection from detect.py, the comparison from compare.py, the reading and presentation here.
__all__ = ["KINDS", "MAX_INPUT_LINE", "SCHEMA_VERSION", "as_json", "compare", "cut_long_lines", "decode_input",
           "detect_kind", "diagnose_dumps", "diagnose_text", "exit_status", "render_text", "summary_counts"]


def _stem(name: str | None) -> str | None:
    if not name or name in ("-", "<stdin>"):
        return None
    base = os.path.basename(name.replace("\\", "/"))
    stem = base.split(".")[0] if not base.startswith(".") else base
    return stem or None


def _result(name: str, kind: str | None, host: str | None, error: str | None, **rest) -> dict:
    out = {"source": name, "kind": kind, "kind_description": KINDS.get(kind), "host": host, "read": [],
           "findings": [], "unparsed_count": 0, "notes": [], "error": error, "also": []}
    out.update(rest)
    return out


def diagnose_text(text: str, name: str = "<stdin>", host: str | None = None, *, kind: str | None = None,
                  line_rate_gbit_s: float | None = None, sysctl_intent: dict | None = None,
                  cluster_cidrs: list[str] | None = None, roce_interfaces: list[str] | None = None) -> dict:
    """Read one input and diagnose it.

    ``text`` is the input, ``name`` its file name (``"<stdin>"`` for standard input), ``host`` the
    host it came from when known (``--host``). ``kind`` forces a kind (a key of KINDS) instead of
    ``detect_kind``. Options: ``line_rate_gbit_s`` the per-node network line rate in Gb/s for
    nccl-tests (4 x 200 Gb/s -> 800), ``sysctl_intent`` the recommended sysctl values (the
    sysctl_tuning role's ``sysctl_tuning_settings``), ``cluster_cidrs`` the cluster subnets ufw is
    judged for (default: the subnets its ALLOW rules name), ``roce_interfaces`` the RoCE netdevs
    for netplan.

    Returns ``{"source": name, "kind": str | None, "kind_description", "host": str | None (the
    NCCL log prefix host when the log has exactly one, else ``host``, else the file name's stem),
    "read": [plain-word lines of what was read], "findings": [finding dicts (``parsers.finding``)
    each with "evidence": [quoted input lines]], "unparsed_count": int, "notes": [str] (input cut
    short, nothing read), "error": str | None, "also": [companion kinds read too], "facts": {...}
    (what ``compare`` needs: NCCL versions/env per host, ranks, sysctl values)}``. ``error`` is set
    for input that cannot be read: empty, binary, no recognisable kind, a parser's exception (named
    with the file and kind), unreadable YAML. Never raises.
    """
    fallback_host = host or _stem(name)
    try:
        problem = text_error(text)
        if problem:
            return _result(name, None, fallback_host, f"{name}: {problem}")
        text, cut = cut_long_lines(text)
        if kind is not None and kind not in KINDS:
            return _result(name, None, fallback_host, f"{name}: unknown kind {kind!r}; kinds are {', '.join(KINDS)}")
        if kind == "flight_recorder":  # binary: read from the files (diagnose_dumps), never as text
            return _result(name, kind, fallback_host, f"{name}: flight recorder dumps are binary pickles: give the "
                                                      "dump files themselves")
        detected = kind or detect_kind(text, name)
        if detected is None:
            return _result(name, None, fallback_host,
                           f"{name}: not a kind of input the doctor knows (none of: {', '.join(KINDS)}); "
                           "give --kind KIND if it is one")
        opts = {"line_rate_gbit_s": line_rate_gbit_s, "sysctl_intent": sysctl_intent, "cluster_cidrs": cluster_cidrs,
                "roce_interfaces": roce_interfaces}
        kinds = [detected]
        if kind is None:
            scores = kind_scores(text)
            kinds += [c for c in COMPANIONS.get(detected, ()) if scores.get(c, 0) >= COMPANION_SCORE]
        out = _result(name, detected, fallback_host, None, facts={})
        lines = text.splitlines()
        for k in kinds:
            try:
                got = READERS[k](text, fallback_host, opts)
            except Exception as exc:  # a parser bug must not end the run: report it for this input
                out["error"] = (f"{name}: reading it as {k} failed inside the parser ({type(exc).__name__}: {exc}); "
                                "this is a bug in ncclprep, please report it with the input")
                return out
            if k != detected:
                out["also"].append(k)
            if got.get("host") and k == detected:
                out["host"] = got["host"]
            out["read"] += got["read"]
            for f in got["findings"]:
                if k != detected and any(f["id"] == o["id"] and f["subject"] == o["subject"] for o in out["findings"]):
                    continue  # read again by the companion kind (an NCCL error inside a torch traceback)
                f = dict(f)
                f["evidence"] = evidence(k, f, lines)
                out["findings"].append(f)
            out["unparsed_count"] += len(got["unparsed"])
            out["notes"] += got.get("notes", [])
            out["facts"].update(got.get("facts", {}))
            if got.get("error"):
                out["error"] = f"{name}: {got['error']}"
            if k == detected and not text.endswith("\n") and got["unparsed"] and \
                    got["unparsed"][-1].strip() == lines[-1].strip() and lines[-1].strip():
                out["notes"].append("the last line looks cut off (no newline and not understood)")
        if cut:
            out["notes"].insert(0, f"{cut} line(s) longer than {MAX_INPUT_LINE} characters were cut to "
                                   f"{MAX_INPUT_LINE} before reading")
        if not out["read"] and not out["findings"] and out["error"] is None:
            out["notes"].append(f"nothing of a {detected} input was read")
        return out
    except Exception as exc:  # last resort: never a traceback
        return _result(name, kind, fallback_host, f"{name}: could not be read ({type(exc).__name__}: {exc})")


def diagnose_dumps(dumps: list[tuple[str, bytes | Callable[[], bytes]]], host: str | None = None,
                   forgive: list[str] | None = None) -> dict:
    """torch's flight recorder dumps (``[(file name, bytes or a function that reads them)]``, one per
    rank) read together: one result shaped as ``diagnose_text``'s, kind ``flight_recorder``. A dump
    refused (it names a class or function, is not a dump, or is of a shape or size no dump has:
    ``flight_recorder.load_dump``) or whose reading raises OSError is named in ``error`` and left
    out, and the others are still read; the rank of each is the number its file name ends with. A
    refused file named in ``forgive`` (found in a folder: a job's own pickle beside the dumps) is a
    note instead of an error.

    The dumps are read one at a time, and only their checked fields are kept: a function given
    instead of bytes is called when its turn comes, so one dump's bytes (at most MAX_DUMP_BYTES)
    are held at once. Past MAX_TOTAL_DUMP_BYTES read, or MAX_TOTAL_ITEMS entries and listed ranks
    kept, the remaining dumps are left out with an error. Never raises."""
    from ansible.module_utils.ncclprep.parsers import flight_recorder as fr

    name = f"flight recorder ({len(dumps)} dump{'s' if len(dumps) != 1 else ''})"
    try:
        return _diagnose_dumps(dumps, name, host, set(forgive or []), fr)
    except Exception as exc:  # last resort: never a traceback
        return _result(name, "flight_recorder", host, f"{name}: could not be read ({type(exc).__name__}: "
                                                      f"{str(exc)[:200]})", facts={})


def _load_each_dump(dumps: list, fr) -> tuple[dict[int, dict], dict[str, int], list[tuple[str, str]]]:
    """``({rank: checked dump}, {file name: rank}, [(file name, why it was left out)])``: the dumps
    read one at a time (``diagnose_dumps``), each file's bytes dropped once read."""
    loaded: dict[int, dict] = {}
    ranks: dict[str, int] = {}
    errors: list[tuple[str, str]] = []
    read_bytes = held = 0
    for path, data in dumps:
        if read_bytes >= fr.MAX_TOTAL_DUMP_BYTES or held >= fr.MAX_TOTAL_ITEMS:
            errors.append((path, f"left out: the dumps before it came to {read_bytes} bytes and {held} entries and "
                                 f"ranks, the most read in one run ({fr.MAX_TOTAL_DUMP_BYTES} bytes, "
                                 f"{fr.MAX_TOTAL_ITEMS} entries and ranks); give the dumps of fewer ranks"))
            continue
        rank = fr.dump_rank(path)
        try:
            raw = data() if callable(data) else data
            read_bytes += len(raw)
            dump = fr.load_dump(raw)
        except fr.DumpRefused as exc:
            errors.append((path, str(exc)))
            continue
        except OSError as exc:
            errors.append((path, f"cannot be read ({exc.strerror or exc})"))
            continue
        except Exception as exc:  # a dump no check foresaw: said for this file, the others still read
            errors.append((path, f"could not be read ({type(exc).__name__}: {str(exc)[:200]})"))
            continue
        finally:
            raw = None
        if rank is None or rank in loaded:
            errors.append((path, f"no rank at the end of its name (torch writes <prefix><rank>), or a second dump of "
                                 f"rank {rank}: left out"))
            continue
        loaded[rank] = dump
        ranks[path] = rank
        held += len(dump["entries"]) + sum(len(c["ranks"]) for c in dump.get("pg_config", {}).values())
    return loaded, ranks, errors


def _diagnose_dumps(dumps: list, name: str, host: str | None, forgive: set[str], fr) -> dict:
    out = _result(name, "flight_recorder", host, None, facts={})
    loaded, ranks, errors = _load_each_dump(dumps, fr)
    out["notes"] += [f"not read: {path}: {why}" for path, why in errors if path in forgive]
    errors = [f"{path}: {why}" for path, why in errors if path not in forgive]
    if errors:
        out["error"] = "; ".join(errors)
    if not loaded:
        return out
    versions = sorted({d["version"] for d in loaded.values()})
    out["read"].append(f"dumps of ranks {', '.join(map(str, sorted(loaded)))} (flight recorder version "
                       f"{', '.join(versions)}), {sum(len(d['entries']) for d in loaded.values())} entries")
    try:
        stuck = fr.analyze(loaded)
        found = fr.diagnose_flight_recorder(stuck, host)
    except Exception as exc:  # a dump of an odd shape (a field of another type): said, not raised
        out["error"] = "; ".join([*errors, f"the dumps could not be read together ({type(exc).__name__}: "
                                           f"{str(exc)[:200]})"])
        return out
    for g in stuck:
        out["read"].append(f"process group {g['pg']}: last collective per rank "
                           + ", ".join(f"{r}: #{s}" for r, s in sorted(g["last"].items())))
    for f in found:
        f = dict(f)
        shown = set(f.get("suspects") or []) | set(f.get("waiting") or [])
        f["evidence"] = [f"{path}: rank {r}" for path, r in ranks.items() if r in shown][:6]
        out["findings"].append(f)
    if not stuck:
        out["notes"].append("no collective is left uncompleted in these dumps: no rank was stuck when they were "
                            "written")
    return out


# --- presentation --------------------------------------------------------------------------------------

def _status(results: list[dict], comparisons: list[dict]) -> str:
    if any(r.get("error") for r in results):
        return "error"
    sev = {f["severity"] for r in results for f in r["findings"]} | {f["severity"] for f in comparisons}
    return "fail" if "FAIL" in sev else "warn" if "WARN" in sev else "ok"


def summary_counts(results: list[dict], comparisons: list[dict]) -> dict:
    """``{"FAIL": n, "WARN": n, "INFO": n, "errors": n, "inputs": n}`` over every finding and input."""
    counts = {s: 0 for s in SEVERITIES}
    for f in [f for r in results for f in r["findings"]] + list(comparisons):
        counts[f["severity"]] = counts.get(f["severity"], 0) + 1
    counts["errors"] = sum(1 for r in results if r.get("error"))
    counts["inputs"] = len(results)
    return counts


def _render_finding(f: dict) -> list[str]:
    out = [f"{f['severity']} {f['subject']}: {f['message']}"]
    out += [f"  > {ln}" for ln in f.get("evidence") or []]
    if f.get("remediation"):
        out.append(f"  fix: {f['remediation']}")
    return out


def render_text(results: list[dict], comparisons: list[dict]) -> str:
    """Plain words for a terminal: per input ``file: kind (description)``, what was read, each finding
    as ``FAIL|WARN|INFO subject: message`` with its evidence lines quoted (``  > ``) and ``  fix:
    remediation``; then the comparisons across inputs; last a one-line summary. Never raises."""
    out: list[str] = []
    for r in results:
        head = f"{r['source']}: {r['kind'] or 'unknown kind'}"
        if r.get("kind_description"):
            head += f" ({r['kind_description']}" + (f"; also read as {', '.join(r['also'])}" if r.get("also") else "") \
                + ")"
        if r.get("host") and r["kind"]:
            head += f" [host {r['host']}]"
        out.append(head)
        if r.get("error"):
            out.append(f"  error: {r['error']}")
        for line in r.get("read") or []:
            out.append(f"  read: {line}")
        for note in r.get("notes") or []:
            out.append(f"  note: {note}")
        if r.get("unparsed_count"):
            out.append(f"  note: {r['unparsed_count']} line{'s' if r['unparsed_count'] != 1 else ''} not understood "
                       "(kept out of the reading)")
        for f in r.get("findings") or []:
            out += ["  " + ln for ln in _render_finding(f)]
        if r["kind"] and not r.get("error") and not r.get("findings"):
            out.append("  nothing wrong found in this input")
        out.append("")
    if comparisons:
        out.append(f"across the {len(results)} inputs:")
        for f in comparisons:
            out += ["  " + ln for ln in _render_finding(f)]
        out.append("")
    c = summary_counts(results, comparisons)
    status = _status(results, comparisons)
    verdict = {"error": "some input could not be read", "fail": "something is wrong", "warn": "worth a look",
               "ok": "nothing wrong found"}[status]
    out.append(f"doctor: {c['inputs']} input{'s' if c['inputs'] != 1 else ''}, {c['FAIL']} FAIL, {c['WARN']} WARN, "
               f"{c['INFO']} INFO" + (f", {c['errors']} unreadable" if c["errors"] else "") + f": {verdict}")
    return "\n".join(out) + "\n"


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def as_json(results: list[dict], comparisons: list[dict]) -> dict:
    """The findings as data: ``{"schema_version": 1, "status": "ok" | "warn" | "fail" | "error",
    "summary": summary_counts(...), "inputs": [diagnose_text results without "facts"], "comparisons":
    [findings]}``; every value JSON-serialisable (sets become lists, other objects strings)."""
    inputs = [{k: v for k, v in r.items() if k != "facts"} for r in results]
    return _jsonable({"schema_version": SCHEMA_VERSION, "status": _status(results, comparisons),
                      "summary": summary_counts(results, comparisons), "inputs": inputs,
                      "comparisons": comparisons})


def exit_status(results: list[dict], comparisons: list[dict]) -> int:
    """2 when an input could not be read, 1 when some finding is FAIL, else 0."""
    status = _status(results, comparisons)
    return {"error": 2, "fail": 1}.get(status, 0)
