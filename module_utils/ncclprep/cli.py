"""``ncclprep node ...`` and ``ncclprep report --history`` on a node: the one router of the node
side's commands (site.yml installs ``/usr/local/sbin/ncclprep``, which calls ``main``; the
controller's CLI, src/ncclprep/cli.py, hands ``ncclprep node ...`` here too). Each command lives
in its own module, imported only when asked for (all of them at once cost each health check and
Prolog some 50 ms more, python -X importtime here); none of them imports this one:

    node check                    nodecheck.main: this node's checks against its intent
    node health | node prolog     nodehealth.main: Slurm's HealthCheckProgram and Prolog
    node epilog | node retest     retest.main: root's network re-test (Slurm's Epilog, or by hand)
    node preflight                node/preflight.py main: a preflight, one task per node (srun, --members)
    report --history              nodehealth.history_main: this node's ledger of verdicts

Exit code 2 and the usage for anything else."""

from __future__ import annotations

import sys

from ansible.module_utils.ncclprep.node import check as nodecheck

USAGE = """usage: ncclprep node check [--json] [--only CONCERN ...] [--intent PATH] [--record PATH]
       ncclprep node health [--dry-run] [--max-age S] [--refresh-after S] (ncclprep node health -h)
       ncclprep node prolog [--dry-run] [--max-age S] (ncclprep node prolog -h)
       srun --ntasks-per-node=1 ncclprep node preflight [--need K] (ncclprep node preflight -h)
       ncclprep node preflight --members FILE [--rank N] [--run-id ID] (on every member at once)
       ncclprep node epilog (Slurm's Epilog) | ncclprep node retest --id ID --nodes A,B (-h)
       ncclprep report --history [--json]"""


def main(argv: list[str] | None = None) -> int:
    """Route ``argv`` (default sys.argv[1:], e.g. ``["node", "check", "--json"]``) to its command;
    returns that command's exit code, 2 with the usage for an unknown one. The probes' commands
    (preflight, retest) first re-run under the torch runtime's interpreter when this one lacks
    torch (nodecheck.reexec_under_torch)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:2] in (["node", "health"], ["node", "prolog"]):  # Slurm's HealthCheckProgram and Prolog
        from ansible.module_utils.ncclprep.slurm import health as nodehealth

        return nodehealth.main(args[2:], args[1])
    if args[:2] == ["report", "--history"]:  # the ledger of this node's verdicts
        from ansible.module_utils.ncclprep.slurm import health as nodehealth

        return nodehealth.history_main(args[2:])
    if args[:2] in (["node", "epilog"], ["node", "retest"]):  # root's network re-test (Slurm's Epilog)
        if args[1] == "retest":
            nodecheck.reexec_under_torch(args)
        from ansible.module_utils.ncclprep.slurm import retest

        return retest.main(args[2:], args[1])
    if args[:2] == ["node", "preflight"]:  # a preflight, one task per node
        nodecheck.reexec_under_torch(args)
        from ansible.module_utils.ncclprep.node import preflight

        return preflight.main(args[2:])
    if args[:2] == ["node", "check"]:
        return nodecheck.main(args[2:])
    print(USAGE, file=sys.stderr)
    return nodecheck.EXIT_USAGE
