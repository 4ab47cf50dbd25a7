"""`ncclprep node preflight` (module_utils/ncclprep/node/preflight.py): the job's nodes and ranks from
Slurm's environment, the members they are, the store's key, the options, the vetted nodes and the
exit codes. The run itself across nodes is tested on the local Slurm cluster
(tests/integration/test_local_cluster.py)."""

from __future__ import annotations

import json
import os
import typing

import pytest
from ansible.module_utils.ncclprep import cli
from ansible.module_utils.ncclprep.model import HostRecord
from ansible.module_utils.ncclprep.node import check as nodecheck
from ansible.module_utils.ncclprep.node import preflight as jobpreflight
from ansible.module_utils.ncclprep.node.preflight import (
    EXIT_COULD_NOT_RUN,
    EXIT_FAILED,
    EXIT_PASS,
    EXIT_USAGE,
    SETTABLE,
    Usage,
    job_from_env,
    job_from_members,
    job_members,
    job_token,
    options,
    read_members,
    verdict,
)

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs")
NODES = {"gpu[01-03]": ["gpu01", "gpu02", "gpu03"], "gpu[01,03]": ["gpu01", "gpu03"]}
ENV = {"SLURM_JOB_ID": "4242", "SLURMD_NODENAME": "gpu02", "SLURM_JOB_NODELIST": "gpu[01-03]",
       "SLURM_NNODES": "3", "SLURM_NTASKS": "3"}


def expand(nodelist):
    return NODES[nodelist]


def check(cid, status, hosts=()):
    return {"id": cid, "status": status, "hosts": list(hosts), "measured": None, "expected": None,
            "message": cid, "remediation": ""}


def test_the_rank_is_this_nodes_place_in_the_steps_node_list():
    assert job_from_env(ENV, expand) == {"job_id": "4242", "nodes": ["gpu01", "gpu02", "gpu03"], "rank": 1,
                                         "node": "gpu02", "launcher": "slurm"}
    # a step on part of the job's nodes: the step's list and counts win over the job's
    step = dict(ENV, SLURMD_NODENAME="gpu03", SLURM_STEP_NODELIST="gpu[01,03]", SLURM_STEP_NUM_NODES="2",
                SLURM_STEP_NUM_TASKS="2")
    assert job_from_env(step, expand)["nodes"] == ["gpu01", "gpu03"]
    assert job_from_env(step, expand)["rank"] == 1


def test_outside_a_job_step_or_with_more_tasks_than_nodes_it_says_how_to_run_it():
    with pytest.raises(Usage, match="SLURM_JOB_ID not set: run it as a job step.*srun --ntasks-per-node=1"):
        job_from_env({k: v for k, v in ENV.items() if k != "SLURM_JOB_ID"}, expand)
    with pytest.raises(Usage, match="6 tasks on 3 nodes: the preflight runs one task per node"):
        job_from_env(dict(ENV, SLURM_NTASKS="6"), expand)
    with pytest.raises(Usage, match="this node, gpu09, is not in the step's nodes gpu"):
        job_from_env(dict(ENV, SLURMD_NODENAME="gpu09"), expand)
    # plain names need no scontrol
    assert jobpreflight.hostnames("gpu01,gpu07") == ["gpu01", "gpu07"]


def test_slurm_names_map_to_members_by_full_or_short_name_and_unknown_ones_are_named():
    members = {"gpu01.cluster": "10.0.0.1", "gpu02": "10.0.0.2", "gpu03": "10.0.0.3"}
    assert job_members(members, ["gpu03", "gpu01", "gpu02.cluster"]) == (
        ["gpu03", "gpu01.cluster", "gpu02"], ["10.0.0.3", "10.0.0.1", "10.0.0.2"])
    with pytest.raises(nodecheck.CouldNotRun, match=r"Slurm node\(s\) gpu07, login are no members .*gpu01.cluster"):
        job_members(members, ["gpu01", "gpu07", "login"])


def test_the_stores_key_is_the_jobs_secret_else_one_derived_from_the_job_id_and_said_so():
    assert job_token({"NCCLPREP_PREFLIGHT_TOKEN": "s3cret"}, "7") == ("s3cret", True)
    derived, sealed = job_token({}, "7")
    assert not sealed and len(derived) == 32
    assert job_token({}, "7")[0] == derived != job_token({}, "8")[0]


def test_the_secrets_file_is_read_once_and_removed_and_one_others_could_read_is_refused(tmp_path, capsys):
    """validate.yml hands the run's secret in a file (--token-file), not in the environment that
    Ansible's async start puts on a command line (docs/security.md)."""
    good = tmp_path / "good.token"
    good.write_text("s3cret\n")
    good.chmod(0o600)
    assert jobpreflight.read_token_file(str(good)) == "s3cret"
    assert not good.exists()
    loose = tmp_path / "loose.token"
    loose.write_text("s3cret\n")
    loose.chmod(0o644)
    with pytest.raises(Usage, match=r"mode 0644: its group or others may read it"):
        jobpreflight.read_token_file(str(loose))
    link = tmp_path / "link.token"
    link.symlink_to(loose)
    with pytest.raises(Usage, match=r"link\.token: .*a regular file, not a link"):
        jobpreflight.read_token_file(str(link))
    empty = tmp_path / "empty.token"
    empty.write_text("\n")
    empty.chmod(0o600)
    with pytest.raises(Usage, match="empty"):
        jobpreflight.read_token_file(str(empty))
    with pytest.raises(Usage, match="No such file"):
        jobpreflight.read_token_file(str(tmp_path / "absent"))
    fifo = tmp_path / "fifo.token"  # opened without waiting for a writer, and refused
    os.mkfifo(fifo, 0o600)
    with pytest.raises(Usage, match="fifo.token: not a regular file"):
        jobpreflight.read_token_file(str(fifo))
    # through the command line: refused with exit 2 and the file named, before the member list is read
    assert jobpreflight.main(["--nodes", "a,b", "--token-file", str(loose)], env={}) == EXIT_USAGE
    assert f"--token-file {loose}: mode 0644" in capsys.readouterr().err


