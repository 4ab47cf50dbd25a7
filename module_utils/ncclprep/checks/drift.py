"""drift.files (preflight's own check): the files site.yml manages hold what it wrote.

Record ``drift``: drift.check_all's rows for the host (the engine holds the node's files against
site.yml's record of them), ``[{concern, kind, path, state,
diff, mode_expected, mode_found}]`` (module_utils/ncclprep/drift.py; block rows add ``block``,
lines rows ``lines`` and ``missing``), one per entry of every concern's ``<concern>_managed_files``
that applies on the host: whole files, the hosts block, known_hosts lines. Live settings are held
by each concern's own checks (sysctl.*, data_plane.mtu, rps_rfs.queues, ...); this check holds
the files that carry them across a reboot or into every launch. A row of state ``stale``
(drift.inventory_row) says the inventory changed since site.yml last wrote the host's files.
"""

from __future__ import annotations

from ansible.module_utils.ncclprep.drift import summary
from ansible.module_utils.ncclprep.model import Check, Context, HostRecord, make_check, verdict


def check_drift(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """drift.files: FAIL naming every host with a file not as site.yml wrote it, measured host ->
    {path: the diff lines (or the state)}, the message one line per file; else WARN naming the
    hosts whose files were written from another inventory than the launcher's (a ``stale`` row);
    SKIP when no host compared its files (turned off; a member without a data-plane address: the
    files that list every member cannot be rendered then; ``ncclprep node preflight`` not started
    as root, or without site.yml's record of the files)."""
    rows = {h: (r or {}).get("drift") for h, r in records.items()}
    rows = {h: v for h, v in rows.items() if v is not None}
    if not rows:
        return [make_check("drift.files", "SKIP", message="no managed file was compared (preflight_drift_enabled "
                                                          "is false; a member was down before its facts were "
                                                          "read: the files that list every member need them all; "
                                                          "or ncclprep node preflight ran as a job's user, or "
                                                          "without site.yml's record of the files)")]
    bad = {h: [f for f in files if f["state"] not in ("ok", "stale")] for h, files in rows.items()}
    bad = {h: files for h, files in bad.items() if files}
    stale = {h: next(f for f in files if f["state"] == "stale") for h, files in rows.items()
             if any(f["state"] == "stale" for f in files)}
    n = sum(1 for files in rows.values() for f in files if f["state"] != "stale")
    if not bad and stale:
        return [make_check(
            "drift.files", "WARN", sorted(stale), measured={h: summary(f) for h, f in sorted(stale.items())},
            expected="the files written from this inventory",
            message=f"{', '.join(sorted(stale))}: {summary(next(iter(stale.values())))}; the {n} managed files "
                    "hold what it asked for then"[:600],
            remediation="run site.yml: it writes the files (and the intent the checks hold the node to) from the "
                        "inventory as it is now")]
    return [verdict(
        "drift.files", bad, measured={h: {f["path"]: f["diff"] or f["state"] for f in files}
                                      for h, files in sorted(bad.items())},
        expected="what site.yml writes from the inventory",
        message="; ".join(f"{h}: {summary(f)} ({f['concern']})" for h, files in sorted(bad.items())
                          for f in files)[:600],
        remediation="a hand edit or an inventory change not applied: put the change into the inventory and "
                    "re-run site.yml (it rewrites the file), or undo the edit",
        passed=f"{n} managed files on {len(rows)} hosts as site.yml writes them", passed_measured=n)]
