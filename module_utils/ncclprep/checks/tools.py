"""tools.findings (preflight's own check): what the node's own tools say, read by node_facts
through the parsers (``hostinfo``: numactl, nvidia-smi topo, ip, netplan and the rest;
module_utils/ncclprep/node/hostinfo.py). The RDMA readings (``ib_ports``, ``ibv_devinfo``) are
judged by links.rdma instead.

A parser's FAIL finding fails the check; a WARN finding, or a tool that ran but exited
non-zero or past its deadline, gives WARN: the finding is evidence worth reading, not proof
that a job fails. INFO findings are not reported.
"""

from __future__ import annotations

from ansible.module_utils.ncclprep.model import Check, Context, HostRecord, facts_of, make_check

#: hostinfo readings judged elsewhere (checks/links.py).
ELSEWHERE = ("ib_ports", "ibv_devinfo")


def check_tools(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """tools.findings: FAIL naming hosts with a FAIL finding, else WARN naming hosts with a
    WARN finding or a tool error (measured: host -> [{reading, message, remediation}]; the
    remediation is every distinct one, joined), else PASS
    (measured: host -> readings seen). SKIP when no host gave a reading. No check without facts."""
    seen: dict[str, list] = {}
    by_severity: dict[str, dict] = {"FAIL": {}, "WARN": {}}
    for host, record in records.items():
        hostinfo = facts_of(record).get("hostinfo") or {}
        for key, reading in sorted(hostinfo.items()):
            if not reading or key in ELSEWHERE:
                continue
            seen.setdefault(host, []).append(key)
            if reading.get("error"):
                by_severity["WARN"].setdefault(host, []).append(
                    {"reading": key, "message": f"{reading.get('source')}: {reading['error']}",
                     "remediation": "run the tool by hand on the host to see why it fails"})
            for f in reading.get("findings") or []:
                if f.get("severity") in by_severity:
                    by_severity[f["severity"]].setdefault(host, []).append(
                        {"reading": key, "message": f.get("message"), "remediation": f.get("remediation") or ""})
    if not seen:
        return [make_check("tools.findings", "SKIP", message="no host ran a tool node_facts reads")]
    for status in ("FAIL", "WARN"):
        found = by_severity[status]
        if found:
            fixes = list(dict.fromkeys(f["remediation"] for v in found.values() for f in v if f["remediation"]))
            return [make_check("tools.findings", status, found, measured=found,
                               message="; ".join(f"{h}: " + ", ".join(f"{f['reading']}: {f['message']}" for f in v)
                                                 for h, v in sorted(found.items())),
                               remediation="; ".join(fixes) or "see each finding in the host report")]
    return [make_check("tools.findings", "PASS", measured=seen,
                       message=f"no finding in the tools' output on {len(seen)} hosts")]