SETTINGS = {
    "cpu_binding": ["0-15", "16-31"],
    "net": {"store_port": 29520, "listen_port": 29521, "ports": [29400], "ephemeral_sample": 4, "mtu": 4096,
            "latency_samples": 50, "bandwidth_seconds": 0.25, "matchings": 2, "every_pair": False, "repair": 2,
            "max_latency_us": 50, "slow_z": -3.5, "slow_ratio": 0.5, "min_gbps": None, "join_timeout": 30,
            "step_timeout": 2.0, "connect_timeout": 1.0, "timeout": 120, "enabled": True},
    "probe": {"port": 29510, "ops": ["all_reduce"], "sizes": [4096], "warmup": 1, "iters": 2, "timeout": 60,
              "join_timeout": 20, "local_ranks": None, "blame": True, "blame_timeout": 30, "enabled": True},
    "report": {"min_busbw_gbps": 5.0, "expect_net": None, "link_floor_ratio": 0.1},
}


def test_the_options_are_validate_ymls_settings_for_the_jobs_nodes_in_rank_order():
    o = options(SETTINGS, ["a", "b"], ["10.0.0.1", "10.0.0.2"], 1, "tok", "slurm-7", [2, 2])
    assert o["net"]["rank"] == 1 and o["net"]["hosts"] == ["a", "b"] and o["net"]["token"] == "tok"
    assert o["net"]["addresses"] == ["10.0.0.1", "10.0.0.2"] and o["net"]["mtu"] == 4096
    assert o["net"]["seed"] == "slurm-7" and o["net"]["timeout"] == 120
    from ansible.module_utils.ncclprep.probes.net import OPTIONS, bad_input

    assert set(o["net"]) == set(OPTIONS) and bad_input(o["net"]) is None
    assert o["probe"]["master_addr"] == "10.0.0.1" and o["probe"]["master_port"] == 29510
    assert o["probe"]["local_ranks"] == [2, 2] and o["probe"]["cpu_binding"] == ["0-15", "16-31"]
    assert o["probe"]["blame_floor"] == 5.0
    # a binding that does not fit this node's ranks binds none
    assert options(SETTINGS, ["a", "b"], ["x", "y"], 0, "t", "s", [1, 1])["probe"]["cpu_binding"] == []


def test_the_vetted_nodes_are_those_no_failed_check_names_and_need_decides_the_exit():
    checks = [check("host.reachable", "PASS"), check("net.latency", "FAIL", ["n2 <-> n3"]),
              check("sysctl.somaxconn", "WARN", ["n4"]), check("collective.all_reduce", "HANG", ["n2"])]
    hosts = ["n1", "n2", "n3", "n4"]
    assert verdict(checks, hosts, None) == {"status": "FAIL", "code": EXIT_FAILED, "vetted": ["n1", "n4"],
                                            "excluded": ["n2", "n3"], "need": None}
    assert verdict(checks, hosts, 2)["code"] == EXIT_PASS
    assert verdict(checks, hosts, 3)["code"] == EXIT_FAILED
    # a failure that names none of the job's hosts counts against all of them
    assert verdict([check("versions.torch", "FAIL")], hosts, 1)["vetted"] == []
    assert verdict([check("net.latency", "PASS")], hosts, None) == {
        "status": "PASS", "code": EXIT_PASS, "vetted": hosts, "excluded": [], "need": None}


def test_a_member_list_reads_one_name_a_line_and_refuses_an_empty_one_or_a_name_twice(tmp_path):
    """--members FILE: names in rank order; blank lines and comments skipped; an MPI hostfile's
    ``slots=`` ignored. Unreadable, empty or with a name twice: Usage naming the file."""
    listed = tmp_path / "members"
    listed.write_text("# the job's nodes\nnode2 slots=8\n\n  node1  # the first\nnode3\n")
    assert read_members(str(listed)) == ["node2", "node1", "node3"]
    listed.write_text("node1\nnode2\nnode1\n")
    with pytest.raises(Usage, match=f"--members {listed}: node1 listed twice"):
        read_members(str(listed))
    listed.write_text("# nobody\n\n")
    with pytest.raises(Usage, match=f"--members {listed}: no member named"):
        read_members(str(listed))
    with pytest.raises(Usage, match=f"--members {tmp_path / 'absent'}: .*No such file"):
        read_members(str(tmp_path / "absent"))


def test_a_member_lists_rank_is_the_launchers_else_this_nodes_place_and_never_another_nodes():
    nodes = ["node1", "node2.cluster", "node3"]
    mine = job_from_members(nodes, "node2", None, None)
    assert mine == {"job_id": mine["job_id"], "nodes": nodes, "rank": 1, "node": "node2.cluster",
                    "launcher": "members"}
    # every node draws the same id from the same list, another list another id; a given id wins
    assert job_from_members(nodes, "node3", None, None)["job_id"] == mine["job_id"]
    assert job_from_members(nodes[:2], "node1", None, None)["job_id"] != mine["job_id"]
    assert job_from_members(nodes, "node3", "2", "val-7")["job_id"] == "val-7"
    assert job_from_members(nodes, "node3", 2, None)["rank"] == 2
    with pytest.raises(Usage, match=r"rank 1 is node2.cluster in the member list, but this node is node3"):
        job_from_members(nodes, "node3", "1", None)
    with pytest.raises(Usage, match=r"rank 3: valid: 0..2 \(the member list names 3\)"):
        job_from_members(nodes, "node3", "3", None)
    with pytest.raises(Usage, match=r"rank 'two': valid: an integer 0..2"):
        job_from_members(nodes, "node3", "two", None)
    with pytest.raises(Usage, match=r"this node, node9, is not in the member list \(node1, node2.cluster, node3\)"):
        job_from_members(nodes, "node9", None, None)


