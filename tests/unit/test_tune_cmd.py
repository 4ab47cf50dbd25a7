"""``ncclprep tune``'s flow (src/ncclprep/tune_cmd.py) against a fake cluster: run_playbook answered
the way the steps' playbooks answer (plan JSON, the nodes' nccl_probe results, validate.yml's report),
so the order of the steps, the write-back, the restore after a lost node and the refusals are checked
without Ansible. The playbooks themselves run in tests/integration (the local cluster)."""

from __future__ import annotations

import json
import os

import pytest
import yaml
from ansible.module_utils.ncclprep.report.schema import SCHEMA_VERSION

from ncclprep import tune_cmd
from ncclprep.runner import Failure, RunResult

SIZES = (1048576, 16777216)
SPACE = [{"name": "mtu", "values": [{"nic_mtu_value": 9000}, {"nic_mtu_value": 4096}]}]


class FakeCluster:
    """Answers run_playbook like the steps' playbooks on two nodes. ``busbw``: MTU -> busbw at the
    largest size (the smaller size stays 0.3); ``lose_at``: the measure run whose apply play loses node2."""

    def __init__(self, tmp_path, busbw, lose_at=None, refuse=None, mtu=4096):
        self.tmp, self.busbw, self.lose_at, self.refuse = tmp_path, busbw, lose_at, refuse
        self.mtu, self.inventory_mtu = mtu, mtu
        self.calls: list[tuple[str, str, dict]] = []
        self.runs = 0
        #: host -> the MTU it resolves to whatever the vars file says (a host_vars file that wins over it)
        self.resolved: dict[str, int] = {}

    def __call__(self, playbook, inventory, extra, label, verbose=False, stream=None, task_lines=True):
        tags = extra[extra.index("--tags") + 1] if "--tags" in extra else ""
        values: dict = {}
        for i, a in enumerate(extra):
            if a == "-e":
                v = extra[i + 1]
                values.update(json.load(open(v[1:], encoding="utf-8")) if v.startswith("@") else json.loads(v))
        self.calls.append((playbook, tags, values))
        if tags == "tune_plan":
            with open(values["tune_out"], "w", encoding="utf-8") as fh:
                json.dump({"space": SPACE, "hosts": ["node1", "node2"], "runs": 5, "op": "all_reduce",
                           "sizes": list(SIZES), "iters": 5, "target_size": None, "training": False,
                           "min_gain": 0.05, "max_loss": 0.02,
                           "baselines": {h: {"nic_mtu_value": self.resolved.get(h, self._inventory_value()),
                                             "sysctl_tuning_overrides": {}, "nccl_env_overrides": {},
                                             "nic_mtu_enabled": True} for h in ("node1", "node2")}}, fh)
            return RunResult(rc=0)
        if tags == "tune_check":
            if self.refuse is not None and values.get("nic_mtu_value") == self.refuse:
                return RunResult(rc=2, failures=[Failure("node1", "Check the MTU against the interface", "assert",
                                                         f"nic_mtu_value={self.refuse}: above max_mtu",
                                                         play="Check the inventory before any change")])
            return RunResult(rc=0)
        if tags == "tune_apply,tune_measure":
            self.runs += 1
            if self.runs == self.lose_at:
                return RunResult(rc=4, failures=[Failure("node2", "Gathering Facts", "setup", "No route to host",
                                                         kind="unreachable")])
            self.mtu = values.get("nic_mtu_value", self.inventory_mtu)
            big = self.busbw[self.mtu] * (1 + 0.01 * (self.runs % 3))  # a little noise, the same for both
            rows = [{"op": "all_reduce", "size_bytes": s, "time_us": 10.0, "algbw_gbps": b, "busbw_gbps": b,
                     "wrong": 0} for s, b in ((SIZES[0], 0.3), (SIZES[1], big))]
            with open(values["tune_out"], "w", encoding="utf-8") as fh:
                json.dump({h: {"probe": {"status": "PASS", "results": rows}, "smoke": None}
                           for h in ("node1", "node2")}, fh)
            return RunResult(rc=0)
        if playbook == "site.yml":  # the restore (--tags nic_mtu) or the whole run
            self.mtu = self._inventory_value()
            return RunResult(rc=0)
        if playbook == "validate.yml":
            run = self.tmp / "reports" / "run1"
            run.mkdir(parents=True, exist_ok=True)
            (run / "cluster.json").write_text(cluster_json(self.busbw[self.mtu]))
            return RunResult(rc=0, report={"status": "PASS", "report_dir": str(run), "problems": []})
        raise AssertionError(f"unexpected run: {playbook} {tags}")

    def _inventory_value(self) -> int:
        tuned = self.tmp / "inv" / "group_vars" / "all" / "ncclprep_tuned.yml"
        return (yaml.safe_load(tuned.read_text()) or {}).get("nic_mtu_value", self.inventory_mtu) \
            if tuned.exists() else self.inventory_mtu


