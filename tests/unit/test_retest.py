"""Root's network re-test (module_utils/ncclprep/slurm/retest.py): the claim a job's user leaves and what
of it the Epilog believes, the key, the rate limit, this node's verdict and what Slurm is told;
then three nodes on loopback addresses re-testing for real through ``ncclprep node epilog``, with
sinfo and scontrol stand-ins on PATH. The Slurm cluster's own run is the integration tier's
(tests/integration/test_local_cluster.py)."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time

import pytest

# Spawned nodes do not run conftest: import ncclprep first so module_utils is importable.
# isort: off
import ncclprep  # noqa: F401
from ansible.module_utils.ncclprep import cli
from ansible.module_utils.ncclprep.slurm import claims
from ansible.module_utils.ncclprep.node import check as nodecheck
from ansible.module_utils.ncclprep.slurm import retest
from ansible.module_utils.ncclprep.slurm.claims import claim_of, claim_path, take_claim, write_claim
from ansible.module_utils.ncclprep.slurm.retest import due, retest_key, verdict_of

BANDWIDTH = {"id": "net.bandwidth", "status": "FAIL", "hosts": ["n3"], "measured": {"n3": 0.02},
             "expected": ">= 0.5 of the median", "message": "n3 sends slowly"}
SYSCTL = {"id": "sysctl.net.core.somaxconn", "status": "FAIL", "hosts": ["n2"], "measured": {"n2": "128"},
          "expected": "65535", "message": "128"}
PASSING = {"id": "net.latency", "status": "PASS", "hosts": [], "measured": None, "expected": None, "message": ""}


def test_a_claim_names_only_failed_network_checks_and_its_path_only_a_slurm_job_id(tmp_path):
    assert claim_of([SYSCTL, PASSING]) is None
    assert claim_of([SYSCTL, BANDWIDTH, dict(PASSING, id="collective.all_reduce", status="HANG", hosts=[])]) == {
        "checks": ["collective.all_reduce", "net.bandwidth"], "hosts": ["n3"]}
    assert claim_path("4242", "/c") == "/c/4242/claim.json" and claim_path("17_3", "/c") == "/c/17_3/claim.json"
    for bad in ("../etc/passwd", "", "12/x", "12.json"):
        with pytest.raises(ValueError, match="not a Slurm job id"):
            claim_path(bad)
    assert write_claim("5", {"checks": ["net.bandwidth"], "hosts": ["n3"]}, str(tmp_path / "absent")) is None
    # no folder of the job's (the Prolog made none): no claim
    assert write_claim("5", {"checks": ["net.bandwidth"], "hosts": ["n3"]}, str(tmp_path)) is None


def test_the_epilog_believes_only_the_jobs_users_own_regular_small_claim_and_removes_every_one(tmp_path):
    folder = str(tmp_path)
    uid = os.getuid()
    claim = {"checks": ["net.bandwidth"], "hosts": ["n3"]}
    for job in ("7", "8", "9", "10", "11", "12"):
        assert claims.open_claims(job, uid, folder=folder) is None  # the Prolog's part
    path = write_claim("7", claim, folder)
    assert path == f"{folder}/7/claim.json" and oct(os.stat(path).st_mode & 0o777) == "0o600"
    got, why = take_claim("7", uid, folder)
    assert got == dict(claim, job_id="7") and why == "job 7 claims net.bandwidth" and not os.path.exists(path)
    assert take_claim("7", uid, folder) == (None, "no claim")
    write_claim("8", claim, folder)
    got, why = take_claim("8", uid + 1, folder)
    assert got is None and why == f"{folder}/8 belongs to uid {uid}, not the job's user ({uid + 1}): ignored"
    assert not os.path.exists(f"{folder}/8")
    os.symlink("/etc/hostname", f"{folder}/9/claim.json")
    assert take_claim("9", uid, folder) == (
        None, f"{folder}/9/claim.json is not a regular file (Too many levels of symbolic links): ignored")
    assert not os.path.lexists(f"{folder}/9") and os.path.exists("/etc/hostname")
    write_claim("10", claim, folder)
    os.rename(f"{folder}/10/claim.json", f"{folder}/11/claim.json")  # another job's claim under this job's name
    assert take_claim("11", uid, folder) == (None, f"{folder}/11/claim.json is not a claim of job 11: ignored")
    with open(f"{folder}/12/claim.json", "w") as fh:
        fh.write(json.dumps(dict(claim, job_id="12")) + " " * claims.CLAIM_MAX_BYTES)
    assert take_claim("12", uid, folder)[1].endswith(f"bytes (at most {claims.CLAIM_MAX_BYTES}): ignored")
    assert take_claim("10", uid, folder) == (None, "no claim")
    assert os.listdir(folder) == []


def test_the_key_comes_from_the_shared_secret_and_the_run_and_the_rate_limit_from_the_stamp(tmp_path):
    key = retest_key(b"munge secret", "job-7")
    assert len(key) == 32 and int(key, 16) >= 0
    assert key == retest_key(b"munge secret", "job-7")
    assert len({key, retest_key(b"munge secret", "job-8"), retest_key(b"another secret", "job-7")}) == 3
    stamp = tmp_path / "stamp"
    assert due(str(stamp), 300, time.time()) == (True, None)
    stamp.write_text("job-7\n")
    may, age = due(str(stamp), 300, time.time() + 10)
    assert not may and 9 < age < 12
    assert due(str(stamp), 300, time.time() + 301)[0]


def test_this_nodes_verdict_is_the_failed_rows_that_name_it():
    hosts = ["n1", "n2", "n3"]
    link = dict(BANDWIDTH, hosts=["n1 -> n2"])
    assert verdict_of([BANDWIDTH, PASSING], "n3", hosts, "retest job-7 t")["failed"] == [BANDWIDTH]
    v = verdict_of([BANDWIDTH, PASSING], "n1", hosts, "retest job-7 t")
    assert v == {"status": "PASS", "failed": [], "warned": [], "why": None, "run": "retest job-7 t",
                 "scope": "network"}
    assert [verdict_of([link], h, hosts, "r")["status"] for h in hosts] == ["FAIL", "FAIL", "PASS"]
    # a row that names no host (the whole run, a store lost or tampered with) and a run that blames
    # several nodes at once are a fabric or membership fault: UNKNOWN for every node (issue 40, N4)
    unnamed = dict(BANDWIDTH, status="HANG", hosts=[])
    assert {verdict_of([unnamed], h, hosts, "r")["status"] for h in hosts} == {"UNKNOWN"}
    two = dict(BANDWIDTH, hosts=["n2", "n3"])
    got = verdict_of([two], "n3", hosts, "r")
    assert got["status"] == "UNKNOWN" and got["why"] == (
        "one run blames 2 nodes at once (n2, n3): a fabric or membership fault, no node's")
    # a node named by net.run (never arrived, gone: a deleted store key feigns it) was not measured
    # a store the probe found tampered with (netutil): net.run WARN naming no one, the rest SKIP
    tampered = {"id": "net.run", "status": "WARN", "hosts": [], "message": "the store on n1 was tampered with",
                "measured": {"store_state": {"n2": "tampered"}}}
    skipped = dict(PASSING, id="net.bandwidth", status="SKIP")
    for h in hosts:
        got = verdict_of([tampered, skipped], h, hosts, "r")
        assert got["status"] == "UNKNOWN" and "was tampered with" in got["why"]
    gone = {"id": "net.run", "status": "HANG", "hosts": ["n3"], "message": "n3 never arrived"}
    assert verdict_of([gone], "n3", hosts, "r")["status"] == "UNKNOWN"
    assert verdict_of([gone], "n1", hosts, "r")["status"] == "PASS"


class Slurm:
    """sinfo prints ``rows`` (``name|state|reason``, no features); squeue lists ``jobs``; scontrol
    calls are kept."""

    def __init__(self, rows: str, jobs: str = ""):
        self.rows, self.jobs, self.calls = rows, jobs, []

    def __call__(self, argv, timeout):
        self.calls.append(argv)
        if argv[0] == "sinfo":
            rows = (x.split("|") for x in self.rows.splitlines())
            return 0, "".join(f"{n}|{st}|1|(null)|{r}\n" for n, st, r in rows), ""
        return (0, self.jobs, "") if argv[0] == "squeue" else (0, "", "")

    def updates(self):
        return [c for c in self.calls if c[0] == "scontrol" and any(a.startswith("State=") for a in c)]


def opts(ledger, **kw):
    return argparse.Namespace(ledger=ledger, strike_window=kw.get("window", 86400.0), max_drained=8)


def test_the_epilogs_verdict_drains_on_the_second_strike_and_only_a_network_pass_resumes(tmp_path):
    """A blame of the node itself is one strike per re-test; the Epilog's node is ``completing`` the
    job that ended, which is no job running on it when no other job runs there (squeue); the
    second strike drains; a node check's pass leaves the network drain, a network pass resumes it."""
    ledger = str(tmp_path / "ledger.json")
    hosts = ["n1", "n2", "n3"]
    rows = "n1|completing|none\nn2|completing|none\nn3|completing|none\n"
    first = Slurm(rows)
    line = retest.act("n3", verdict_of([BANDWIDTH], "n3", hosts, "retest job-7 a"), opts(ledger), "7", first)
    assert line == ("n3: network strike 1 of 2 within 24 h (run:retest job-7 a); drains on a failure with another "
                    "partner")
    assert [c[0] for c in first.calls] == ["sinfo", "squeue"]
    busy = Slurm("n1|allocated|none\nn2|allocated|none\nn3|allocated|none\n")
    line = retest.act("n3", verdict_of([BANDWIDTH], "n3", hosts, "retest x b"), opts(ledger), None, busy)
    assert "never drains a busy node" in line and len(busy.calls) == 1
    # N6: a shared node completing job 9 while job 12 still runs there is busy: no drain
    shared = Slurm(rows, jobs="9\n12\n")
    line = retest.act("n3", verdict_of([BANDWIDTH], "n3", hosts, "retest job-9 s"), opts(ledger), "9", shared)
    assert "never drains a busy node" in line and not shared.updates()
    second = Slurm(rows, jobs="9\n")
    line = retest.act("n3", verdict_of([BANDWIDTH], "n3", hosts, "retest job-9 c"), opts(ledger), "9", second)
    reason = "ncclprep: net.bandwidth: measured 0.02, expected >= 0.5 of the median"
    assert line == f"n3: drained: {reason}"
    assert second.updates() == [["scontrol", "update", "NodeName=n3", "State=DRAIN", f"Reason={reason}"]]
    drained = Slurm(f"n1|idle|none\nn2|idle|none\nn3|drained|{reason}\n")
    from ansible.module_utils.ncclprep.slurm import health as nodehealth

    code, line, _ = nodehealth.health("n3", {"generated_at": nodehealth._now().isoformat(), "checks": [PASSING]},
                                      ledger, drained, 900)
    assert code == 0 and "which only root's network re-test resumes: left drained" in line
    assert len(drained.calls) == 1
    line = retest.act("n3", verdict_of([PASSING], "n3", hosts, "retest fixed d"), opts(ledger), None, drained)
    assert line == f"n3: passes now; resumed from {reason!r}"
    assert drained.calls[-1] == ["scontrol", "update", "NodeName=n3", "State=RESUME"]
    entries = json.loads(open(ledger).read())
    assert [(e.get("scope"), e.get("status") or e.get("event")) for e in entries] == [
        ("network", "FAIL")] * 4 + [("node", "PASS"), ("network", "PASS"), ("network", "resumed")]
    # two network failures two days apart: no drain (the first is out of the window)
    old = str(tmp_path / "old.json")
    two_days = (nodehealth._now() - __import__("datetime").timedelta(days=2)).isoformat()
    nodehealth.write_ledger(old, [{"at": two_days, "run": "retest job-1 x", "scope": "network", "status": "FAIL",
                                   "network": True, "partners": ["n1"], "checks": ["net.bandwidth"]}])
    link = dict(BANDWIDTH, hosts=["n2 -> n3"])
    line = retest.act("n3", verdict_of([link], "n3", hosts, "retest job-2 y"), opts(old), "2", Slurm(rows))
    assert "network strike 1 of 2 within 24 h (n2)" in line


