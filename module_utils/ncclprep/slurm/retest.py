"""``ncclprep node epilog`` and ``ncclprep node retest``: root's own network re-test, the only path
from a network fault to a Slurm drain (issue 25; docs/slurm.md, "Verdicts a job's user cannot forge").

A job's preflight (node/preflight.py) runs as the job's user, so what it finds is a claim, not a
verdict. When its checks failed on the network (slurm.is_network: net.*, collective.*, torchrun.*)
each of its tasks leaves the claim on its node: ``CLAIMS_DIR/<job id>/claim.json``
(``write_claim``). The job's folder is made by slurm.conf's Prolog (root, ``prolog_claims``) for
the job's user alone (0700) in root's CLAIMS_DIR (0755), so no one can take a future job's name or
leave anything there that outlives the job.

``ncclprep node epilog`` is slurm.conf's Epilog: root, on every node of a job as the job ends.
It takes the job's claim (``take_claim``: a regular file owned by the job's user, SLURM_JOB_UID, in
a folder of theirs, at most CLAIM_MAX_BYTES read) and removes the job's folder whole; when there is
no claim, or it names no network fault, it is done (the usual case: one open). Otherwise the nodes
of the job (SLURM_NODELIST in an Epilog's environment) re-test their network among themselves as
root (``retest``):

1. every node joins a store on the job's first node (its data-plane address, port
   ``net.store_port + 3``, RETEST_PORT_OFFSET), sealed with a key derived from the munge key
   (``retest_key``: every Slurm node holds it, only root reads it), and says whether it takes
   part: a node that re-tested less than ``--min-interval`` seconds ago declines, so a forged
   claim costs at most one probe per node and interval, never a drain of its own;
2. the first node waits ``--join-timeout`` seconds and posts who joined (netutil.rendezvous: every
   node sees the same); none takes part when any node declined (every node must agree on the
   ranks);
3. those nodes run the network probe (netprobe.probe) with the intent's ``job.net`` settings,
   validate.yml's, and post their results; the first node judges them with validate.yml's net.*
   checks (checks.network.check_network) and posts the rows. Every node keeps what it posted
   (netutil.Keeper) until it is read, and the first node keeps what it read: a process on a member
   node that deletes a key only delays the step (review N4); one that writes a value without the
   key is found out (StoreTampered) and the run judges no one;
4. each node takes the failed rows that judge it (verdict_of: slurm.judged; UNKNOWN for a fabric
   fault or a tampered store) as its network verdict and acts on it through nodehealth.act (its
   ledger entry, the run ``retest <id> <time>``; slurm.decide with scope ``network``; the
   breaker's mark): two strikes with different partners within the window drain it; a pass
   resumes only a network drain of ncclprep's.

``ncclprep node retest --id ID --nodes A,B,...`` is the same re-test started by root by hand on each
of the nodes at once (pdsh, clush, an Ansible ad-hoc run): how a node drained for the network comes
back once fixed, since a drained node runs no job and so no Epilog. It skips the rate limit.

Both print one line and exit 0 whatever happened (the Epilog's wrapper too: Slurm drains a node
whose Epilog fails); ``retest`` exits 1 when this node failed the re-test, 3 when it could not run.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import hmac
import json
import os
import re
import socket
import sys
import time
import traceback
from collections.abc import Mapping

from ansible.module_utils.ncclprep.atomic import write_atomic
from ansible.module_utils.ncclprep.netutil import (
    Keeper,
    StoreTampered,
    await_one,
    await_readers,
    await_values,
    open_signed_store,
    rendezvous,
)
from ansible.module_utils.ncclprep.node import check as nodecheck
from ansible.module_utils.ncclprep.node.hostinfo import subprocess_runner
from ansible.module_utils.ncclprep.slurm import rules as slurm
from ansible.module_utils.ncclprep.slurm.claims import CLAIMS_DIR, TAKEN_DIR, hand_over, take_claim, taken_over

#: When this node last took part in a re-test (root's; its mtime is the time).
STAMP_FILE = "/var/lib/ncclprep/retest-last"
#: Every Slurm node's shared secret, readable by root (and munge) only.
MUNGE_KEY = "/etc/munge/munge.key"
#: The re-test's store listens on the network probe's store port plus this (the job's is +2).
RETEST_PORT_OFFSET = 3
#: Default seconds between two re-tests of one node (slurm_health_retest_interval).
MIN_INTERVAL_S = 300.0
#: Default seconds the first node waits for the others to join (the Epilogs of a job start together).
JOIN_TIMEOUT_S = 20.0
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_COULD_NOT_RUN = 0, 1, 2, 3
#: Set by the Epilog for its own second run under the torch runtime: look in TAKEN_DIR for the claim
#: the first run took and believed. The variable only says where to look: the claim itself passes
#: through a root-only file, so a variable in the Epilog's environment skips no check (review N14).
ENV_TAKEN = "NCCLPREP_CLAIM_TAKEN"
_RUN_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
#: The re-test store's listener (rank 0), kept open until the process ends (retest).
_KEEP: list = []


class CouldNotRun(Exception):
    """The re-test cannot run here (no key, no intent, no store): nothing is judged."""


def retest_key(secret: bytes, run_id: str) -> str:
    """The re-test's store key: HMAC-SHA256 of ``run_id`` under ``secret`` (the munge key), hex,
    32 characters; every node of the re-test derives the same one, no job's user can."""
    return hmac.new(secret, b"ncclprep-retest\0" + run_id.encode(), hashlib.sha256).hexdigest()[:32]