def test_a_member_launch_takes_its_list_and_rank_from_the_environment_too(tmp_path, capsys, monkeypatch):
    """NCCLPREP_MEMBERS and NCCLPREP_RANK (or a Kubernetes indexed Job's JOB_COMPLETION_INDEX) stand
    for --members and --rank; Slurm's environment is not read then. The list is checked before the
    intent, the rank against the intent's host."""
    listed = tmp_path / "members"
    listed.write_text("gpu01\ngpu02\n")
    intent = tmp_path / "intent.json"
    intent.write_text(json.dumps({"version": nodecheck.INTENT_VERSION, "host": "gpu02", "node": {}, "readers": {},
                                  "intent": {}}))
    seen = []
    monkeypatch.setattr(jobpreflight, "run", lambda doc, job, opts, env: seen.append((job, opts.hostfile)) or 0)
    env = dict(ENV, NCCLPREP_MEMBERS=str(listed), JOB_COMPLETION_INDEX="1", SLURM_JOB_ID="9")
    assert jobpreflight.main(["--intent", str(intent)], env=env) == EXIT_PASS
    [(job, hostfile)] = seen
    assert job["launcher"] == "members" and job["nodes"] == ["gpu01", "gpu02"] and job["rank"] == 1
    assert hostfile == f"./ncclprep-hosts.{job['job_id']}"
    env = dict(env, NCCLPREP_RANK="0")  # ours before Kubernetes': rank 0 is gpu01, not this node
    assert jobpreflight.main(["--intent", str(intent)], env=env) == EXIT_USAGE
    assert "gpu02: rank 0 is gpu01 in the member list, but this node is gpu02" in capsys.readouterr().err
    listed.write_text("gpu01\ngpu01\n")
    assert jobpreflight.main(["--members", str(listed), "--intent", str(tmp_path / "absent")], env={}) == EXIT_USAGE
    assert "gpu01 listed twice" in capsys.readouterr().err


def test_the_nodes_inline_stand_for_a_member_list_and_the_settings_change_this_runs_values(tmp_path, capsys,
                                                                                           monkeypatch):
    """--nodes a,b,c is --members' list inline (validate.yml gives it so, no file to write on every
    node); --settings changes the intent's settings for one run as validate.yml's -e does, and is
    refused naming the key and value when it is not JSON, names no known section or key, or is of
    another kind than the intent's value."""
    intent = tmp_path / "intent.json"
    intent.write_text(json.dumps({"version": nodecheck.INTENT_VERSION, "host": "gpu02", "readers": {}, "intent": {},
                                  "node": {"dataset_path": None, "timeout": 5.0, "cidr": "10.0.0.0/24"},
                                  "job": dict(SETTINGS, ssh=None, smoke={"enabled": True, "timeout": 120})}))
    seen = []
    monkeypatch.setattr(jobpreflight, "run", lambda doc, job, opts, env: seen.append((doc, job)) or 0)
    given = {"probe": {"timeout": 36, "join_timeout": 12}, "smoke": {"enabled": False},
             "node": {"dataset_path": "/data"}, "report": {"min_busbw_gbps": 2}, "ssh": {"timeout": 3.0}}
    env = {"NCCLPREP_MEMBERS": str(tmp_path / "absent")}  # --nodes wins over the environment's list
    assert jobpreflight.main(["--nodes", "gpu01,gpu02", "--intent", str(intent), "--settings", json.dumps(given)],
                             env=env) == EXIT_PASS
    [(doc, job)] = seen
    assert job["nodes"] == ["gpu01", "gpu02"] and job["rank"] == 1 and job["launcher"] == "members"
    assert doc["job"]["probe"] == dict(SETTINGS["probe"], timeout=36, join_timeout=12)
    assert doc["job"]["smoke"] == {"enabled": False, "timeout": 120}
    assert doc["job"]["report"]["min_busbw_gbps"] == 2 and doc["job"]["net"] == SETTINGS["net"]
    assert doc["node"] == {"dataset_path": "/data", "timeout": 5.0, "cidr": "10.0.0.0/24"}
    assert doc["job"]["ssh"] is None  # the ssh_trust concern off stays off
    assert json.loads(intent.read_text())["job"]["probe"]["timeout"] == 60  # the intent itself is not changed
    for argv, error in (
            (["--nodes", "gpu01,gpu01"], "--nodes: gpu01 listed twice"),
            (["--nodes", " , "], "--nodes ' , ': no member named"),
            (["--nodes", "gpu02", "--members", str(intent)], "--members and --nodes both given"),
            (["--nodes", "gpu02", "--settings", "{probe"], "--settings is not JSON: "),
            (["--nodes", "gpu02", "--settings", "[1]"], "--settings '[1]': a JSON object of sections"),
            (["--nodes", "gpu02", "--settings", '{"members": {}}'], "--settings: unknown section 'members'; valid: "
                                                                     "net, probe, smoke, ssh, drift, report, node"),
            (["--nodes", "gpu02", "--settings", '{"probe": 3}'], "--settings: probe is 3, not an object"),
            (["--nodes", "gpu02", "--settings", '{"probe": {"timout": 3}}'], "--settings: unknown key probe.timout; "
                                                                             "valid: blame, blame_timeout, enabled, "),
            (["--nodes", "gpu02", "--settings", '{"node": {"cidr": "0.0.0.0/0"}}'],
             "--settings: unknown key node.cidr; valid: connect_port, dataset_path, timeout"),
            (["--nodes", "gpu02", "--settings", '{"probe": {"timeout": "36"}}'],
             '--settings: probe.timeout="36" (preflight_probe_timeout): the intent\'s is 60, of another kind'),
            (["--nodes", "gpu02", "--settings", '{"smoke": {"enabled": 1}}'],
             "--settings: smoke.enabled=1 (preflight_smoke_enabled): the intent's is true, of another kind")):
        assert jobpreflight.main([*argv, "--intent", str(intent)], env={}) == EXIT_USAGE, argv
        assert error in capsys.readouterr().err, argv
    assert len(seen) == 1