def test_the_epilog_without_slurms_variables_or_a_claim_does_nothing_and_exits_0(tmp_path, capsys):
    env = {"SLURM_JOB_ID": "31", "SLURM_JOB_UID": str(os.getuid()), "SLURM_JOB_NODELIST": "n1,n2",
           "SLURMD_NODENAME": "n1"}
    assert retest.main(["--claims", str(tmp_path)], "epilog", env) == 0
    assert capsys.readouterr().out == "ncclprep epilog n1: job 31: no claim: nothing to re-test\n"
    assert retest.main([], "epilog", {"SLURMD_NODENAME": "n1"}) == 0
    assert "not run by Slurm's Epilog (no SLURM_JOB_UID)" in capsys.readouterr().out
    assert retest.main(["--bogus"], "epilog", env) == 0
    capsys.readouterr()
    assert retest.main(["--id", "a/b", "--nodes", "n1,n2", "--node", "n1"], "retest", {}) == 2
    assert "--id='a/b'" in capsys.readouterr().err
    assert retest.main(["--id", "x", "--nodes", "n2,n3", "--node", "n1"], "retest", {}) == 2
    assert cli.main(["node", "retest", "--id", "x", "--nodes", "n1", "--node", "n1"]) == 2
    assert "two or more distinct Slurm names" in capsys.readouterr().err


