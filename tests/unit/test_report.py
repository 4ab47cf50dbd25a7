"""The report folder of a run: its layout, cluster.json against docs/report-schema.json, older
runs read back, and summary.md as a person reads it in a terminal."""

import json
import os

import jsonschema
import pytest
from ansible.module_utils.ncclprep.checks import make_check
from ansible.module_utils.ncclprep.report import (
    SCHEMA_VERSION,
    load_run,
    render_markdown,
    upgrade,
    write_reports,
)
from ansible.module_utils.ncclprep.report.common import brief, grid_rows, host_status, human_size
from report_cases import HOSTS, STAMP, make_cluster, make_records

import ncclprep

DOCS = os.path.join(ncclprep.REPO_ROOT, "docs")
with open(os.path.join(DOCS, "report-schema.json"), encoding="utf-8") as _fh:
    SCHEMA = json.load(_fh)
RUN_FILES = {"cluster.json", "hosts", "summary.md", "junit.xml", "metrics.prom", "report.html"}


def _cluster(status="FAIL"):
    checks = [make_check("sysctl.net.core.somaxconn", "FAIL", ["node2"], {"node2": "128"}, "65535",
                         "net.core.somaxconn differs | on node2", "sysctl -w net.core.somaxconn='65535'"),
              make_check("host.reachable", "PASS", [], 2, 2, "all 2 hosts answered")]
    return {"schema_version": SCHEMA_VERSION, "status": status, "generated_at": "20261130T000000Z",
            "hosts": ["node1", "node2"], "checks": checks,
            "collectives": {"all_reduce": [{"size_bytes": 4092, "time_us_max": 100.0, "algbw_gbps": 0.04,
                                            "busbw_gbps": 0.06, "wrong": 0, "slowest_host": "node1"}]}}


# ---------------------------------------------------------------- the folder

def test_layout_latest_link_and_host_files(tmp_path):
    run = write_reports(str(tmp_path), _cluster(), {"node2": {"facts": {"hostname": "node2"}}}, "20261130T000000Z")
    assert run == str(tmp_path / "20261130T000000Z")
    assert os.readlink(tmp_path / "latest") == "20261130T000000Z"
    assert set(os.listdir(run)) == RUN_FILES  # no temp file left behind
    cluster = json.loads((tmp_path / "latest" / "cluster.json").read_text())
    assert cluster["status"] == "FAIL" and cluster["schema_version"] == SCHEMA_VERSION == 2
    assert set(cluster["checks"][0]) == {"id", "status", "hosts", "measured", "expected", "message", "remediation"}
    node2 = json.loads((tmp_path / "latest" / "hosts" / "node2.json").read_text())
    assert node2["host"] == "node2" and node2["facts"] == {"hostname": "node2"}
    assert [c["id"] for c in node2["checks"]] == ["sysctl.net.core.somaxconn"]
    node1 = json.loads((tmp_path / "latest" / "hosts" / "node1.json").read_text())
    assert node1["checks"] == []
    # a second run moves latest
    write_reports(str(tmp_path), _cluster("PASS"), {}, "20261130T000100Z")
    assert os.readlink(tmp_path / "latest") == "20261130T000100Z"


def test_host_file_lists_the_checks_naming_the_host_as_an_end_of_a_link(tmp_path):
    cluster = make_cluster(latency={("node1", "node3"): 200.0})
    run = write_reports(str(tmp_path), cluster, make_records())
    ids = {h: [c["id"] for c in json.loads((tmp_path / STAMP / "hosts" / f"{h}.json").read_text())["checks"]]
           for h in HOSTS}
    assert run.endswith(STAMP)  # the folder is the cluster's stamp
    assert "net.latency" in ids["node1"] and "net.latency" in ids["node3"] and "net.latency" not in ids["node2"]


def test_textfile_dir_gets_the_metrics_atomically(tmp_path):
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    run = write_reports(str(tmp_path / "reports"), make_cluster(), make_records(), textfile_dir=str(textfile))
    assert os.listdir(textfile) == ["ncclprep.prom"]
    assert (textfile / "ncclprep.prom").read_text() == open(os.path.join(run, "metrics.prom")).read()
    assert oct(os.stat(textfile / "ncclprep.prom").st_mode & 0o777) == "0o644"  # node_exporter may run as another user
    with pytest.raises(OSError):
        write_reports(str(tmp_path / "reports"), make_cluster(), {}, "20261130T221501Z",
                      textfile_dir=str(tmp_path / "absent"))


# ---------------------------------------------------------------- the schema

