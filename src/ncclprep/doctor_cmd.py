"""``ncclprep doctor``: the argparse entry of the offline doctor (the engine is
``module_utils/ncclprep/doctor.py``). It reads the files (``-`` or none: standard input), loads the
sysctl_tuning role's recommended values, and prints the doctor's text or JSON.

Exit status: 0 no FAIL finding; 1 some FAIL finding; 2 a usage error or an input that could not be
read (a missing file, an unknown kind, binary or empty input).
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import json
import os
import re
import stat
import sys

# ncclprep must be imported before ansible.module_utils.ncclprep: keep this order.
# isort: off
import ncclprep  # noqa: F401  (extends ansible.module_utils.__path__)
from ansible.module_utils.ncclprep.doctor import (
    KINDS,
    as_json,
    compare,
    decode_input,
    diagnose_dumps,
    diagnose_text,
    exit_status,
    render_text,
)
# isort: on

EXIT_USAGE = 2
#: The role defaults that hold the recommended sysctl values (what validate.yml checks nodes against).
SYSCTL_DEFAULTS = os.path.join(ncclprep.REPO_ROOT, "roles", "sysctl_tuning", "defaults", "main.yml")


def load_sysctl_intent(path: str = SYSCTL_DEFAULTS) -> dict | None:
    """``sysctl_tuning_settings`` of the sysctl_tuning role's defaults, None when unreadable."""
    try:
        import yaml

        with open(path, encoding="utf-8") as fh:
            settings = (yaml.safe_load(fh) or {}).get("sysctl_tuning_settings")
        return settings if isinstance(settings, dict) else None
    except Exception:  # no PyYAML, no file, bad YAML: the sysctl sizes are then not judged
        return None


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as exit status 2 on the given stream, never raising past main."""

    def __init__(self, *args, stream=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._stream = stream

    def _print_message(self, message, file=None):
        if message:
            (self._stream or file or sys.stderr).write(message)


def build_parser(stream=None) -> argparse.ArgumentParser:
    kinds = "\n".join(f"  {k:<12} {v}" for k, v in KINDS.items())
    parser = _Parser(
        prog="ncclprep doctor", stream=stream, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Read what a failed job left behind (logs, tool output) offline: say what each input is, what "
                    "was read, what is wrong and what to do, quoting the lines that show it. Several files from "
                    "several nodes are also compared (a version or setting that differs, a rank that never arrived).",
        epilog=f"kinds of input (found from the content; --kind forces one):\n{kinds}\n\n"
               "exit status: 0 no FAIL finding; 1 some FAIL finding; 2 usage error or an input that could not be "
               "read (missing file, unknown kind, binary or empty input).")
    parser.add_argument("files", nargs="*", metavar="FILE", help="input files or folders (a job's debug folder: "
                        "every file under it); '-' or none reads standard input")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON (schema_version 1)")
    parser.add_argument("--host", help="the host the input came from (when the text and the file name do not say)")
    parser.add_argument("--kind", choices=sorted(KINDS), metavar="KIND",
                        help="the kind of every input, instead of detecting it (kinds below)")
    parser.add_argument("--line-rate", type=float, metavar="GBITS",
                        help="per-node network line rate in Gb/s for nccl-tests (4 x 200 Gb/s NICs: 800)")
    parser.add_argument("--cluster-cidr", action="append", metavar="CIDR", type=cidr,
                        help="the cluster's subnet to judge ufw rules for, such as 10.0.0.0/16 (default: the subnets "
                             "the rules name)")
    return parser


def cidr(value: str) -> str:
    """``value`` when it is an IPv4 or IPv6 subnet (host bits may be set: 10.0.0.7/24), else
    argparse.ArgumentTypeError naming it, so ``--cluster-cidr 10.0.0.0/33`` is a usage error
    (exit 2) rather than a subnet left out of the ufw judgement unsaid."""
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not a subnet ({exc}); give one such as 10.0.0.0/16 "
                                         "or fd00::/64") from None
    return value


#: How much of an input is read: its first and last HEAD_TAIL_BYTES (a job's log says how it
#: started at the top and how it ended at the bottom); what lies between is skipped and said so.
#: 2 x 1 MiB (about 30,000 lines of an NCCL log) keeps a 2 GB file to seconds and well under
#: 200 MB of memory (review F14; bench/doctor_input.py: 2 x 4 MiB took 15 s and 216 MB here).
HEAD_TAIL_BYTES = 1024 * 1024
#: The most read from a pipe (standard input, a named pipe): it cannot be read from its end, so
#: it is read through, and ``yes |`` would never end. 64 MiB take well under a second.
MAX_STREAM_BYTES = 64 * 1024 * 1024
_CHUNK = 1024 * 1024


class InputError(Exception):
    """An input that is not read, with the reason in words (``str``)."""


def _read_bounded(fh) -> tuple[bytes, int]:
    """``(data, skipped)``: all of binary stream ``fh``, or its first and last HEAD_TAIL_BYTES
    joined by a newline, with ``skipped`` the number of bytes left out between them (0: all
    read). A regular file is read from both ends; anything else (a pipe, a device given as
    standard input) is read through, keeping its tail, and raises InputError past
    MAX_STREAM_BYTES (``yes |`` and ``< /dev/zero`` never end)."""
    head = fh.read(HEAD_TAIL_BYTES)
    if len(head) < HEAD_TAIL_BYTES:
        return head, 0
    try:
        info = os.fstat(fh.fileno())
        seekable = stat.S_ISREG(info.st_mode) and info.st_size > 0 and fh.seekable()
        size = info.st_size
    except (OSError, AttributeError, ValueError):
        seekable = False
    if seekable:
        if size <= 2 * HEAD_TAIL_BYTES:
            return head + fh.read(HEAD_TAIL_BYTES), 0
        fh.seek(size - HEAD_TAIL_BYTES)
        tail = fh.read(HEAD_TAIL_BYTES)
        return head + b"\n" + tail, size - len(head) - len(tail)
    tail, total = bytearray(), len(head)
    while chunk := fh.read(min(_CHUNK, MAX_STREAM_BYTES + 1 - total)):
        total += len(chunk)
        if total > MAX_STREAM_BYTES:
            raise InputError(f"went on past {MAX_STREAM_BYTES // (1024 * 1024)} MiB, the most read from a pipe or "
                             "device; save it to a file and give the file (a file is read from both ends)")
        tail += chunk
        del tail[:-HEAD_TAIL_BYTES]
    if total <= 2 * HEAD_TAIL_BYTES:  # the tail overlaps the head: nothing was skipped
        return head + bytes(tail[len(tail) - (total - len(head)):]), 0
    return head + b"\n" + bytes(tail), total - len(head) - len(tail)


def _open(path: str, in_dir: bool):
    """``(binary file, is a pipe)`` for ``path``, opened without blocking (a named pipe with no
    writer would block in ``open`` for good) and checked with ``fstat`` on what was opened: a
    regular file or a pipe, never a folder, device or socket (``/dev/zero`` never ends). A file
    found in a folder (``in_dir``) that is a symbolic link is not followed (``O_NOFOLLOW``: a link
    out of the folder, to ``/etc/passwd``, is not read). Raises OSError or InputError."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (os.O_NOFOLLOW if in_dir else 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if in_dir and exc.errno == errno.ELOOP:
            raise InputError("a symbolic link: not followed out of the folder") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputError("is a directory, not a file")
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise InputError("a device or socket, not a file (give a file, or '-' for standard input)")
        if stat.S_ISFIFO(mode):  # reads wait for the writer, and end when it closes
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), stat.S_ISFIFO(mode)
    except BaseException:
        os.close(fd)
        raise