def cluster_json(busbw: float) -> str:
    """validate.yml's cluster.json (the current schema's least) with all_reduce's busbw at the target."""
    return json.dumps({"schema_version": SCHEMA_VERSION, "status": "PASS", "hosts": ["node1", "node2"], "checks": [],
                       "collectives": {"all_reduce": [{"size_bytes": SIZES[1], "busbw_gbps": busbw}]}})


@pytest.fixture
def inventory(tmp_path, monkeypatch):
    monkeypatch.setattr(tune_cmd, "REPO_ROOT", str(tmp_path))
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "hosts.yml").write_text("all: {}\n")
    return str(tmp_path / "inv")


def test_a_real_win_is_written_provisioned_and_verified(tmp_path, inventory, monkeypatch, capsys):
    fake = FakeCluster(tmp_path, {4096: 0.50, 9000: 0.60})
    monkeypatch.setattr(tune_cmd, "run_playbook", fake)
    assert tune_cmd.tune_main(inventory, []) == 0
    steps = [(p, t) for p, t, _ in fake.calls]
    assert steps[:2] == [("tune.yml", "tune_plan"), ("site.yml", "tune_check")]
    assert steps[2:12] == [("tune.yml", "tune_apply,tune_measure")] * 10
    # the inventory read again (the written value resolves on every node), then site.yml whole
    assert steps[12:] == [("tune.yml", "tune_plan"), ("site.yml", ""), ("validate.yml", "")]
    # the runs alternate (rotated rounds) and each applies its own variant, the baseline the inventory's
    assert [v.get("nic_mtu_value") for _, t, v in fake.calls if t == "tune_apply,tune_measure"] == \
        [None, 9000, 9000, None, None, 9000, 9000, None, None, 9000]
    assert all(v["tune_concerns"] == ["nic_mtu"] for _, t, v in fake.calls if t == "tune_apply,tune_measure")
    tuned = os.path.join(inventory, "group_vars", "all", "ncclprep_tuned.yml")
    text = open(tuned, encoding="utf-8").read()
    assert yaml.safe_load(text) == {"nic_mtu_value": 9000}
    assert "# mtu: nic_mtu_value=9000: all_reduce busbw at 16777216 bytes 0.505 -> 0.606 GB/s (+20.0 %, " \
           "medians of 5 runs), interval " in text
    out = capsys.readouterr().out
    assert "ncclprep tune: run 10/10 (round 5/5): mtu: nic_mtu_value=9000, about " in out
    assert "  mtu: nic_mtu_value=9000: KEEP: all_reduce busbw at 16777216 bytes 0.505 -> 0.606 GB/s" in out
    assert "validate.yml PASS" in out and "as tuned" in out
    rec = json.load(open(next(p for p in (tmp_path / "reports").glob("tune-*/tuning.json")), encoding="utf-8"))
    assert rec["status"] == "decided" and rec["written"] == tuned and rec["verify"]["ok"] is True
    # validate.yml got the record for its Tuning section
    assert fake.calls[-1][2]["preflight_tuning_file"].endswith("tuning.json")


