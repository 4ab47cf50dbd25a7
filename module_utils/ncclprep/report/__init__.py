"""Report files of a validate.yml run, all rendered from one versioned cluster dict.

Layout under ``base`` (write_reports): ``<UTC timestamp>/`` holding ``cluster.json`` (the
cluster dict, schema version SCHEMA_VERSION: docs/report-schema.md, docs/report-schema.json),
``hosts/<host>.json`` (the host's record and the checks that name it), ``summary.md``,
``junit.xml``, ``metrics.prom`` and ``report.html``; and the symlink ``latest`` -> the newest.

The public functions (the CLI and cluster_report use these names):

- ``build_cluster(checks, hosts, records, stamp=None, limits=None) -> dict``: the cluster dict.
- ``write_reports(base, cluster, host_records, stamp=None, textfile_dir=None) -> str``: every file; the run folder.
- ``load_run(path) -> (cluster, host_records)``: a run folder back (any readable schema version).
- ``render_markdown(cluster) -> str``: summary.md (markdown.py).
- ``render_html(cluster, host_records=None) -> str``: report.html (html.py).
- ``render_junit(cluster) -> str``: junit.xml (junit.py).
- ``render_prom(cluster) -> str``: metrics.prom, node_exporter's textfile format (prom.py).
- ``compare_runs(old, new, busbw_tol=0.10, latency_tol=0.25) -> dict``, ``render_compare_markdown(diff)``,
  ``render_compare_json(diff)``: what changed between two runs (compare.py).
- ``upgrade(cluster, host_records=None) -> dict``: an older cluster dict as the current schema (schema.py).
- ``SCHEMA_VERSION``, ``utc_stamp(now=None)``.

Every renderer is a pure function of the cluster dict (plus host records for the HTML hosts
table). Standard library and Jinja2 only (report.html); every import is absolute, the form
Ansible follows when it ships module_utils with library/cluster_report.py.
"""

from __future__ import annotations

import glob
import json
import os

from ansible.module_utils.ncclprep.atomic import write_atomic
from ansible.module_utils.ncclprep.report.common import named_hosts
from ansible.module_utils.ncclprep.report.compare import compare_runs, render_compare_json, render_compare_markdown
from ansible.module_utils.ncclprep.report.html import render_html
from ansible.module_utils.ncclprep.report.junit import render_junit
from ansible.module_utils.ncclprep.report.markdown import render_markdown
from ansible.module_utils.ncclprep.report.prom import render_prom
from ansible.module_utils.ncclprep.report.schema import (
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    build_cluster,
    upgrade,
    utc_stamp,
)

__all__ = [
    "FILES", "READABLE_VERSIONS", "SCHEMA_VERSION", "TEXTFILE_NAME", "build_cluster", "compare_runs", "load_run",
    "render_compare_json", "render_compare_markdown", "render_html", "render_junit", "render_markdown",
    "render_prom", "upgrade", "utc_stamp", "write_reports",
]

#: The files of a run folder besides hosts/<host>.json, and what renders each.
FILES = {
    "summary.md": render_markdown,
    "junit.xml": render_junit,
    "metrics.prom": render_prom,
}
#: The file name write_reports gives the metrics in ``textfile_dir`` (node_exporter reads *.prom).
TEXTFILE_NAME = "ncclprep.prom"


def _write_json(path: str, data) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def write_reports(base: str, cluster: dict, host_records: dict, stamp: str | None = None,
                  textfile_dir: str | None = None) -> str:
    """Write one run's reports under ``base`` and point ``base/latest`` at it.

    ``cluster``: build_cluster's dict; ``host_records``: host -> whatever is known about it
    (HostRecord: facts, probe, smoke ...); each host file also holds ``host`` and the
    ``checks`` that name that host (directly or as an end of a link). ``stamp``: the folder
    name (default ``cluster["generated_at"]``, else now). ``textfile_dir``: a node_exporter
    textfile-collector folder that also gets the metrics as ``ncclprep.prom`` (None: none).
    Every file is written atomically (a temp file, then rename). Returns the run folder.
    Raises OSError when a folder cannot be written.
    """
    stamp = stamp or cluster.get("generated_at") or utc_stamp()
    run = os.path.join(base, stamp)
    os.makedirs(os.path.join(run, "hosts"), exist_ok=True)
    _write_json(os.path.join(run, "cluster.json"), cluster)
    named = [(c, named_hosts(c, cluster["hosts"])) for c in cluster["checks"]]
    for host in cluster["hosts"]:
        record = dict(host_records.get(host) or {})
        record["host"] = host
        record["checks"] = [c for c, hosts in named if host in hosts]
        _write_json(os.path.join(run, "hosts", f"{host}.json"), record)
    for name, render in FILES.items():
        write_atomic(os.path.join(run, name), render(cluster))
    write_atomic(os.path.join(run, "report.html"), render_html(cluster, host_records))
    if textfile_dir:
        write_atomic(os.path.join(textfile_dir, TEXTFILE_NAME), render_prom(cluster))
    link = os.path.join(base, "latest")
    tmp = link + ".tmp"
    if os.path.lexists(tmp):
        os.remove(tmp)
    os.symlink(stamp, tmp)
    os.replace(tmp, link)
    return run


def load_run(path: str) -> tuple[dict, dict]:
    """A run back from disk: ``(cluster, host_records)``.

    ``path``: a run folder, its ``cluster.json``, or a reports folder holding ``latest``.
    ``cluster`` is upgraded to the current schema (``upgrade``: version 1 runs read too);
    ``host_records``: host -> the content of ``hosts/<host>.json`` without its ``host`` and
    ``checks`` keys ({} when the folder has none). Raises FileNotFoundError naming the path
    when there is no cluster.json, ValueError when it is not a readable report.
    """
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, "cluster.json")) and \
            os.path.exists(os.path.join(path, "latest", "cluster.json")):
        path = os.path.join(path, "latest")
    run = os.path.dirname(path) if os.path.basename(path) == "cluster.json" else path
    cluster_json = os.path.join(run, "cluster.json")
    if not os.path.isfile(cluster_json):
        raise FileNotFoundError(f"no report at {path}: {cluster_json} does not exist (run validate.yml first)")
    try:
        with open(cluster_json, encoding="utf-8") as fh:
            cluster = json.load(fh)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{cluster_json} is not JSON: {exc}") from exc
    if not isinstance(cluster, dict):
        raise ValueError(f"{cluster_json} holds a {type(cluster).__name__}, not a cluster report")
    records = {}
    for file in sorted(glob.glob(os.path.join(run, "hosts", "*.json"))):
        with open(file, encoding="utf-8") as fh:
            record = json.load(fh)
        host = record.pop("host", None) or os.path.basename(file)[: -len(".json")]
        record.pop("checks", None)
        records[host] = record
    try:
        return upgrade(cluster, records), records
    except ValueError as exc:
        raise ValueError(f"{cluster_json}: {exc}") from exc