def due(stamp: str, min_interval: float, now: float) -> tuple[bool, float | None]:
    """``(this node may re-test now, seconds since its last re-test or None)``: when it last took
    part (``stamp``'s mtime) lies ``min_interval`` seconds back or more, or it never did."""
    try:
        age = now - os.path.getmtime(stamp)
    except OSError:
        return True, None
    return age >= min_interval, age


def verdict_of(rows: list[Mapping], host: str, hosts: list[str], run: str) -> dict:
    """This node's network verdict from the re-test's net.* ``rows`` (slurm.node_verdict's shape
    plus ``run`` and ``scope: network``): FAIL with the failed rows that judge ``host``
    (slurm.judged); UNKNOWN when the run's failures are a fabric or membership fault (slurm.fabric:
    several nodes blamed at once, a row naming no host), when the probe's store was tampered with
    or lost (a net.run row naming no host with ``measured.store_state``), or when this node was not
    measured (a net.run row names it: it did not take part or vanished,
    which anyone on a member node can feign by deleting a store key; review N4); else PASS."""
    from ansible.module_utils.ncclprep.checks import BAD

    base = {"run": run, "scope": "network"}
    why = slurm.malformed(rows)
    if why:
        return dict(base, status="UNKNOWN", failed=[], why=why)
    store = next((r for r in rows if r.get("id") == "net.run" and not r.get("hosts")
                  and isinstance(r.get("measured"), dict) and r["measured"].get("store_state")), None)
    if store is not None:  # the probe's store tampered with or lost (netutil): the run judged no one
        return dict(base, status="UNKNOWN", failed=[], why=f"the re-test's probe store: {store.get('message')}")
    bad = [dict(r) for r in rows if r.get("status") in BAD]
    why = slurm.fabric([r for r in bad if slurm.is_network(r)])
    if why:
        return dict(base, status="UNKNOWN", failed=[], why=f"{why}: a fabric or membership fault, no node's")
    unmeasured = [r for r in bad if r.get("id") in slurm.NOT_VERDICTS and r.get("hosts")
                  and any(host in slurm.name_ends(str(n)) for n in r["hosts"])]
    if unmeasured:
        return dict(base, status="UNKNOWN", failed=[],
                    why=f"{host} was not measured ({unmeasured[0].get('id')}: {unmeasured[0].get('message')})")
    failed = slurm.judged(bad, host)
    warned = [dict(r) for r in rows if r.get("status") == "WARN"]
    status = "FAIL" if failed else "WARN" if slurm.degraded(warned, host) else "PASS"
    return dict(base, status=status, failed=failed, warned=warned, why=None)


