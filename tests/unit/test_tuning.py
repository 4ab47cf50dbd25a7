"""The decision rule of ``ncclprep tune`` (module_utils/ncclprep/tune/decide.py) on samples shaped like the
local cluster's: all_reduce busbw at the largest size spread 0.43-0.62 GB/s (median 0.51) over ten
healthy validate runs in a row (the CI table of stop 36), smaller sizes alike."""

from __future__ import annotations

import pytest
from ansible.module_utils.ncclprep.tune.decide import MIN_RUNS, bootstrap_ratio, decide, schedule

SMALL, LARGE = 65536, 4194304
# busbw (GB/s) of five runs a side at two sizes
BASE = {SMALL: [0.101, 0.097, 0.105, 0.099, 0.103], LARGE: [0.49, 0.51, 0.47, 0.52, 0.50]}


def test_the_schedule_alternates_and_rotates_and_refuses_too_few_runs():
    order = schedule(["base", "mtu1500"], 5)
    assert [v for _, v in order] == ["base", "mtu1500", "mtu1500", "base"] * 2 + ["base", "mtu1500"]
    three = [v for _, v in schedule(["a", "b", "c"], 6)]
    assert three[:9] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert all(three.count(v) == 6 for v in "abc")
    with pytest.raises(ValueError, match=f"runs=4: valid: at least {MIN_RUNS}"):
        schedule(["a", "b"], 4)
    with pytest.raises(ValueError, match="two or more distinct"):
        schedule(["a", "a"], 5)


def test_a_real_win_is_kept_with_its_interval_above_one():
    variant = {SMALL: [0.104, 0.100, 0.106, 0.102, 0.105], LARGE: [0.60, 0.62, 0.58, 0.61, 0.59]}
    got = decide(BASE, variant)
    assert got["keep"] and got["verdict"] == "keep" and got["target"] == LARGE
    assert got["sizes"][LARGE]["ratio"] == pytest.approx(0.60 / 0.50)
    low, high = got["interval"]
    assert 1 < low <= 1.2 <= high
    assert got["why"].startswith("+20.0 % at 4194304 (higher is better), interval ")


def test_a_win_inside_the_noise_is_no_significant_difference():
    """A median 8 % higher, but the runs spread as widely as the cluster's own (0.43-0.62)."""
    base = {LARGE: [0.43, 0.62, 0.51, 0.45, 0.58]}
    variant = {LARGE: [0.44, 0.63, 0.55, 0.47, 0.60]}
    got = decide(base, variant)
    assert not got["keep"] and got["verdict"] == "no significant difference"
    assert got["sizes"][LARGE]["ratio"] == pytest.approx(0.55 / 0.51)
    assert got["interval"][0] < 1 and "reaches 1: the defaults stay" in got["why"]
    # a significant gain below 5 % is not kept either
    small = {LARGE: [x * 1.03 for x in BASE[LARGE]]}
    got = decide({LARGE: BASE[LARGE]}, small)
    assert not got["keep"] and "+3.0 % at 4194304 is below the 5 % a change must win" in got["why"]


def test_a_win_at_one_size_that_loses_at_another_is_not_kept():
    variant = {SMALL: [0.095, 0.091, 0.098, 0.093, 0.096], LARGE: [0.60, 0.62, 0.58, 0.61, 0.59]}
    got = decide(BASE, variant)
    assert not got["keep"] and got["verdict"] == f"worse at {SMALL}"
    assert got["why"] == f"more than 2 % worse at {SMALL} (-5.9 %): the defaults stay"


def test_a_time_is_better_lower_and_bad_input_is_refused():
    base = {0: [0.210, 0.205, 0.215, 0.208, 0.212]}  # the training job's step time, seconds
    faster = {0: [0.180, 0.178, 0.183, 0.181, 0.179]}
    got = decide(base, faster, higher_is_better=False)
    assert got["keep"] and got["sizes"][0]["ratio"] == pytest.approx(0.21 / 0.18)
    assert bootstrap_ratio(base[0], faster[0], False) == bootstrap_ratio(base[0], faster[0], False)  # repeatable
    with pytest.raises(ValueError, match="the same sizes"):
        decide(BASE, {LARGE: BASE[LARGE]})
    with pytest.raises(ValueError, match=f"fewer than {MIN_RUNS} runs a side"):
        decide({1: [1.0] * 4}, {1: [1.0] * 4})
    with pytest.raises(ValueError, match="target=7: valid: a measured size"):
        decide(BASE, BASE, target=7)
    with pytest.raises(ValueError, match="valid: positive figures"):
        decide({1: [0.0] * 5}, {1: [1.0] * 5})