def _read(path: str, stdin, in_dir: bool = False) -> tuple[str | None, str | None, str | None]:
    """``(text, None, note)`` or ``(None, reason, None)`` for one path (``-``: standard input);
    ``note`` says what was skipped of a large input (None: all of it was read)."""
    try:
        if path == "-":
            if hasattr(stdin, "buffer"):
                data, skipped = _read_bounded(stdin.buffer)
            else:
                text = stdin.read(MAX_STREAM_BYTES + 1)
                if len(text) > MAX_STREAM_BYTES:
                    raise InputError(f"more than {MAX_STREAM_BYTES} characters on standard input")
                data, skipped = text.encode("utf-8", errors="replace"), 0
        else:
            fh, _pipe = _open(path, in_dir)
            with fh:
                data, skipped = _read_bounded(fh)
    except FileNotFoundError:
        return None, "no such file", None
    except IsADirectoryError:
        return None, "is a directory, not a file", None
    except InputError as exc:
        return None, str(exc), None
    except (OSError, UnicodeError) as exc:
        return None, f"cannot be read ({exc.strerror if isinstance(exc, OSError) and exc.strerror else exc})", None
    note = None
    if skipped:
        mib = HEAD_TAIL_BYTES // (1024 * 1024)
        note = (f"input cut: only its first and last {mib} MiB were read; the {skipped / 1e9:.2f} GB between "
                "them were skipped (split the file, or give the part around the failure)")
    text, problem = decode_input(data)
    return text, problem, note


