import json
import os

from ansible.module_utils.ncclprep.checks import make_check
from ansible.module_utils.ncclprep.report import SCHEMA_VERSION, render_markdown, write_reports


def _cluster(status="FAIL"):
    checks = [make_check("sysctl.net.core.somaxconn", "FAIL", ["node2"], {"node2": "128"}, "65535",
                         "net.core.somaxconn differs | on node2", "sysctl -w net.core.somaxconn='65535'"),
              make_check("host.reachable", "PASS", [], 2, 2, "all 2 hosts answered")]
    return {"schema_version": SCHEMA_VERSION, "status": status, "generated_at": "20261130T000000Z",
            "hosts": ["node1", "node2"], "checks": checks,
            "collectives": {"all_reduce": [{"size_bytes": 4092, "time_us_max": 100.0, "algbw_gbps": 0.04,
                                            "busbw_gbps": 0.06, "wrong": 0, "slowest_host": "node1"}]}}


def test_layout_latest_link_and_host_files(tmp_path):
    run = write_reports(str(tmp_path), _cluster(), {"node2": {"facts": {"hostname": "node2"}}}, "20261130T000000Z")
    assert run == str(tmp_path / "20261130T000000Z")
    assert os.readlink(tmp_path / "latest") == "20261130T000000Z"
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


def test_markdown_puts_problems_first():
    md = render_markdown(_cluster())
    lines = md.splitlines()
    assert lines[0] == "# ncclprep preflight: FAIL"
    assert lines.index("### FAIL sysctl.net.core.somaxconn: node2") < lines.index("## Passed: 1")
    assert "- measured: node2: 128" in lines and "- fix: sysctl -w net.core.somaxconn='65535'" in lines
    assert "| 4092 B |       0.06 |" in md