def test_no_significant_difference_writes_nothing_and_restores(tmp_path, inventory, monkeypatch, capsys):
    fake = FakeCluster(tmp_path, {4096: 0.50, 9000: 0.51})
    monkeypatch.setattr(tune_cmd, "run_playbook", fake)
    assert tune_cmd.tune_main(inventory, []) == 0
    assert [(p, t) for p, t, _ in fake.calls][12:] == [("site.yml", "nic_mtu"), ("validate.yml", "")]
    assert fake.mtu == 4096
    assert not os.path.exists(os.path.join(inventory, "group_vars"))
    assert "no variant won: the inventory's settings stay (nothing written)" in capsys.readouterr().out


def test_a_node_lost_mid_run_stops_restores_and_names_it(tmp_path, inventory, monkeypatch, capsys):
    fake = FakeCluster(tmp_path, {4096: 0.50, 9000: 0.60}, lose_at=3)
    monkeypatch.setattr(tune_cmd, "run_playbook", fake)
    assert tune_cmd.tune_main(inventory, []) == 3
    assert [(p, t) for p, t, _ in fake.calls][-1] == ("site.yml", "nic_mtu")  # restored at once, no validate
    assert fake.mtu == 4096 and not os.path.exists(os.path.join(inventory, "group_vars"))
    cap = capsys.readouterr()
    assert ("ncclprep tune: run 3 (mtu: nic_mtu_value=9000): node2 unreachable at 'Gathering Facts': No route to host"
            in cap.err)
    assert "nothing was kept; the inventory's settings are back in force" in cap.out
    rec = json.load(open(next(p for p in (tmp_path / "reports").glob("tune-*/tuning.json")), encoding="utf-8"))
    assert rec["status"] == "interrupted" and len(rec["runs"]) == 2 and rec["restored"]["ok"]


def test_a_refused_variant_stops_before_any_change(tmp_path, inventory, monkeypatch, capsys):
    fake = FakeCluster(tmp_path, {4096: 0.50, 9000: 0.60}, refuse=9000)
    monkeypatch.setattr(tune_cmd, "run_playbook", fake)
    assert tune_cmd.tune_main(inventory, []) == 2
    assert [(p, t) for p, t, _ in fake.calls] == [("tune.yml", "tune_plan"), ("site.yml", "tune_check")]
    assert "variant mtu: nic_mtu_value=9000 refused: node1 failed at 'Check the MTU against the interface': " \
           "nic_mtu_value=9000: above max_mtu" in capsys.readouterr().err


def test_a_variable_that_differs_between_nodes_is_refused_naming_them():
    read = {"hosts": ["node1", "node2"], "baselines": {"node1": {"nic_mtu_value": 4096},
                                                       "node2": {"nic_mtu_value": 1500}}}
    with pytest.raises(ValueError, match=r"nic_mtu_value differs between the nodes \(node1 4096, node2 1500\)"):
        tune_cmd.baseline_of(read, {"nic_mtu_value"})
    # a variable the space does not tune may differ (an interface name per host, say)
    assert tune_cmd.baseline_of(read, {"sysctl_tuning_overrides"}) == {}


def test_the_tuned_file_sits_in_a_folder_inventory_or_beside_a_file_one(tmp_path):
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    assert tune_cmd.tuned_path(str(tmp_path)) == str(tmp_path / "group_vars" / "all" / "ncclprep_tuned.yml")
    assert tune_cmd.tuned_path(str(tmp_path / "hosts.yml")) == str(tmp_path / "group_vars" / "all" /
                                                                    "ncclprep_tuned.yml")


def _record(tmp_path) -> dict:
    return json.load(open(next(p for p in (tmp_path / "reports").glob("tune-*/tuning.json")), encoding="utf-8"))