def retest(doc: dict, nodes: list[str], me: str, run_id: str, key: str, may: bool, join_timeout: float,
           say) -> tuple[str, list[str], list[dict] | None]:
    """Steps 1-3 of the module docstring on this node: ``(this node's member name, the members that
    took part, the net.* rows)``; rows None when the re-test did not run (a node declined, fewer
    than two joined).
    ``nodes``: the Slurm names in the job's order, ``me`` this node's; ``may``: this node's rate
    limit lets it take part. Raises CouldNotRun (no job settings, the store not reached or tampered
    with)."""
    from ansible.module_utils.ncclprep.node.preflight import job_members

    settings = doc.get("job")
    if not isinstance(settings, dict):
        raise CouldNotRun(f"{nodecheck.INTENT_FILE}: no job settings: run site.yml again with this ncclprep")
    try:
        names, addresses = job_members(settings["members"], nodes)
    except nodecheck.CouldNotRun as exc:
        raise CouldNotRun(str(exc)) from None
    rank, world = nodes.index(me), len(nodes)
    port = settings["net"]["store_port"] + RETEST_PORT_OFFSET
    try:
        store, listener = open_signed_store(rank, world, addresses[0], port, key, join_timeout + 30)
        # held for the life of the process: dropped at return, the socket object closed the
        # listener's descriptor under the store's server thread, and the node's lock file (opened
        # next, same number) then failed with EBADF
        _KEEP.append(listener)
    except Exception as exc:  # noqa: BLE001  (torch raises RuntimeError, OSError, DistStoreError ...)
        raise CouldNotRun(f"the re-test's store on {names[0]} ({addresses[0]}:{port}): {exc}") from None
    try:
        return _steps(store, rank, world, names, addresses, settings, run_id, key, may, join_timeout, say)
    except StoreTampered as exc:
        raise CouldNotRun(f"the re-test's store on {names[0]} was tampered with: {exc}") from None


def _steps(store, rank, world, names, addresses, settings, run_id, key, may, join_timeout, say):
    """retest's steps 1-3 on ``store`` (the run's sealed store). Raises StoreTampered, RuntimeError
    (the store stopped answering)."""
    from ansible.module_utils.ncclprep.node.preflight import net_limits, options
    from ansible.module_utils.ncclprep.probes.net import probe as net_probe

    keeper = Keeper(store)
    joined = rendezvous(store, keeper, rank, world, "may", "1" if may else "0", join_timeout, 15)
    declined = [r for r, said in joined.items() if said != "1"]
    go = [] if declined or len(joined) < 2 else sorted(joined)
    if rank == 0 and declined:
        say(f"{', '.join(names[r] for r in declined)} re-tested less than the interval ago: no re-test")
    if rank not in go:
        if rank == 0:  # the others read who joined from this node's store: keep it up until they have
            await_readers(store, "may", len(joined) - 1, 10)
        return names[rank], [names[r] for r in go], None
    taking = [names[r] for r in go]
    o = options(settings, taking, [addresses[r] for r in go], go.index(rank), key, f"retest-{run_id}",
                [1] * len(go))["net"]
    say(f"{names[rank]}: re-testing the network with {', '.join(n for n in taking if n != names[rank])} "
        f"(deadline {o['timeout']} s)")
    keeper.post(f"net/{rank}", json.dumps(net_probe(o, None), default=str))
    if rank == 0:
        from ansible.module_utils.ncclprep.checks.network import check_network
        from ansible.module_utils.ncclprep.model import Context

        got = await_values(store, [f"net/{r}" for r in go], o["timeout"] + 30, keeper)
        records = {names[r]: ({"alive": True, "net": json.loads(got[f"net/{r}"])} if f"net/{r}" in got
                              else {"alive": False}) for r in go}
        ctx = Context(all_hosts=tuple(taking), **net_limits(settings))
        text = json.dumps(check_network(records, ctx), default=str)
        store.set("rows", text)
        # the others read the rows from this node's store: keep it up until they have them
        await_readers(store, "rows", len(go) - 1, 10)
        return names[rank], taking, json.loads(text)
    rows = json.loads(await_one(store, "rows", o["timeout"] + 60, keeper))
    store.add("rows/read", 1)
    return names[rank], taking, rows