# ------------------------------------------------------------- three nodes on loopback, for real

HOSTS = ["n1", "n2", "n3"]
ADDRS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def _settings(store_port: int, listen_port: int) -> dict:
    return {
        "members": dict(zip(HOSTS, ADDRS, strict=True)),
        "net": {"store_port": store_port - retest.RETEST_PORT_OFFSET, "listen_port": listen_port, "ports": [],
                "ephemeral_sample": 2, "mtu": 1500, "latency_samples": 20, "bandwidth_seconds": 0.05,
                "matchings": 2, "every_pair": False, "repair": 2, "max_latency_us": None, "slow_z": -3.5,
                # loopback on a loaded 2-core machine: a direction may run at a fifth of the others'
                # (seen while the integration tier ran); only a stream at 1/1000 of them fails here
                "slow_ratio": 0.001, "min_gbps": None, "join_timeout": 10, "step_timeout": 5.0,
                "connect_timeout": 2.0, "timeout": 60, "enabled": True},
        "probe": {"port": 1, "ops": [], "sizes": [], "warmup": 0, "iters": 0, "timeout": 1, "join_timeout": 1,
                  "local_ranks": None, "blame": False, "blame_timeout": 1, "enabled": False},
        "report": {"min_busbw_gbps": None, "expect_net": None, "link_floor_ratio": None},
    }