def test_a_file_that_wins_over_the_tuned_one_is_named_and_nothing_is_kept(tmp_path, inventory, monkeypatch, capsys):
    """node2's host_vars (say) sets the MTU after group_vars/all: the winner would not reach it."""
    fake = FakeCluster(tmp_path, {4096: 0.50, 9000: 0.60})
    fake.resolved = {"node2": 4096}
    monkeypatch.setattr(tune_cmd, "run_playbook", fake)
    assert tune_cmd.tune_main(inventory, []) == 3
    assert [(p, t) for p, t, _ in fake.calls][12:] == [("tune.yml", "tune_plan"), ("site.yml", "nic_mtu")]
    cap = capsys.readouterr()
    assert "node2 still resolves nic_mtu_value to 4096 (not 9000): a file Ansible reads after it" in cap.err
    assert not os.path.exists(os.path.join(inventory, "group_vars", "all", "ncclprep_tuned.yml"))
    assert "put back as it was before this run" in cap.out and fake.mtu == 4096
    assert _record(tmp_path)["status"] == "interrupted"


def test_an_inventory_with_group_vars_all_yml_is_refused_before_any_run(tmp_path, inventory, monkeypatch, capsys):
    """A folder group_vars/all/ beside group_vars/all.yml would hide all.yml from Ansible."""
    os.makedirs(os.path.join(inventory, "group_vars"))
    with open(os.path.join(inventory, "group_vars", "all.yml"), "w", encoding="utf-8") as fh:
        fh.write("data_plane_cidr: 10.0.0.0/24\n")
    fake = FakeCluster(tmp_path, {4096: 0.50, 9000: 0.60})
    monkeypatch.setattr(tune_cmd, "run_playbook", fake)
    assert tune_cmd.tune_main(inventory, []) == 2
    assert [(p, t) for p, t, _ in fake.calls] == [("tune.yml", "tune_plan")]
    assert "group_vars/all.yml exists: a folder" in capsys.readouterr().err
    assert not os.path.exists(os.path.join(inventory, "group_vars", "all"))


@pytest.mark.parametrize("args", [["--check"], ["-l", "node1"], ["--limit=node1"]])
def test_check_mode_and_a_limit_are_refused(tmp_path, inventory, monkeypatch, capsys, args):
    monkeypatch.setattr(tune_cmd, "run_playbook", lambda *a, **k: pytest.fail("nothing may run"))
    assert tune_cmd.tune_main(inventory, args) == 2
    assert "not taken: tune applies each variant for real" in capsys.readouterr().err


def test_a_failed_provisioning_of_the_winner_puts_the_file_back_and_restores(tmp_path, inventory, monkeypatch,
                                                                            capsys):
    fake = FakeCluster(tmp_path, {4096: 0.50, 9000: 0.60})

    def failing(playbook, inventory_, extra, label, **kw):
        if playbook == "site.yml" and "--tags" not in extra:
            fake.calls.append((playbook, "", {}))
            return RunResult(rc=2, failures=[Failure("node1", "Ensure the data-plane MTU", "command", "boom")])
        return fake(playbook, inventory_, extra, label, **kw)

    monkeypatch.setattr(tune_cmd, "run_playbook", failing)
    assert tune_cmd.tune_main(inventory, []) == 3
    assert [(p, t) for p, t, _ in fake.calls][-2:] == [("site.yml", ""), ("site.yml", "nic_mtu")]
    assert not os.path.exists(os.path.join(inventory, "group_vars", "all", "ncclprep_tuned.yml"))
    assert "provisioning the winner (site.yml): node1 failed at 'Ensure the data-plane MTU': boom" in \
        capsys.readouterr().err


def test_a_bug_after_the_runs_restores_instead_of_leaving_the_last_variant(tmp_path, inventory, monkeypatch,
                                                                           capsys):
    fake = FakeCluster(tmp_path, {4096: 0.50, 9000: 0.60})
    monkeypatch.setattr(tune_cmd, "run_playbook", fake)
    monkeypatch.setattr(tune_cmd.tuning, "judge", lambda *a, **k: {}["decisions"])
    assert tune_cmd.tune_main(inventory, []) == 3
    assert [(p, t) for p, t, _ in fake.calls][-1] == ("site.yml", "nic_mtu") and fake.mtu == 4096
    assert "ncclprep tune: KeyError: 'decisions'" in capsys.readouterr().err
    assert _record(tmp_path)["status"] == "interrupted"


