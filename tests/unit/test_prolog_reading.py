"""The Slurm Prolog's reading (node.read_quick through nodehealth.quick_rows, review N10): within its
6 s it read the whole node (the torch probe, the hostinfo tools, the dataset, a connect to every
member), so one member that did not answer took 5.6 s of them. It reads the data-plane interface
and looks up the job's members' names now, connects to none, and judges them with the node check's
own functions."""

from __future__ import annotations

import json
import socket
import time

from ansible.module_utils.ncclprep.concerns import host_names
from ansible.module_utils.ncclprep.node import check as nodecheck
from ansible.module_utils.ncclprep.node import read as node
from ansible.module_utils.ncclprep.slurm import health as nodehealth
from ansible.module_utils.ncclprep.slurm.health import PROLOG_CHECKS, PROLOG_MODULES, quick_rows

#: What the fake resolver answers, name -> addresses in its order (no answer: cannot resolve).
RESOLVER = {"n1": ["127.0.0.1"], "n2": ["127.0.0.2"], "n3": ["127.0.0.3"], "wrong": ["127.0.0.9"],
            "looped": ["127.0.1.1", "127.0.0.4"]}
#: `ip -j addr show` of the fake node: loopback (up: sysfs says unknown) and an interface sysfs does
#: not know (no operstate: down).
IP_ADDR = json.dumps([{"ifname": "lo", "mtu": 65536, "addr_info": [{"local": "127.0.0.1", "prefixlen": 8}]},
                      {"ifname": "dp9", "mtu": 9000, "addr_info": [{"local": "10.0.0.5", "prefixlen": 24}]}])


def fake_resolver(monkeypatch, log: str | None = None) -> None:
    """socket.getaddrinfo answers from RESOLVER (each name asked appended to ``log``, a file: the
    Prolog reads in a forked child)."""
    def getaddrinfo(name, port, *args, **kwargs):
        if log:
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(name + "\n")
        if name not in RESOLVER:
            raise socket.gaierror(-2, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 0)) for a in RESOLVER[name]]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def dark_members(monkeypatch, log: str) -> None:
    """Every connect hangs 5 s, as to a member that never answers SYN, and says so in ``log``."""
    def create_connection(address, timeout=None, *args, **kwargs):
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"{address[0]}\n")
        time.sleep(5)
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", create_connection)


def fake_run(calls: list):
    def run(argv, timeout):
        calls.append(list(argv))
        if argv[:3] == ["ip", "-j", "addr"]:
            return 0, IP_ADDR, ""
        return 127, "", f"{argv[0]}: not here"
    return run


def names(*hosts: str) -> list[dict]:
    return [{"host": h, "address": f"127.0.0.{h[1:]}", "names": [h]} for h in hosts]


def test_the_prologs_rows_are_the_node_checks_rows_on_the_same_node(monkeypatch):
    """Same ids, statuses and messages as the whole reading gives for data_plane.interface and
    names.resolve: a name that resolves right, elsewhere, not at all, first to loopback; the
    data-plane interface up, down, absent."""
    fake_resolver(monkeypatch)

    class Answered:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: Answered())
    entries = [{"host": "n1", "address": "127.0.0.1", "names": ["n1"]},
               {"host": "n2", "address": "127.0.0.2", "names": ["n2", "wrong"]},
               {"host": "n3", "address": "127.0.0.3", "names": ["absent"]},
               {"host": "n4", "address": "127.0.0.4", "names": ["looped"]}]
    for cidr, entries_here in (("127.0.0.0/8", entries[:1]), ("127.0.0.0/8", entries),
                               ("10.0.0.0/24", entries), ("192.168.77.0/24", [])):
        options = {"cidr": cidr, "names": entries_here, "timeout": 2.0}
        doc = {"host": "n1", "intent": {}}
        full = nodecheck.check(doc, node.read_facts(options, fake_run([]), lambda tool: None), PROLOG_MODULES)
        quick = nodecheck.check(doc, node.read_quick(options, None, fake_run([])), PROLOG_MODULES)
        want = [r for r in full if r["id"] in PROLOG_CHECKS]
        assert [r for r in quick if r["id"] in PROLOG_CHECKS] == want, cidr
        assert [r["id"] for r in want] == ["data_plane.interface", "names.resolve"]
    assert {r["id"]: r["status"] for r in want} == {"data_plane.interface": "FAIL", "names.resolve": "SKIP"}


