"""junit.xml: the checks as JUnit test results, for CI systems.

One ``<testsuite name="ncclprep preflight">`` inside ``<testsuites>``; one ``<testcase>`` per
check and cluster host: ``classname`` the check id, ``name`` the host. Each host's status is
common.host_status's: FAIL -> ``<failure>``, HANG -> ``<error>``, SKIP -> ``<skipped>``, WARN ->
a passing testcase whose ``<system-out>`` holds the warning, PASS -> a passing testcase. The
message attribute is the check's message; the element text holds measured, expected and the fix.

Pure Python, standard library only: ``ansible.module_utils.ncclprep.report.junit``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ansible.module_utils.ncclprep.report.common import brief, host_status

SUITE = "ncclprep preflight"
_ELEMENT = {"FAIL": "failure", "HANG": "error", "SKIP": "skipped"}


def _evidence(check: dict) -> str:
    return "\n".join([f"measured: {brief(check.get('measured'), 2000)}",
                      f"expected: {brief(check.get('expected'), 2000)}",
                      f"fix: {check.get('remediation') or '-'}"])


def render_junit(cluster: dict) -> str:
    """junit.xml of a cluster dict: an XML document (str, UTF-8 declared) with
    ``len(checks) x len(hosts)`` testcases; suite attributes ``tests``, ``failures`` (FAIL),
    ``errors`` (HANG), ``skipped`` (SKIP), ``time`` 0 and ``timestamp`` (the run's).
    Raises KeyError when ``checks`` or ``hosts`` is missing."""
    hosts = list(cluster["hosts"])
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    suite = ET.Element("testsuite", name=SUITE)
    props = ET.SubElement(suite, "properties")
    for name, value in (("status", cluster.get("status")), ("generated_at", cluster.get("generated_at")),
                        ("schema_version", cluster.get("schema_version")), ("hosts", len(hosts))):
        ET.SubElement(props, "property", name=name, value=str(value))
    for check in cluster["checks"]:
        for host, status in host_status(check, hosts).items():
            case = ET.SubElement(suite, "testcase", classname=check["id"], name=host, time="0")
            totals["tests"] += 1
            tag = _ELEMENT.get(status)
            if tag == "skipped":
                ET.SubElement(case, tag, message=check.get("message") or "skipped")
                totals["skipped"] += 1
            elif tag:
                el = ET.SubElement(case, tag, message=check.get("message") or status, type=status)
                el.text = _evidence(check)
                totals["failures" if tag == "failure" else "errors"] += 1
            elif status == "WARN":
                ET.SubElement(case, "system-out").text = f"WARN: {check.get('message')}\n{_evidence(check)}"
    attrs = {k: str(v) for k, v in totals.items()}
    suite.attrib.update(attrs, time="0", timestamp=_iso(cluster.get("generated_at")))
    root = ET.Element("testsuites", name="ncclprep", time="0", **attrs)
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _iso(stamp: str | None) -> str:
    """``20261130T221500Z`` -> ``2026-11-30T22:15:00`` (JUnit's timestamp form); as given otherwise."""
    s = stamp or ""
    if len(s) == 16 and s[8] == "T" and s.endswith("Z"):
        return f"{s[0:4]}-{s[4:6]}-{s[6:8]}T{s[9:11]}:{s[11:13]}:{s[13:15]}"
    return s
