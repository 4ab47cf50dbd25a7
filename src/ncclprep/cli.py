"""The ``ncclprep`` command: the local cluster, provisioning, the preflight, its reports, the doctor.

    ncclprep cluster up [--nodes N] [--slurm] | grow --nodes N | reboot NODE... | down
                                                the local podman cluster (playbooks/local_cluster.yml)
    ncclprep provision -i INVENTORY [ARGS...]   provision every node (site.yml)
    ncclprep validate -i INVENTORY [ARGS...]    the preflight: check, measure, report (validate.yml)
    ncclprep tune -i INVENTORY [--no-verify] [ARGS...]
                                                measure tune_space's variants, keep a winner, verify (tune.yml)
    ncclprep tune --nccl-tuner [ALGO,PROTO=]FILE... [--collective C] [-o CSV]
                                                an NCCL tuner CSV from recorded nccl-tests sweeps
    ncclprep report [RUN] [--compare RUN] [--format md|html|json|junit] [-o FILE]
    ncclprep doctor [--json] FILE...            read a failed job's logs and tool output offline
    ncclprep node check [--json] [--only C...]  this node's checks, no Ansible (site.yml installs it on every node)
    ncclprep node health | prolog [--dry-run]   Slurm's HealthCheckProgram and Prolog on that check's record

ARGS are passed to ansible-playbook as given (-l, -e, --check, --tags ...). Progress is one
live line (stage, host, elapsed); -v shows ansible-playbook's own output instead.

Exit codes: 0 all passed; 1 a check failed or hung (or, for report --compare, a new failure);
2 bad input or usage (refused before anything changed); 3 could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ncclprep import REPO_ROOT, __version__
from ncclprep.runner import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_COULD_NOT_RUN, EXIT_PASS, RunResult, run_playbook

EPILOG = "exit codes: 0 all passed; 1 a check failed or hung; 2 bad input or usage; 3 could not run."
#: The playbook commands' epilog: what they do with the arguments they do not know.
PLAYBOOK_EPILOG = EPILOG + " Other arguments go to ansible-playbook as given."
REPORT_EPILOG = ("exit codes: 0 the run passed; 1 it failed (with --compare: a check failed that passed "
                 "before); 2 no such run or bad usage.")
REPORTS = os.path.join(REPO_ROOT, "reports")
FORMATS = ("md", "html", "json", "junit")
#: ansible-playbook arguments that only list or check (their output is shown as with -v).
LISTING_ARGS = frozenset({"--list-hosts", "--list-tasks", "--list-tags", "--syntax-check"})


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _recap_table(result: RunResult) -> list[str]:
    lines = ["| host | ok | changed | failed | unreachable |", "|---|---:|---:|---:|---:|"]
    for host, n in sorted(result.recap.items()):
        lines.append(f"| {host} | {n['ok']} | {n['changed']} | {n['failed']} | {n['unreachable']} |")
    return lines


def _checks_table(cluster: dict) -> list[str]:
    """Counts per status, then one row per check that is not PASS (the run's verdicts at a glance)."""
    from ansible.module_utils.ncclprep.report.common import SEVERITY, counts

    checks = cluster.get("checks") or []
    tally = ", ".join(f"{s} {n}" for s, n in counts(checks).items() if n)
    lines = [f"{len(checks)} checks on {len(cluster.get('hosts') or [])} hosts: {tally}"]
    rows = sorted((c for c in checks if c["status"] != "PASS"), key=lambda c: (SEVERITY.index(c["status"]), c["id"]))
    if rows:
        lines += ["", "| status | check | hosts | message |", "|---|---|---|---|"]
        for c in rows:
            msg = " ".join(str(c.get("message") or "").split())
            lines.append(f"| {c['status']} | {c['id']} | {', '.join(c['hosts'])} | {msg[:110]} |")
    return lines


def _explain_failure(result: RunResult, what: str) -> None:
    """Name what went wrong when no report says it (bad input, an unreachable host, a failed task)."""
    for f in result.failures[:10]:
        err = "unreachable" if f.kind == "unreachable" else "failed"
        print(f"ncclprep: {what}: {f.host} {err} at '{f.task}': {f.message}", file=sys.stderr)
    if len(result.failures) > 10:
        print(f"ncclprep: ... and {len(result.failures) - 10} more failed tasks", file=sys.stderr)
    if result.no_hosts and not result.recap:
        print(f"ncclprep: {what}: no host in the inventory matched {', '.join(dict.fromkeys(result.no_hosts))} "
              "(an empty or unparsable inventory, or one without that group); nothing ran", file=sys.stderr)
    if not result.failures:
        for line in result.output_tail:
            print(f"ncclprep: {line}", file=sys.stderr)
    if result.error:
        print(f"ncclprep: {what}: {result.error}", file=sys.stderr)


def _playbook_command(args: argparse.Namespace, extra: list[str]) -> int:
    playbook, label = {"provision": ("site.yml", "provision"), "validate": ("validate.yml", "validate")}[args.command]
    if args.inventory is None and not os.environ.get("ANSIBLE_INVENTORY"):
        print(f"ncclprep {args.command}: give the inventory, e.g. -i inventory/local (usage: ncclprep "
              f"{args.command} --help)", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.verbose > 1:
        extra = ["-" + "v" * (args.verbose - 1), *extra]
    # what these print is the answer (hosts, tasks, tags, a syntax error): show Ansible's output
    listing = any(a in LISTING_ARGS for a in extra)
    try:
        result = run_playbook(playbook, args.inventory, extra, label, verbose=args.verbose > 0 or listing)
    except FileNotFoundError as exc:
        print(f"ncclprep {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    code = result.exit_code
    _out()
    _out(f"ncclprep {args.command}: {'PASS' if code == EXIT_PASS else 'FAIL'} in {result.elapsed_s:.0f} s "
         f"(exit code {code})")
    if result.recap:
        _out()
        for line in _recap_table(result):
            _out(line)
    if result.report and result.report.get("report_dir"):
        run = result.report["report_dir"]
        try:
            with open(os.path.join(run, "cluster.json"), encoding="utf-8") as fh:
                cluster = json.load(fh)
        except (OSError, ValueError) as exc:
            print(f"ncclprep: cannot read {run}/cluster.json: {exc}", file=sys.stderr)
        else:
            _out()
            for line in _checks_table(cluster):
                _out(line)
        _out()
        _out(f"report: {run}/summary.md (report.html, junit.xml, metrics.prom, cluster.json beside it)")
    if code in (EXIT_BAD_INPUT, EXIT_COULD_NOT_RUN) or (code == EXIT_CHECK_FAILED and not result.report):
        _explain_failure(result, args.command)
    return code


def _resolve_run(name: str | None) -> str:
    """A run folder from a path, a run name under reports/ (its UTC stamp) or None (reports/latest).

    Raises FileNotFoundError naming what was looked at.
    """
    candidates = ([os.path.join(REPORTS, "latest")] if name is None
                  else list(dict.fromkeys([name, os.path.join(REPORTS, name)])))  # an absolute path: once
    for path in candidates:
        if os.path.isfile(os.path.join(path, "cluster.json")):
            return os.path.realpath(path)
    raise FileNotFoundError(f"no report at {' or '.join(candidates)} (run ncclprep validate first)")


def _report_command(args: argparse.Namespace) -> int:
    from ansible.module_utils.ncclprep import report

    try:
        run = _resolve_run(args.run)
        cluster, hosts = report.load_run(run)
        old = None
        if args.compare:
            old, _ = report.load_run(_resolve_run(args.compare))
    except (FileNotFoundError, ValueError) as exc:
        print(f"ncclprep report: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if old is not None:
        diff = report.compare_runs(old, cluster)
        text = (json.dumps(diff, indent=2, sort_keys=True) + "\n" if args.format == "json"
                else report.render_compare_markdown(diff))
        code = EXIT_CHECK_FAILED if diff.get("new_failures") else EXIT_PASS
    else:
        text = {"md": lambda: report.render_markdown(cluster),
                "html": lambda: report.render_html(cluster, hosts),
                "json": lambda: json.dumps(cluster, indent=2, sort_keys=True) + "\n",
                "junit": lambda: report.render_junit(cluster)}[args.format]()
        code = EXIT_PASS if cluster.get("status") == "PASS" else EXIT_CHECK_FAILED
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"ncclprep report: wrote {args.output} ({args.format}) from {run}", file=sys.stderr)
    else:
        sys.stdout.write(text)
        if args.format == "md" and old is None:
            _out(f"\nreport: {run}")
    return code


def _cluster_command(args: argparse.Namespace, extra: list[str]) -> int:
    if args.action in ("up", "grow") and args.nodes < 2:
        print(f"ncclprep cluster {args.action}: --nodes {args.nodes}: valid: 2 or more nodes", file=sys.stderr)
        return EXIT_BAD_INPUT
    if (args.action == "reboot") != bool(args.names):
        print(f"ncclprep cluster {args.action}: nodes {' '.join(args.names) or 'none'}: valid: reboot takes "
              "one or more node names (node2 ...), the other actions none", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.slurm and args.action != "up":
        print(f"ncclprep cluster {args.action}: --slurm goes with up (grow keeps what the cluster runs)",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.action == "up":
        state = ["-e", "local_cluster_state=present", "-e", f"local_cluster_nodes={args.nodes}",
                 "-e", f"local_cluster_slurm={str(args.slurm).lower()}"]
    elif args.action == "grow":
        state = ["-e", "local_cluster_state=grow", "-e", f"local_cluster_nodes={args.nodes}"]
    elif args.action == "reboot":
        state = ["-e", "local_cluster_state=reboot", "-e", json.dumps({"local_cluster_reboot": args.names})]
    else:
        state = ["-e", "local_cluster_state=absent"]
    result = run_playbook("playbooks/local_cluster.yml", None, [*state, *extra], f"cluster {args.action}",
                          verbose=args.verbose > 0)
    code = EXIT_PASS if result.rc == 0 and not result.failures else EXIT_COULD_NOT_RUN
    if code == EXIT_PASS:
        _out(f"ncclprep cluster {args.action}: done in {result.elapsed_s:.0f} s"
             + (f"; {args.nodes} nodes in inventory/local" if args.action in ("up", "grow") else "")
             + (f"; {', '.join(args.names)} booted and answer SSH" if args.action == "reboot" else "")
             + ("; Slurm: slurmctld on node1, every node idle in sinfo" if args.slurm else ""))
    else:
        _explain_failure(result, f"cluster {args.action}")
    return code


def _tune_command(args: argparse.Namespace, extra: list[str]) -> int:
    from ncclprep.tune_cmd import nccl_tuner_main, tune_main

    if args.nccl_tuner:
        mixed = [a for a, on in (("-i", args.inventory), ("--no-verify", args.no_verify)) if on] + extra
        if mixed:
            print(f"ncclprep tune --nccl-tuner: {' '.join(mixed)}: not taken with --nccl-tuner (it reads recorded "
                  "sweeps, no cluster)", file=sys.stderr)
            return EXIT_BAD_INPUT
        return nccl_tuner_main(args.nccl_tuner, args.collective, args.output)
    if args.collective or args.output:
        print("ncclprep tune: --collective and -o go with --nccl-tuner", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.inventory is None:
        print("ncclprep tune: give the inventory, e.g. -i inventory/local (usage: ncclprep tune --help)",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    if not os.path.exists(args.inventory):
        print(f"ncclprep tune: inventory {args.inventory!r} does not exist", file=sys.stderr)
        return EXIT_BAD_INPUT
    return tune_main(args.inventory, extra, verbose=args.verbose > 0, verify=not args.no_verify)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command (each has --help)."""
    parser = argparse.ArgumentParser(prog="ncclprep", description=__doc__.splitlines()[0], epilog=PLAYBOOK_EPILOG,
                                     allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"ncclprep {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("cluster", help="bring the local podman cluster up or down", epilog=PLAYBOOK_EPILOG,
                       description="The local test cluster of podman containers (playbooks/local_cluster.yml); "
                                   "its inventory is inventory/local.", allow_abbrev=False)
    p.add_argument("action", choices=("up", "grow", "reboot", "down"),
                   help="up: a fresh cluster; grow: keep the running nodes, start the missing ones up to --nodes "
                        "(into Slurm too, where it runs Slurm); reboot NODE...: stop and start those nodes as a "
                        "reboot does and wait until systemd has booted them and sshd answers; down: remove it")
    p.add_argument("names", nargs="*", metavar="NODE", help="with reboot: the nodes (node2 ...)")
    p.add_argument("--nodes", type=int, default=3, help="nodes to start, or to grow to (default 3)")
    p.add_argument("--slurm", action="store_true",
                   help="with up: Debian's Slurm on the nodes, slurmctld on node1 and slurmd on every node")
    p.add_argument("-v", "--verbose", action="count", default=0, help="show ansible-playbook's output")
    for name, text in (("provision", "provision every node (site.yml)"),
                       ("validate", "the preflight before jobs: check, measure, report (validate.yml)")):
        p = sub.add_parser(name, help=text, description=text + ". Other arguments go to ansible-playbook.",
                           epilog=PLAYBOOK_EPILOG, allow_abbrev=False)
        p.add_argument("-i", "--inventory", help="inventory path, e.g. inventory/local")
        p.add_argument("-v", "--verbose", action="count", default=0,
                       help="show ansible-playbook's output instead of the progress line (-vv and more: "
                            "also pass -v... to ansible-playbook)")
    text = "measure variants of the host and NCCL settings, keep a winner only when it wins (tune.yml)"
    p = sub.add_parser("tune", help=text, epilog=PLAYBOOK_EPILOG, allow_abbrev=False,
                       description=text + ": the space is tune_space in the inventory (roles/tune, docs/tuning.md); "
                                   "the winners go to the inventory's group_vars/all/ncclprep_tuned.yml, then site.yml "
                                   "and validate.yml run. Other arguments go to ansible-playbook.")
    p.add_argument("-i", "--inventory", help="inventory path, e.g. inventory/local")
    p.add_argument("--no-verify", action="store_true",
                   help="no validate.yml after the decision (the inventory's settings are applied still: site.yml "
                        "whole when something was kept, else over the tuned concerns)")
    p.add_argument("--nccl-tuner", nargs="+", metavar="[ALGO,PROTO=]FILE",
                   help="no cluster run: write an NCCL tuner CSV (NCCL_TUNER_CONFIG_FILE) from recorded nccl-tests "
                        "sweeps, one per forced algorithm and protocol (read from its NCCL INFO lines, or given as "
                        "ring,simple=FILE) and best one of NCCL's own choice (default=FILE)")
    p.add_argument("--collective", help="with --nccl-tuner: allreduce, allgather, reducescatter, broadcast or reduce "
                                        "(default: what the sweeps print, else allreduce)")
    p.add_argument("-o", "--output", metavar="FILE", help="with --nccl-tuner: write the CSV there (default: stdout)")
    p.add_argument("-v", "--verbose", action="count", default=0, help="show ansible-playbook's output")
    p = sub.add_parser("report", help="print, convert or compare the reports of validate runs", epilog=REPORT_EPILOG,
                       description="Print a validate run's report (default: reports/latest) in one of the "
                                   "formats, or what changed since another run.", allow_abbrev=False)
    p.add_argument("run", nargs="?", help="run folder, or its name under reports/ (default reports/latest)")
    p.add_argument("--compare", metavar="RUN", help="the earlier run to compare RUN with")
    p.add_argument("--format", choices=FORMATS, default="md", help="md (default), html, json or junit")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")
    p.set_defaults(subparser=p)
    sub.add_parser("doctor", help="read a failed job's logs and tool output offline", add_help=False)
    sub.add_parser("node", help="node check: this node's checks against the intent site.yml installed, "
                                "no Ansible (also /usr/local/sbin/ncclprep on every node); node health and "
                                "node prolog: Slurm's HealthCheckProgram and Prolog on that check's record; "
                                "node preflight: a Slurm job's preflight, one srun task per node",
                      add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "doctor":
        from ncclprep.doctor_cmd import doctor_main

        return doctor_main(argv[1:])
    if argv and argv[0] == "node":
        from ansible.module_utils.ncclprep.cli import main as node_main

        return node_main(argv)
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    extra = [a for a in extra if a != "--"]
    try:
        if args.command in ("provision", "validate"):
            return _playbook_command(args, extra)
        if args.command == "tune":
            return _tune_command(args, extra)
        if extra and args.command == "report":
            args.subparser.error(f"unrecognized arguments: {' '.join(extra)}")
        if args.command == "cluster":
            return _cluster_command(args, extra)
        return _report_command(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    except BrokenPipeError:  # `ncclprep report | head`
        sys.stderr.close()
        return EXIT_PASS
    except KeyboardInterrupt:
        print("ncclprep: interrupted", file=sys.stderr)
        return EXIT_COULD_NOT_RUN


if __name__ == "__main__":
    sys.exit(main())