def test_what_settings_may_change_is_the_tables_and_validate_yml_hands_on_the_table():
    """jobpreflight.SETTABLE is node/settings.py's table, section by section (every key with its
    variable), and the preflight role's __preflight_run_settings (what site.yml records in the intent's
    job key and validate.yml passes with --settings) is the lookup that builds every one of them."""
    import yaml
    from ansible.module_utils.ncclprep.node import settings

    role = os.path.join(os.path.dirname(DOCS), "roles", "preflight")
    with open(os.path.join(role, "vars", "main.yml"), encoding="utf-8") as fh:
        run_settings = yaml.safe_load(fh)["__preflight_run_settings"]
    assert run_settings == "{{ query('ncclprep_preflight_settings') | first }}"
    assert SETTABLE == {sec: {s.key: s.var for s in settings.SETTINGS if s.section == sec} for sec in settings.SECTIONS}
    assert sum(len(keys) for keys in SETTABLE.values()) == len(settings.SETTINGS) == len(settings.BY_VAR)


def test_settings_out_of_range_are_refused_before_anything_joins(tmp_path, capsys, monkeypatch):
    """The settings' ranges (node/settings.py problems) on the intent's settings with --settings over
    them: exit 2 naming host, variable, value and what is valid, every problem at once, before the
    job's store is opened."""
    intent = tmp_path / "intent.json"
    intent.write_text(json.dumps({"version": nodecheck.INTENT_VERSION, "host": "gpu02", "readers": {}, "intent": {},
                                  "node": {}, "job": dict(SETTINGS, members={"gpu01": "10.0.0.1", "gpu02": "10.0.0.2"},
                                                          ssh={"peers": 32}, smoke={"enabled": False})}))
    opened = []
    monkeypatch.setattr(jobpreflight, "open_signed_store", lambda *a: opened.append(a))
    for given, error in (({"probe": {"join_timeout": 60}},
                          "gpu02: preflight_probe_join_timeout=60: valid: below preflight_probe_timeout (60)"),
                         ({"probe": {"ops": ["allreduce"]}},
                          "gpu02: preflight_probe_ops=[\"allreduce\"]: valid: a list of collectives, each one of "
                          "all_gather, all_reduce, all_to_all, broadcast, reduce_scatter"),
                         ({"net": {"store_port": 70000}, "probe": {"blame_timeout": 5}},
                          "gpu02: preflight_net_store_port=70000: valid: a TCP port, 1..65535; gpu02: "
                          "preflight_probe_blame_timeout=5: valid: an integer >= 10 (seconds of one blame round, half "
                          "of them for the ranks to arrive)"),
                         ({"net": {"timeout": 40}},
                          "gpu02: preflight_net_timeout=40: valid: at least 86 s, preflight_net_join_timeout (30 s) "
                          "plus one round's deadline and 10 s; below it a node lost mid-run gets every node's probe "
                          "killed instead of named"),
                         ({"node": {"timeout": 0}}, "gpu02: preflight_name_timeout=0: valid: seconds > 0"),
                         ({"ssh": {"peers": 0}}, "gpu02: preflight_ssh_peers=0: valid: null or an integer >= 1")):
        argv = ["--nodes", "gpu01,gpu02", "--intent", str(intent), "--settings", json.dumps(given)]
        assert jobpreflight.main(argv, env={}) == EXIT_USAGE, given
        err = capsys.readouterr().err
        assert f"ncclprep node preflight: gpu02: the preflight settings: {error}\n" in err, err
    # a batch job's environment gives them to every task srun starts; --settings, where given, wins
    argv = ["--nodes", "gpu01,gpu02", "--intent", str(intent)]
    env = {"NCCLPREP_PREFLIGHT_SETTINGS": json.dumps({"probe": {"blame_timeout": 9}})}
    assert jobpreflight.main(argv, env=env) == EXIT_USAGE
    assert "gpu02: preflight_probe_blame_timeout=9: valid: an integer >= 10" in capsys.readouterr().err
    assert jobpreflight.main([*argv, "--settings", '{"net": {"timeout": 40}}'], env=env) == EXIT_USAGE
    assert "preflight_probe_blame_timeout" not in capsys.readouterr().err
    assert opened == []