def _node(folder: str, host: str, args: list[str], env: dict, queue) -> None:
    os.environ["PATH"] = f"{folder}/bin:{os.environ['PATH']}"
    from contextlib import redirect_stdout
    from io import StringIO

    out = StringIO()
    with redirect_stdout(out):
        code = retest.main(args, "epilog", env)
    queue.put((host, code, out.getvalue()))


def _epilogs(tmp_path, ctx, min_interval: float, with_claim: dict) -> dict:
    queue, procs = ctx.Queue(), []
    for host in HOSTS:
        base = tmp_path / host
        assert claims.open_claims("77", os.getuid(), folder=str(base / "claims")) is None  # the Prolog's part
        if with_claim[host]:
            write_claim("77", {"checks": ["net.bandwidth"], "hosts": ["n3"]}, str(base / "claims"))
        args = ["--claims", str(base / "claims"), "--intent", str(tmp_path / "intent.json"),
                "--ledger", str(base / "ledger.json"), "--stamp", str(base / "stamp"),
                "--munge-key", str(tmp_path / "munge.key"), "--min-interval", str(min_interval),
                "--join-timeout", "5", "--taken", str(base / "taken")]
        env = {"SLURM_JOB_ID": "77", "SLURM_JOB_UID": str(os.getuid()), "SLURM_NODELIST": ",".join(HOSTS),
               "SLURMD_NODENAME": host}
        procs.append(ctx.Process(target=_node, args=(str(tmp_path), host, args, env, queue)))
    for p in procs:
        p.start()
    out = {}
    for _ in procs:
        host, code, text = queue.get(timeout=120)
        out[host] = (code, text.strip())
    for p in procs:
        p.join(10)
    return out


