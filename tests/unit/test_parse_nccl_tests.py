from ansible.module_utils.ncclprep.parsers.nccl_tests import busbw_values, diagnose_nccl_tests, parse_nccl_tests


def test_healthy_3node_tail_reading(case):
    parsed = parse_nccl_tests(case("nccl_tests/allreduce-3node-healthy-tail.txt"))
    assert parsed["unparsed"] == [] and parsed["has_header"] is False and parsed["elided"] == 0
    rows = parsed["rows"]
    assert len(rows) == 6
    assert rows[0]["size"] == 127926280 and rows[0]["count"] == 31981570  # not a power of two
    assert (rows[0]["type"], rows[0]["redop"], rows[0]["root"]) == ("float", "sum", -1)
    assert rows[0]["out_of_place"] == {"time_us": 2560.7, "algbw_gbps": 49.96, "busbw_gbps": 95.75, "wrong": 0}
    assert rows[-1]["size"] == 133169160
    values = busbw_values(parsed)
    assert (min(values), max(values)) == (95.5, 96.69)
    assert all(r[h]["wrong"] == 0 for r in rows for h in ("out_of_place", "in_place"))
    assert (parsed["out_of_bounds"], parsed["out_of_bounds_ok"]) == (0, True)
    assert parsed["avg_busbw_gbps"] == 84.8558


def test_healthy_3node_tail_diagnosis(case):
    parsed = parse_nccl_tests(case("nccl_tests/allreduce-3node-healthy-tail.txt"))
    findings = diagnose_nccl_tests(parsed, line_rate_gbit_s=4 * 200)
    assert [(f["id"], f["severity"]) for f in findings] == [("nccl_tests.healthy", "INFO"),
                                                           ("nccl_tests.avg_busbw", "INFO")]
    assert findings[0]["peak_busbw_gbps"] == 96.69 and findings[0]["line_rate_gbps"] == 100
    assert "not the figure to compare with the line rate" in findings[1]["message"]


def test_wrong_results_reading(case):
    parsed = parse_nccl_tests(case("nccl_tests/allreduce-wrong-results.txt"))
    assert parsed["unparsed"] == [] and parsed["has_header"] is True and parsed["elided"] == 1
    assert [r["size"] for r in parsed["rows"]] == [8, 262144, 524288]
    last = parsed["rows"][-1]
    assert (last["out_of_place"]["wrong"], last["in_place"]["wrong"]) == (237858, 238038)
    assert (last["out_of_place"]["busbw_gbps"], last["in_place"]["busbw_gbps"]) == (0.79, 0.92)
    assert parsed["out_of_bounds"] is None and parsed["avg_busbw_gbps"] is None


def test_wrong_results_diagnosis_fails_with_counts(case):
    parsed = parse_nccl_tests(case("nccl_tests/allreduce-wrong-results.txt"))
    findings = diagnose_nccl_tests(parsed, line_rate_gbit_s=100, host="n1")
    assert [(f["id"], f["severity"], f["subject"]) for f in findings] == [
        ("nccl_tests.wrong_results", "FAIL", "n1"), ("nccl_tests.low_busbw", "WARN", "n1")]
    assert findings[0]["wrong"] == [{"size": 524288, "out_of_place": 237858, "in_place": 238038}]
    assert "data corruption" in findings[0]["message"]
    assert findings[1]["line_rate_gbps"] == 12.5 and findings[1]["peak_busbw_gbps"] == 0.92
    # without a line rate the corruption is judged and the peak is set against a 100 Gb/s link
    plain = diagnose_nccl_tests(parsed)
    assert [(f["id"], f["severity"]) for f in plain] == [("nccl_tests.wrong_results", "FAIL"),
                                                         ("nccl_tests.peak_busbw", "INFO")]
    assert "far under even a 100 Gb/s link" in plain[1]["message"] and plain[1]["peak_busbw_gbps"] == 0.92


def test_old_rows_without_root_na_wrong_and_garbled_lines():
    text = ("# nThread 1 nGpus 1 minBytes 8 maxBytes 128\n"
            "         8             2     float     sum    12.1    0.00    0.00    N/A    11.9    0.00    0.00    N/A\n"
            "        16             4     float     sum    12.1    0.00    0.00\n"
            "# Out of bounds values : 3 FAILED\n"
            "# Avg bus bandwidth    : nan-ish\n")
    parsed = parse_nccl_tests(text)
    [row] = parsed["rows"]
    assert row["root"] is None and row["out_of_place"]["wrong"] is None and row["in_place"]["time_us"] == 11.9
    assert parsed["started"]  # the options line: the test began
    assert parsed["unparsed"] == ["        16             4     float     sum    12.1    0.00    0.00",
                      "# Avg bus bandwidth    : nan-ish"]
    assert (parsed["out_of_bounds"], parsed["out_of_bounds_ok"]) == (3, False)
    assert [f["id"] for f in diagnose_nccl_tests(parsed)] == ["nccl_tests.out_of_bounds", "nccl_tests.peak_busbw"]
