"""junit.xml, metrics.prom and report.html read back the way their consumers read them: junitparser
(a CI system), prometheus_client's text parser (node_exporter's textfile collector) and
html.parser (a browser, from disk, without a network)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from ansible.module_utils.ncclprep.checks import make_check
from ansible.module_utils.ncclprep.report import render_html, render_junit, render_prom
from junitparser import Error, Failure, JUnitXml, Skipped
from prometheus_client.parser import text_string_to_metric_families
from report_cases import BUSBW, HOSTS, SIZES, make_cluster, make_records

FAULTS = {"somaxconn_node2": "128", "latency": {("node1", "node3"): 200.0}, "kernel_node3": "6.5.0"}


@pytest.fixture(scope="module")
def faulty():
    return make_cluster(**FAULTS)


# ---------------------------------------------------------------- junit.xml

def _cases(xml: str) -> dict:
    (suite,) = list(JUnitXml.fromstring(xml))
    assert suite.name == "ncclprep preflight"
    return suite, {(case.classname, case.name): case for case in suite}


def test_junit_has_one_testcase_per_check_and_host_and_fails_the_named_ones(faulty):
    suite, cases = _cases(render_junit(faulty))
    assert len(cases) == suite.tests == len(faulty["checks"]) * 3
    failing = sorted(k for k, c in cases.items() if any(isinstance(r, Failure) for r in c.result))
    assert failing == [("net.latency", "node1"), ("net.latency", "node3"), ("sysctl.net.core.somaxconn", "node2"),
                       ("versions.kernel", "node3")]
    assert suite.failures == 4 and suite.errors == 0
    skipped = [k for k, c in cases.items() if any(isinstance(r, Skipped) for r in c.result)]
    assert suite.skipped == len(skipped) == 3 * sum(c["status"] == "SKIP" for c in faulty["checks"])
    (failure,) = cases[("sysctl.net.core.somaxconn", "node2")].result
    assert failure.message == "net.core.somaxconn differs from intent on node2 (node2=128; intended 65535)"
    assert failure.text.splitlines() == ["measured: node2: 128", "expected: 65535",
                                         "fix: re-run site.yml (role sysctl_tuning) or on node2: "
                                         "sysctl -w net.core.somaxconn='65535'"]
    assert cases[("sysctl.net.core.somaxconn", "node1")].is_passed


def test_junit_hang_is_an_error_and_warn_passes_with_its_message_in_system_out():
    cluster = make_cluster(hang_node3=True)
    cluster["checks"].append(make_check("links.counters", "WARN", ["node1"], {"node1": {"net eth0": {"crc": 3}}},
                                        message="an error counter grew on node1"))
    suite, cases = _cases(render_junit(cluster))
    (error,) = cases[("collective.run", "node3")].result
    assert isinstance(error, Error) and error.message.startswith("ranks on node3 never arrived")
    assert cases[("collective.run", "node1")].is_passed and suite.errors == 1
    warn = cases[("links.counters", "node1")]
    assert warn.is_passed and warn.system_out.startswith("WARN: an error counter grew on node1")
    assert "measured: node1: net eth0 {crc: 3}" in warn.system_out or "net eth0" in warn.system_out


def test_junit_fails_every_host_when_a_failing_check_names_none():
    cluster = {"status": "FAIL", "generated_at": "x", "hosts": HOSTS,
               "checks": [make_check("collective.blame", "FAIL", [], message="every pairing failed")]}
    suite, cases = _cases(render_junit(cluster))
    assert suite.failures == 3 and all(not c.is_passed for c in cases.values())


# ---------------------------------------------------------------- metrics.prom

def _samples(text: str) -> dict:
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert all(f.type == "gauge" and f.documentation for f in families.values())
    return {name: {tuple(sorted(s.labels.items())): s.value for s in f.samples} for name, f in families.items()}


def test_metrics_are_gauges_in_base_units(faulty):
    text = render_prom(faulty)
    assert text.count("# TYPE ") == text.count("# HELP ") >= 10
    m = _samples(text)
    assert m["ncclprep_run_timestamp_seconds"][()] == 1796076900.0  # 2026-11-30T22:15:00Z
    assert m["ncclprep_run_status"] == {(("status", "FAIL"),): 1.0, (("status", "PASS"),): 0.0}
    assert m["ncclprep_run_hosts"][()] == 3
    assert m["ncclprep_checks"][(("status", "FAIL"),)] == 3
    status = m["ncclprep_check_status"]
    assert status[(("check", "sysctl.net.core.somaxconn"), ("host", "node2"), ("status", "FAIL"))] == 1
    assert status[(("check", "sysctl.net.core.somaxconn"), ("host", "node1"), ("status", "PASS"))] == 1
    assert len(status) == len(faulty["checks"]) * 3  # one state per check and host
    busbw = m["ncclprep_collective_busbw_bytes_per_second"]
    assert len(busbw) == len(SIZES) * len(BUSBW)
    # the slowest rank (node3: the figures as given) at 16 MiB, in bytes per second
    assert busbw[(("op", "all_reduce"), ("size_bytes", "16777216"))] == pytest.approx(0.74e9)
    assert m["ncclprep_collective_time_seconds"][(("op", "all_reduce"), ("size_bytes", "16777216"))] == \
        pytest.approx(16777216 / 0.74e9, rel=1e-6)
    lat = m["ncclprep_net_latency_p50_seconds"]
    assert lat[(("dst", "node3"), ("src", "node1"))] == pytest.approx(200e-6)
    assert lat[(("dst", "node1"), ("src", "node2"))] == pytest.approx(40e-6) and len(lat) == 6
    assert m["ncclprep_net_bandwidth_bytes_per_second"][(("dst", "node2"), ("src", "node1"))] == pytest.approx(1.5e9)
    assert m["ncclprep_net_path_mtu_bytes"][(("dst", "node2"), ("src", "node1"))] == 4096
    assert m["ncclprep_net_port_open"][(("dst", "node2"), ("port", "29500"), ("src", "node1"))] == 1
    info = m["ncclprep_version_info"]
    assert info[(("component", "kernel"), ("host", "node3"), ("outlier", "true"), ("version", "6.5.0"))] == 1


def test_metrics_labels_are_escaped():
    cluster = {"status": "FAIL", "generated_at": "x", "hosts": ['we"ird\\host'],
               "checks": [make_check("a.b", "FAIL", [])]}
    m = _samples(render_prom(cluster))
    assert m["ncclprep_check_status"] == {(("check", "a.b"), ("host", 'we"ird\\host'), ("status", "FAIL")): 1}
    assert "ncclprep_run_timestamp_seconds" not in m  # no stamp, no timestamp


# ---------------------------------------------------------------- report.html

class Page(HTMLParser):
    """Every element with its attributes and the text directly inside it, in document order."""

    def __init__(self, text: str):
        super().__init__()
        self.elements: list[dict] = []
        self.stack: list[dict] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        el = {"tag": tag, "attrs": dict(attrs), "text": "", "parents": [e["attrs"].get("id") for e in self.stack]}
        self.elements.append(el)
        if tag not in ("meta", "br", "img", "input", "hr", "link"):  # the void elements of HTML
            self.stack.append(el)

    def handle_startendtag(self, tag, attrs):
        self.elements.append({"tag": tag, "attrs": dict(attrs), "text": "",
                              "parents": [e["attrs"].get("id") for e in self.stack]})

    def handle_endtag(self, tag):
        if any(e["tag"] == tag for e in self.stack):
            while self.stack.pop()["tag"] != tag:
                pass

    def handle_data(self, data):
        if self.stack:
            self.stack[-1]["text"] += data

    def by_id(self, id_):
        (el,) = [e for e in self.elements if e["attrs"].get("id") == id_]
        return el

    def inside(self, id_, tag=None):
        return [e for e in self.elements if id_ in e["parents"] and (tag is None or e["tag"] == tag)]


@pytest.fixture(scope="module")
def page(faulty):
    return Page(render_html(faulty, make_records(**FAULTS)))


def test_html_is_self_contained(faulty):
    text = render_html(faulty, make_records(**FAULTS))
    p = Page(text)
    links = [v for e in p.elements for k, v in e["attrs"].items() if k in ("src", "href") and v]
    assert links and all(v.startswith("#") for v in links)  # anchors only
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text)
    assert not any(e["tag"] in ("script", "link", "img", "iframe") for e in p.elements)


def test_html_checks_grid_has_a_status_cell_per_check_and_host(page, faulty):
    cells = [e for e in page.inside("checks", "td") if "data-host" in e["attrs"]]
    assert len(cells) == len(faulty["checks"]) * 3
    failing = sorted(e["attrs"]["data-host"] for e in cells if e["attrs"]["class"] == "status-FAIL")
    assert failing == ["node1", "node2", "node3", "node3"]
    row = [e for e in page.inside("checks", "tr") if e["attrs"].get("data-check") == "net.latency"]
    assert row
    anchors = [e["attrs"]["href"] for e in page.inside("checks", "a")]
    assert "#failure-net.latency" in anchors and page.by_id("failure-net.latency")


def test_html_failure_shows_the_evidence_and_the_fix(page):
    failure = page.by_id("failure-sysctl.net.core.somaxconn")
    assert "status-FAIL" in failure["attrs"]["class"]
    texts = [e["text"] for e in page.inside("failure-sysctl.net.core.somaxconn")]
    assert "FAIL sysctl.net.core.somaxconn: node2" in texts
    assert "node2: 128" in texts and "65535" in texts
    assert "re-run site.yml (role sysctl_tuning) or on node2: sysctl -w net.core.somaxconn='65535'" in texts


def test_html_latency_heat_map_cell_holds_the_value_coloured_bad(page):
    cells = [e for e in page.inside("matrix-latency_p50_us", "td") if e["text"]]
    by_title = {e["attrs"]["title"]: e for e in cells}
    slow, fine = by_title["node1 -> node3: 200 us"], by_title["node2 -> node1: 40 us"]
    assert slow["text"] == "200" and slow["attrs"]["style"] == "background:hsl(0,65%,78%)"  # >= 2 x median: red
    assert fine["text"] == "40" and fine["attrs"]["style"] == "background:hsl(120,65%,78%)"
    assert len(cells) == 6
    legend = [e["text"] for e in page.elements if e["tag"] == "span" and "style" in e["attrs"]]
    assert "<= median (40 us)" in legend
    for key in ("latency_p99_us", "bandwidth_gbps", "path_mtu_largest", "ports"):
        assert page.by_id(f"matrix-{key}")["tag"] == "table"


def test_html_plots_busbw_against_size_with_one_point_per_size(page):
    for op in BUSBW:
        svg = page.by_id(f"plot-{op}")
        assert svg["tag"] == "svg"
        (line,) = [e for e in page.inside(f"plot-{op}", "polyline") if e["attrs"]["class"] == "busbw"]
        points = [tuple(map(float, p.split(","))) for p in line["attrs"]["points"].split()]
        assert len(points) == len(SIZES)
        xs = [x for x, _ in points]
        steps = [b - a for a, b in zip(xs, xs[1:], strict=False)]
        assert max(steps) - min(steps) < 0.2  # sizes 16x apart: equal steps on a log2 axis
        ys = [y for _, y in points]
        assert ys == sorted(ys, reverse=True)  # busbw grows with the size (SVG y grows downwards)
        labels = [e["text"] for e in page.inside(f"plot-{op}", "text")]
        assert {"4 KiB", "16 MiB", "busbw (GB/s)", "message size (bytes, log2 scale)"} <= set(labels)


def test_html_versions_table_marks_the_outlier(page):
    outliers = [e for e in page.inside("versions", "td") if e["attrs"].get("class") == "outlier"]
    assert [e["text"] for e in outliers] == ["6.5.0"]
    assert outliers[0]["attrs"]["title"] == "the majority has 6.8.0-45-generic"


def test_html_escapes_what_the_checks_report():
    cluster = {"status": "FAIL", "generated_at": "x", "hosts": ["n1"],
               "checks": [make_check("x.y", "FAIL", ["n1"], measured="<script>alert(1)</script>",
                                     message="<img src=http://evil/>")]}
    text = render_html(cluster)
    assert "<script>" not in text and "<img" not in text and "&lt;script&gt;" in text