#: Files read from the folders given (a job's debug folder: per-rank logs, NCCL's, the dumps).
MAX_DIR_FILES = 2000
#: Names listed in one folder at most (a folder of a million files is not a job's debug folder).
MAX_DIR_ENTRIES = 10 * MAX_DIR_FILES


def _natural(name: str) -> list:
    """Sort key with numbers read as numbers: rank2.log before rank10.log."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _listing(folder: str) -> tuple[list[str], list[str], int, bool]:
    """``(sub-folders, regular files, symbolic links, cut)`` of ``folder`` in natural order, hidden
    names left out, read with ``lstat`` (``DirEntry`` without following links); at most
    MAX_DIR_ENTRIES names are listed (``cut`` when there were more)."""
    dirs, files, links, cut = [], [], 0, False
    try:
        with os.scandir(folder) as it:
            for n, entry in enumerate(it):
                if n == MAX_DIR_ENTRIES:
                    cut = True
                    break
                if entry.name.startswith("."):
                    continue
                try:
                    if entry.is_symlink():
                        links += 1
                    elif entry.is_dir(follow_symlinks=False):
                        dirs.append(entry.name)
                    elif entry.is_file(follow_symlinks=False) and not entry.name.endswith(".tmp"):
                        files.append(entry.name)
                except OSError:
                    continue
    except OSError:
        pass
    return sorted(dirs, key=_natural), sorted(files, key=_natural), links, cut


def _expand(paths: list[str]) -> tuple[list[tuple[str, bool | None]], list[str]]:
    """``paths`` with each folder replaced by the files under it (natural order, depth first,
    hidden ones left out): ``([(path, came from a folder; None for a folder without files)],
    notes)``. Only regular files are taken (a named pipe would block the read, a device never
    end), no half-written dump (the template writes <prefix><rank>.tmp, then renames it), and no
    symbolic link (it may lead out of the folder). The walk stops at MAX_DIR_FILES files in all;
    the notes say what was left out."""
    out: list[tuple[str, bool | None]] = []
    taken = links = 0
    full = long_listing = False
    for path in paths:
        if path == "-" or not os.path.isdir(path):
            out.append((path, False))
            continue
        found = 0
        todo = [path]  # folders still to list, the next one last
        while todo and not full:
            folder = todo.pop()
            dirs, files, n_links, cut = _listing(folder)
            links += n_links
            long_listing = long_listing or cut
            for f in files:
                if taken == MAX_DIR_FILES:
                    full = True
                    break
                out.append((os.path.join(folder, f), True))
                taken += 1
                found += 1
            todo += [os.path.join(folder, d) for d in reversed(dirs)]
        if not found and not full:
            out.append((path, None))  # an empty folder: said as such
    notes = []
    if full:
        notes.append(f"the folders hold more than {MAX_DIR_FILES} files: the first {MAX_DIR_FILES} in name order were "
                     "read, the walk stopped there")
    if long_listing:
        notes.append(f"a folder holds more than {MAX_DIR_ENTRIES} names: only {MAX_DIR_ENTRIES} of them were listed")
    if links:
        notes.append(f"{links} symbolic link(s) in the folders were not followed (a link may lead out of the folder; "
                     "give its target itself to read it)")
    return out, notes


def _dump_reader(path: str, in_dir: bool):
    """A function reading the flight recorder dump at ``path`` (``diagnose_dumps`` calls it when that
    dump's turn comes), or None when ``path`` is standard input, not a regular file, unreadable,
    or does not start as a pickle."""
    from ansible.module_utils.ncclprep.parsers.flight_recorder import MAX_DUMP_BYTES, is_dump

    if path == "-":
        return None
    try:  # stat first: a named pipe opened and closed here would lose what its writer wrote
        if not stat.S_ISREG((os.lstat(path) if in_dir else os.stat(path)).st_mode):
            return None
        fh, pipe = _open(path, in_dir)
        with fh:
            if pipe or not is_dump(fh.read(3)):
                return None
    except (OSError, InputError):
        return None

    def read() -> bytes:
        fh, pipe = _open(path, in_dir)
        with fh:
            if pipe:
                raise InputError("no longer a regular file")
            return fh.read(MAX_DUMP_BYTES + 1)  # one byte more: load_dump refuses what is larger

    return read


def doctor_main(argv: list[str] | None = None, stdin=None, stdout=None) -> int:
    """Run ``ncclprep doctor`` on ``argv`` (without the program and subcommand names); return the exit status.

    ``stdin``/``stdout`` default to the process's. Never raises (argparse's own exits become status
    2, or 0 for --help).
    """
    stdin = stdin if stdin is not None else sys.stdin
    stdout = stdout if stdout is not None else sys.stdout
    parser = build_parser(stream=stdout)
    try:
        args = parser.parse_args(argv if argv is not None else sys.argv[1:])
    except SystemExit as exc:
        return 0 if exc.code in (0, None) else EXIT_USAGE
    try:
        intent = load_sysctl_intent()
        results = []
        dumps = []
        inputs, folder_notes = _expand(args.files or ["-"])
        from_folder = {path for path, in_dir in inputs if in_dir}
        for path, in_dir in inputs:
            name = "<stdin>" if path == "-" else path
            if in_dir is None:
                results.append(diagnose_text("", name, args.host) | {"error": f"{name}: a folder with no file in it"})
                continue
            dump = _dump_reader(path, bool(in_dir))
            if dump is not None:
                dumps.append((name, dump))
                continue
            text, problem, note = _read(path, stdin, bool(in_dir))
            if problem and in_dir:  # a job folder holds other files too (a core file, an empty log)
                results.append(diagnose_text("", name, args.host) | {"error": None, "notes": [f"not read: {problem}"]})
                continue
            if problem:
                results.append(diagnose_text("", name, args.host) | {"error": f"{name}: {problem}"})
                continue
            results.append(diagnose_text(text, name, args.host, kind=args.kind, line_rate_gbit_s=args.line_rate,
                                         sysctl_intent=intent, cluster_cidrs=args.cluster_cidr))
            if in_dir and results[-1]["kind"] is None and results[-1]["error"]:
                # a job folder holds other files too (the training's own output, an empty log): not an error there
                said = results[-1]["error"].split(": ", 1)[-1]
                results[-1]["error"] = None
                results[-1]["notes"].append(f"not read ({said}); only its name was used (a rank's file that printed "
                                            "no error)")
            if note:
                results[-1]["notes"].insert(0, note)
        if folder_notes:
            results.append(diagnose_text("", "(folders)", args.host) | {"error": None, "notes": folder_notes})
        if dumps:
            results.append(diagnose_dumps(dumps, args.host, forgive=[name for name, _ in dumps
                                                                      if name in from_folder]))
        comparisons = compare(results)
        if args.json:
            stdout.write(json.dumps(as_json(results, comparisons), indent=2) + "\n")
        else:
            stdout.write(render_text(results, comparisons))
        return exit_status(results, comparisons)
    except Exception as exc:  # never a traceback
        stdout.write(f"ncclprep doctor: internal error ({type(exc).__name__}: {exc}); please report it\n")
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(doctor_main())
