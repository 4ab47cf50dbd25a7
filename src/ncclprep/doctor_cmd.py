"""``ncclprep doctor``: the argparse entry of the offline doctor (the engine is
``module_utils/ncclprep/doctor.py``). It reads the files (``-`` or none: standard input), loads the
sysctl_tuning role's recommended values, and prints the doctor's text or JSON.

Exit status: 0 no FAIL finding; 1 some FAIL finding; 2 a usage error or an input that could not be
read (a missing file, an unknown kind, binary or empty input).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# ncclprep must be imported before ansible.module_utils.ncclprep: keep this order.
# isort: off
import ncclprep  # noqa: F401  (extends ansible.module_utils.__path__)
from ansible.module_utils.ncclprep.doctor import (
    KINDS,
    as_json,
    compare,
    decode_input,
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
    parser.add_argument("files", nargs="*", metavar="FILE", help="input files; '-' or none reads standard input")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON (schema_version 1)")
    parser.add_argument("--host", help="the host the input came from (when the text and the file name do not say)")
    parser.add_argument("--kind", choices=sorted(KINDS), metavar="KIND",
                        help="the kind of every input, instead of detecting it (kinds below)")
    parser.add_argument("--line-rate", type=float, metavar="GBITS",
                        help="per-node network line rate in Gb/s for nccl-tests (4 x 200 Gb/s NICs: 800)")
    parser.add_argument("--cluster-cidr", action="append", metavar="CIDR",
                        help="the cluster's subnet to judge ufw rules for (default: the subnets the rules name)")
    return parser


def _read(path: str, stdin) -> tuple[str | None, str | None]:
    """``(text, None)`` or ``(None, reason)`` for one path (``-``: standard input)."""
    try:
        if path == "-":
            data = stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read()
        else:
            with open(path, "rb") as fh:
                data = fh.read()
    except FileNotFoundError:
        return None, "no such file"
    except IsADirectoryError:
        return None, "is a directory, not a file"
    except (OSError, UnicodeError) as exc:
        return None, f"cannot be read ({exc.strerror if isinstance(exc, OSError) and exc.strerror else exc})"
    if isinstance(data, str):
        data = data.encode("utf-8", errors="replace")
    return decode_input(data)


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
        for path in args.files or ["-"]:
            name = "<stdin>" if path == "-" else path
            text, problem = _read(path, stdin)
            if problem:
                results.append(diagnose_text("", name, args.host) | {"error": f"{name}: {problem}"})
                continue
            results.append(diagnose_text(text, name, args.host, kind=args.kind, line_rate_gbit_s=args.line_rate,
                                         sysctl_intent=intent, cluster_cidrs=args.cluster_cidr))
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