# -- the space, one run's figures, the whole run's decision, the report (issue 26) ----------------
from ansible.module_utils.ncclprep.tune.decide import (  # noqa: E402
    BASELINE,
    judge,
    plan,
    report_section,
    run_figures,
    verify_figures,
)

INVENTORY = {"nic_mtu_value": 4096, "sysctl_tuning_overrides": {"net.core.somaxconn": 4096},
             "nccl_env_overrides": {}}


def test_the_plan_merges_mappings_skips_the_baseline_and_names_the_concerns():
    space = [{"name": "mtu", "values": [{"nic_mtu_value": 1500}, {"nic_mtu_value": 4096}]},
             {"name": "buffers", "values": [{"sysctl_tuning_overrides": {"net.core.rmem_max": 67108864}}]},
             {"name": "sockets", "values": [{"nccl_env_overrides": {"NCCL_SOCKET_NTHREADS": 4,
                                                                    "NCCL_NSOCKS_PERTHREAD": 4}}]}]
    got = plan(space, INVENTORY)
    assert [v["name"] for v in got] == [BASELINE, "mtu-0", "buffers-0", "sockets-0"]
    assert got[0]["vars"] == {} and got[1]["vars"] == {"nic_mtu_value": 1500}
    # 4096 is the inventory's own value: the baseline, not measured twice
    assert "mtu-1" not in [v["name"] for v in got]
    assert got[2]["vars"] == {"sysctl_tuning_overrides": {"net.core.somaxconn": 4096, "net.core.rmem_max": 67108864}}
    assert got[2]["concerns"] == ["sysctl_tuning"] and got[3]["concerns"] == ["nccl_env"]
    assert got[3]["label"] == "sockets: NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4"


@pytest.mark.parametrize("space, message", [
    ([{"name": "x", "values": [{"nic_mtu_probe_timeout": 1}]}],
     r"tune_space\[0\].values\[0\].nic_mtu_probe_timeout=1: nic_mtu_probe_timeout cannot be tuned"),
    ([{"name": "x", "values": [{"nccl_env_overrides": {"NCCL_ALGO": "Ring"}}]}],
     r"tune_space\[0\].values\[0\].nccl_env_overrides: NCCL_ALGO cannot be tuned"),
    ([{"name": "x", "values": [{"sysctl_tuning_overrides": 5}]}], r"valid: a mapping merged onto the inventory's"),
    # rps_rfs false leaves the masks in place: a run could not go back to on and off again (rps_rfs_cpus: none)
    ([{"name": "x", "values": [{"rps_rfs_enabled": False}]}], r"rps_rfs_enabled cannot be tuned"),
    ([{"name": "x", "values": []}], r"tune_space\[0\].values=\[\]: valid: one value or more"),
    ([{"name": "x", "values": [{"nic_mtu_value": 9000}]}, {"name": "x", "values": [{"nic_mtu_value": 1500}]}],
     r"tune_space\[1\].name='x': valid: a name of its own"),
    ([{"name": "baseline", "values": [{"nic_mtu_value": 1500}]}], r"tune_space\[0\].name='baseline'"),
])
def test_the_plan_refuses_what_cannot_be_tuned_naming_where(space, message):
    with pytest.raises(ValueError, match=message):
        plan(space, INVENTORY)


def test_the_plan_refuses_an_mtu_when_nic_mtu_is_switched_off():
    """nic_mtu_enabled false: the role applies nothing, every MTU run would measure the same thing."""
    space = [{"name": "mtu", "values": [{"nic_mtu_value": 1500}]}]
    with pytest.raises(ValueError, match=r"tune_space\[0\].values\[0\].nic_mtu_value=1500: nic_mtu_enabled is false "
                                         r"in the inventory, so nic_mtu applies nothing"):
        plan(space, dict(INVENTORY, nic_mtu_enabled=False))
    assert [v["name"] for v in plan(space, dict(INVENTORY, nic_mtu_enabled=True))] == [BASELINE, "mtu-0"]