def act(host: str, verdict: dict, opts: argparse.Namespace, ending_job: str | None,
        runner=subprocess_runner) -> str:
    """Step 4 for this node's Slurm name ``host``: nodehealth.act (the ledger entry, sinfo,
    slurm.decide with scope network, carry_out). ``ending_job``: the Epilog's job id, whose node is
    ``completing`` it (busy only while other jobs run there: nodehealth.other_jobs). Returns the
    line to print. Raises nothing."""
    from ansible.module_utils.ncclprep.slurm.health import act as act_on

    result = act_on(host, verdict, opts.ledger, runner, window=opts.strike_window, max_drained=opts.max_drained,
                    ending_job=ending_job)
    return result["line"]


def parser(command: str) -> argparse.ArgumentParser:
    """The options of ``ncclprep node epilog`` or ``ncclprep node retest``."""
    from ansible.module_utils.ncclprep.slurm.health import _seconds, add_rule_options

    if command == "epilog":
        p = argparse.ArgumentParser(
            prog="ncclprep node epilog", allow_abbrev=False,
            description="Slurm's Epilog (root): when the ending job's preflight claimed a network fault, re-test "
                        "the network among the job's nodes as root and act on the result (ledger, drain, resume).",
            epilog="exit code: always 0 (Slurm drains a node whose Epilog fails); the line says what happened.")
        p.add_argument("--claims", default=CLAIMS_DIR, help=f"the claims folder (default {CLAIMS_DIR})")
        p.add_argument("--min-interval", type=_seconds, default=MIN_INTERVAL_S,
                       help=f"seconds between two re-tests of this node (default {MIN_INTERVAL_S:g})")
    else:
        p = argparse.ArgumentParser(
            prog="ncclprep node retest", allow_abbrev=False,
            description="Root's network re-test among NODES, started on each of them at once: this node's verdict "
                        "enters its ledger; it drains on the second strike and resumes a network drain on a pass.",
            epilog="exit codes: 0 passed (or the re-test did not run: a node declined); 1 this node failed; "
                   "2 bad usage; 3 could not run.")
        p.add_argument("--id", required=True, help="the re-test's name, the same on every node (letters, digits, "
                                                   "_.:-)")
        p.add_argument("--nodes", required=True, help="the Slurm names of the nodes, comma-separated, the same "
                                                      "order on every node (the first hosts the store)")
    p.add_argument("--node", default=None, help="Slurm's name of this node (default $SLURMD_NODENAME, then the "
                                                "host name)")
    p.add_argument("--join-timeout", type=_seconds, default=JOIN_TIMEOUT_S,
                   help=f"seconds the first node waits for the others (default {JOIN_TIMEOUT_S:g})")
    p.add_argument("--intent", default=nodecheck.INTENT_FILE, help="the intent document")
    add_rule_options(p)
    p.add_argument("--munge-key", default=MUNGE_KEY, help=f"the shared secret (default {MUNGE_KEY})")
    p.add_argument("--stamp", default=STAMP_FILE, help=argparse.SUPPRESS)
    p.add_argument("--taken", default=TAKEN_DIR, help=argparse.SUPPRESS)
    return p


def _say(text: str) -> None:
    print(f"ncclprep retest: {datetime.datetime.now():%H:%M:%S} {text}", file=sys.stderr, flush=True)


def run(opts: argparse.Namespace, nodes: list[str], me: str, run_id: str, may: bool,
        ending_job: str | None) -> tuple[int, str]:
    """The re-test and its act for this node: ``(exit code, line)``; ``ending_job``: the Epilog's
    job id (None for ``node retest``). The rate limit's stamp is written once the re-test ran (a
    run that could not start uses up no interval: review N13). Raises nothing."""
    try:
        with open(opts.munge_key, "rb") as fh:
            key = retest_key(fh.read(), run_id)
        doc = nodecheck.intent_document(opts.intent)
        if not isinstance(doc.get("job"), dict):
            raise CouldNotRun(f"{opts.intent}: no job settings: run site.yml again with this ncclprep")
        member, taking, rows = retest(doc, nodes, me, run_id, key, may, opts.join_timeout, _say)
        if may and rows is not None:
            os.makedirs(os.path.dirname(opts.stamp) or ".", mode=0o700, exist_ok=True)
            write_atomic(opts.stamp, f"{run_id}\n", mode=0o600)
    except (OSError, CouldNotRun, nodecheck.CouldNotRun) as exc:
        return EXIT_COULD_NOT_RUN, f"{me}: UNKNOWN ({exc}): nothing done"
    except Exception as exc:  # noqa: BLE001  (a crash, a store gone mid-run: say so, never a traceback alone)
        print(f"ncclprep retest {me}: crashed:\n{traceback.format_exc()}", file=sys.stderr)
        return EXIT_COULD_NOT_RUN, f"{me}: UNKNOWN (the re-test crashed: {type(exc).__name__}: {exc}): nothing done"
    if rows is None:
        return EXIT_OK, f"{me}: no re-test ({len(taking)} of {len(nodes)} nodes to re-test): nothing done"
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    verdict = verdict_of(rows, member, taking, f"retest {run_id} {stamp}")
    line = act(me, verdict, opts, ending_job)
    return (EXIT_FAILED if verdict["status"] == "FAIL" else EXIT_OK), f"{me}: re-test {verdict['status']}: {line}"


