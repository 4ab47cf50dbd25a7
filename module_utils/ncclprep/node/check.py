"""``ncclprep node check``: a node's checks without Ansible, from what site.yml installed.

site.yml installs this package on every node (``/opt/ncclprep/lib/ncclprep-core.zip``, run by
``/usr/local/sbin/ncclprep``) with the intent it computed for that node in ``INTENT_FILE``
(mode 0644, root: a job's preflight reads it as the job's user; nothing secret is in it), the
document ``intent_document`` reads::

    {"version": 1, "host": inventory name,
     "node": {node.OPTIONS: the data-plane cidr and interface, sysctl keys, names to resolve ...},
     "readers": {concern: its reader options (OPTIONS of concerns/<concern>.py)},
     "roce_qos": {concerns.roce_qos.SURVEY_SPEC's options} or null (the concern off),
     "job": {the members' data-plane addresses, the launcher, validate.yml's preflight_* settings:
             what ``ncclprep node preflight`` runs a Slurm job's preflight with, node/preflight.py},
     "intent": {concern: <concern>_intent, or null where it is off}}

``read_node`` reads the node as validate.yml's node_facts does (node.read_node: node.read_facts,
every concern's reader, roce_qos.survey, the TCP listeners from ``ss``) and ``checks.evaluate_node``
judges it with the same check functions, so a node's rows carry the ids, statuses and messages
validate.yml gives that host judged alone (checks.NODE_MODULES: the checks of one host's own
record). It needs no controller and no Ansible. Like validate.yml's reading it resolves every
member's names and connects to each address's SSH port (names.reachable), so a member that is
down fails that check on every node; a job-scoped check (Slurm, issue 25) is to narrow it.

Exit codes: 0 every check passed (WARN and SKIP pass), 1 a check failed or hung, 2 bad usage,
3 could not run (no intent file or an unreadable one, a reader that crashed).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import traceback

from ansible.module_utils.ncclprep.atomic import write_atomic
from ansible.module_utils.ncclprep.checks import BAD, NODE_MODULES, evaluate_node
from ansible.module_utils.ncclprep.node import read as node
from ansible.module_utils.ncclprep.node.hostinfo import subprocess_runner

INTENT_FILE = "/etc/ncclprep/intent.json"
#: The record of the last run: {host, generated_at, alive, facts, intent, checks}, the shape of
#: validate.yml's hosts/<host>.json.
RECORD_FILE = "/var/lib/ncclprep/node-check.json"
INTENT_VERSION = 1
EXIT_PASS, EXIT_FAILED, EXIT_USAGE, EXIT_COULD_NOT_RUN = 0, 1, 2, 3


class CouldNotRun(Exception):
    """The node could not be checked (exit 3); the message says what and where."""


def read_node(doc: dict, only: tuple[str, ...] | None = None, path: str = INTENT_FILE) -> dict:
    """node.read_node with the reading options of ``doc`` (read from ``path``); raises CouldNotRun
    for what it refuses, naming ``path``."""
    try:
        reading = {k: doc.get(k) for k in ("node", "readers", "roce_qos")}
        return node.read_node(reading, only, subprocess_runner, node.find_tool,
                              warn=lambda text: print(f"ncclprep node check: warning: {text}", file=sys.stderr))
    except node.ReadError as exc:
        raise CouldNotRun(f"{exc} (from {path})") from None


def intent_document(path: str = INTENT_FILE) -> dict:
    """The intent document at ``path`` (module docstring). Raises CouldNotRun naming the path when
    it is absent, not JSON, of another version, or without its keys."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise CouldNotRun(f"{path} does not exist: run site.yml on this node first (it writes the intent)") from None
    except (OSError, ValueError) as exc:
        raise CouldNotRun(f"{path} cannot be read: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != INTENT_VERSION:
        raise CouldNotRun(f"{path}: version {doc.get('version') if isinstance(doc, dict) else None!r}, this "
                          f"command reads version {INTENT_VERSION}: run site.yml again with this ncclprep")
    missing = [k for k in ("host", "node", "readers", "intent") if not isinstance(doc.get(k), (dict, str))]
    if missing:
        raise CouldNotRun(f"{path}: no {', '.join(missing)}: run site.yml again")
    return doc


def check(doc: dict, facts: dict, only: tuple[str, ...] | None = None) -> list[dict]:
    """The rows of checks.evaluate_node for this node's record (alive, ``facts``, the intent of
    ``doc``)."""
    return evaluate_node(doc["host"], {"alive": True, "facts": facts, "intent": doc["intent"]}, only)


def write_record(path: str, doc: dict, facts: dict, rows: list[dict]) -> None:
    """The run's record at ``path`` (RECORD_FILE's shape), written atomically, mode 0600.
    Raises OSError when it cannot be written."""
    record = {"host": doc["host"], "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "alive": True, "facts": facts, "intent": doc["intent"], "checks": rows}
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    write_atomic(path, json.dumps(record, indent=2, sort_keys=True, default=str) + "\n", mode=0o600)


def render_text(host: str, rows: list[dict]) -> str:
    """One line per check (status, id, message), then the verdict."""
    bad = [r for r in rows if r["status"] in BAD]
    lines = [f"{r['status']:<4}  {r['id']}  {' '.join(str(r.get('message') or '').split())}" for r in rows]
    lines.append(f"{host}: {'FAIL' if bad else 'PASS'}, {len(rows)} checks, {len(bad)} failed or hung")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ncclprep node check", allow_abbrev=False,
        description="Read this node and run the checks validate.yml runs on it, against the intent site.yml "
                    f"installed ({INTENT_FILE}); no Ansible, no controller.",
        epilog="exit codes: 0 all passed; 1 a check failed or hung; 2 bad usage; 3 could not run "
               "(no intent file, a reader crashed).")
    p.add_argument("--json", action="store_true", help="print {host, status, checks, record} as JSON")
    p.add_argument("--only", nargs="+", metavar="CONCERN", choices=NODE_MODULES,
                   help=f"only these checks' modules ({', '.join(NODE_MODULES)})")
    p.add_argument("--intent", default=INTENT_FILE, help=f"the intent document (default {INTENT_FILE})")
    p.add_argument("--record", default=RECORD_FILE,
                   help=f"where the run's record goes (default {RECORD_FILE}); '-' writes none")
    return p


def reexec_under_torch(args: list[str], env: dict[str, str] | None = None) -> None:
    """Run this command again under the torch runtime's interpreter (the intent's
    ``node.torch_python``) when this one cannot import torch: the job's preflight and root's
    re-test (retest.py) run the probes in-process. Returns when it can, or when there is no other
    to run (the probes then report torch missing). ``env``: variables the second run gets (set only when it starts)."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None or os.environ.get("NCCLPREP_REEXEC"):
        return
    try:
        python = intent_document().get("node", {}).get("torch_python")
    except CouldNotRun:
        return
    if python and os.access(python, os.X_OK) and os.path.abspath(python) != os.path.abspath(sys.executable):
        os.environ.update(env or {}, NCCLPREP_REEXEC="1")
        os.execv(python, [python, "-I", os.path.abspath(sys.argv[0]), *args])


def main(argv: list[str]) -> int:
    """``ncclprep node check [--json] [--only CONCERN...]`` (``argv``: what follows ``node check``;
    cli.main routes it here): the exit code (module docstring)."""
    try:
        opts = parser().parse_args(argv)
    except SystemExit as exc:
        return EXIT_PASS if exc.code == 0 else EXIT_USAGE
    only = tuple(opts.only) if opts.only else None
    try:
        doc = intent_document(opts.intent)
        facts = read_node(doc, only, opts.intent)
        rows = check(doc, facts, only)
    except CouldNotRun as exc:
        print(f"ncclprep node check: {socket.gethostname()}: {exc}", file=sys.stderr)
        return EXIT_COULD_NOT_RUN
    except Exception:  # a reader or check that crashed: say where, exit 3, never a traceback alone
        print(f"ncclprep node check: {socket.gethostname()}: crashed:\n{traceback.format_exc()}", file=sys.stderr)
        return EXIT_COULD_NOT_RUN
    record = None if opts.record == "-" else opts.record
    if record:
        try:
            write_record(record, doc, facts, rows)
        except OSError as exc:
            print(f"ncclprep node check: cannot write the record {record}: {exc}", file=sys.stderr)
            return EXIT_COULD_NOT_RUN
    failed = any(r["status"] in BAD for r in rows)
    if opts.json:
        print(json.dumps({"host": doc["host"], "status": "FAIL" if failed else "PASS", "checks": rows,
                          "record": record}, indent=2, sort_keys=True, default=str))
    else:
        print(render_text(doc["host"], rows))
    return EXIT_FAILED if failed else EXIT_PASS
