"""The slurm_health concern (module_utils/ncclprep/concerns/slurm_health.py): slurm.conf read as
Slurm reads it, the intent's lines and its refusals, the check slurm.health; the role's wrappers
rendered and run against a fake ncclprep."""

from __future__ import annotations

import subprocess

import pytest
from ansible.module_utils.ncclprep.concerns import slurm_health
from ansible.module_utils.ncclprep.concerns.slurm_health import check, intent, parse_slurm_conf, read_conf
from ansible.module_utils.ncclprep.model import Context
from test_role_templates import render

CONF = """# slurm.conf
ClusterName=c   SlurmctldHost=node1(10.0.0.1)
healthcheckprogram=/usr/sbin/nhc   # a site's own
HealthCheckInterval=60
NodeName=node[1-3] CPUs=2 State=UNKNOWN Prolog=nonsense
PartitionName=main Nodes=ALL Default=YES
HealthCheckInterval=120
"""
V = {"slurm_health_config": "/etc/slurm/slurm.conf", "slurm_health_program": "/usr/local/sbin/ncclprep-health",
     "slurm_health_interval": 300, "slurm_health_node_state": "any",
     "slurm_health_prolog": "/usr/local/sbin/ncclprep-prolog", "slurm_health_prolog_enabled": True,
     "slurm_health_epilog": "/usr/local/sbin/ncclprep-epilog", "slurm_health_epilog_enabled": True,
     "slurm_health_retest_interval": 300, "slurm_health_max_drained": 8, "slurm_health_strike_window": 86400}


def test_slurm_conf_settings_are_read_as_slurm_reads_them():
    assert parse_slurm_conf(CONF) == {"ClusterName": "c", "SlurmctldHost": "node1(10.0.0.1)",
                                      "healthcheckprogram": "/usr/sbin/nhc", "HealthCheckInterval": "120"}


def test_a_missing_slurm_conf_reads_as_absent(tmp_path):
    assert read_conf(str(tmp_path / "none")) == {"config": str(tmp_path / "none"), "exists": False, "settings": {}}
    (tmp_path / "slurm.conf").write_text(CONF)
    assert read_conf(str(tmp_path / "slurm.conf"))["settings"]["HealthCheckInterval"] == "120"


def test_the_intent_is_the_lines_that_run_ncclprep_and_refuses_bad_values():
    want = intent(V, {})
    assert want["lines"] == {"HealthCheckProgram": "/usr/local/sbin/ncclprep-health", "HealthCheckInterval": 300,
                             "HealthCheckNodeState": "ANY", "Prolog": "/usr/local/sbin/ncclprep-prolog",
                             "Epilog": "/usr/local/sbin/ncclprep-epilog"}
    assert want["retest_interval"] == 300 and want["epilog"] == "/usr/local/sbin/ncclprep-epilog"
    assert "Prolog" not in intent(dict(V, slurm_health_prolog_enabled=False), {})["lines"]
    off = intent(dict(V, slurm_health_epilog_enabled=False), {})
    assert "Epilog" not in off["lines"] and off["epilog"] is None
    for name, value, message in (("slurm_health_interval", 0, "slurm_health_interval=0: valid: seconds, 1 to 65535"),
                                 ("slurm_health_interval", "soon", "slurm_health_interval=soon: valid"),
                                 ("slurm_health_node_state", "IDLE,BUSY", "slurm_health_node_state=IDLE,BUSY: valid"),
                                 ("slurm_health_retest_interval", -1, "slurm_health_retest_interval=-1: valid: "
                                                                      "seconds, 0 to 86400"),
                                 ("slurm_health_max_drained", 0, "slurm_health_max_drained=0: valid: nodes, 1 to"),
                                 ("slurm_health_strike_window", 10, "slurm_health_strike_window=10: valid: seconds, "
                                                                    "60 to 2592000"),
                                 ("slurm_health_epilog", "epilog", "slurm_health_epilog=epilog: valid: an "
                                                                   "absolute path"),
                                 ("slurm_health_program", "ncclprep-health", "slurm_health_program=ncclprep-health: "
                                                                             "valid: an absolute path")):
        with pytest.raises(ValueError, match=message):
            intent(dict(V, **{name: value}), {})


