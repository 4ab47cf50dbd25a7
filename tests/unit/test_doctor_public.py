"""The doctor on real output from public issue threads (tests/fixtures/doctor, issue 27): each case
read as its thread concluded, listed in CASES.yml with its source link, the versions it shows and
the thread's conclusion. Beside shared/cases (tests/unit/test_doctor.py), these come with the
repository, so they run in a clean clone too."""

from __future__ import annotations

import io
import os
import re

import pytest
import yaml
from ansible.module_utils.ncclprep.doctor import detect_kind, diagnose_text
from conftest import REPO

from ncclprep.doctor_cmd import doctor_main

HERE = os.path.join(REPO, "tests", "fixtures", "doctor")
with open(os.path.join(HERE, "CASES.yml"), encoding="utf-8") as _fh:
    CASES = yaml.safe_load(_fh)


def test_every_case_file_is_listed_with_its_thread_and_conclusion():
    files = sorted(os.path.relpath(os.path.join(d, f), HERE) for d, _, fs in os.walk(HERE) for f in fs
                   if f != "CASES.yml")
    assert files == sorted(c["file"] for c in CASES)
    for c in CASES:
        assert re.match(r"^https://(?:github\.com/[\w.-]+/[\w.-]+/(?:issues|pull|discussions)/\d+|forums\.developer\."
                        r"nvidia\.com/)", c["source"]), c["file"]
        assert c["conclusion"].strip() and c["diagnosis"].strip() and c["reading"].strip(), c["file"]
        assert set(c["expect"]) == {"kind", "exit", "has", "lacks"} and c["expect"]["has"], c["file"]


def test_the_cases_span_the_versions_and_kinds_the_issue_names():
    """NCCL 2.4 to 2.2x log formats and torch 1.x to 2.x messages (issue 27 item 2)."""
    nccl = {str((c.get("versions") or {}).get("nccl") or "") for c in CASES}
    torch = {str((c.get("versions") or {}).get("torch") or "") for c in CASES}
    minors = {int(m.group(1)) for v in nccl for m in [re.match(r"2\.(\d+)", v)] if m}
    assert min(minors) <= 4 and max(minors) >= 20, sorted(minors)
    assert any(v.startswith("1.") for v in torch) and any(v.startswith("2.") for v in torch), sorted(torch)


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_case_is_read_as_its_thread_concluded(case):
    path = os.path.join(HERE, case["file"])
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    want = case["expect"]
    assert detect_kind(text, path) == want["kind"]
    out = io.StringIO()
    code = doctor_main([path], stdin=io.StringIO(""), stdout=out)
    shown = out.getvalue()
    assert code == want["exit"], shown
    for piece in want["has"]:
        assert piece in shown, f"{piece!r} not in:\n{shown}"
    for piece in want["lacks"]:
        assert piece not in shown, f"{piece!r} in:\n{shown}"
    # the reading is the same through the library call the CLI makes, and quotes its evidence
    result = diagnose_text(text, path)
    for f in result["findings"]:
        if f["severity"] == "FAIL":
            assert f["evidence"], f["id"]