@pytest.mark.parametrize("faults", [{}, {"somaxconn_node2": "128", "latency": {("node1", "node3"): 200.0},
                                         "kernel_node3": "6.5.0"}, {"hang_node3": True}])
def test_rendered_cluster_json_validates_against_the_documented_schema(tmp_path, faults):
    write_reports(str(tmp_path), make_cluster(**faults), make_records(**faults))
    cluster = json.loads((tmp_path / STAMP / "cluster.json").read_text())
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.validate(cluster, SCHEMA, cls=jsonschema.Draft202012Validator)
    for host in HOSTS:
        host_file = json.loads((tmp_path / STAMP / "hosts" / f"{host}.json").read_text())
        jsonschema.validate(host_file, SCHEMA["$defs"]["host_file"] | {"$defs": SCHEMA["$defs"]})


def test_schema_refuses_what_it_does_not_document():
    cluster = json.loads(json.dumps(make_cluster()))
    for bad in ({"schema_version": 1}, {"status": "WARN"}, {"surprise": 1}, {"generated_at": "yesterday"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(cluster | bad, SCHEMA)
    cluster["collectives"]["all_reduce"][0]["busbw_gbps"] = "fast"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(cluster, SCHEMA)


def test_schema_page_documents_every_key_of_the_json_schema():
    with open(os.path.join(DOCS, "report-schema.md"), encoding="utf-8") as fh:
        page = fh.read()
    keys = set(SCHEMA["properties"]) | set(SCHEMA["properties"]["network"]["properties"])
    for part in ("versions", "run"):
        keys |= set(SCHEMA["properties"][part]["properties"])
    keys |= set(SCHEMA["$defs"]["check"]["properties"]) | set(SCHEMA["$defs"]["collective_row"]["properties"])
    assert not sorted(k for k in keys if f"`{k}`" not in page)


def test_versions_table_marks_the_hosts_that_differ_from_the_majority():
    cluster = make_cluster(kernel_node3="6.5.0-35-generic")
    versions = cluster["versions"]
    assert versions["keys"] == ["torch", "torch_nccl", "driver", "kernel", "python"]  # cuda: no host has it
    assert versions["hosts"]["node3"]["kernel"] == "6.5.0-35-generic"
    assert versions["majority"]["kernel"] == "6.8.0-45-generic"
    assert versions["outliers"] == {"kernel": ["node3"]}
    assert cluster["run"]["counts"]["FAIL"] == 1 and cluster["run"]["timestamp_s"] == 1796076900.0
    assert cluster["run"]["limits"]["net_limits"] == {"max_latency_us": 100}


# ---------------------------------------------------------------- reading runs back

def _v1_run(folder, **faults):
    """A run folder as schema version 1 wrote it (no versions, no run)."""
    cluster = make_cluster(**faults)
    cluster = {k: v for k, v in cluster.items() if k not in ("versions", "run")} | {"schema_version": 1}
    os.makedirs(folder / "hosts")
    (folder / "cluster.json").write_text(json.dumps(cluster))
    for host, rec in make_records(**faults).items():
        (folder / "hosts" / f"{host}.json").write_text(json.dumps(dict(rec, host=host, checks=[])))
    return cluster


def test_load_run_reads_a_run_folder_its_cluster_json_or_the_reports_folder(tmp_path):
    written = make_cluster(somaxconn_node2="128")
    write_reports(str(tmp_path), written, make_records(somaxconn_node2="128"))
    for path in (tmp_path / STAMP, tmp_path / STAMP / "cluster.json", tmp_path, tmp_path / "latest"):
        cluster, hosts = load_run(str(path))
        assert cluster == json.loads(json.dumps(written))
        assert sorted(hosts) == HOSTS and "checks" not in hosts["node2"] and "host" not in hosts["node2"]
        assert hosts["node2"]["facts"]["sysctl_tuning"]["net.core.somaxconn"]["value"] == "128"


def test_load_run_upgrades_a_schema_version_1_run(tmp_path):
    _v1_run(tmp_path, kernel_node3="6.5.0")
    cluster, hosts = load_run(str(tmp_path))
    assert cluster["schema_version"] == 2 and cluster["run"]["upgraded_from"] == 1
    assert cluster["versions"]["outliers"] == {"kernel": ["node3"]}  # from the host files' facts
    assert cluster["run"]["stamp"] == STAMP and cluster["run"]["limits"] == {}
    jsonschema.validate(cluster, SCHEMA)
    assert render_markdown(cluster).startswith("# ncclprep preflight: FAIL")


def test_load_run_names_what_is_missing_or_unreadable(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"no report at {tmp_path}"):
        load_run(str(tmp_path))
    (tmp_path / "cluster.json").write_text(json.dumps({"schema_version": 99, "status": "PASS"}))
    with pytest.raises(ValueError, match=r"schema_version=99: this ncclprep reads \[1, 2\]"):
        load_run(str(tmp_path))
    (tmp_path / "cluster.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        load_run(str(tmp_path))
    with pytest.raises(ValueError, match="no checks"):
        upgrade({"schema_version": 1, "status": "PASS", "hosts": []})


# ---------------------------------------------------------------- summary.md

def test_markdown_puts_problems_first():
    md = render_markdown(_cluster())
    lines = md.splitlines()
    assert lines[0] == "# ncclprep preflight: FAIL"
    assert lines.index("### FAIL sysctl.net.core.somaxconn: node2") < lines.index("## Passed: 1")
    assert "- measured: node2: 128" in lines and "- fix: sysctl -w net.core.somaxconn='65535'" in lines
    assert "| 4092 B |       0.06 |" in md


def test_markdown_failure_blocks_read_as_text_not_json():
    cluster = make_cluster(somaxconn_node2="128", latency={("node1", "node3"): 200.0})
    md = render_markdown(cluster)
    lines = md.splitlines()
    assert all(len(line) <= 100 for line in lines), [line for line in lines if len(line) > 100]
    assert '{"' not in md and "null" not in md
    heads = [ln for ln in lines if ln.startswith("### ")]
    assert heads == ["### FAIL sysctl.net.core.somaxconn: node2", "### FAIL net.latency: node1 -> node3"]
    block = lines[lines.index(heads[1]):]
    assert block[2] == "TCP round trip p50 above 100 us on node1 -> node3: node1 -> node3 200 us (median 40 us)"
    assert block[4:7] == ["- measured: node1 -> node3: p50 200, p99 400; median_p50: 40",
                          "- expected: p50 <= 100 us",
                          "- fix: look for a congested or mis-routed path (tc qdisc, switch counters, a route via "
                          "another NIC)"]
    # problems, then the grid, then the passes, then the figures
    order = [next(i for i, ln in enumerate(lines) if ln.startswith(s)) for s in (
        "## Problems: 2 checks failed or hung", "## Status per host", "## Skipped: ", "## Passed: ",
        "## Collectives: busbw of the slowest rank", "## TCP round trip p50 (us): rows send, columns receive")]
    assert order == sorted(order)


def test_markdown_grid_rows_name_the_checks_that_named_hosts():
    md = render_markdown(make_cluster(latency={("node1", "node3"): 200.0}, kernel_node3="6.5.0"))
    rows = {" ".join(ln.split()) for ln in md.splitlines()}
    assert "| net.latency | FAIL | PASS | FAIL |" in rows  # both ends of the link
    assert "| versions.kernel | PASS | PASS | FAIL |" in rows
    assert "| net.* (4) | PASS | PASS | PASS |" in rows  # the rest of the group in one row
    assert "| links.* (2) | SKIP | SKIP | SKIP |" in rows
    assert "| 16 MiB | 0.338 | 0.74 |" in rows  # busbw per size (rows) and op (columns)


def test_markdown_hangs_come_before_fails_and_warnings_after():
    cluster = _cluster()
    cluster["checks"] += [make_check("collective.run", "HANG", ["node2"], message="ranks on node2 never arrived"),
                          make_check("links.counters", "WARN", ["node1"], message="crc errors grew on node1")]
    heads = [ln for ln in render_markdown(cluster).splitlines() if ln.startswith("##")]
    assert heads[:5] == ["## Problems: 2 checks failed or hung", "### HANG collective.run: node2",
                         "### FAIL sysctl.net.core.somaxconn: node2", "## Warnings: 1",
                         "### WARN links.counters: node1"]


def test_markdown_of_a_large_cluster_stays_within_100_columns():
    hosts = [f"gpu-node-{i:04d}" for i in range(40)]
    measured = {h: "128" for h in hosts}
    cluster = {"schema_version": 2, "status": "FAIL", "generated_at": STAMP, "hosts": hosts, "checks": [
        make_check("sysctl.net.core.somaxconn", "FAIL", hosts[:30], measured, "65535", "differs", "fix it"),
        make_check("host.reachable", "PASS", [], 40, 40, "all 40 hosts answered")],
        "network": {"latency_p50_us": {a: {b: 40.0 + (a == hosts[3]) * 500 for b in hosts if b != a} for a in hosts}}}
    md = render_markdown(cluster)
    lines = md.splitlines()
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    assert "- measured: gpu-node-0000: 128; gpu-node-0001: 128" in md and "(+" in md  # cut, counting the rest
    assert "10 of 40 hosts pass every check (not shown)." in lines
    assert "columns: 1 = gpu-node-0000, 2 = gpu-node-0001" in md  # numbered columns with a legend
    assert "## TCP round trip p50 (us): the 10 worst of 1560 directions" in lines
    assert " ".join(lines[lines.index("## TCP round trip p50 (us): the 10 worst of 1560 directions") + 4].split()) \
        == "| gpu-node-0003 | gpu-node-0000 | 540 |"


# ---------------------------------------------------------------- the shared rules

def test_host_status_blames_named_hosts_link_ends_or_everyone():
    hosts = ["node1", "node2", "node3"]
    assert host_status(make_check("a.b", "FAIL", ["node2"]), hosts) == {"node1": "PASS", "node2": "FAIL",
                                                                         "node3": "PASS"}
    assert host_status(make_check("a.b", "HANG", ["node1 <-> node3"]), hosts) == {"node1": "HANG", "node2": "PASS",
                                                                                   "node3": "HANG"}
    assert set(host_status(make_check("a.b", "FAIL", []), hosts).values()) == {"FAIL"}
    assert set(host_status(make_check("a.b", "FAIL", ["a group"]), hosts).values()) == {"FAIL"}
    assert set(host_status(make_check("a.b", "SKIP", ["node1"]), hosts).values()) == {"SKIP"}
    assert host_status(make_check("a.b", "WARN", ["node3"]), hosts)["node3"] == "WARN"
    rows = dict(grid_rows([make_check("x.one", "PASS"), make_check("x.two", "SKIP")], hosts))
    assert rows == {"x.* (2)": dict.fromkeys(hosts, "PASS")}


def test_brief_and_sizes():
    assert brief(None) == "-" and brief({}) == "none" and brief(0.123456) == "0.1235" and brief(True) == "yes"
    assert brief({"node1": {"29500": {"node2": "filtered"}}}) == "node1: 29500 {node2: filtered}"
    assert brief(["a", "b"]) == "a, b" and brief("x" * 300, 20) == "x" * 17 + "..."
    assert brief({f"h{i}": i for i in range(100)}, 41) == "h0: 0; h1: 1; h2: 2; h3: 3 ... (+96 more)"
    assert [human_size(n) for n in (4096, 16777216, 4092, 3 << 30)] == ["4 KiB", "16 MiB", "4092 B", "3 GiB"]


def _tuning_record() -> dict:
    """An `ncclprep tune` record of two variants, five runs each, the variant 20 % ahead at 16 MiB."""
    from ansible.module_utils.ncclprep.tune.decide import judge, plan

    variants = plan([{"name": "mtu", "values": [{"nic_mtu_value": 9000}]}], {"nic_mtu_value": 4096})
    runs = {"baseline": [0.50, 0.51, 0.49, 0.50, 0.52], "mtu-0": [0.60, 0.61, 0.59, 0.60, 0.62]}
    figs = {n: [{"busbw": {1048576: 0.3, 16777216: x}, "step_s": 0.04, "variant": n} for x in xs]
            for n, xs in runs.items()}
    return {"generated_at": "2026-12-06T05:00:00Z", "status": "decided", "method": "bootstrap", "variants": variants,
            "runs": figs["baseline"] + figs["mtu-0"], "result": judge(variants, figs),
            "written": "inventory/x/group_vars/all/ncclprep_tuned.yml",
            "plan": {"op": "all_reduce", "runs": 5, "min_gain": 0.05, "max_loss": 0.02}}


def test_the_tuning_section_is_in_the_schema_the_summary_and_the_page():
    from ansible.module_utils.ncclprep.report import render_html
    from ansible.module_utils.ncclprep.tune.decide import report_section

    cluster = make_cluster() | {"tuning": report_section(_tuning_record())}
    jsonschema.validate(json.loads(json.dumps(cluster)), SCHEMA, cls=jsonschema.Draft202012Validator)
    md = render_markdown(cluster)
    assert "## Tuning: kept mtu: nic_mtu_value=9000" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| mtu: nic_mtu_value=9000"))
    assert "0.6 (0.59-0.62)" in row and "+20.0 %" in row and "keep" in row
    assert "Written to inventory/x/group_vars/all/ncclprep_tuned.yml." in md
    page = render_html(cluster)
    assert '<section id="tuning">' in page and 'id="plot-tuning"' in page
    assert page.count("<polyline fill=\"none\"") == 2  # one line per variant
    assert "median 0.6 GB/s, runs 0.59-0.62 (5)" in page
    assert "## Tuning" not in render_markdown(make_cluster())