def _records(busbw_large: float, step_s: float | None = 0.040, status: str = "PASS") -> dict:
    """Two nodes' nccl_probe and torchrun_smoke results as the measure step writes them."""
    out = {}
    for i, host in enumerate(("node1", "node2")):
        rows = [{"op": "all_reduce", "size_bytes": s, "time_us": 100.0 + 10 * i, "algbw_gbps": b,
                 "busbw_gbps": b - 0.01 * i, "wrong": 0} for s, b in ((SMALL, 0.1), (LARGE, busbw_large))]
        rows.append({"op": "broadcast", "size_bytes": LARGE, "time_us": 1.0, "algbw_gbps": 9.0, "busbw_gbps": 9.0,
                     "wrong": 0})
        smoke = None if step_s is None else {"status": "PASS", "workers": [{"rank": i, "step_s": step_s + 0.002 * i}]}
        out[host] = {"probe": {"status": status, "results": rows, "error": None if status == "PASS" else "rank 1 gone"},
                     "smoke": smoke}
    return out


def test_one_runs_figures_are_the_slowest_rank_and_worker():
    fig = run_figures(_records(0.5), "all_reduce")
    assert fig["busbw"] == {SMALL: pytest.approx(0.09), LARGE: pytest.approx(0.49)}
    assert fig["step_s"] == pytest.approx(0.042) and fig["errors"] == []
    bad = run_figures(_records(0.5, None, status="FAIL"), "all_reduce")
    assert bad["step_s"] is None
    assert bad["errors"] == ["node1: probe FAIL: rank 1 gone", "node2: probe FAIL: rank 1 gone"]


VARIANTS = plan([{"name": "mtu", "values": [{"nic_mtu_value": 1500}, {"nic_mtu_value": 9000}]}], INVENTORY)


def _runs(base, v1500, v9000, steps=(0.040, 0.040, 0.040)):
    """Five runs a variant from each variant's busbw at LARGE (SMALL alike in every run)."""
    def figs(xs, step):
        return [{"busbw": {SMALL: 0.1, LARGE: x}, "step_s": step, "variant": name} for x in xs]
    out = {}
    for name, xs, step in ((BASELINE, base, steps[0]), ("mtu-0", v1500, steps[1]), ("mtu-1", v9000, steps[2])):
        out[name] = [dict(f, variant=name) for f in figs(xs, step)]
    return out


def test_the_run_keeps_the_best_winner_of_a_dimension():
    runs = _runs([0.50, 0.51, 0.49, 0.50, 0.52], [0.56, 0.55, 0.57, 0.56, 0.58], [0.62, 0.61, 0.63, 0.60, 0.62])
    got = judge(VARIANTS, runs)
    assert got["decisions"]["mtu-0"]["keep"] and got["decisions"]["mtu-1"]["keep"]
    assert got["winners"] == ["mtu-1"] and got["vars"] == {"nic_mtu_value": 9000}
    assert got["decisions"]["mtu-1"]["step"]["ratio"] == pytest.approx(1.0)


def test_a_busbw_win_that_slows_the_training_step_is_not_kept():
    runs = _runs([0.50, 0.51, 0.49, 0.50, 0.52], [0.50] * 5, [0.62, 0.61, 0.63, 0.60, 0.62],
                 steps=(0.040, 0.040, 0.043))
    got = judge(VARIANTS, runs)
    d = got["decisions"]["mtu-1"]
    assert not d["keep"] and d["verdict"] == "worse in training" and got["winners"] == []
    assert "training step is +7.5 % longer" in d["why"]
    assert got["decisions"]["mtu-0"]["verdict"] == "no significant difference"


def test_the_report_section_and_the_verification_read_the_record():
    runs = _runs([0.50, 0.51, 0.49, 0.50, 0.52], [0.40, 0.41, 0.39, 0.40, 0.42], [0.62, 0.61, 0.63, 0.60, 0.62])
    result = judge(VARIANTS, runs)
    flat = [r for name in (BASELINE, "mtu-0", "mtu-1") for r in runs[name]]
    record = {"generated_at": "2026-12-06T05:00:00Z", "status": "decided", "method": "m", "variants": VARIANTS,
              "runs": flat, "result": result,
              "plan": {"op": "all_reduce", "runs": 5, "min_gain": 0.05, "max_loss": 0.02}}
    sec = report_section(record)
    assert sec["decision"] == "kept mtu: nic_mtu_value=9000" and sec["target_bytes"] == LARGE
    base, low, high = sec["variants"]
    assert base["verdict"] == "baseline" and base["sizes"][str(LARGE)] == {"median": 0.50, "low": 0.49, "high": 0.52,
                                                                            "runs": 5}
    assert low["verdict"] == f"worse at {LARGE}" and not low["keep"]
    assert high["keep"] and high["ratio"] == pytest.approx(0.62 / 0.50)
    # validate.yml's figure inside the winner's spread is as tuned; below its lowest run it is not
    ok = verify_figures(result, flat, {LARGE: 0.61}, {v["name"]: v for v in VARIANTS})
    assert ok["ok"] and ok["expected"] == [0.60, 0.62, 0.63] and "as tuned" in ok["note"]
    assert verify_figures(result, flat, {LARGE: 0.55}, {})["ok"] is False
    assert verify_figures(result, flat, {}, {})["ok"] is None