def test_the_prologs_reading_runs_one_command_and_connects_to_no_member(monkeypatch, tmp_path):
    fake_resolver(monkeypatch)
    dark_members(monkeypatch, str(tmp_path / "connects"))
    calls: list = []
    start = time.monotonic()
    facts = node.read_quick({"cidr": "127.0.0.0/8", "names": names("n1", "n2", "n3"),
                             "torch_python": "/usr/bin/python3", "dataset_path": str(tmp_path)}, None, fake_run(calls))
    assert time.monotonic() - start < 1.0
    assert calls == [["ip", "-j", "addr", "show"]]  # no torch python, no nvidia-smi, ibstat, numactl
    assert not (tmp_path / "connects").exists()
    assert sorted(facts) == ["cidr", "data_plane", "host_names", "hostname", "interfaces"]
    assert [(r["host"], r["addresses"], r["reachable"]) for r in facts["host_names"]] == [
        ("n1", ["127.0.0.1"], None), ("n2", ["127.0.0.2"], None), ("n3", ["127.0.0.3"], None)]
    # only the members named
    facts = node.read_quick({"cidr": "127.0.0.0/8", "names": names("n1", "n2", "n3")}, {"n2"}, fake_run([]))
    assert [r["host"] for r in facts["host_names"]] == ["n2"]


def test_resolve_without_reach_looks_up_and_connects_to_none(monkeypatch, tmp_path):
    fake_resolver(monkeypatch)
    tried = []
    monkeypatch.setattr(host_names, "connect", lambda *a, **k: tried.append(a) or {"reachable": True})
    rows = host_names.resolve(names("n1", "n2"), 22, 2.0, reach=False)
    assert tried == [] and [(r["name"], r["reachable"], r["error"]) for r in rows] == [("n1", None, None),
                                                                                      ("n2", None, None)]
    assert [r["reachable"] for r in host_names.resolve(names("n1"), 22, 2.0)] == [True] and len(tried) == 1


def _intent(tmp_path, hosts: list[str], torch_python: str) -> str:
    path = tmp_path / "intent.json"
    entries = [{"host": h, "address": f"127.0.0.{n + 1}", "names": [h.split(".")[0]]} for n, h in enumerate(hosts)]
    path.write_text(json.dumps({
        "version": nodecheck.INTENT_VERSION, "host": hosts[0], "readers": {}, "intent": {},
        "node": {"cidr": "127.0.0.0/8", "names": entries, "torch_python": torch_python, "timeout": 5.0}}))
    return str(path)


def test_a_member_that_never_answers_costs_the_prolog_nothing_and_no_torch_probe_runs(monkeypatch, tmp_path):
    """Review N10: one member that did not answer SYN took 5.56 s of the Prolog's 6 s; on a GPU
    node the torch import came on top, so the reading passed its deadline: UNKNOWN for every job."""
    torch_python = tmp_path / "python"
    torch_python.write_text(f"#!/bin/sh\ntouch {tmp_path}/torch-probed\nsleep 5\n")
    torch_python.chmod(0o755)
    fake_resolver(monkeypatch)
    dark_members(monkeypatch, str(tmp_path / "connects"))
    intent = _intent(tmp_path, ["n1", "n2", "n3"], str(torch_python))
    start = time.monotonic()
    rows, why = quick_rows(intent, deadline=5)
    took = time.monotonic() - start
    # (names.resolve fails: every address here is loopback, which a rank must not advertise)
    assert why is None and [(r["id"], r["status"]) for r in rows] == [("data_plane.interface", "PASS"),
                                                                      ("names.resolve", "FAIL")]
    assert took < 1.0, took
    assert not (tmp_path / "connects").exists() and not (tmp_path / "torch-probed").exists()


def test_the_prolog_looks_up_only_the_names_of_the_jobs_nodes(monkeypatch, tmp_path):
    """SLURM_JOB_NODELIST (or SLURM_NODELIST) names the job's nodes; a Slurm name matches a member
    by its full or short name (node/preflight.py job_members); a node that is no member has no name."""
    log = tmp_path / "looked-up"
    fake_resolver(monkeypatch, str(log))
    intent = _intent(tmp_path, ["n1.example", "n2.example", "n3.example"], "/nonexistent")
    rows, why = quick_rows(intent, deadline=5, nodelist="n1,n3.example,gpu7")
    assert why is None and [r["id"] for r in rows] == list(PROLOG_CHECKS)
    assert sorted(log.read_text().split()) == ["n1", "n3"] and "n2" not in rows[1]["message"]
    log.unlink()
    rows, why = quick_rows(intent, deadline=5)  # no node list: every member's names
    assert why is None and sorted(log.read_text().split()) == ["n1", "n2", "n3"]
    # the Prolog's own environment: SLURM_NODELIST when SLURM_JOB_NODELIST is not there
    log.unlink()
    for name in ("SLURM_JOB_ID", "SLURM_JOB_UID", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_NODELIST", "n2")
    code = nodehealth.main(["--intent", intent, "--record", str(tmp_path / "none.json"), "--ledger",
                            str(tmp_path / "ledger.json"), "--node", "n2", "--dry-run"], "prolog")
    assert code == 0 and log.read_text().split() == ["n2"]
