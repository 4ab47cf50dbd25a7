"""The preflight's settings are defined once (module_utils/ncclprep/node/settings.py): the role's
argument spec and defaults are held to the table here, its README is generated from the spec
(test_role_docs.py), the values of a run come from the table's lookup (test_node_preflight.py), and
the ranges are one function, ``problems``, which validate.yml, site.yml and the engine run."""

from __future__ import annotations

import os

import pytest
import yaml
from ansible.module_utils.ncclprep.node import settings
from ansible.module_utils.ncclprep.node.settings import BY_VAR, KINDS, SETTINGS, coerce, problems, values

import ncclprep

ROLE = os.path.join(ncclprep.REPO_ROOT, "roles", "preflight")
#: The role's variables that are no engine setting: where site.yml installs the node side, and the
#: controller's report outputs.
NOT_SETTINGS = {"preflight_report_dir", "preflight_textfile_dir", "preflight_tuning_file", "preflight_node_lib",
                "preflight_node_command", "preflight_node_intent", "preflight_node_managed",
                "preflight_slurm_example"}


def _yaml(*path: str) -> dict:
    with open(os.path.join(ROLE, *path), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _defaults() -> dict:
    return {sec: {k: (BY_VAR[var].default) for k, var in keys.items()} for sec, keys in settings.SETTABLE.items()}


def test_the_argument_spec_says_what_the_table_says_and_has_no_setting_of_its_own():
    spec = _yaml("meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(spec) - set(BY_VAR) == NOT_SETTINGS
    for s in SETTINGS:
        kind, elements = KINDS[s.kind]
        want = {"type": kind, **({"elements": elements} if elements else {}),
                **({"default": s.default_expr or s.default} if s.default is not None else {}),
                "description": s.description()}
        assert spec[s.var] == want, (s.var, spec[s.var], want)


def test_the_role_defaults_are_the_tables():
    defaults = _yaml("defaults", "main.yml")
    for s in SETTINGS:
        assert defaults[s.var] == (s.default_expr or s.default), s.var


def test_the_defaults_are_valid_at_every_mtu_and_a_range_is_said_in_the_description():
    for mtu in (None, 1500, 4096, 9000):
        assert problems(_defaults(), "gpu01", mtu) == [], mtu
    assert BY_VAR["preflight_probe_local_ranks"].description().endswith("Valid: null or an integer >= 1.")
    assert BY_VAR["preflight_net_slow_z"].description().endswith("Valid: a number < 0.")
    assert "Valid" not in BY_VAR["preflight_net_enabled"].description()


@pytest.mark.parametrize("var,bad,good", [
    ("preflight_name_timeout", 0, 0.5),
    ("preflight_connect_port", 65536, 65535),
    ("preflight_ssh_peers", 0, None),
    ("preflight_ssh_parallel", 0, 1),
    ("preflight_net_store_port", 0, 1),
    ("preflight_net_ports", [22, 70000], [22, 65535]),
    ("preflight_net_ephemeral_sample", -1, 0),
    ("preflight_net_latency_samples", 0, 1),
    ("preflight_net_bandwidth_seconds", 0, 0.01),
    ("preflight_net_repair", -1, 0),
    ("preflight_net_max_latency_us", 0, None),
    ("preflight_net_slow_z", 0, -0.1),
    ("preflight_net_slow_ratio", 1.01, 1),
    ("preflight_net_min_gbps", -1, None),
    ("preflight_net_link_floor_ratio", 0, None),
    ("preflight_probe_ops", [], ["broadcast"]),
    ("preflight_probe_ops", ["allreduce"], ["all_to_all", "all_reduce"]),
    ("preflight_probe_sizes", [4096, 0], [1]),
    ("preflight_probe_iters", 0, 1),
    ("preflight_probe_local_ranks", 0, 8),
    ("preflight_probe_blame_timeout", 9, 10),
    ("preflight_probe_expect_net", "roce", "ib"),
    ("preflight_min_busbw_gbps", 0, 0.5),
    ("preflight_smoke_steps", 0, 1),
    ("preflight_net_every_pair", "yes", False),  # a string where a boolean belongs (--settings JSON)
    ("preflight_probe_warmup", 1.5, 0),
    ("preflight_ssh_enabled", None, True),
])
def test_each_range_refuses_its_bad_value_by_host_variable_and_value_and_takes_its_edge(var, bad, good):
    s = BY_VAR[var]
    sections = _defaults()
    sections[s.section][s.key] = bad
    shown = settings.show(bad)
    assert problems(sections, "gpu07", 9000) == [f"gpu07: {var}={shown}: valid: {s.valid()}"]
    sections[s.section][s.key] = good
    assert problems(sections, "gpu07", 9000) == []


def test_the_rules_between_settings_name_both_variables():
    sections = _defaults()
    sections["net"].update(join_timeout=120)
    sections["probe"].update(join_timeout=130)
    sections["net"].update(listen_port=29520)
    assert problems(sections, "gpu01") == [
        "gpu01: preflight_net_join_timeout=120: valid: below preflight_net_timeout (120)",
        "gpu01: preflight_probe_join_timeout=130: valid: below preflight_probe_timeout (120)",
        "gpu01: preflight_net_listen_port=29520: valid: a port other than preflight_net_store_port (29520)"]
    # the least deadline: 30 s join + one round (2 * (2 * 1 + 2 * (2 * 2 + 0.25)) + 3) + 10 s, 64 s without
    # the path-MTU search; the search at MTU 9000 adds its probes' steps
    sections = _defaults()
    sections["net"]["timeout"] = 63
    assert problems(sections, "gpu01") == [
        "gpu01: preflight_net_timeout=63: valid: at least 64 s, preflight_net_join_timeout (30 s) plus one round's "
        "deadline and 10 s; below it a node lost mid-run gets every node's probe killed instead of named"]
    sections["net"]["timeout"] = 64
    assert problems(sections, "gpu01") == []
    assert "at least 89 s" in problems(sections, "gpu01", 9000)[0]
    # a section the run does not have (ssh with the ssh_trust concern off) is not checked
    assert problems({"ssh": None, "net": {"timeout": 5}}, "gpu01") == []


def test_values_take_the_hosts_variables_as_their_kind_and_the_tables_default_for_an_unset_one():
    given = {"preflight_net_timeout": "150", "preflight_net_every_pair": "true", "preflight_net_slow_ratio": 1,
             "preflight_probe_sizes": ["4096", 65536], "preflight_probe_iters": "many"}

    def get(var):
        return given[var]

    out = values(get)
    assert out["net"]["timeout"] == 150 and out["net"]["every_pair"] is True
    assert out["net"]["slow_ratio"] == 1.0 and isinstance(out["net"]["slow_ratio"], float)
    assert out["probe"]["sizes"] == [4096, 65536] and out["probe"]["iters"] == "many"
    assert out["probe"]["warmup"] == 2 and out["report"]["expect_net"] is None
    assert problems(out, "gpu01") == ["gpu01: preflight_probe_iters=many: valid: an integer >= 1"]
    assert coerce(BY_VAR["preflight_probe_iters"], "5.5") == "5.5" and coerce(BY_VAR["preflight_probe_iters"], 5.0) == 5
    assert coerce(BY_VAR["preflight_net_min_gbps"], "inf") == "inf"
