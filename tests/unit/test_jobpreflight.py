"""`ncclprep node preflight` (module_utils/ncclprep/jobpreflight.py): the job's nodes and ranks from
Slurm's environment, the members they are, the store's key, the options, the vetted nodes and the
exit codes. The run itself across nodes is tested on the local Slurm cluster
(tests/integration/test_local_cluster.py)."""

from __future__ import annotations

import pytest
from ansible.module_utils.ncclprep import jobpreflight, nodecheck
from ansible.module_utils.ncclprep.jobpreflight import (
    EXIT_COULD_NOT_RUN,
    EXIT_FAILED,
    EXIT_PASS,
    EXIT_USAGE,
    Usage,
    job_from_env,
    job_members,
    job_token,
    options,
    verdict,
)

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
                                         "node": "gpu02"}
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
    from ansible.module_utils.ncclprep.netprobe import ARGUMENT_SPEC, bad_input

    assert set(o["net"]) == set(ARGUMENT_SPEC) and bad_input(o["net"]) is None
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
    assert nodecheck.main(["node", "preflight"]) == EXIT_USAGE
    assert "ncclprep node preflight: " in capsys.readouterr().err
    assert nodecheck.main(["node", "nonsense"]) == EXIT_USAGE
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
            "from ansible.module_utils.ncclprep.nodecheck import main; sys.exit(main())")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.path.join(repo, "src")]),
               SLURM_JOB_ID="7", SLURMD_NODENAME="gpu01", SLURM_STEP_NODELIST="gpu01", NCCLPREP_REEXEC="1")
    env.pop("SLURM_JOB_NODELIST", None)
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "absent.json")], capture_output=True,
                         text=True, env=env, timeout=60)
    assert out.returncode == EXIT_COULD_NOT_RUN, out.stderr
    assert f"{tmp_path / 'absent.json'} does not exist: run site.yml" in out.stderr