def test_bad_usage_exits_2_and_a_missing_intent_exits_3(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(jobpreflight, "hostnames", expand)
    assert jobpreflight.main([], env={}) == EXIT_USAGE
    assert "not set: run it as a job step" in capsys.readouterr().err
    assert jobpreflight.main(["--need", "0"], env=ENV) == EXIT_USAGE
    assert "--need=0: valid: an integer >= 1" in capsys.readouterr().err
    assert jobpreflight.main(["--need", "4"], env=ENV) == EXIT_USAGE
    assert "--need=4 is more than the step's 3 nodes" in capsys.readouterr().err
    absent = tmp_path / "intent.json"
    assert jobpreflight.main(["--intent", str(absent)], env=ENV) == EXIT_COULD_NOT_RUN
    assert f"gpu02: {absent} does not exist: run site.yml" in capsys.readouterr().err
    # an intent from before the job settings: run site.yml again
    absent.write_text('{"version": 1, "host": "gpu02", "node": {}, "readers": {}, "intent": {}}')
    assert jobpreflight.main(["--intent", str(absent)], env=ENV) == EXIT_COULD_NOT_RUN
    assert "no job settings: run site.yml again" in capsys.readouterr().err


def test_the_node_command_hands_node_preflight_to_the_jobs_preflight(capsys, monkeypatch):
    for key in ("SLURM_JOB_ID", "SLURMD_NODENAME", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST"):
        monkeypatch.delenv(key, raising=False)
    assert cli.main(["node", "preflight"]) == EXIT_USAGE
    assert "ncclprep node preflight: " in capsys.readouterr().err
    assert cli.main(["node", "nonsense"]) == EXIT_USAGE
    assert "ncclprep node preflight [--need K]" in capsys.readouterr().err


def test_the_command_says_why_it_cannot_run_without_the_reports_libraries(tmp_path):
    """Without its intent the node command cannot find the torch venv and stays on the system
    python, which may lack jinja2 (the HTML report's): it must still say what is missing (exit 3),
    not crash importing the reports (seen on the local cluster)."""
    import os
    import subprocess
    import sys

    blocker = tmp_path / "jinja2.py"
    blocker.write_text("raise ImportError('no jinja2 here')\n")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("import sys, ncclprep; sys.argv = ['ncclprep', 'node', 'preflight', '--intent', sys.argv[1]];"
            "from ansible.module_utils.ncclprep.cli import main; sys.exit(main())")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.path.join(repo, "src")]),
               SLURM_JOB_ID="7", SLURMD_NODENAME="gpu01", SLURM_STEP_NODELIST="gpu01", NCCLPREP_REEXEC="1")
    env.pop("SLURM_JOB_NODELIST", None)
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "absent.json")], capture_output=True,
                         text=True, env=env, timeout=60)
    assert out.returncode == EXIT_COULD_NOT_RUN, out.stderr
    assert f"{tmp_path / 'absent.json'} does not exist: run site.yml" in out.stderr


class DictStore:
    """The job's store as one node sees it alone: check, get, set and add on a dict."""

    def __init__(self):
        self.data = {}

    def set(self, key, value):
        self.data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key):
        return self.data[key]

    def check(self, keys):
        return all(k in self.data for k in keys)

    def add(self, key, amount):
        self.data[key] = str(int(self.data.get(key, b"0")) + amount).encode()
        return int(self.data[key])


def one_node_run(tmp_path, monkeypatch, env, keep=(), doc=None, **opts):
    """``jobpreflight.run`` on a one-node job (gpu01, job 7) with the network probe and the
    collectives off, the smoke step on and its launch recorded instead of run, judged by the run's
    own checks (host.*, torchrun.*, and those starting with one of ``keep``; ``doc``: more of the
    intent document): (exit code, the run_job calls, the report's checks by id)."""
    import argparse
    import json

    from ansible.module_utils.ncclprep.probes import smoke as ddp_smoke

    calls = []

    def run_job(*args, **kwargs):
        calls.append((args, kwargs))
        return {"status": "PASS", "rc": 0, "workers": [{"rank": 0, "world_size": 1, "params_identical": True}],
                "elapsed_s": 1.0, "log_tail": [], "error": None, "host": args[10]}

    monkeypatch.setattr(ddp_smoke, "run_job", run_job)
    monkeypatch.setattr(jobpreflight, "open_signed_store", lambda *a: (DictStore(), None))
    monkeypatch.setattr(nodecheck, "read_node", lambda reading: {"hostname": "gpu01"})
    # the node's reading is not under test: only the run's own checks are kept
    evaluate = jobpreflight.evaluate
    monkeypatch.setattr(jobpreflight, "evaluate",
                        lambda *a: [c for c in evaluate(*a) if c["id"].startswith(("host.", "torchrun.", *keep))])
    settings = dict(SETTINGS, members={"gpu01": "10.0.0.1"}, launcher="/usr/local/bin/ncclprep-torchrun",
                    script="/x/ncclprep_train.py", env_file=None,
                    net=dict(SETTINGS["net"], enabled=False), probe=dict(SETTINGS["probe"], enabled=False),
                    smoke={"enabled": True, "steps": 2, "accumulation": 1, "timeout": 60})
    job = {"job_id": "7", "nodes": ["gpu01"], "rank": 0, "node": "gpu01", "launcher": opts.pop("launcher", "slurm")}
    options_ = argparse.Namespace(**{"need": None, "report_dir": str(tmp_path / "reports"), "json": False,
                                     "records": False, "inventory_digest": None, "hostfile": str(tmp_path / "hosts"),
                                     **opts})
    code = jobpreflight.run({"job": settings, "intent": {}, **(doc or {})}, job, options_, env)
    written = tmp_path / "reports" / "latest" / "cluster.json"
    checks = json.loads(written.read_text())["checks"] if written.exists() else []
    return code, calls, {c["id"]: c for c in checks}