def _three_nodes(tmp_path) -> int:
    """Three nodes' files under ``tmp_path`` (intent, munge key, fake sinfo/squeue/scontrol, claim
    folders): the re-test store's port."""
    from test_netprobe import _free_port, _ports

    store, listen = _free_port(), _ports()[1]
    (tmp_path / "intent.json").write_text(
        json.dumps({"version": nodecheck.INTENT_VERSION, "host": "n1", "node": {}, "readers": {}, "intent": {},
                    "job": _settings(store, listen)}))
    (tmp_path / "munge.key").write_bytes(os.urandom(64))
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "sinfo").write_text("#!/bin/sh\nprintf 'n1|completing|1|(null)|none\\n"
                                            "n2|completing|1|(null)|none\\nn3|completing|1|(null)|none\\n'\n")
    (tmp_path / "bin" / "squeue").write_text("#!/bin/sh\necho 77\n")
    (tmp_path / "bin" / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/scontrol.log\n")
    for tool in ("sinfo", "scontrol", "squeue"):
        os.chmod(tmp_path / "bin" / tool, 0o755)
    for host in HOSTS:
        (tmp_path / host / "claims").mkdir(parents=True)
    return store


def test_three_nodes_epilogs_re_test_as_root_once_per_interval_and_a_node_without_a_claim_stays_out(tmp_path):
    pytest.importorskip("torch")
    ctx = multiprocessing.get_context("spawn")
    _three_nodes(tmp_path)
    out = _epilogs(tmp_path, ctx, 300, {h: True for h in HOSTS})
    for host in HOSTS:
        code, line = out[host]
        assert code == 0 and line == f"ncclprep epilog job 77: job 77 claims net.bandwidth; {host}: re-test PASS: " \
                                      f"{host}: passes", out
        entries = json.loads((tmp_path / host / "ledger.json").read_text())
        assert [(e["scope"], e["status"], e["run"].split()[:2]) for e in entries] == [
            ("network", "PASS", ["retest", "job-77"])]
        assert os.listdir(tmp_path / host / "claims") == []
    assert not (tmp_path / "scontrol.log").exists()  # nothing to drain or resume
    # again at once: every node re-tested less than 300 s ago, so none re-tests, and quickly
    start = time.monotonic()
    out = _epilogs(tmp_path, ctx, 300, {h: True for h in HOSTS})
    assert {h: out[h] for h in HOSTS} == {h: (0, f"ncclprep epilog job 77: job 77 claims net.bandwidth; {h}: no "
                                                 "re-test (0 of 3 nodes to re-test): nothing done") for h in HOSTS}
    assert time.monotonic() - start < 60
    # n2 left no claim (its task died): it does nothing, the others re-test between themselves
    out = _epilogs(tmp_path, ctx, 0, {"n1": True, "n2": False, "n3": True})
    assert out["n2"] == (0, "ncclprep epilog n2: job 77: no claim: nothing to re-test")
    for host in ("n1", "n3"):
        assert out[host][1].endswith(f"{host}: re-test PASS: {host}: passes"), out
    assert len(json.loads((tmp_path / "n1" / "ledger.json").read_text())) == 2


def test_a_word_a_stranger_deletes_from_the_re_tests_store_delays_it_and_leaves_no_node_out(tmp_path):
    """Review N4, the re-test's own store: a process on a member node deleted ``may/1`` (n2's word
    that it takes part) as it appeared, and the first node, which looked for the key, re-tested
    without n2 ("no re-test (2 of 3 nodes to re-test)" on n2). n2 now posts its word again and the
    first node counts it once read: the three nodes re-test and pass."""
    pytest.importorskip("torch")
    from test_collectives import _deleting, _stranger

    deleted = []
    ctx = multiprocessing.get_context("spawn")
    port = _three_nodes(tmp_path)
    stranger = _stranger(port, _deleting("may/1", deleted))
    out = _epilogs(tmp_path, ctx, 0, {h: True for h in HOSTS})
    stranger.join(5)
    assert any(deleted), "the stranger deleted n2's word at least once"
    for host in HOSTS:
        assert out[host] == (0, f"ncclprep epilog job 77: job 77 claims net.bandwidth; {host}: re-test PASS: "
                                f"{host}: passes"), out


def test_missing_keys_names_the_late_ones_after_the_deadline_and_none_once_all_arrive():
    """netutil.missing_keys, the waits of the job's preflight (node/preflight.py)."""
    from ansible.module_utils.ncclprep.netutil import missing_keys

    class Store:
        def __init__(self):
            self.keys, self.checks = {"a"}, 0

        def check(self, keys):
            self.checks += 1
            if self.checks == 3:
                self.keys.add("b")  # b arrives while it waits
            return all(k in self.keys for k in keys)

    store = Store()
    start = time.monotonic()
    assert missing_keys(store, ["a", "b"], 5) == [] and time.monotonic() - start < 4
    start = time.monotonic()
    assert missing_keys(store, ["a", "c", "d"], 0.5) == ["c", "d"]
    assert 0.5 <= time.monotonic() - start < 3


def test_the_taken_variable_alone_skips_no_claim_check_and_a_run_that_cannot_start_writes_no_stamp(tmp_path, capsys):
    """N14: NCCLPREP_CLAIM_TAKEN in the Epilog's environment skipped every claim check; the claim
    now passes through root's own folder. N13: the rate limit's stamp was written before the
    re-test ran, so a run that could not start (or a forged claim) used up the interval."""
    (tmp_path / "claims").mkdir()
    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_UID": str(os.getuid()), "SLURM_NODELIST": "n1,n2",
           "SLURMD_NODENAME": "n1", retest.ENV_TAKEN: "job 42 claims net.bandwidth"}
    args = ["--claims", str(tmp_path / "claims"), "--taken", str(tmp_path / "taken"), "--stamp",
            str(tmp_path / "stamp"), "--intent", str(tmp_path / "intent.json"), "--ledger", str(tmp_path / "l.json")]
    assert retest.main(args, "epilog", env) == 0
    assert capsys.readouterr().out.strip() == "ncclprep epilog n1: job 42: no claim: nothing to re-test"
    # a hand-over in a folder others may write is not believed either
    claims.hand_over("42", "job 42 claims net.bandwidth", str(tmp_path / "taken"))
    assert claims.taken_over("42", str(tmp_path / "taken")) == "job 42 claims net.bandwidth"
    assert claims.taken_over("42", str(tmp_path / "taken")) is None  # read once
    claims.hand_over("42", "x", str(tmp_path / "taken"))
    os.chmod(tmp_path / "taken", 0o777)
    assert claims.taken_over("42", str(tmp_path / "taken")) is None
    # N13: no job settings in the intent: UNKNOWN, exit 3, no stamp, and the path named is --intent's
    (tmp_path / "intent.json").write_text(json.dumps({"version": nodecheck.INTENT_VERSION, "host": "n1", "node": {},
                                                      "readers": {}, "intent": {}}))
    (tmp_path / "key").write_bytes(b"k" * 32)
    code = retest.main(["--id", "fix1", "--nodes", "n1,n2", "--node", "n1", "--munge-key", str(tmp_path / "key"),
                        *args[4:]], "retest", {})
    assert code == 3 and not (tmp_path / "stamp").exists()
    assert f"{tmp_path / 'intent.json'}: no job settings" in capsys.readouterr().out


def test_a_claim_of_no_network_check_or_with_control_characters_starts_nothing(tmp_path):
    """A break-it review: a claim naming only sysctl.x, or ids carrying a newline, was believed and
    its text written to root's Epilog log as it was."""
    from ansible.module_utils.ncclprep.slurm.claims import prolog_claims

    folder = tmp_path / "claims"
    folder.mkdir(mode=0o755)
    for checks, want in ((["sysctl.not.a.network.check"], "names no network check: ignored"),
                         (["net.bandwidth\nncclprep epilog job 1: forged"], "names no network check: ignored"),
                         (["net.bandwidth", "x\ny"], "job 88 claims net.bandwidth")):
        prolog_claims({"SLURM_JOB_ID": "88", "SLURM_JOB_UID": str(os.getuid()), "SLURM_JOB_GID": str(os.getgid())},
                      str(folder))
        assert write_claim("88", {"checks": checks, "hosts": ["n3"]}, str(folder))
        claim, why = take_claim("88", os.getuid(), str(folder))
        assert why.endswith(want), why
        assert "\n" not in why