def test_a_restore_that_fails_does_not_say_the_settings_are_back(tmp_path, inventory, monkeypatch, capsys):
    fake = FakeCluster(tmp_path, {4096: 0.50, 9000: 0.60}, lose_at=2)

    def lost(playbook, inventory_, extra, label, **kw):
        if playbook == "site.yml" and "nic_mtu" in extra:
            return RunResult(rc=4, failures=[Failure("node2", "Gathering Facts", "setup", "No route to host",
                                                     kind="unreachable")])
        return fake(playbook, inventory_, extra, label, **kw)

    monkeypatch.setattr(tune_cmd, "run_playbook", lost)
    assert tune_cmd.tune_main(inventory, []) == 3
    cap = capsys.readouterr()
    assert "back in force" not in cap.out and "the restore did not finish" in cap.out
    assert "run `ncclprep provision -i" in cap.err


def test_validate_below_every_run_of_the_winner_fails_the_verification(tmp_path, inventory, monkeypatch, capsys):
    fake = FakeCluster(tmp_path, {4096: 0.50, 9000: 0.60})

    def slow_validate(playbook, inventory_, extra, label, **kw):
        out = fake(playbook, inventory_, extra, label, **kw)
        if playbook == "validate.yml":
            (tmp_path / "reports" / "run1" / "cluster.json").write_text(cluster_json(0.40))
        return out

    monkeypatch.setattr(tune_cmd, "run_playbook", slow_validate)
    assert tune_cmd.tune_main(inventory, []) == 1
    out = capsys.readouterr().out
    assert "below every tuning run" in out and "the kept settings did not hold in validate.yml" in out


def test_a_tuned_file_that_is_no_mapping_is_left_intact_named_and_nothing_is_kept(tmp_path, inventory, monkeypatch,
                                                                                  capsys):
    """Review N18: the file was opened for writing (emptied) before the winners were merged into it; a
    previous file holding a YAML list raised ValueError and was left empty, and unwrite put nothing
    back. Here the list appears during the runs (another hand, another tune run)."""
    fake = FakeCluster(tmp_path, {4096: 0.50, 9000: 0.60})
    tuned = os.path.join(inventory, "group_vars", "all", "ncclprep_tuned.yml")
    listed = "- nic_mtu_value: 9000\n"

    def edited_mid_run(playbook, inventory_, extra, label, **kw):
        out = fake(playbook, inventory_, extra, label, **kw)
        if fake.runs == 10 and not os.path.exists(tuned):
            os.makedirs(os.path.dirname(tuned))
            with open(tuned, "w", encoding="utf-8") as fh:
                fh.write(listed)
            fake._inventory_value = lambda: fake.inventory_mtu  # the fake reads a mapping only
        return out

    monkeypatch.setattr(tune_cmd, "run_playbook", edited_mid_run)
    assert tune_cmd.tune_main(inventory, []) == 3
    assert open(tuned, encoding="utf-8").read() == listed
    assert sorted(os.listdir(os.path.dirname(tuned))) == [".ncclprep_tuned.yml.lock", "ncclprep_tuned.yml"]
    cap = capsys.readouterr()
    assert (f"ncclprep tune: the winners were not written: {tuned} holds a YAML list, not a mapping of variable "
            "names to values; fix or remove it") in cap.err
    assert "put back" not in cap.out and "nothing was kept; the inventory's settings are back in force" in cap.out
    assert [(p, t) for p, t, _ in fake.calls][-1] == ("site.yml", "nic_mtu") and fake.mtu == 4096
    assert _record(tmp_path)["status"] == "interrupted" and _record(tmp_path).get("written") is None


def _tune_at(inventory: str) -> tune_cmd.Tune:
    run = tune_cmd.Tune(inventory, [])
    run.read = {"op": "all_reduce", "min_gain": 0.05, "max_loss": 0.02}
    return run