def test_the_runs_report_follows_the_schema_and_says_which_launcher_started_it(tmp_path, monkeypatch):
    """cluster.json of ``ncclprep node preflight`` against docs/report-schema.json: the srun path
    wrote a ``slurm`` key the schema does not allow; both launchers now write ``launch``. A run
    from a member list leaves no claim for Slurm's Epilog."""
    import jsonschema

    with open(os.path.join(DOCS, "report-schema.json"), encoding="utf-8") as fh:
        schema = json.load(fh)
    claims = []
    monkeypatch.setattr(jobpreflight, "_leave_claim", lambda *a: claims.append(a))
    for launcher in ("slurm", "members"):
        assert one_node_run(tmp_path, monkeypatch, {"NCCLPREP_PREFLIGHT_TOKEN": "s3cret"}, launcher=launcher)[0] == 0
        cluster = json.loads((tmp_path / "reports" / "latest" / "cluster.json").read_text())
        jsonschema.validate(cluster, schema)
        assert cluster["launch"] == {"launcher": launcher, "run_id": "7", "nodes": ["gpu01"]}
    assert [a[0] for a in claims] == ["7"]  # the Slurm run's only


def test_for_a_launcher_that_writes_the_reports_the_first_node_prints_the_records(tmp_path, monkeypatch, capsys):
    """--records (validate.yml's launch): no reports on the node; the last line of the first node's
    output is the verdict with every node's record, as validate.yml's cluster_report takes them."""
    code, _, _ = one_node_run(tmp_path, monkeypatch, {"NCCLPREP_PREFLIGHT_TOKEN": "s"}, records=True)
    assert code == 0 and not (tmp_path / "reports").exists()
    out = capsys.readouterr().out.splitlines()
    assert out[-2] == "ncclprep node preflight: preflight PASS on 1 nodes, the records to the launcher"
    last = json.loads(out[-1])
    assert (last["status"], last["code"], last["hosts"], last["problems"]) == ("PASS", 0, ["gpu01"], [])
    record = last["records"]["gpu01"]
    assert record["alive"] is True and record["facts"] == {"hostname": "gpu01"}
    assert record["smoke"]["status"] == "PASS"
    assert set(record) == set(typing.get_type_hints(HostRecord))  # every field of the record, no other


def test_a_node_lost_after_the_probes_is_left_out_of_the_training_job(tmp_path, monkeypatch):
    """The training job's launcher waits for every node of its hostfile: gpu02, there at the join but
    gone after the probes (frozen, as the fault suite's paused node3), would hang it for gpu01 until
    its deadline. The nodes still there are decided once (a rendezvous ``smoke``); the job runs on
    them; the lost node is named not alive by the report."""
    import argparse

    from ansible.module_utils.ncclprep.probes import smoke as ddp_smoke

    key = jobpreflight.run_key({"job_id": "7", "nodes": ["gpu01", "gpu02"]})
    decided = {"gpus": {0: f"0 {key}", 1: f"0 {key}"}, "probed": {0: "ready"}}
    asked, hostfiles = [], []
    monkeypatch.setattr(jobpreflight, "rendezvous", lambda store, keeper, rank, world, name, *a, **kw:
                        asked.append((name, rank, world)) or decided[name])
    monkeypatch.setattr(jobpreflight, "open_signed_store", lambda *a: (DictStore(), None))
    monkeypatch.setattr(jobpreflight, "missing_keys", lambda store, keys, _s: [k for k in keys if k not in store.data])
    monkeypatch.setattr(nodecheck, "read_node", lambda reading: {"hostname": "gpu01"})

    def run_job(*args, env=None, **kwargs):
        hostfiles.append(open(env["NCCLPREP_HOSTFILE"]).read())
        return {"status": "PASS", "rc": 0, "workers": [{"rank": 0, "world_size": 1, "params_identical": True}],
                "elapsed_s": 1.0, "log_tail": [], "error": None, "host": args[10]}

    monkeypatch.setattr(ddp_smoke, "run_job", run_job)
    settings = dict(SETTINGS, members={"gpu01": "10.0.0.1", "gpu02": "10.0.0.2"}, ssh=None, env_file=None,
                    launcher="/usr/local/bin/ncclprep-torchrun", script="/x/ncclprep_train.py",
                    net=dict(SETTINGS["net"], enabled=False), probe=dict(SETTINGS["probe"], enabled=False),
                    smoke={"enabled": True, "steps": 2, "accumulation": 1, "timeout": 60})
    job = {"job_id": "7", "nodes": ["gpu01", "gpu02"], "rank": 0, "node": "gpu01", "launcher": "members"}
    opts = argparse.Namespace(need=None, report_dir=str(tmp_path / "reports"), json=False, records=False,
                              inventory_digest=None, hostfile=str(tmp_path / "hosts"))
    assert jobpreflight.run({"job": settings, "intent": {}}, job, opts, {"NCCLPREP_PREFLIGHT_TOKEN": "s"}) == 1
    assert ("probed", 0, 2) in asked and hostfiles == ["gpu01\n"]
    checks = {c["id"]: c for c in json.loads((tmp_path / "reports" / "latest" / "cluster.json").read_text())["checks"]}
    assert checks["host.reachable"]["status"] == "FAIL" and checks["host.reachable"]["hosts"] == ["gpu02"]
    assert checks["torchrun.smoke"]["status"] == "PASS"


