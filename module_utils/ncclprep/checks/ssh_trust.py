"""ssh.trust (concern ssh_trust): every node logs in to every other, host keys checked, no prompt."""

from __future__ import annotations

from ansible.module_utils.ncclprep.checks.model import (
    Check,
    Context,
    HostRecord,
    retried_warning,
    retry_evidence,
    verdict,
)


def check_ssh(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """ssh.trust: every node logs in to every other node, by name and by data-plane address,
    with host keys checked and no prompt.

    record ``ssh``: the ssh_mesh module's results [{host, name, ok, cause, explanation}] run on
    that host (None: not run; no check when it ran nowhere). Links to a host without facts are
    left to host.reachable. FAIL names each link ``src -> dst`` (measured: link -> ["name: cause
    (explanation)"]); WARN, when every login passed but some only on a retry (results'
    ``retried``), names those links with the first tries' errors; PASS measures the number of
    logins.
    """
    rows = {h: r.get("ssh") for h, r in sorted(records.items()) if r.get("ssh") is not None}
    if not rows:
        return []
    alive = {h for h, r in records.items() if r.get("facts")}
    bad: dict[str, list[str]] = {}
    retried: dict[str, list[str]] = {}
    logins = failed = 0
    for src, results in rows.items():
        for res in results:
            if res.get("host") not in alive:
                continue
            logins += 1
            if not res.get("ok"):
                failed += 1
                bad.setdefault(f"{src} -> {res.get('host')}", []).append(
                    f"{res.get('name')}: {res.get('cause')} ({res.get('explanation')})")
            elif res.get("retried"):
                retried.setdefault(f"{src} -> {res.get('host')}", []).append(
                    retry_evidence(res.get("name"), res["retried"]))
    if not bad and retried:
        return [retried_warning(
            "ssh.trust", retried, expected="every login passes on its first try",
            summary=f"{sum(map(len, retried.values()))} of {logins} node-to-node SSH logins passed only on a retry",
            remediation="a transient fault (sshd's MaxStartups under a burst, a dropped packet): re-run "
                        "validate.yml; if it comes back, check sshd and the link on the named targets")]
    return [verdict("ssh.trust", bad, expected="login with host key checked, no prompt",
                    message=f"{failed} of {logins} node-to-node SSH logins failed: "
                            + "; ".join(f"{k} {', '.join(v)}" for k, v in sorted(bad.items())),
                    remediation="re-run site.yml (roles ssh_trust and host_names); a changed host key "
                                "means a reinstalled node or an impostor: check it before trusting it",
                    passed=f"{logins} node-to-node SSH logins with host keys checked, no prompt",
                    passed_measured={"logins": logins}, passed_expected=None)]