WON = {"winners": [], "decisions": {}, "vars": {"nic_mtu_value": 9000}}


def test_two_tune_runs_write_the_tuned_file_one_after_the_other_and_each_keeps_the_others(inventory, monkeypatch):
    tuned = tune_cmd.tuned_path(inventory)
    os.makedirs(os.path.dirname(tuned))
    with open(tuned, "w", encoding="utf-8") as fh:
        fh.write("sysctl_tuning_overrides: {net.core.rmem_max: 1}\n")
    monkeypatch.setattr(tune_cmd, "LOCK_TIMEOUT_S", 0.2)
    first, second = _tune_at(inventory), _tune_at(inventory)
    with tune_cmd.tuned_lock(tuned):  # another run in the middle of its write
        with pytest.raises(tune_cmd.StepFailed, match=r"the winners were not written: .*/\.ncclprep_tuned\.yml\.lock: "
                                                       r"another ncclprep tune held it for 0\.2 s"):
            first.write_winners(WON, {})
    assert yaml.safe_load(open(tuned, encoding="utf-8")) == {"sysctl_tuning_overrides": {"net.core.rmem_max": 1}}
    assert first.unwrite() is False
    first.write_winners(WON, {})
    second.write_winners({"winners": [], "decisions": {}, "vars": {"nccl_env_overrides": {"NCCL_IB_QPS": 2}}}, {})
    assert yaml.safe_load(open(tuned, encoding="utf-8")) == {
        "sysctl_tuning_overrides": {"net.core.rmem_max": 1}, "nic_mtu_value": 9000,
        "nccl_env_overrides": {"NCCL_IB_QPS": 2}}
    # the first run stopping now does not take the second's winner away with its own
    assert first.unwrite() is True and "changed or went after this run wrote it" in first.record["unwritten"]
    assert second.unwrite() is True  # back to what it found: the first run's winner
    assert yaml.safe_load(open(tuned, encoding="utf-8")) == {
        "sysctl_tuning_overrides": {"net.core.rmem_max": 1}, "nic_mtu_value": 9000}


def test_the_plan_step_reads_each_nodes_value_else_its_roles_default(tmp_path):
    """roles/tune's plan.yml through ansible-playbook (two local hosts): every variable of tuning.READ,
    handed over by the CLI, is read on each node; the inventory's value where it sets one (node2's
    MTU), else the default of the role READ names (review: plan.yml had its own list of both)."""
    import subprocess
    import sys

    from ansible.module_utils.ncclprep.tune import decide as tuning
    from conftest import ANSIBLE_JSON_ENV, BIN, REPO

    hosts = {"node1": {"ansible_connection": "local"},
             "node2": {"ansible_connection": "local", "nic_mtu_value": 9000}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"ncclprep_nodes": {"hosts": hosts}}}}))
    out = tmp_path / "plan.json"
    res = subprocess.run([os.path.join(BIN, "ansible-playbook"), "tune.yml", "-i", str(tmp_path / "hosts.yml"),
                          "--tags", "tune_plan", "-e", f"ansible_python_interpreter={sys.executable}",
                          "-e", json.dumps({"tune_out": str(out), "tune_variables": tuning.READ})],
                         cwd=REPO, env=ANSIBLE_JSON_ENV, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    plan = json.loads(out.read_text())
    defaults = {}
    for role in set(tuning.READ.values()):
        with open(os.path.join(REPO, "roles", role, "defaults", "main.yml"), encoding="utf-8") as fh:
            defaults[role] = yaml.safe_load(fh)
    want = {var: defaults[role][var] for var, role in tuning.READ.items()}
    assert set(tuning.READ) >= set(tuning.TUNABLE) | set(tuning.SWITCHES.values())
    assert plan["baselines"]["node1"] == want
    assert plan["baselines"]["node2"] == dict(want, nic_mtu_value=9000)
    assert plan["hosts"] == ["node1", "node2"] and plan["runs"] == 5