def main(argv: list[str], command: str = "retest", env: Mapping[str, str] | None = None) -> int:
    """``ncclprep node epilog|retest [options]`` (``argv`` without ``node <command>``): the exit code."""
    env = os.environ if env is None else env
    try:
        opts = parser(command).parse_args(argv)
    except SystemExit as exc:
        return EXIT_OK if exc.code == 0 or command == "epilog" else EXIT_USAGE
    me = opts.node or env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    if command == "epilog":
        # Slurm 22.05 hands its Epilog SLURM_NODELIST (no SLURM_JOB_NODELIST; seen on the local cluster)
        job_id = env.get("SLURM_JOB_ID", "")
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
        try:
            uid = int(env.get("SLURM_JOB_UID", ""))
        except ValueError:
            print(f"ncclprep epilog {me}: not run by Slurm's Epilog (no SLURM_JOB_UID): nothing done")
            return EXIT_OK
        # the second run under torch (set below) takes the claim the first believed from root's folder
        why = taken_over(job_id, opts.taken) if env.get(ENV_TAKEN) else None
        if not why:
            claim, why = take_claim(job_id, uid, opts.claims)
            if claim is None:
                print(f"ncclprep epilog {me}: job {job_id}: {why}: nothing to re-test")
                return EXIT_OK
            try:
                hand_over(job_id, why, opts.taken)
            except (OSError, ValueError) as exc:
                print(f"ncclprep epilog {me}: job {job_id}: {why}; cannot hand it over ({exc}): nothing done")
                return EXIT_OK
            nodecheck.reexec_under_torch(["node", "epilog", *argv], {ENV_TAKEN: "1"})
            taken_over(job_id, opts.taken)  # torch is here: this run goes on; the hand-over is not needed
        from ansible.module_utils.ncclprep.node.preflight import hostnames

        try:
            nodes = hostnames(nodelist)
        except nodecheck.CouldNotRun as exc:
            print(f"ncclprep epilog {me}: job {job_id}: {why}; {exc}: nothing done")
            return EXIT_OK
        if me not in nodes or len(nodes) < 2:
            told = f"the job's nodes {nodelist}" if nodelist else "no node list from Slurm (SLURM_NODELIST)"
            print(f"ncclprep epilog {me}: job {job_id}: {why}; {told}: no re-test with this node")
            return EXIT_OK
        may, age = due(opts.stamp, opts.min_interval, time.time())
        _, line = run(opts, nodes, me, f"job-{job_id}", may, job_id)
        print(f"ncclprep epilog job {job_id}: {why}; {line}")
        return EXIT_OK
    if not _RUN_ID.match(opts.id):
        print(f"ncclprep retest {me}: --id={opts.id!r}: valid: 1-64 letters, digits, _ . : -", file=sys.stderr)
        return EXIT_USAGE
    nodes = [n for n in opts.nodes.split(",") if n]
    if me not in nodes or len(nodes) < 2 or len(set(nodes)) != len(nodes):
        print(f"ncclprep retest {me}: --nodes={opts.nodes!r}: valid: two or more distinct Slurm names, this node's "
              "among them", file=sys.stderr)
        return EXIT_USAGE
    code, line = run(opts, nodes, me, opts.id, True, None)
    print(f"ncclprep retest {line}")
    return code
