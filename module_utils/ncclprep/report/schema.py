"""cluster.json, schema version 2: how a run's cluster dict is built, and older runs read.

docs/report-schema.md documents every key (docs/report-schema.json is the same as a JSON
Schema). In short::

    {"schema_version": 2, "status": "PASS" | "FAIL", "generated_at": "20261130T221500Z",
     "hosts": [host, ...],                 # every host the run was meant to cover
     "checks": [Check, ...],               # model.Check, report order
     "network": {...},                     # checks.summarize_network ({} when it did not run)
     "collectives": {...},                 # checks.summarize_collectives ({} when it did not run)
     "versions": {"keys", "hosts", "majority", "outliers"},   # versions_table
     "run": {"stamp", "timestamp_s", "counts", "limits"}}

Version 1 (before ``versions`` and ``run``) is read by ``upgrade``.
Pure Python: imported as ``ansible.module_utils.ncclprep.report.schema``.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Mapping
from typing import Any

from ansible.module_utils.ncclprep.checks.network import summarize_network
from ansible.module_utils.ncclprep.model import majority, overall
from ansible.module_utils.ncclprep.probes.collectives import summarize_collectives
from ansible.module_utils.ncclprep.report.common import counts

SCHEMA_VERSION = 2
#: Schema versions load_run / upgrade read.
READABLE_VERSIONS = (1, 2)
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"

#: The software versions of the versions table: node_facts' ``versions`` keys (the ones
#: checks/versions.py holds against the majority, plus torch), in column order.
VERSION_KEYS = ("torch", "torch_nccl", "torch_cuda", "cudnn", "driver", "cuda", "libnccl", "kernel", "python")


def utc_stamp(now: datetime.datetime | None = None) -> str:
    """UTC timestamp used as the run folder name, e.g. ``20261130T221500Z``."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return now.strftime(STAMP_FORMAT)


def stamp_seconds(stamp: str) -> float | None:
    """Seconds since the epoch of a ``utc_stamp`` (None when it is not one)."""
    try:
        return datetime.datetime.strptime(stamp, STAMP_FORMAT).replace(tzinfo=datetime.timezone.utc).timestamp()
    except (TypeError, ValueError):
        return None


def versions_table(records: Mapping[str, Any]) -> dict:
    """The versions table of the hosts that gave facts (facts ``versions``, node_facts).

    Returns ``{"keys": [the VERSION_KEYS some host reports], "hosts": {host: {key: version
    string or None}}, "majority": {key: the most common value (model.majority, None
    counting as a value, as checks/versions.py counts it)}, "outliers": {key: [hosts whose
    value differs from the majority]}}`` (``outliers`` only for keys that have some).
    """
    seen = {h: ((r or {}).get("facts") or {}).get("versions") or {} for h, r in sorted(records.items())
            if (r or {}).get("facts")}
    keys = [k for k in VERSION_KEYS if any(v.get(k) is not None for v in seen.values())]
    table = {h: {k: (None if v.get(k) is None else str(v.get(k))) for k in keys} for h, v in seen.items()}
    common = {k: majority({h: row[k] for h, row in table.items()}) for k in keys}
    outliers = {k: sorted(h for h, row in table.items() if row[k] != common[k]) for k in keys}
    return {"keys": keys, "hosts": table, "majority": common, "outliers": {k: v for k, v in outliers.items() if v}}


def build_cluster(checks: list, hosts: list[str], records: Mapping[str, Any], stamp: str | None = None,
                  limits: Mapping[str, Any] | None = None) -> dict:
    """The cluster dict of one run (schema version SCHEMA_VERSION) from its checks.

    ``checks``: checks.evaluate's result; ``hosts``: every host the run was meant to cover;
    ``records``: host -> HostRecord; ``stamp``: the run's utc_stamp (default now);
    ``limits``: the limits the checks ran with (``min_busbw_gbps`` GB/s, ``expect_net``,
    ``net_limits``), stored as given under ``run.limits``. Raises nothing of its own.
    """
    stamp = stamp or utc_stamp()
    return {
        "schema_version": SCHEMA_VERSION,
        "status": overall(checks),
        "generated_at": stamp,
        "hosts": list(hosts),
        "checks": list(checks),
        "network": summarize_network(dict(records)),
        "collectives": summarize_collectives(dict(records)),
        "versions": versions_table(records),
        "run": {"stamp": stamp, "timestamp_s": stamp_seconds(stamp), "counts": counts(checks),
                "limits": dict(limits or {})},
    }


def upgrade(cluster: Mapping[str, Any], host_records: Mapping[str, Any] | None = None) -> dict:
    """A cluster dict of any READABLE_VERSIONS as the current schema (a copy).

    Version 1 gains ``versions`` (from ``host_records``' facts, the hosts/<host>.json files;
    empty without them), ``run`` (from ``generated_at`` and the checks; limits unknown: {})
    (``run.upgraded_from``: 1) and ``network`` / ``collectives`` as {} where absent. Raises ValueError naming the
    version when it is not one of READABLE_VERSIONS, or when ``checks`` or ``hosts`` is missing.
    """
    version = cluster.get("schema_version")
    if version not in READABLE_VERSIONS:
        raise ValueError(f"schema_version={version!r}: this ncclprep reads {list(READABLE_VERSIONS)}")
    missing = [k for k in ("status", "hosts", "checks") if k not in cluster]
    if missing:
        raise ValueError(f"not a cluster report (schema_version {version}): no {', '.join(missing)}")
    out = copy.deepcopy(dict(cluster))
    out.setdefault("network", {})
    out.setdefault("collectives", {})
    out["network"] = out["network"] or {}
    out["collectives"] = out["collectives"] or {}
    if version == 1:
        stamp = out.get("generated_at")
        out["versions"] = versions_table(host_records or {})
        out["run"] = {"stamp": stamp, "timestamp_s": stamp_seconds(stamp), "counts": counts(out["checks"]),
                      "limits": {}, "upgraded_from": 1}
        out["schema_version"] = SCHEMA_VERSION
    return out