def record(settings, exists=True):
    return {"alive": True, "intent": {"slurm_health": intent(V, {})},
            "facts": {"slurm_health": {"config": "/etc/slurm/slurm.conf", "exists": exists, "settings": settings}}}


def test_the_check_names_the_hosts_whose_slurm_conf_differs_with_what_it_says():
    good = {"HealthCheckProgram": "/usr/local/sbin/ncclprep-health", "healthcheckinterval": "300",
            "HealthCheckNodeState": "ANY", "Prolog": "/usr/local/sbin/ncclprep-prolog",
            "Epilog": "/usr/local/sbin/ncclprep-epilog"}
    records = {"node1": record(good), "node2": record(dict(good, Prolog="/etc/slurm/prolog.sh")),
               "node3": record({}, exists=False)}
    (c,) = check(records, Context(all_hosts=("node1", "node2", "node3")))
    assert c["id"] == "slurm.health" and c["status"] == "FAIL" and c["hosts"] == ["node2", "node3"]
    assert c["measured"] == {"node2": {"Prolog": "/etc/slurm/prolog.sh"}, "node3": "no /etc/slurm/slurm.conf"}
    (ok,) = check({"node1": record(good)}, Context(all_hosts=("node1",)))
    assert ok["status"] == "PASS"
    off = {"node1": {"alive": True, "intent": {"slurm_health": None}, "facts": {}}}
    assert check(off, Context(all_hosts=("node1",))) == []
    assert slurm_health.SWITCH == "slurm_health_enabled" and slurm_health.IDS == ("slurm.health",)


@pytest.fixture(scope="module")
def wrappers(tmp_path_factory):
    """The role's three wrappers rendered around a fake ncclprep that records its arguments and exits
    with the code in the file ``rc``."""
    folder = tmp_path_factory.mktemp("wrappers")
    fake = folder / "ncclprep"
    fake.write_text(f'#!/bin/sh\necho "$@" > {folder}/args\nexit "$(cat {folder}/rc)"\n')
    fake.chmod(0o755)
    out = {}
    for name in ("prolog", "health", "epilog"):
        script = folder / name
        script.write_text(render("slurm_health", f"ncclprep-{name}.sh.j2", folder, preflight_node_command=str(fake),
                                 slurm_health_retest_interval=300, slurm_health_epilog_log=str(folder / "log"),
                                 slurm_health_max_drained=3, slurm_health_strike_window=7200))
        script.chmod(0o755)
        out[name] = script
    return folder, out


@pytest.mark.parametrize("rc, want", [(0, 0), (10, 1), (1, 0), (3, 0), (124, 0)])
def test_the_prolog_wrapper_requeues_only_on_a_measured_failure(wrappers, rc, want):
    """ncclprep node prolog's exit 10 (it drained the node) reaches Slurm as 1; could-not-tell (3),
    a crash (Python's 1: a failed import drained every node with Slurm's "Prolog error", past the
    breaker) and a run past the wrapper's deadline (124) let the job run; the health check's code
    passes through."""
    folder, scripts = wrappers
    (folder / "rc").write_text(str(rc))
    assert subprocess.run([str(scripts["prolog"])], timeout=30).returncode == want
    rules = ["--max-drained", "3", "--strike-window", "7200"]
    assert (folder / "args").read_text().split() == ["node", "prolog", *rules]
    assert subprocess.run([str(scripts["health"]), "--dry-run"], timeout=30).returncode == rc
    assert (folder / "args").read_text().split() == ["node", "health", *rules, "--dry-run"]
    # the Epilog never fails (Slurm would drain the node), and passes the re-test interval on
    assert subprocess.run([str(scripts["epilog"])], timeout=30).returncode == 0
    assert (folder / "args").read_text().split() == ["node", "epilog", *rules, "--min-interval", "300"]