def test_the_report_section_reads_a_record_that_went_through_json():
    """tuning.json is read back by cluster_report: its size keys are strings then (a KeyError before)."""
    import json

    runs = _runs([0.50, 0.51, 0.49, 0.50, 0.52], [0.56, 0.55, 0.57, 0.56, 0.58], [0.62, 0.61, 0.63, 0.60, 0.62])
    flat = [r for name in (BASELINE, "mtu-0", "mtu-1") for r in runs[name]]
    record = json.loads(json.dumps({"variants": VARIANTS, "runs": flat, "result": judge(VARIANTS, runs),
                                    "plan": {"op": "all_reduce"}, "status": "decided"}))
    sec = report_section(record)
    assert [v["ratio"] for v in sec["variants"][1:]] == [pytest.approx(0.56 / 0.50), pytest.approx(0.62 / 0.50)]
    assert sec["variants"][2]["sizes"][str(LARGE)]["median"] == 0.62


def test_two_dimensions_that_win_on_one_mapping_keep_both_keys():
    """Socket buffers and the backlog are both sysctl_tuning_overrides: the second winner used to
    overwrite the first's keys with the inventory's (review of issue 26)."""
    space = [{"name": "buffers", "values": [{"sysctl_tuning_overrides": {"net.core.rmem_max": 1000}}]},
             {"name": "backlog", "values": [{"sysctl_tuning_overrides": {"net.core.netdev_max_backlog": 5000}}]}]
    variants = plan(space, INVENTORY)
    win = [0.60, 0.61, 0.62, 0.60, 0.61]
    runs = {n: [{"busbw": {LARGE: x}, "step_s": None, "variant": n} for x in xs]
            for n, xs in ((BASELINE, [0.50, 0.51, 0.49, 0.50, 0.52]), ("buffers-0", win), ("backlog-0", win))}
    got = judge(variants, runs)
    assert got["winners"] == ["buffers-0", "backlog-0"]
    assert got["vars"] == {"sysctl_tuning_overrides": {"net.core.somaxconn": 4096, "net.core.rmem_max": 1000,
                                                       "net.core.netdev_max_backlog": 5000}}


def test_the_target_asked_for_is_the_measured_size_nearest_to_it():
    """tune_target_size 16777216 is measured as 16777212 on 3 ranks: judged there, not a ValueError."""
    runs = _runs([0.50, 0.51, 0.49, 0.50, 0.52], [0.50] * 5, [0.62, 0.61, 0.63, 0.60, 0.62])
    for r in (r for rs in runs.values() for r in rs):
        r["busbw"] = {SMALL - 4: r["busbw"][SMALL], LARGE - 4: r["busbw"][LARGE]}
    got = judge(VARIANTS, runs, target=LARGE)
    assert got["decisions"]["mtu-1"]["target"] == LARGE - 4 and got["winners"] == ["mtu-1"]


def test_a_value_given_as_a_string_equal_to_the_inventorys_is_the_baseline():
    """-e nic_mtu_value=4096 arrives as "4096": still the inventory's own value, not measured twice."""
    got = plan([{"name": "mtu", "values": [{"nic_mtu_value": "4096"}, {"nic_mtu_value": 1500}]}], INVENTORY)
    assert [v["name"] for v in got] == [BASELINE, "mtu-1"]
    with pytest.raises(ValueError, match=r"tune_space\[0\].name='a/b': valid: a name of its own"):
        plan([{"name": "a/b", "values": [{"nic_mtu_value": 1500}]}], INVENTORY)
    with pytest.raises(ValueError, match=r"tune_space\[0\]='mtu': valid: a mapping"):
        plan(["mtu"], INVENTORY)


def test_rps_rfs_off_is_a_variant_of_rps_rfs_cpus():
    got = plan([{"name": "rps", "values": [{"rps_rfs_cpus": "none"}]}], dict(INVENTORY, rps_rfs_cpus=None))
    assert got[1]["vars"] == {"rps_rfs_cpus": "none"} and got[1]["concerns"] == ["rps_rfs"]
    with pytest.raises(ValueError, match="rps_rfs_enabled is false in the inventory"):
        plan([{"name": "rps", "values": [{"rps_rfs_cpus": "none"}]}], dict(INVENTORY, rps_rfs_enabled=False))
