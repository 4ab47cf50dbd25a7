"""dataset.path (preflight's own check): the training data is readable on every node.

A data loader that cannot open its files fails every rank of that node at the first batch,
after the job has waited for its whole allocation; a hung network mount hangs it instead.
node_facts reads ``preflight_dataset_path`` under a deadline (module_utils/ncclprep/node/dataset.py).

Facts: ``dataset`` {path, exists, kind, readable, entries, sample, error, hung} or None.
"""

from __future__ import annotations

from ansible.module_utils.ncclprep.model import Check, Context, HostRecord, facts_of, make_check, verdict


def check_dataset(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """dataset.path: HANG naming hosts where reading the path did not finish in time; FAIL
    naming hosts where it is missing, unreadable or an empty folder (measured: host -> the
    error); SKIP when no dataset path is set. No check without facts."""
    read = {h: facts_of(r).get("dataset") for h, r in records.items() if facts_of(r)}
    read = {h: v for h, v in read.items() if v is not None}
    if not read:
        return [make_check("dataset.path", "SKIP", message="no dataset path set (preflight_dataset_path)")]
    paths = sorted({v.get("path") for v in read.values()})
    hung = {h: v.get("error") for h, v in read.items() if v.get("hung")}
    if hung:
        return [make_check("dataset.path", "HANG", hung, measured=hung, expected="readable",
                           message="reading the dataset hung on " + ", ".join(sorted(hung)) + f" ({paths[0]})",
                           remediation="check the network mount on those hosts (mount, dmesg; remount it)")]
    bad = {}
    for host, v in read.items():
        if not v.get("readable"):
            bad[host] = v.get("error") or "not readable"
        elif v.get("kind") == "dir" and not v.get("entries"):
            bad[host] = "empty folder (the mount missing, the mount point left?)"
    return [verdict("dataset.path", bad, expected="readable, not empty",
                    message=f"dataset {paths[0]} not usable on "
                            + "; ".join(f"{h}: {e}" for h, e in sorted(bad.items())),
                    remediation="mount the dataset on those hosts and give the job's user read access",
                    passed=f"dataset {paths[0]} readable on {len(read)} hosts",
                    passed_measured={h: v.get("entries") for h, v in sorted(read.items())})]