def test_a_node_given_another_run_id_is_told_so_and_left_out(tmp_path, monkeypatch, capsys):
    """Three nodes started with a run id each (seen on the local cluster: ``$RANDOM`` expanded on each
    node): their probes and the smoke job's rendezvous ran apart, the smoke job FAILed after its
    60 s deadline with a C++ frame for a message. Each node posts its run id and member list with
    its GPU count; one that differs from the first node's exits 2 saying why."""
    import argparse

    posted = {0: "0 r1/" + jobpreflight.run_key({"job_id": "x", "nodes": ["gpu01", "gpu02"]}).split("/")[1],
              1: "0 r2/ab"}
    monkeypatch.setattr(jobpreflight, "open_signed_store", lambda *a: (DictStore(), None))
    monkeypatch.setattr(jobpreflight, "rendezvous", lambda *a, **k: dict(posted))
    settings = dict(SETTINGS, members={"gpu01": "10.0.0.1", "gpu02": "10.0.0.2"})
    job = {"job_id": "r2", "nodes": ["gpu01", "gpu02"], "rank": 1, "node": "gpu02", "launcher": "members"}
    opts = argparse.Namespace(need=None, report_dir=str(tmp_path), json=False, hostfile=str(tmp_path / "h"),
                              records=False, inventory_digest=None)
    assert jobpreflight.run({"job": settings, "intent": {}}, job, opts, {}) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "gpu02: this node was given another run than gpu01" in err
    assert "every node must be given the same --members and --run-id" in err


def test_the_engine_logs_in_to_its_peers_as_ssh_yml_does_and_skips_without_the_key(tmp_path, monkeypatch):
    """ssh.trust from the engine (issue 42 item 1): the intent's job.ssh settings, sshmesh's targets
    (each peer by name, then address) and rounds; none when the concern is off, or when this user
    cannot read the cluster key (a job's user under srun), so ssh.trust is a SKIP there, not a
    FAIL for a key that was never this user's."""
    from ansible.module_utils.ncclprep.probes import sshmesh

    said, calls = [], []
    monkeypatch.setattr(sshmesh, "run_in_rounds", lambda targets, p: calls.append((targets, p)) or ["ran"])
    key = tmp_path / "cluster_key"
    key.write_text("k")
    ssh = {"user": "root", "identity": str(key), "known_hosts": "/etc/ssh/ssh_known_hosts", "peers": 32,
           "timeout": 15.0, "parallel": 4}
    nodes, addresses = ["n1", "n2", "n3"], ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert jobpreflight.logins(ssh, "n2", nodes, addresses, "r", said.append) == ["ran"]
    [(targets, p)] = calls
    assert targets == [{"host": "n3", "name": "n3"}, {"host": "n3", "name": "10.0.0.3"},
                       {"host": "n1", "name": "n1"}, {"host": "n1", "name": "10.0.0.1"}]
    assert (p["user"], p["identity"], p["known_hosts"], p["timeout"], p["parallel"]) == (
        "root", str(key), "/etc/ssh/ssh_known_hosts", 15.0, 4)
    assert jobpreflight.logins(None, "n2", nodes, addresses, "r", said.append) is None
    assert jobpreflight.logins(ssh, "n1", ["n1"], ["10.0.0.1"], "r", said.append) is None  # no peer
    monkeypatch.setattr(jobpreflight.os, "access", lambda path, mode: False)
    assert jobpreflight.logins(ssh, "n2", nodes, addresses, "r", said.append) is None
    assert said[-1] == f"n2: ssh.trust not read: this user cannot read the cluster key {key}"
    assert len(calls) == 1


def test_the_engine_compares_the_managed_files_as_root_and_skips_as_a_jobs_user(tmp_path, monkeypatch):
    """drift.files from the engine (issue 42 item 1): the node's managed files against the record
    site.yml wrote (the intent's ``managed``), a hand edit named as validate.yml names it; SKIP, each
    said, for a job's user (the record and the files are root's to read) and without a record."""
    conf = tmp_path / "nccl.conf"
    conf.write_text("NCCL_DEBUG=WARN\nNCCL_DEBUG=TRACE\n")
    conf.chmod(0o644)
    record = tmp_path / "managed.json"
    record.write_text(json.dumps({"version": 1, "files": [
        {"concern": "nccl_env", "path": str(conf), "kind": "file", "mode": "0644", "content": "NCCL_DEBUG=WARN\n"}]}))
    said = []
    monkeypatch.setattr(jobpreflight.os, "geteuid", lambda: 0)
    [row] = jobpreflight.drift_rows(str(record), "gpu01", said.append)
    assert (row["concern"], row["state"], row["path"]) == ("nccl_env", "differs", str(conf))
    code, _, checks = one_node_run(tmp_path, monkeypatch, {"NCCLPREP_PREFLIGHT_TOKEN": "s"}, keep=("drift.",),
                                   doc={"managed": str(record)})
    assert code == 1
    assert checks["drift.files"]["status"] == "FAIL" and checks["drift.files"]["hosts"] == ["gpu01"]
    assert checks["drift.files"]["message"] == f"gpu01: {conf} differs: +NCCL_DEBUG=TRACE (nccl_env)"
    # the inventory changed since site.yml wrote the files: a stale row beside them
    rows = jobpreflight.drift_rows(str(record), "gpu01", said.append, ("a1", "b2"))
    assert [r["state"] for r in rows] == ["differs", "stale"] and rows[1]["recorded"] == "a1"
    assert jobpreflight.drift_rows(str(record), "gpu01", said.append, ("a1", "a1"))[-1]["state"] == "differs"
    conf.write_text("NCCL_DEBUG=WARN\n")
    code, _, checks = one_node_run(tmp_path, monkeypatch, {"NCCLPREP_PREFLIGHT_TOKEN": "s"}, keep=("drift.",),
                                   doc={"managed": str(record), "inventory": "a1"}, inventory_digest="b2")
    assert code == 0 and checks["drift.files"]["status"] == "WARN" and checks["drift.files"]["hosts"] == ["gpu01"]
    assert checks["drift.files"]["message"] == (
        "gpu01: the inventory changed since site.yml last wrote these files (its digest a1, now b2); the 1 managed "
        "files hold what it asked for then")
    code, _, checks = one_node_run(tmp_path, monkeypatch, {"NCCLPREP_PREFLIGHT_TOKEN": "s"}, keep=("drift.",),
                                   doc={"managed": str(record), "inventory": "b2"}, inventory_digest="b2")
    assert code == 0 and checks["drift.files"]["status"] == "PASS"
    assert jobpreflight.drift_rows(None, "gpu01", said.append) is None
    assert said[-1] == ("gpu01: drift.files not read: the intent names no record of the managed files (site.yml "
                        "of an older ncclprep)")
    assert jobpreflight.drift_rows(str(tmp_path / "none.json"), "gpu01", said.append) is None
    assert said[-1].startswith("gpu01: drift.files not read: no record of the managed files at ")
    monkeypatch.setattr(jobpreflight.os, "geteuid", lambda: 1000)
    assert jobpreflight.drift_rows(str(record), "gpu01", said.append) is None
    assert said[-1] == "gpu01: drift.files not read: the managed files are compared only when started as root"
    code, _, checks = one_node_run(tmp_path, monkeypatch, {"NCCLPREP_PREFLIGHT_TOKEN": "s"}, keep=("drift.",),
                                   doc={"managed": str(record)})
    assert code == 0 and checks["drift.files"]["status"] == "SKIP"


