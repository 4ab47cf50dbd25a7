"""The per-host record (HostRecord): the typed shape the engine builds on every node, taken by
validate.yml from the engine's first node (engine.yml) and evaluated by cluster_report."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import types
import typing

import yaml
from ansible.module_utils.ncclprep import concerns
from ansible.module_utils.ncclprep.checks import HostRecord
from conftest import ANSIBLE_JSON_ENV as ENV
from conftest import BIN, REPO

CONCERNS_FILE = os.path.join(REPO, "playbooks", "vars", "concerns.yml")
REPORT_YML = os.path.join(REPO, "roles", "preflight", "tasks", "report.yml")
ENGINE_YML = os.path.join(REPO, "roles", "preflight", "tasks", "engine.yml")

CONCERNS = [concerns.name_of(c) for c in concerns.CONCERNS]

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


# ---------------------------------------------------------------- the run's secret reaches the engine unseen

FAKE_ENGINE = """#!/bin/sh
# what the engine was given: its arguments, whether the secret was in its environment, the file's mode and text
out="$OUT_DIR/$(hostname).$$"
printf '%s\\n' "$@" > "$out.argv"
env | grep -c '^NCCLPREP_PREFLIGHT_TOKEN=' > "$out.inenv"
while [ $# -gt 0 ]; do
  if [ "$1" = --token-file ]; then stat -c %a "$2" > "$out.mode"; cat "$2" > "$out.token"; rm -f "$2"; fi
  shift
done
sleep 1
"""


def test_validate_hands_the_engine_its_secret_in_an_owner_only_file_never_on_a_command_line(tmp_path):
    """docs/security.md, the run's token: Ansible starts an async task as ``/bin/sh -c
    'VAR=value ... async_wrapper.py ...'``, so a secret in the task's environment sat on a
    process's command line, readable by any local user's ``ps``. engine.yml's own tasks, run on
    localhost with a fake engine while a thread reads every process's command line: the secret
    must reach the engine in a 0600 file and in no command line and not in its environment."""
    if os.geteuid() != 0:
        import pytest
        pytest.skip("the secret's file goes to /run, which root writes")
    import threading
    secret = "S3cretOfThisRun" + os.urandom(8).hex()
    engine = tmp_path / "fake-engine"
    engine.write_text(FAKE_ENGINE)
    engine.chmod(0o755)
    (tmp_path / "out").mkdir()
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"children": {"ncclprep_nodes": {"hosts": {
        "fake1": {"ansible_connection": "local"}}}}}}))
    wanted = ("Draw the run's secret", "Hand every node the run's secret in a file only its owner reads",
              "Start the preflight engine on every node")
    with open(ENGINE_YML, encoding="utf-8") as fh:
        tasks = [t for t in yaml.safe_load(fh) if t.get("name") in wanted]
    assert [t["name"] for t in tasks] == list(wanted)
    wait = {"name": "Wait", "ansible.builtin.async_status": {"jid": "{{ __preflight_engine_job.ansible_job_id }}"},
            "register": "done", "until": "done.finished", "retries": 60, "delay": 1}
    play = [{"hosts": "ncclprep_nodes", "gather_facts": False, "tasks": tasks + [wait],
             "vars": {"__preflight_run_id": "t" + os.urandom(4).hex(), "__preflight_nodes": ["fake1"],
                      "__preflight_inventory_digest": "0" * 64, "__preflight_settings": {},
                      "__preflight_engine_deadline": 60, "preflight_node_command": str(engine)}}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    (tmp_path / "secret.yml").write_text(yaml.safe_dump({"__preflight_token": secret}))  # not on our own argv
    seen: list[str] = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            for path in glob.glob("/proc/[0-9]*/cmdline"):
                try:
                    with open(path, "rb") as fh:
                        line = fh.read()
                except OSError:
                    continue
                if secret.encode() in line:
                    seen.append(line.replace(b"\0", b" ").decode(errors="replace")[:300])
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    cmd = [os.path.join(BIN, "ansible-playbook"), "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"),
           "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"@{tmp_path / 'secret.yml'}"]
    try:
        out = subprocess.run(cmd, cwd=REPO, env=dict(ENV, OUT_DIR=str(tmp_path / "out")), capture_output=True,
                             text=True, timeout=180)
    finally:
        stop.set()
        watcher.join()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert seen == []
    assert secret not in out.stdout + out.stderr  # no_log: not in Ansible's output either
    (argv,) = glob.glob(str(tmp_path / "out" / "*.argv"))
    given = open(argv, encoding="utf-8").read().splitlines()
    base = argv[:-len(".argv")]
    assert open(base + ".inenv", encoding="utf-8").read().strip() == "0"
    assert given[given.index("--token-file") + 1].startswith("/run/ncclprep-validate-")
    assert open(base + ".mode", encoding="utf-8").read().strip() == "600"
    assert open(base + ".token", encoding="utf-8").read().strip() == secret
