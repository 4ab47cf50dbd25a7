"""The ``ncclprep`` command: site.yml and validate.yml through ansible-runner, and reports.

    ncclprep site -i inventory/<env> [-- ansible-playbook args]
    ncclprep validate -i inventory/<env> [-- ansible-playbook args]
    ncclprep report [RUN_DIR]        # print summary.md of a run (default reports/latest)

Exit status: that of ansible-playbook for site/validate (2 when a check is FAIL
or HANG); for report 0 when the run is PASS, 2 when FAIL, 1 when no report exists.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ncclprep import REPO_ROOT, __version__


def _playbook(name: str, args: argparse.Namespace) -> int:
    import ansible_runner

    cmdline = [os.path.join(REPO_ROOT, f"{name}.yml"), "-i", args.inventory, *args.extra]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO_ROOT, "ansible.cfg"))
    os.environ.update(env)
    _out, _err, rc = ansible_runner.run_command(
        executable_cmd="ansible-playbook",
        cmdline_args=cmdline,
        host_cwd=REPO_ROOT,
        input_fd=sys.stdin,
        output_fd=sys.stdout,
        error_fd=sys.stderr,
    )
    return rc


def _report(args: argparse.Namespace) -> int:
    run = args.run_dir or os.path.join(REPO_ROOT, "reports", "latest")
    cluster_json = os.path.join(run, "cluster.json")
    if not os.path.exists(cluster_json):
        print(f"ncclprep: no report at {run} (run validate.yml first)", file=sys.stderr)
        return 1
    with open(os.path.join(run, "summary.md"), encoding="utf-8") as fh:
        sys.stdout.write(fh.read())
    with open(cluster_json, encoding="utf-8") as fh:
        status = json.load(fh)["status"]
    print(f"\nreport: {os.path.realpath(run)}")
    return 0 if status == "PASS" else 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ncclprep", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"ncclprep {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("site", "provision every node (site.yml)"),
                       ("validate", "preflight: check, measure, report (validate.yml)")):
        p = sub.add_parser(name, help=text)
        p.add_argument("-i", "--inventory", required=True, help="inventory path, e.g. inventory/local")
        p.add_argument("extra", nargs=argparse.REMAINDER, help="more ansible-playbook arguments after --")
    p = sub.add_parser("report", help="print the summary of a validate run")
    p.add_argument("run_dir", nargs="?", help="run folder (default reports/latest)")
    args = parser.parse_args(argv)
    if args.command == "report":
        try:
            return _report(args)
        except BrokenPipeError:  # `ncclprep report | head`
            sys.stderr.close()
            return 0
    args.extra = [a for a in args.extra if a != "--"]
    return _playbook(args.command, args)


if __name__ == "__main__":
    sys.exit(main())