def test_the_hostfile_replaces_a_planted_link_and_writes_nothing_through_it(tmp_path, monkeypatch):
    """Review N20: in a shared submit folder another user could plant a link at the hostfile's
    path, and the first node wrote the vetted nodes through it, as the job's user, into whatever
    file it named. The hostfile is written to a new temporary file (O_EXCL, O_NOFOLLOW), then
    renamed over the path: the link is replaced, its target left as it was."""
    import os

    shared = tmp_path / "submit"
    shared.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    hostfile = shared / "ncclprep-hosts.7"
    os.symlink(victim, hostfile)
    code, _, _ = one_node_run(tmp_path, monkeypatch, {"NCCLPREP_PREFLIGHT_TOKEN": "s3cret"}, need=1,
                              hostfile=str(hostfile))
    assert code == EXIT_PASS
    assert victim.read_text() == "precious\n"
    assert not hostfile.is_symlink() and hostfile.read_text() == "gpu01\n"
    assert [p.name for p in shared.iterdir()] == ["ncclprep-hosts.7"]  # no temporary file left


def test_a_report_folder_another_user_linked_elsewhere_is_not_followed(tmp_path, monkeypatch, capsys):
    """Review N20: the reports' folder in a shared submit folder, replaced by another user's link,
    had the first node write the run's reports and its ``latest`` link wherever that link led.
    Such a link is refused (the hostfile and the verdict still come); the user's own link is
    followed."""
    import os

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, tmp_path / "reports")
    if os.geteuid() == 0:
        os.lchown(tmp_path / "reports", 4321, 4321)
        owner = 4321
    else:  # only root can give a link away: this user becomes someone else instead
        owner = os.geteuid()
        monkeypatch.setattr(jobpreflight.os, "geteuid", lambda: owner + 1)
    code, _, _ = one_node_run(tmp_path, monkeypatch, {"NCCLPREP_PREFLIGHT_TOKEN": "s3cret"}, need=1)
    assert list(elsewhere.iterdir()) == []
    err = capsys.readouterr().err
    assert (f"cannot write the reports under {tmp_path / 'reports'}: {tmp_path / 'reports'} is a link that uid "
            f"{owner} made, not this job's user: not followed") in err
    assert code == EXIT_PASS and (tmp_path / "hosts").read_text() == "gpu01\n"
    monkeypatch.undo()
    (tmp_path / "reports").unlink()
    os.symlink(elsewhere, tmp_path / "reports")  # the user's own link: followed
    assert one_node_run(tmp_path, monkeypatch, {"NCCLPREP_PREFLIGHT_TOKEN": "s3cret"})[0] == EXIT_PASS
    assert (elsewhere / "latest" / "summary.md").exists()


def test_without_the_jobs_secret_the_smoke_job_is_not_run_and_the_report_says_why(tmp_path, monkeypatch):
    """Review N5: without NCCLPREP_PREFLIGHT_TOKEN the store key, and the launcher's rendezvous
    nonce, fell back to sha256("ncclprep-preflight-<job id>"), which every user can compute: a
    process squatting the rendezvous port could prove itself the job's. The smoke job is then not
    started, and torchrun.smoke is a SKIP naming the variable and how to set it."""
    code, calls, checks = one_node_run(tmp_path, monkeypatch, {})
    assert calls == [] and code == EXIT_PASS
    smoke = checks["torchrun.smoke"]
    assert smoke["status"] == "SKIP"
    assert smoke["message"].startswith("the training smoke job was not run: NCCLPREP_PREFLIGHT_TOKEN is not set")
    assert "export NCCLPREP_PREFLIGHT_TOKEN=" in smoke["remediation"]
    # with it, the job runs with the secret as its rendezvous nonce, on the job's nodes
    code, calls, checks = one_node_run(tmp_path, monkeypatch, {"NCCLPREP_PREFLIGHT_TOKEN": "s3cret"})
    assert code == EXIT_PASS and checks["torchrun.smoke"]["status"] == "PASS"
    [(args, kwargs)] = calls
    assert args[2] == "ncclprep-preflight-7" and args[8] == "s3cret" and "NCCLPREP_HOSTFILE" in kwargs["env"]
