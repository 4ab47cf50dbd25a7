"""The per-host record (HostRecord): built by the filter report.yml calls, with exactly the
typed shape, one intent key per concern of the registry; then evaluated by cluster_report."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import types
import typing

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.module_utils.ncclprep import concerns
from ansible.module_utils.ncclprep.checks import HostRecord, build_record
from ansible.module_utils.ncclprep.model import RESULT_VARS
from conftest import ANSIBLE_JSON_ENV as ENV
from conftest import BIN, REPO, load_source

CONCERNS_FILE = os.path.join(REPO, "playbooks", "vars", "concerns.yml")
REPORT_YML = os.path.join(REPO, "roles", "preflight", "tasks", "report.yml")
ENGINE_YML = os.path.join(REPO, "roles", "preflight", "tasks", "engine.yml")

CONCERNS = [concerns.name_of(c) for c in concerns.CONCERNS]

records_filters = load_source("ncclprep_records_filters", "filter_plugins/records.py")
host_records = records_filters.FilterModule().filters()["ncclprep_host_records"]

HINTS = typing.get_type_hints(HostRecord)


def conforms(value, hint) -> bool:
    """``value`` fits the annotation ``hint`` (Any, None, unions, bare and parametrised dict/list/bool)."""
    if hint is typing.Any:
        return True
    if hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, arg) for arg in typing.get_args(hint))
    return isinstance(value, origin or hint)


def assert_is_host_record(host, record):
    assert set(record) == set(HINTS), f"{host}: keys {sorted(record)} != HostRecord {sorted(HINTS)}"
    for key, hint in HINTS.items():
        assert conforms(record[key], hint), f"{host}: {key}={record[key]!r} is not {hint}"
    assert set(record["intent"]) == set(CONCERNS), f"{host}: intent keys != the registry's concerns"


def test_conforms_tells_the_annotations_apart():
    assert conforms(None, HINTS["facts"]) and conforms({}, HINTS["facts"]) and not conforms([], HINTS["facts"])
    assert conforms(True, HINTS["alive"]) and not conforms(None, HINTS["alive"])
    assert conforms([], HINTS["ssh"]) and not conforms({}, HINTS["ssh"])
    assert not conforms(None, HINTS["intent"])


def test_host_record_documents_every_field():
    for key in HINTS:
        assert f"``{key}``" in HostRecord.__doc__, key


# ---------------------------------------------------------------- build_record and the filter

FACTS = {"hostname": "n1", "data_plane": {"interface": "eth0", "address": "10.0.0.1", "mtu": 9000}}


def test_record_keys_intent_by_concern_and_reads_the_registered_results():
    hv = {"ansible_facts": {"ncclprep": FACTS, "hostname": "n1"},
          "sysctl_tuning_intent": {"net.core.somaxconn": 65535},
          "torch_runtime_intent": {"version": "2.13.0", "python": "/opt/ncclprep/venv/bin/python"},
          "__preflight_ssh": {"changed": False, "results": [{"host": "n2", "name": "n2", "ok": True}]},
          "__preflight_drift": {"changed": False, "files": []},
          # one job: the network probe's result beside the collectives'
          "__preflight_probe": {"changed": False, "net": {"status": "PASS", "links": []}, "probe": {"status": "PASS"}},
          "__preflight_smoke": {"changed": False, "skipped": True},
          "__preflight_counters": {"changed": False, "counters": {"rdma": {}, "net": {"eth1": {"carrier_changes": 2}}}}}
    rec = build_record(hv, True, CONCERNS)
    assert_is_host_record("n1", rec)
    assert rec["facts"] == FACTS
    assert rec["intent"]["sysctl_tuning"] == {"net.core.somaxconn": 65535}
    assert rec["intent"]["torch_runtime"]["version"] == "2.13.0"
    assert rec["intent"]["firewall"] is None
    assert rec["ssh"] == [{"host": "n2", "name": "n2", "ok": True}]
    assert rec["probe"] == {"status": "PASS"} and rec["smoke"] is None
    assert rec["net"] == {"status": "PASS", "links": []} and rec["drift"] == []
    assert rec["counters"] == {"rdma": {}, "net": {"eth1": {"carrier_changes": 2}}}
    assert rec["blame"] is None
    assert set(RESULT_VARS) == {"ssh", "counters", "drift", "net", "probe", "blame", "smoke"}


def test_host_without_anything_is_a_full_record_of_nones():
    rec = build_record({}, False, CONCERNS)
    assert_is_host_record("n2", rec)
    assert rec == {"alive": False, "facts": None, "intent": dict.fromkeys(CONCERNS), "ssh": None,
                   "counters": None, "drift": None, "net": None, "probe": None, "blame": None, "smoke": None}


def test_the_counters_come_from_the_smoke_job_where_it_read_them_else_from_port_counters():
    """Issue 24: the smoke job, which runs last, reads the port counters once it is over (no module run
    of their own); where no smoke job ran, the port_counters task's reading is the record's."""
    after_job = {"rdma": {}, "net": {"eth1": {"rx_errors": 5}}}
    own = {"rdma": {}, "net": {"eth1": {"rx_errors": 1}}}
    hv = {"__preflight_smoke": {"smoke": {"status": "PASS"}, "counters": after_job},
          "__preflight_counters": {"changed": False, "skipped": True}}
    assert build_record(hv, True, CONCERNS)["counters"] == after_job
    hv = {"__preflight_smoke": {"changed": False, "skipped": True}, "__preflight_counters": {"counters": own}}
    assert build_record(hv, True, CONCERNS)["counters"] == own
    assert build_record({}, True, CONCERNS)["counters"] is None


def test_filter_covers_every_host_and_marks_the_dropped_ones():
    hostvars = {"n1": {"ansible_facts": {"ncclprep": FACTS}}, "n2": {}, "other": {}}
    out = host_records(hostvars, ["n1", "n2"], ["n1"], (c for c in CONCERNS))
    assert list(out) == ["n1", "n2"]
    assert out["n1"]["alive"] is True and out["n2"]["alive"] is False
    for host, rec in out.items():
        assert_is_host_record(host, rec)


@pytest.mark.parametrize("args,message", [
    ((["n1", "ghost"], ["n1"], ["nic_mtu"]), "host 'ghost' of all_hosts is not in hostvars (hosts there: n1)"),
    (("n1", ["n1"], ["nic_mtu"]), "all_hosts='n1' is not a list of names"),
    ((["n1"], ["n1"], ["nic_mtu", None]), "concern_names holds [None]"),
    ((["n1"], None, ["nic_mtu"]), "alive_hosts=None is not a list of names"),
])
def test_filter_names_the_bad_argument(args, message):
    with pytest.raises(AnsibleFilterError) as err:
        host_records({"n1": {}}, *args)
    assert message in str(err.value)


def test_build_record_rejects_a_concern_that_is_not_a_name():
    with pytest.raises(TypeError, match="concern name 3"):
        build_record({}, True, ["nic_mtu", 3])


# ---------------------------------------------------------------- the playbook produces exactly that shape

def _report_tasks() -> list[dict]:
    """The record task of engine.yml and the cluster_report task of report.yml, as they are there."""
    found = []
    for path, name in ((ENGINE_YML, "Take every node's record from the first node"),
                       (REPORT_YML, "Evaluate the checks and write the reports")):
        with open(path, encoding="utf-8") as fh:
            found += [t for t in yaml.safe_load(fh) if t.get("name") == name]
    assert len(found) == 2
    return found


# fake1's net_probe result: one direction to fake2, which carries the matrices into cluster.json
NET = {"status": "PASS", "host": "fake1", "hosts": ["fake1"], "missing_hosts": [], "gone_hosts": [],
       "links": [{"src": "fake1", "dst": "fake2", "phase": 1, "round": 1,
                  "latency_us": {"p50": 30.0, "p99": 41.0, "samples": 100}, "bandwidth_gbps": 1.5,
                  "path_mtu": {"mtu": 1500, "ok": True, "largest": 1500}, "ports": {"29500": "open"},
                  "hang": None, "error": None}]}
# the net.* limits of the preflight's defaults (report.yml passes them to cluster_report)
with open(os.path.join(REPO, "roles", "preflight", "defaults", "main.yml"), encoding="utf-8") as _fh:
    NET_LIMITS = {k: v for k, v in yaml.safe_load(_fh).items()
                  if k in ("preflight_net_max_latency_us", "preflight_net_slow_z", "preflight_net_slow_ratio",
                           "preflight_net_min_gbps", "preflight_net_link_floor_ratio")}

PROBE = {"status": "PASS", "rank": 0, "stage": "done", "hosts": ["fake1"], "missing_hosts": [],
         "results": [{"op": "all_reduce", "size_bytes": 4096, "count": 1024, "time_us": 50.0, "algbw_gbps": 0.08,
                      "busbw_gbps": 0.0, "wrong": 0}]}


def test_playbook_builds_host_records_of_exactly_the_typed_shape(tmp_path):
    """Two fake hosts on localhost: fake1 the engine's first node, whose last line gives both
    records, fake2 failing early (unreachable: out of the play). engine.yml's record task must give
    fake1 its HostRecord as the engine built it and fake2 not alive, whatever the engine said of it;
    cluster_report (shipped with the checks package by Ansible) evaluates them."""
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"children": {"ncclprep_nodes": {"hosts": {
        "fake1": {"ansible_connection": "local"}, "fake2": {"ansible_connection": "local"}}}}}}))
    facts = {"hostname": "fake1", "versions": {"torch": "2.13.0+cpu"},
             "data_plane": {"interface": "lo", "address": "127.0.0.1", "mtu": 65536, "operstate": "unknown"},
             "interfaces": {"lo": {"mtu": 65536, "operstate": "unknown", "addresses": ["127.0.0.1/8"]}},
             "sysctl_tuning": {"net.core.somaxconn": {"value": "4096", "writable": True}}, "host_names": []}
    one = {"alive": True, "facts": facts, "ssh": [], "drift": None, "net": NET, "probe": PROBE, "blame": None,
           "smoke": None, "counters": {"rdma": {}, "net": {"eth1": {"carrier_changes": 2}}},
           "intent": dict(dict.fromkeys(CONCERNS), sysctl_tuning={"net.core.somaxconn": 4096},
                          torch_runtime={"version": "2.13.0", "python": "/opt/ncclprep/venv/bin/python"},
                          nic_mtu={"interface": "lo", "mtu": 65536},
                          nccl_env={"NCCL_SOCKET_IFNAME": "=lo", "GLOO_SOCKET_IFNAME": "lo"})}
    last = json.dumps({"status": "PASS", "code": 0, "hosts": ["fake1", "fake2"],
                       "records": {"fake1": one, "fake2": dict(one, facts=None)}})
    setup = [
        {"name": "Give fake1 the engine's output", "when": "inventory_hostname == 'fake1'",
         "ansible.builtin.set_fact": {"__preflight_nodes": ["fake1", "fake2"], "__preflight_engine_done": {
             "rc": 0,
             "stdout": f"ncclprep node preflight: preflight PASS on 2 nodes, the records to the launcher\n{last}"}}},
        {"name": "Drop fake2 from the play", "when": "inventory_hostname == 'fake2'",
         "ansible.builtin.fail": {"msg": "fake2 is gone"}},
    ]
    show = {"name": "Show the records", "run_once": True, "ansible.builtin.debug": {"var": "__preflight_records"}}
    play = [{"hosts": "ncclprep_nodes", "gather_facts": False, "vars_files": [CONCERNS_FILE],
             "tasks": setup + _report_tasks() + [show]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    reports = tmp_path / "reports"
    cmd = [os.path.join(BIN, "ansible-playbook"), "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"),
           "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"preflight_report_dir={reports}",
           "-e", '{"preflight_min_busbw_gbps": null}', "-e", json.dumps(NET_LIMITS),
           "-e", json.dumps({"preflight_textfile_dir": str(tmp_path), "preflight_tuning_file": None})]
    out = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=180)
    assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-3000:]  # fake2's failure, nothing else
    tasks = json.loads(out.stdout[out.stdout.index("{"):])["plays"][0]["tasks"]
    records = tasks[-1]["hosts"]["fake1"]["__preflight_records"]

    assert set(records) == {"fake1", "fake2"}
    assert_is_host_record("fake1", records["fake1"])
    assert records["fake1"] == one
    assert records["fake2"] == {"alive": False}  # out of the play: not alive, whatever the engine said

    (run_dir,) = [p for p in glob.glob(str(reports / "*")) if not os.path.islink(p)]
    cluster_json = os.path.join(run_dir, "cluster.json")
    with open(cluster_json, encoding="utf-8") as fh:
        cluster = json.load(fh)
    by_id = {c["id"]: c for c in cluster["checks"]}
    assert cluster["status"] == "FAIL"
    assert by_id["host.reachable"]["hosts"] == ["fake2"]
    for cid in ("data_plane.interface", "data_plane.mtu", "sysctl.net.core.somaxconn", "versions.torch",
                "nccl_env.ifname", "collective.all_reduce", "net.run", "net.latency", "net.bandwidth", "net.ports"):
        assert by_id[cid]["status"] == "PASS", by_id[cid]
    assert cluster["network"]["latency_p50_us"] == {"fake1": {"fake2": 30.0}}
    assert cluster["network"]["ports"] == {"fake1": {"fake2": {"29500": "open"}}}
    with open(os.path.join(os.path.dirname(cluster_json), "hosts", "fake1.json"), encoding="utf-8") as fh:
        assert set(json.load(fh)["intent"]) == set(CONCERNS)
    # the report package shipped with the module renders every file, and the textfile copy
    assert cluster["schema_version"] == 2 and cluster["versions"]["hosts"] == {"fake1": {"torch": "2.13.0+cpu"}}
    for name in ("summary.md", "junit.xml", "metrics.prom", "report.html"):
        assert os.path.getsize(os.path.join(run_dir, name)) > 0, name
    with open(tmp_path / "ncclprep.prom", encoding="utf-8") as fh:
        assert 'ncclprep_check_status{check="host.reachable",host="fake2",status="FAIL"} 1' in fh.read()
