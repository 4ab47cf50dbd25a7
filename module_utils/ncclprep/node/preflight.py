"""``ncclprep node preflight``: the preflight of a set of nodes, one task on each, from any launcher.

    srun --ntasks-per-node=1 ncclprep node preflight [--need K] [--report-dir DIR] [--hostfile PATH]
    pdsh -w node[1-3] ncclprep node preflight --members FILE [--rank N] [--run-id ID] [...]
    ncclprep node preflight --nodes node1,node2,node3 --rank N [--settings JSON] [...]

One task per node, no Ansible and no SSH. The nodes and their ranks come from the launcher, one of:

- a member list (``--members FILE`` or NCCLPREP_MEMBERS: one member name a line, in rank order;
  blank lines and ``#`` comments skipped, anything after the name ignored, so an MPI hostfile's
  ``node1 slots=8`` reads as node1). This node's rank is ``--rank`` (else NCCLPREP_RANK, else
  JOB_COMPLETION_INDEX, a Kubernetes indexed Job's), or, given none, its own place in the list
  (the host name site.yml installed the intent under). The run's id (``--run-id``, else
  NCCLPREP_RUN_ID, else one drawn from the list) seeds the probe; every node must be given the same
  list and id. Ansible's validate.yml, pdsh, clush or a Kubernetes indexed Job start it this way.
  ``--nodes a,b,c`` gives the same list inline.
- Slurm's environment, without ``--members``: SLURMD_NODENAME, its index in SLURM_STEP_NODELIST
  (or SLURM_JOB_NODELIST) expanded by ``scontrol show hostnames``; the run's id is the job id.

Everything else comes from the intent document site.yml installed on the
node (nodecheck.INTENT_FILE; its ``job`` key holds the members' data-plane addresses, the launcher
and validate.yml's preflight_* settings, so both measure and judge alike; ``--settings`` changes
those settings for one run, as validate.yml's -e does: with_settings). Each task:

1. joins the job's store on the first node (data-plane address, port ``net.store_port + 2``,
   JOB_PORT_OFFSET) and posts its GPU count (its ranks: one per GPU, one on a CPU host); the
   first node waits ``probe.join_timeout`` seconds for them and posts who takes part, so that a
   node that cannot run (no intent, no torch, down) costs the others that wait, not a hang: the
   rest measure among themselves and the report names it (host.reachable);
2. reads its node as ``ncclprep node check`` does (facts against the intent; the names it resolves
   and connects to narrowed to the job's nodes), logs in to its peers over SSH (ssh.trust) and,
   started as root, holds the files site.yml manages against its record of them (drift.files);
3. runs the network probe (probes/net.py probe), the collectives and their blame
   (probes/job.py host_collectives), then the template training job through the launcher on the
   job's nodes still there after them (still_here; ddp_smoke.run_job with NCCLPREP_HOSTFILE), each
   under its own deadline;
4. posts its record (model.HostRecord) to the store.

The first node waits for every record (a node that posts none by the deadline is reported not
alive), evaluates them with validate.yml's checks (checks.evaluate) and writes the same reports
(cluster.json, summary.md, report.html, junit.xml) under ``--report-dir``; it posts the verdict,
and every task prints it and exits with its code. With ``--need K`` the nodes no failed check
names are the vetted ones: the first node prints the vetted and excluded lists and writes the
first K vetted, one a line, to ``--hostfile`` (for NCCLPREP_HOSTFILE of ``ncclprep-torchrun``
and ``srun --nodelist``).

Everything in the store is sealed with the job's secret (netutil.signed_store, keyed by
``NCCLPREP_PREFLIGHT_TOKEN`` from the environment, which srun passes to every task; the example
batch script draws one; or read once from ``--token-file``, a file only its owner can read, which
the engine removes: validate.yml's way, since a variable in an Ansible task's environment sits on
a shell's command line for a moment, where any local user's ``ps`` reads it). Without it the key
is derived from the job id, which seals nothing against a member that knows the id: only the
firewall (members only) guards the store then, and the training smoke job is not run
(torchrun.smoke SKIP, SMOKE_UNSEALED): the secret is also its
rendezvous guard's nonce, and a public one would let anyone prove a squatted rendezvous port.

It runs as the job's user: what it finds is that user's claim. It never drains a node: when a
network check failed under Slurm, every task leaves the claim on its node (claims.write_claim) and
the job's Epilogs re-test the network as root (retest.py); only what root measured reaches Slurm.
A run from a member list leaves no claim (no Slurm job, no Epilog to read it).

The report's ``launch`` key (docs/report-schema.md) says which launcher started the run, its id
and its nodes.

Exit codes: 0 passed (with ``--need``: at least K nodes vetted), 1 a check failed or hung (with
``--need``: fewer than K vetted), 2 bad usage (not in a job step, one task per node not kept, a
member list unreadable, empty, with a name twice, or a rank outside it or naming another node),
3 could not run (no intent, the first node's store or verdict not reached by its deadline).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Mapping

from ansible.module_utils.ncclprep.atomic import read_once, write_atomic
from ansible.module_utils.ncclprep.checks import BAD, evaluate
from ansible.module_utils.ncclprep.drift import check_record, inventory_row
from ansible.module_utils.ncclprep.netutil import (
    Keeper,
    StoreTampered,
    await_readers,
    missing_keys,
    open_signed_store,
    rendezvous,
)
from ansible.module_utils.ncclprep.node import check as nodecheck
from ansible.module_utils.ncclprep.node import settings as preflight_settings
from ansible.module_utils.ncclprep.slurm.claims import CLAIMS_DIR, claim_of, write_claim

EXIT_PASS, EXIT_FAILED, EXIT_USAGE, EXIT_COULD_NOT_RUN = 0, 1, 2, 3
ENV_TOKEN = "NCCLPREP_PREFLIGHT_TOKEN"
#: A launcher that is not Slurm names the members, this node's rank and the run's id here (or
#: with --members, --rank, --run-id).
ENV_MEMBERS, ENV_RANK, ENV_RUN_ID = "NCCLPREP_MEMBERS", "NCCLPREP_RANK", "NCCLPREP_RUN_ID"
#: The index Kubernetes gives each pod of an indexed Job (its rank when no other is given).
ENV_K8S_INDEX = "JOB_COMPLETION_INDEX"
#: This run's settings when --settings is not given (srun hands a job's environment to every task,
#: so a batch job sets them once, e.g. smaller collective sizes; the same JSON as --settings).
ENV_SETTINGS = "NCCLPREP_PREFLIGHT_SETTINGS"
#: The job's store listens on the network probe's store port plus this (validate.yml's ports:
#: the probe's store and its listener, +0 and +1).
JOB_PORT_OFFSET = 2
#: Seconds the first node waits for the other nodes' records after its own is done, and the
#: others for its verdict after theirs: the report's evaluation and writing, and skew.
GATHER_SLACK_S = 60.0
#: Seconds the first node keeps its store up for the others to read the verdict.
VERDICT_WAIT_S = 2.0
#: Deadline of ``scontrol show hostnames``, seconds.
SCONTROL_TIMEOUT = 10.0
#: Why the training smoke job does not run without the job's secret: the launcher's rendezvous
#: guard is keyed by it, and the key derived from the job id in its place is one every user can
#: compute, so a process squatting the rendezvous port could prove itself the job's (review N5).
SMOKE_UNSEALED = (f"the training smoke job was not run: {ENV_TOKEN} is not set, and the key derived from the job "
                  "id in its place is public, so the launcher's rendezvous guard would vouch for any store on the "
                  "port")
SMOKE_REMEDIATION = (f"export a random {ENV_TOKEN} before srun, which hands it to every task (the example batch job "
                     f"does): export {ENV_TOKEN}=\"$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')\"")


class Usage(Exception):
    """Not run as a step of one task per node (exit 2); the message says what to run."""


def hostnames(nodelist: str) -> list[str]:
    """Slurm's node list expression (``node[1-3],gpu7``) expanded by ``scontrol show hostnames``
    (plain names, ``a,b``, need no scontrol). Raises nodecheck.CouldNotRun when scontrol fails or
    passes its deadline."""
    if "[" not in nodelist:
        return [n for n in nodelist.split(",") if n]
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                             timeout=SCONTROL_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise nodecheck.CouldNotRun(f"scontrol show hostnames {nodelist}: {exc}") from None
    if out.returncode != 0:
        raise nodecheck.CouldNotRun(f"scontrol show hostnames {nodelist}: {out.stderr.strip() or out.returncode}")
    return out.stdout.split()


def job_from_env(env: Mapping[str, str], expand: Callable[[str], list[str]] | None = None) -> dict:
    """This task's place in the job step from Slurm's environment: ``{job_id, nodes (the step's
    node names in Slurm's order), rank (this node's index in them), node}``. ``expand``: the node
    list expression's names (None: ``hostnames``). Raises Usage outside a job step, with more tasks than nodes or with
    this node not in the list."""
    missing = [k for k in ("SLURM_JOB_ID", "SLURMD_NODENAME") if not env.get(k)]
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
    if missing or not nodelist:
        raise Usage(f"{', '.join(missing) or 'SLURM_JOB_NODELIST'} not set: run it as a job step on every node, "
                    "srun --ntasks-per-node=1 ncclprep node preflight")
    tasks = env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS")
    nnodes = env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES")
    if tasks and nnodes and tasks != nnodes:
        raise Usage(f"{tasks} tasks on {nnodes} nodes: the preflight runs one task per node, "
                    "srun --ntasks-per-node=1 ncclprep node preflight")
    nodes = (expand or hostnames)(nodelist)
    me = env["SLURMD_NODENAME"]
    if me not in nodes:
        raise Usage(f"this node, {me}, is not in the step's nodes {nodelist}")
    return {"job_id": env["SLURM_JOB_ID"], "nodes": nodes, "rank": nodes.index(me), "node": me, "launcher": "slurm"}


def read_members(path: str) -> list[str]:
    """The member names of the file at ``path``, in rank order (module docstring: one name a line,
    blank lines and ``#`` comments skipped, what follows the name ignored). Raises Usage naming the
    file when it cannot be read, names nobody, or names someone twice."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(1 << 20)
    except (OSError, UnicodeDecodeError) as exc:
        raise Usage(f"--members {path}: {exc}") from None
    names = [line.split("#", 1)[0].split()[0] for line in text.splitlines() if line.split("#", 1)[0].split()]
    if not names:
        raise Usage(f"--members {path}: no member named (one name a line, in rank order)")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise Usage(f"--members {path}: {', '.join(twice)} listed twice (one task per node)")
    return names


def parse_nodes(text: str) -> list[str]:
    """``--nodes``' member names, comma-separated in rank order (``node1,node2,node3``). Raises
    Usage, as read_members does, when it names nobody or someone twice."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise Usage(f"--nodes {text!r}: no member named (names, comma-separated in rank order)")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise Usage(f"--nodes: {', '.join(twice)} listed twice (one task per node)")
    return names


#: What --settings may change (node/settings.py SETTABLE: section -> key -> its preflight_* variable):
#: the intent's ``job`` sections (validate.yml's preflight_* values as site.yml recorded them) and the
#: node reading's validate-time options (``node``). Members, launcher, script, CPU binding, the MTU and
#: ssh's user, key and known_hosts are site.yml's and stay the intent's.
SETTABLE = preflight_settings.SETTABLE


def _same_kind(was: object, value: object) -> bool:
    """Whether ``value`` may replace ``was``: either is null, both are numbers, or one type."""
    number = (int, float)
    if was is None or value is None:
        return True
    if isinstance(was, number) and isinstance(value, number):
        return not isinstance(was, bool) and not isinstance(value, bool) or type(was) is type(value)
    return type(was) is type(value)


def with_settings(doc: dict, text: str | None) -> dict:
    """The intent document ``doc`` with ``--settings`` applied: ``text`` is a JSON object of
    sections (SETTABLE), each an object of the keys to change, e.g. ``{"probe": {"timeout": 36},
    "smoke": {"enabled": false}, "node": {"dataset_path": "/data"}}`` (a launcher's own values for
    this run, as validate.yml's -e gives them). A copy; ``doc`` is left as it is. ssh null in the
    intent (the ssh_trust concern off) stays null. Raises Usage naming the key
    and value that is not JSON, not a known section or key, or not of the intent's kind (null,
    a number, a string, a boolean, a list)."""
    if not text:
        return doc
    try:
        given = json.loads(text)
    except ValueError as exc:
        raise Usage(f"--settings is not JSON: {exc}") from None
    if not isinstance(given, dict):
        raise Usage(f"--settings {text[:80]!r}: a JSON object of sections ({', '.join(SETTABLE)}) expected")
    out = dict(doc, job=dict(doc.get("job") or {}), node=dict(doc.get("node") or {}))
    for section, values in given.items():
        if section not in SETTABLE:
            raise Usage(f"--settings: unknown section {section!r}; valid: {', '.join(SETTABLE)}")
        if not isinstance(values, dict):
            raise Usage(f"--settings: {section} is {values!r}, not an object of the keys to change")
        mine = out["node"] if section == "node" else out["job"].get(section)
        if mine is None and section == "ssh":
            continue
        mine = dict(mine or {})
        for key, value in values.items():
            allowed = SETTABLE[section]
            if key not in allowed:
                raise Usage(f"--settings: unknown key {section}.{key}; valid: {', '.join(sorted(allowed))}")
            if not _same_kind(mine.get(key), value):
                raise Usage(f"--settings: {section}.{key}={json.dumps(value)} ({allowed[key]}): the intent's is "
                            f"{json.dumps(mine.get(key))}, of another kind")
            mine[key] = value
        if section == "node":
            out["node"] = mine
        else:
            out["job"][section] = mine
    return out


def nodes_digest(nodes: list[str]) -> str:
    """12 hex characters of SHA-256 over the node names in rank order, one a line: the same on
    every node given the same list (a run's default id, and part of run_key)."""
    return hashlib.sha256("\n".join(nodes).encode()).hexdigest()[:12]


def job_from_members(nodes: list[str], me: str, rank: str | int | None, run_id: str | None) -> dict:
    """This task's place in a run from a member list, in job_from_env's shape (``launcher``:
    ``members``). ``nodes``: read_members' names; ``me``: this node's member name (the intent's
    host); ``rank``: the launcher's rank of this task (None: ``me``'s place in ``nodes``);
    ``run_id``: None for one drawn from the list (the same on every node). A name matches ``me``
    in full or by its short name (job_members' rule). Raises Usage when the rank is not an integer
    in range, names another node, or when ``me`` is not listed and no rank is given."""
    def same(name: str) -> bool:
        return name == me or name.split(".")[0] == me.split(".")[0]

    if rank is None or rank == "":
        mine = [i for i, n in enumerate(nodes) if same(n)]
        if not mine:
            raise Usage(f"this node, {me}, is not in the member list ({', '.join(nodes)}): give it its rank "
                        f"(--rank or {ENV_RANK}) or list it")
        index = mine[0]
    else:
        try:
            index = int(rank)
        except ValueError:
            raise Usage(f"rank {rank!r}: valid: an integer 0..{len(nodes) - 1}") from None
        if not 0 <= index < len(nodes):
            raise Usage(f"rank {index}: valid: 0..{len(nodes) - 1} (the member list names {len(nodes)})")
        if not same(nodes[index]):
            raise Usage(f"rank {index} is {nodes[index]} in the member list, but this node is {me}: every node "
                        "must be given its own rank")
    run_id = run_id or "m" + nodes_digest(nodes)
    return {"job_id": run_id, "nodes": list(nodes), "rank": index, "node": nodes[index], "launcher": "members"}


def job_members(members: Mapping[str, str], nodes: list[str]) -> tuple[list[str], list[str]]:
    """The ncclprep member names and data-plane addresses of the job's Slurm ``nodes``, in their
    order. ``members``: the intent's ``job.members`` (member -> address). A Slurm name matches the
    member of that name, else the one whose short name (before the first dot) it is, or whose short
    name it is. Raises nodecheck.CouldNotRun naming the nodes that match no member."""
    short = {}
    for name in members:
        short.setdefault(name.split(".")[0], name)
    names, unknown = [], []
    for node in nodes:
        name = node if node in members else short.get(node) or short.get(node.split(".")[0])
        if name is None:
            unknown.append(node)
        else:
            names.append(name)
    if unknown:
        raise nodecheck.CouldNotRun(f"Slurm node(s) {', '.join(unknown)} are no members of this ncclprep cluster "
                                    f"({', '.join(sorted(members))}): run site.yml with them in the inventory")
    return names, [members[n] for n in names]


def read_token_file(path: str) -> str:
    """The run's secret from ``path`` (its first line), and the file removed, so that the secret
    stays in this process alone (atomic.read_once, private). Raises Usage, before anything is read,
    when ``path`` is a link or not a regular file, belongs to another user than this process's, or
    its group or others may read or write it (someone else could have read or planted it), or it
    holds no secret."""
    try:
        data = read_once(path, 4096, private=True)
    except OSError as exc:
        raise Usage(f"--token-file {path}: {exc.strerror} (a regular file, not a link, is needed)") from None
    except ValueError as exc:
        raise Usage(f"--token-file {path}: {exc}") from None
    token = (data.decode("utf-8", "replace").splitlines() or [""])[0].strip()
    if not token:
        raise Usage(f"--token-file {path}: empty (the run's secret on its first line)")
    return token


def job_token(env: Mapping[str, str], job_id: str) -> tuple[str, bool]:
    """The key that seals the job's stores: ``(ENV_TOKEN's value, True)``, or when it is not set
    ``(a digest of the job id, False)`` (module docstring: it seals nothing then)."""
    token = env.get(ENV_TOKEN)
    if token:
        return token, True
    return hashlib.sha256(f"ncclprep-preflight-{job_id}".encode()).hexdigest()[:32], False


def run_key(job: Mapping) -> str:
    """What every node of one run must agree on, as one word: the run's id and a digest of its
    nodes in rank order (node/preflight.py run compares each node's with the first node's)."""
    return f"{job['job_id']}/{nodes_digest(job['nodes'])}".replace(" ", "_")


def logins(ssh: Mapping | None, me: str, taking: list[str], addresses: list[str], seed: str,
           say: Callable[[str], None]) -> list[dict] | None:
    """This node's logins to the others over SSH (check ssh.trust), as validate.yml's ssh.yml makes
    them (sshmesh.targets, run_in_rounds): ``ssh``: the intent's ``job.ssh`` (user, identity,
    known_hosts, peers, timeout in seconds, parallel) or None (the ssh_trust concern off); ``taking``
    and ``addresses``: the nodes that take part and their data-plane addresses, rank order. None, and
    ssh.trust SKIP, when the concern is off or this user cannot read the cluster key (a job's user
    under srun: the key is root's, and the logins would fail for that, not for the cluster's trust)."""
    if not ssh or len(taking) < 2:
        return None
    identity = ssh.get("identity")
    if identity and not os.access(identity, os.R_OK):
        say(f"{me}: ssh.trust not read: this user cannot read the cluster key {identity}")
        return None
    from ansible.module_utils.ncclprep.probes.sshmesh import run_in_rounds, targets

    members = {n: {"address": a} for n, a in zip(taking, addresses, strict=True)}
    peers = ssh.get("peers")
    mine = targets(members, me, taking, None if peers is None else int(peers), seed)
    say(f"{me}: {len(mine)} logins over SSH as {ssh.get('user')}")
    return run_in_rounds(mine, {"user": ssh.get("user"), "identity": identity, "port": 22,
                                "known_hosts": ssh.get("known_hosts"), "timeout": float(ssh.get("timeout") or 15),
                                "parallel": int(ssh.get("parallel") or 4), "retries": 2})


def drift_rows(path: str | None, me: str, say: Callable[[str], None], inventory: tuple = (None, None)
               ) -> list[dict] | None:
    """This node's managed files against the record site.yml wrote at ``path`` (the intent's
    ``managed``; drift.check_record): drift.check_all's rows (check drift.files), and the ``stale``
    row of drift.inventory_row when ``inventory`` (the digest site.yml recorded, the launcher's:
    ``--inventory-digest``) differ. None, and drift.files SKIP, when not run as root (the record and
    some files it names are root's: a job's user under srun), or when the record is missing or
    unusable, each said."""
    if not path:
        say(f"{me}: drift.files not read: the intent names no record of the managed files (site.yml of an "
            "older ncclprep)")
        return None
    if os.geteuid() != 0:
        say(f"{me}: drift.files not read: the managed files are compared only when started as root")
        return None
    rows, why = check_record(path)
    if why:
        say(f"{me}: drift.files not read: {why}")
        return None
    stale = inventory_row(*inventory)
    return rows + [stale] if stale else rows


def options(job: Mapping, names: list[str], addresses: list[str], rank: int, token: str, seed: str,
            local_ranks: list[int]) -> dict:
    """The network probe's and the collectives' options for this node (``net``: probes/net.py
    OPTIONS; ``probe``: probes/job.py host_collectives'), from the intent's ``job``
    settings (validate.yml's preflight_* values) and the job's nodes in rank order."""
    net, probe = job["net"], job["probe"]
    net_opts = {k: net[k] for k in ("store_port", "listen_port", "ports", "ephemeral_sample", "mtu",
                                    "latency_samples", "bandwidth_seconds", "matchings", "every_pair", "repair",
                                    "max_latency_us", "slow_z", "slow_ratio", "min_gbps", "join_timeout",
                                    "step_timeout", "connect_timeout", "timeout")}
    net_opts.update(rank=rank, hosts=names, addresses=addresses, token=token, seed=seed, ephemeral_range=None)
    binding = job.get("cpu_binding") or []
    probe_opts = {
        "rank": rank, "hosts": names, "addresses": addresses, "master_addr": addresses[0],
        "master_port": probe["port"], "backend": "auto", "ops": probe["ops"], "sizes": probe["sizes"],
        "warmup": probe["warmup"], "iters": probe["iters"], "timeout": probe["timeout"],
        "join_timeout": probe["join_timeout"], "token": token, "local_ranks": local_ranks,
        "cpu_binding": binding if len(binding) == local_ranks[rank] else [], "blame": probe["blame"],
        "blame_timeout": probe["blame_timeout"], "blame_floor": job["report"]["min_busbw_gbps"],
        "slow_z": net["slow_z"], "slow_ratio": net["slow_ratio"]}
    return {"net": net_opts, "probe": probe_opts}


def bad_settings(doc: Mapping, names: list[str], addresses: list[str], rank: int) -> None:
    """Raises Usage naming the host, every invalid setting's variable and value and what is valid
    (node/settings.py problems, on the intent document ``doc``'s settings with --settings over them),
    or an option the network probe refuses (probes/net.py bad_input: the members, their addresses,
    the MTU): before anything joins or measures."""
    from ansible.module_utils.ncclprep.probes.net import bad_input

    job = doc["job"]
    sections = {sec: (doc.get("node") or {}) if sec == "node" else job.get(sec) for sec in SETTABLE}
    found = preflight_settings.problems(sections, names[rank], job["net"].get("mtu"))
    if not found and job["net"]["enabled"]:
        why = bad_input(options(job, names, addresses, rank, "-", "-", [1] * len(names))["net"])
        found = [why] if why else []
    if found:
        raise Usage(f"the preflight settings: {'; '.join(found)}")


def net_limits(job: Mapping) -> dict:
    """The net.* checks' limits (model.Context.NET_LIMITS keys) from the intent's ``job`` settings:
    validate.yml's preflight_net_* values and the link floor ratio."""
    net = job["net"]
    return {"max_latency_us": net["max_latency_us"], "slow_z": net["slow_z"], "slow_ratio": net["slow_ratio"],
            "min_gbps": net["min_gbps"], "link_floor_ratio": job["report"]["link_floor_ratio"]}


def vetted(checks: list[dict], hosts: list[str]) -> tuple[list[str], list[str]]:
    """``(vetted, excluded)``: the hosts no failed or hung check names (report.common.host_status:
    a check naming no host of the job counts against all), in ``hosts`` order, and the others."""
    from ansible.module_utils.ncclprep.report.common import host_status  # the reports need jinja2: imported late

    bad = set()
    for check in checks:
        if check["status"] in BAD:
            bad |= {h for h, s in host_status(check, hosts).items() if s in BAD}
    return [h for h in hosts if h not in bad], [h for h in hosts if h in bad]


def verdict(checks: list[dict], hosts: list[str], need: int | None) -> dict:
    """The job's verdict: ``{status: PASS|FAIL, code: exit code, vetted, excluded, need}``. Without
    ``need`` the code is 1 on any failed or hung check; with it, 1 only when fewer than ``need``
    hosts are vetted."""
    ok, out = vetted(checks, hosts)
    status = "FAIL" if any(c["status"] in BAD for c in checks) else "PASS"
    failed = len(ok) < need if need else status != "PASS"
    return {"status": status, "code": EXIT_FAILED if failed else EXIT_PASS, "vetted": ok, "excluded": out,
            "need": need}


def planted_link(path: str) -> str | None:
    """Why the folder ``path`` must not be followed: it is a symbolic link that neither this user
    nor root made, e.g. another user's in a shared submit folder, which would have the job write
    its reports wherever that user chose (review N20); None otherwise (no link, or one of ours)."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(info.st_mode) and info.st_uid not in (os.geteuid(), 0):
        return f"{path} is a link that uid {info.st_uid} made, not this job's user: not followed"
    return None


def _gpus() -> int:
    try:
        import torch

        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # no CUDA context before the ranks fork
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001  (no torch: the probes say so in their results)
        return 0


def say(text: str) -> None:
    """One progress line on stderr, stamped (srun prefixes the task with --label)."""
    print(f"ncclprep node preflight: {datetime.datetime.now():%H:%M:%S} {text}", file=sys.stderr, flush=True)


def run(doc: dict, job: dict, opts: argparse.Namespace, env: Mapping[str, str]) -> int:
    """This node's part of the job's preflight (module docstring); returns the exit code. Raises
    nodecheck.CouldNotRun for what stops it before the measurements."""
    settings = doc.get("job")
    if not isinstance(settings, dict):
        raise nodecheck.CouldNotRun(f"{nodecheck.INTENT_FILE}: no job settings: run site.yml again with this ncclprep")
    names, addresses = job_members(settings["members"], job["nodes"])
    rank, world = job["rank"], len(names)
    me = names[rank]
    bad_settings(doc, names, addresses, rank)
    token, sealed = job_token(env, job["job_id"])
    if rank == 0 and not sealed:
        say(f"{ENV_TOKEN} not set: the job's stores are not sealed (only the firewall guards them)")
    port = settings["net"]["store_port"] + JOB_PORT_OFFSET
    try:
        # _listener: the first node's listening socket, held open for as long as its store serves
        store, _listener = open_signed_store(rank, world, addresses[0], port, token,
                                             settings["probe"]["join_timeout"] + 30)
    except Exception as exc:  # noqa: BLE001  (torch raises RuntimeError, OSError, DistStoreError ...)
        raise nodecheck.CouldNotRun(f"the job's store on {names[0]} ({addresses[0]}:{port}): {exc}") from None
    # who takes part: the nodes whose GPU count the first node read within the join deadline (one
    # list for all: every node's probes must agree on the ranks; a deleted key delays, review N4)
    join = settings["probe"]["join_timeout"]
    try:
        # each node's GPU count and the run's id as it was given: a node given another id (or
        # another member list) would run the probes and the smoke job's rendezvous apart
        posted = rendezvous(store, Keeper(store), rank, world, "gpus", f"{_gpus()} {run_key(job)}", join, 15)
    except StoreTampered as exc:
        raise nodecheck.CouldNotRun(f"the job's store on {names[0]} was tampered with: {exc}") from None
    except RuntimeError as exc:  # torch's DistStoreError: the first node's store stopped answering
        raise nodecheck.CouldNotRun(f"no word from {names[0]} on the nodes that take part: {exc}") from None
    first = posted.get(0, "").partition(" ")[2]
    apart = sorted(r for r, v in posted.items() if v.partition(" ")[2] != first)
    gpus = {r: v.partition(" ")[0] for r, v in posted.items() if r not in apart}
    present = sorted(gpus)
    if rank in apart:
        print(f"ncclprep node preflight: {me}: this node was given another run than {names[0]} (run id and member "
              f"list {run_key(job)} against {first}): every node must be given the same --members and --run-id; "
              "left out of this run, which names this node", file=sys.stderr)
        return EXIT_USAGE
    if apart:
        say(f"{me}: {', '.join(names[r] for r in apart)} given another run id or member list: left out")
    if rank not in present:
        print(f"ncclprep node preflight: {me}: joined after {names[0]}'s {join} s deadline: left out of this job's "
              "preflight, which names this node", file=sys.stderr)
        return EXIT_FAILED
    if len(present) < world:
        say(f"{me}: {', '.join(names[r] for r in range(world) if r not in present)} did not join within {join} s: "
            "measuring the others")
    fixed = settings["probe"]["local_ranks"]
    local_ranks = [int(fixed) if fixed else max(int(gpus[r]), 1) for r in present]
    taking = [names[r] for r in present]
    o = options(settings, taking, [addresses[r] for r in present], present.index(rank), token,
                f"{job['launcher']}-{job['job_id']}", local_ranks)
    world = len(present)
    record: dict = {"alive": True, "facts": None, "intent": doc.get("intent"), "ssh": None, "drift": None,
                    "net": None, "probe": None, "blame": None, "smoke": None, "counters": None}
    say(f"{me}: rank {present.index(rank)} of {world} ({', '.join(taking)}); reading the node")
    reading = {k: doc.get(k) for k in ("node", "readers", "roce_qos")}
    if reading["node"]:
        reading["node"] = dict(reading["node"], names=[e for e in reading["node"].get("names") or []
                                                        if e.get("host") in taking])
    try:
        record["facts"] = nodecheck.read_node(reading)
    except nodecheck.CouldNotRun as exc:
        say(f"{me}: the node's reading failed: {exc}")
    # after the reading, as validate.yml always did: the reading's own connection to each peer
    # (names.reachable) is the first, and retries a refusal as such (tests/faults)
    ssh = settings.get("ssh") if (settings.get("ssh") or {}).get("enabled", True) else None
    record["ssh"] = logins(ssh, me, taking, [addresses[r] for r in present], run_key(job), say)
    if (settings.get("drift") or {}).get("enabled", True):
        record["drift"] = drift_rows(doc.get("managed"), me, say, (doc.get("inventory"), opts.inventory_digest))
    from ansible.module_utils.ncclprep.probes.net import probe as net_probe
    from ansible.module_utils.ncclprep.probes.net import torch_missing

    try:
        import torch  # noqa: F401

        torch_error = None
    except ImportError as exc:
        torch_error = torch_missing(str(exc))
    if settings.get("env_file") and os.path.exists(settings["env_file"]):
        from ansible.module_utils.ncclprep.envfile import read_env_file

        os.environ.update(read_env_file(settings["env_file"]))
    if settings["net"]["enabled"] and world > 1:
        say(f"{me}: the network probe (deadline {o['net']['timeout']} s)")
        record["net"] = net_probe(o["net"], torch_error)
    if settings["probe"]["enabled"]:
        from ansible.module_utils.ncclprep.probes.collectives import rank_layout
        from ansible.module_utils.ncclprep.probes.job import host_collectives

        say(f"{me}: the collectives (deadline {o['probe']['timeout']} s)")
        record["probe"] = host_collectives(o["probe"], me, rank_layout(local_ranks, world), torch_error)
    # who is still here once the probes are done: the training job runs on them, and the first node
    # waits for their records only (a node lost since the join, frozen or gone, costs no deadline more)
    # nodes the probes lost (the network probe's gone or missing ones, the collectives' missing ones)
    gone = {h for part, key in (("net", "gone_hosts"), ("net", "missing_hosts"), ("probe", "missing_hosts"))
            for h in (record[part] or {}).get(key) or []}
    try:
        here, lost = still_here(store, present, rank, settings["probe"]["join_timeout"],
                                [present.index(r) for r in present if names[r] in gone]), None
    except (StoreTampered, RuntimeError) as exc:
        here, lost = present, f"no word from {names[present[0]]} on who is still here: {exc}"
    if len(here) < len(present) and rank in here:
        say(f"{me}: {', '.join(names[r] for r in present if r not in here)} not there after the probes")
    if settings["smoke"]["enabled"] and settings.get("launcher") and not sealed:
        say(f"{me}: the training smoke job not run: {ENV_TOKEN} not set")
        record["smoke"] = {"status": "SKIP", "error": SMOKE_UNSEALED, "host": me}
    elif settings["smoke"]["enabled"] and settings.get("launcher"):
        record["smoke"] = _smoke(settings, job, names, here, rank, token, lost)
    netdev = ((record["facts"] or {}).get("data_plane") or {}).get("interface")
    if netdev:
        from ansible.module_utils.ncclprep.portstate import read_counters

        record["counters"] = read_counters("/sys", [netdev])
    store.set(f"record/{rank}", json.dumps(record, default=str))
    if rank == 0:
        return _judge(store, record, names, here, settings, opts, job)
    say(f"{me}: done; waiting for {names[0]}'s verdict")
    if missing_keys(store, ["verdict"], GATHER_SLACK_S * 2):
        print(f"ncclprep node preflight: {me}: no verdict from {names[0]} within {GATHER_SLACK_S * 2:g} s",
              file=sys.stderr)
        return EXIT_COULD_NOT_RUN
    result = json.loads(store.get("verdict"))
    try:
        store.add("verdict/read", 1)  # the first node may stop serving its store now
    except RuntimeError:
        pass
    print(f"ncclprep node preflight: {me}: {result['line']}")
    if job["launcher"] == "slurm":
        _leave_claim(job["job_id"], result.get("claim"), me)
    return result["code"]


#: Seconds the first node waits for a node the probes already lost (still_here).
LOST_WAIT_S = 5.0


def still_here(store, present: list[int], rank: int, deadline_s: float, lost: list[int] = ()) -> list[int]:
    """The ranks (of the job's nodes) still here once the probes are done: a rendezvous ``probed``
    among ``present`` (the ranks that joined), decided by the first node within ``deadline_s``
    seconds, the same list on every node. The training job's launcher waits for every node it is
    given, so a node lost since the join (frozen, gone) would hang it on all the others, and the
    first node would wait out its deadline for that node's record. ``lost``: indexes into
    ``present`` of the nodes the first node's probes found gone (the network probe's gone hosts,
    the collectives' missing ones): waited for LOST_WAIT_S seconds only, where a frozen node cost
    the whole deadline (20 s of the local inventory's runs); one slow at the collectives' join
    that comes in time still takes part. Raises StoreTampered or RuntimeError as
    netutil.rendezvous does."""
    got = rendezvous(store, Keeper(store), present.index(rank), len(present), "probed", "ready", deadline_s, 15,
                     lost=lost, lost_wait_s=LOST_WAIT_S)
    return [present[i] for i in sorted(got)]


def _smoke(settings: dict, job: dict, names: list[str], here: list[int], rank: int, token: str,
           lost: str | None) -> dict:
    """This node's part of the training smoke job (probes/smoke.py run_job) on the nodes still here
    (``here``: still_here's ranks), or a SKIP saying why it did not run (``lost``: why nobody knows
    who is here)."""
    from ansible.module_utils.ncclprep.probes.smoke import run_job

    me, smoke = names[rank], settings["smoke"]
    if lost:
        return {"status": "SKIP", "host": me, "error": f"the training smoke job was not run: {lost}"}
    if rank not in here:
        return {"status": "SKIP", "host": me, "error": "the training smoke job was not run on this node: it finished "
                                                      "its probes after the first node's deadline"}
    say(f"{me}: the training smoke job through {settings['launcher']} on {len(here)} nodes (deadline "
        f"{smoke['timeout']} s)")
    with tempfile.NamedTemporaryFile("w", prefix="ncclprep-job-", suffix=".hosts") as fh:
        fh.write("".join(f"{names[r]}\n" for r in here))
        fh.flush()
        return run_job(settings["launcher"], settings["script"], f"ncclprep-preflight-{job['job_id']}",
                       smoke["steps"], smoke["accumulation"], 25, smoke["timeout"], True, token, [], me,
                       env={"NCCLPREP_HOSTFILE": fh.name})


def _leave_claim(job_id: str, claim: dict | None, me: str) -> None:
    """This node's copy of the job's claim for its Epilog (claims.write_claim), said when left or
    when it could not be (no folder of the job's: slurm.conf's Prolog makes it)."""
    if claim and write_claim(job_id, claim):
        say(f"{me}: claimed {', '.join(claim['checks'])} for root's re-test in the Epilog")
    elif claim:
        say(f"{me}: no claim left for root's re-test: no folder {CLAIMS_DIR}/{job_id}/ of this job's (ncclprep's "
            "Prolog makes it where the slurm_health concern is on)")


def _judge(store, mine: dict, names: list[str], here: list[int], settings: dict, opts: argparse.Namespace,
           job: dict) -> int:
    """The first node's part after its own record: gather the records of the nodes still there after
    the probes (``here``, ranks in ``names``: still_here's; a record already posted by another is
    taken too, the others are reported not alive), evaluate, write, post the verdict."""
    # here, not at the top: the reports need jinja2, which the torch venv has and the system python
    # that first runs the command (and says why it cannot go on, e.g. without an intent) may lack
    from ansible.module_utils.ncclprep.report import build_cluster, utc_stamp, write_reports

    world = len(names)
    say(f"{names[0]}: waiting for the other nodes' records")
    late = set(missing_keys(store, [f"record/{r}" for r in here if r], GATHER_SLACK_S))
    records = {names[0]: mine}
    readers = 0  # the nodes that posted a record wait for the verdict
    for r in range(1, world):
        key = f"record/{r}"
        posted = key not in late if r in here else not missing_keys(store, [key], 0)
        records[names[r]] = json.loads(store.get(key)) if posted else {"alive": False}
        readers += posted
    blame = (mine.get("probe") or {}).get("blame")
    for rec in records.values():  # the collective blame ran on the first node: every record holds it
        if rec.get("alive", True):
            rec["blame"] = blame
    report = settings["report"]
    limits = net_limits(settings)
    checks = evaluate(records, names, report["min_busbw_gbps"], limits, report["expect_net"])
    if any((rec.get("smoke") or {}).get("error") == SMOKE_UNSEALED for rec in records.values()):
        for check in checks:  # the check's own SKIP says only that the job did not run: say why
            if check["id"] == "torchrun.smoke" and check["status"] == "SKIP":
                check.update(message=SMOKE_UNSEALED, remediation=SMOKE_REMEDIATION)
    cluster = build_cluster(checks, names, records, utc_stamp(),
                            limits={"min_busbw_gbps": report["min_busbw_gbps"], "expect_net": report["expect_net"],
                                    "net_limits": limits})
    cluster["launch"] = {"launcher": job["launcher"], "run_id": job["job_id"], "nodes": job["nodes"]}
    result = verdict(checks, names, opts.need)
    run_dir = None
    try:
        why = planted_link(opts.report_dir)
        if why:
            raise OSError(why)
        if not opts.records:
            run_dir = write_reports(opts.report_dir, cluster, records, cluster["generated_at"])
    except OSError as exc:
        print(f"ncclprep node preflight: cannot write the reports under {opts.report_dir}: {exc}", file=sys.stderr)
    problems = [f"{c['status']} {c['id']} [{', '.join(c['hosts'])}]: {' '.join(str(c['message']).split())}"
                for c in checks if c["status"] in BAD]
    line = f"preflight {result['status']} on {world} nodes, " + (
        "the records to the launcher" if opts.records else f"report {run_dir}/summary.md")
    if opts.need:
        line += (f"; vetted {len(result['vetted'])} of {world} (need {opts.need}): {','.join(result['vetted'])}"
                 f"; excluded: {','.join(result['excluded']) or 'none'}")
        if len(result["vetted"]) >= opts.need:
            try:
                # a new temporary file, then renamed over the path: a link planted there is replaced,
                # never written through (review N20)
                write_atomic(opts.hostfile, "".join(f"{h}\n" for h in result["vetted"][:opts.need]))
                line += f"; hostfile {opts.hostfile}"
            except OSError as exc:
                result["code"] = EXIT_COULD_NOT_RUN
                line += f"; cannot write the hostfile {opts.hostfile}: {exc}"
    claim = claim_of(checks)
    store.set("verdict", json.dumps({"code": result["code"], "line": line, "claim": claim}))
    if job["launcher"] == "slurm":
        _leave_claim(job["job_id"], claim, names[0])
    for text in problems:
        print(f"ncclprep node preflight: {text}", file=sys.stderr)
    print(f"ncclprep node preflight: {line}")
    if opts.records:  # one line, the last: the launcher writes the reports from it (validate.yml)
        print(json.dumps(dict(result, problems=problems, hosts=names, records=records), sort_keys=True,
                         default=str))
    elif opts.json:
        print(json.dumps(dict(result, report_dir=run_dir, problems=problems), sort_keys=True))
    # the others read the verdict from this node's store: keep it up until each of those whose record
    # came said it has it (a node lost since costs the wait's 2 s; it stood at 2 s for every run)
    await_readers(store, "verdict", readers, VERDICT_WAIT_S)
    return result["code"]


def parser() -> argparse.ArgumentParser:
    submit = os.environ.get("SLURM_SUBMIT_DIR") or "."
    p = argparse.ArgumentParser(
        prog="ncclprep node preflight", allow_abbrev=False,
        description="The preflight of a set of nodes, one task on each: the node's rows, the network probe, the "
                    "collectives, the blame and the training smoke job on exactly those nodes. Under Slurm: "
                    "srun --ntasks-per-node=1 ncclprep node preflight. From any other launcher (pdsh, clush, "
                    "Ansible, a Kubernetes indexed Job): ncclprep node preflight --members FILE on every member.",
        epilog="exit codes: 0 passed (with --need: at least K nodes vetted); 1 a check failed or hung (with --need: "
               "fewer than K vetted); 2 bad usage; 3 could not run.")
    p.add_argument("--members", metavar="FILE",
                   help=f"the member names, one a line in rank order, the same file on every node (default "
                        f"${ENV_MEMBERS}; without either, Slurm's job step)")
    p.add_argument("--nodes", metavar="NAMES",
                   help="the member names, comma-separated in rank order, in place of --members FILE")
    p.add_argument("--settings", metavar="JSON",
                   help="this run's own values over the intent's, as a JSON object of sections: net, probe, smoke, "
                        "report, ssh (the preflight_* settings site.yml recorded) and node (connect_port, timeout, "
                        f"dataset_path); e.g. '{{\"smoke\": {{\"enabled\": false}}}}' (default ${ENV_SETTINGS})")
    p.add_argument("--rank", metavar="N",
                   help=f"with --members: this node's rank (default ${ENV_RANK}, else ${ENV_K8S_INDEX}, else this "
                        "node's place in the list)")
    p.add_argument("--run-id", metavar="ID",
                   help=f"with --members: the run's id, the same on every node (default ${ENV_RUN_ID}, else one "
                        "drawn from the list)")
    p.add_argument("--need", type=int, metavar="K",
                   help="the job over-allocated: pass when at least K nodes are vetted, and write the first K to "
                        "--hostfile")
    p.add_argument("--report-dir", default=os.path.join(submit, "ncclprep-reports"),
                   help="where the first node writes the run's reports (default $SLURM_SUBMIT_DIR/ncclprep-reports, "
                        "outside Slurm ./ncclprep-reports)")
    p.add_argument("--hostfile", default=None,
                   help="where --need writes the vetted nodes (default $SLURM_SUBMIT_DIR/ncclprep-hosts.<job id>, "
                        "outside Slurm ./ncclprep-hosts.<run id>)")
    p.add_argument("--intent", default=nodecheck.INTENT_FILE,
                   help=f"the intent document (default {nodecheck.INTENT_FILE})")
    p.add_argument("--json", action="store_true", help="the first node also prints the verdict as JSON")
    p.add_argument("--token-file", metavar="FILE",
                   help=f"read the run's secret from FILE (owner-only, 0600) and remove it, in place of ${ENV_TOKEN} "
                        "in the environment")
    p.add_argument("--inventory-digest", metavar="HEX",
                   help="the launcher's inventory digest (validate.yml's): drift.files WARN on a node whose files "
                        "site.yml wrote from another inventory")
    p.add_argument("--records", action="store_true",
                   help="the first node writes no reports and prints, as its last line, the verdict with every "
                        "node's record (model.HostRecord) as JSON, for a launcher that writes the reports itself "
                        "(validate.yml)")
    return p


def main(argv: list[str], env: Mapping[str, str] | None = None) -> int:
    """``ncclprep node preflight [options]``: the exit code (module docstring)."""
    env = os.environ if env is None else env
    try:
        opts = parser().parse_args(argv)
    except SystemExit as exc:
        return EXIT_PASS if exc.code == 0 else EXIT_USAGE
    host = env.get("SLURMD_NODENAME") or socket.gethostname()
    opts.members = opts.members or (None if opts.nodes else env.get(ENV_MEMBERS)) or None
    opts.rank = opts.rank if opts.rank is not None else env.get(ENV_RANK) or env.get(ENV_K8S_INDEX)
    opts.run_id = opts.run_id or env.get(ENV_RUN_ID) or None
    opts.settings = opts.settings if opts.settings is not None else env.get(ENV_SETTINGS) or None
    if opts.need is not None and opts.need < 1:
        print(f"ncclprep node preflight: {host}: --need={opts.need}: valid: an integer >= 1", file=sys.stderr)
        return EXIT_USAGE
    try:
        if opts.token_file:  # first: the file is gone whatever follows
            env = {**env, ENV_TOKEN: read_token_file(opts.token_file)}
        if opts.members and opts.nodes:
            raise Usage("--members and --nodes both given: one member list")
        if opts.members or opts.nodes:
            nodes = parse_nodes(opts.nodes) if opts.nodes else read_members(opts.members)
            doc = nodecheck.intent_document(opts.intent)
            host = doc["host"]
            job = job_from_members(nodes, doc["host"], opts.rank, opts.run_id)
        else:
            job = job_from_env(env)
            doc = None
        if opts.need is not None and opts.need > len(job["nodes"]):
            raise Usage(f"--need={opts.need} is more than the step's {len(job['nodes'])} nodes")
        if opts.hostfile is None:
            opts.hostfile = os.path.join(env.get("SLURM_SUBMIT_DIR") or ".", f"ncclprep-hosts.{job['job_id']}")
        doc = with_settings(doc or nodecheck.intent_document(opts.intent), opts.settings)
        return run(doc, job, opts, env)
    except Usage as exc:
        print(f"ncclprep node preflight: {host}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except nodecheck.CouldNotRun as exc:
        print(f"ncclprep node preflight: {host}: {exc}", file=sys.stderr)
        return EXIT_COULD_NOT_RUN
    except Exception:  # a crash: say where, exit 3, never a traceback alone
        print(f"ncclprep node preflight: {host}: crashed:\n{traceback.format_exc()}", file=sys.stderr)
        return EXIT_COULD_NOT_RUN
