#!/usr/bin/python
# Copyright: ncclprep contributors
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_report
short_description: Turn every host's facts and probe results into checks and report files
description:
  - "Runs on the controller (C(delegate_to: localhost), C(run_once))."
  - Evaluates the cluster checks (the registry of module_utils/ncclprep/checks/), writes
    C(<dest>/<UTC timestamp>/cluster.json) (schema in docs/report-schema.md), C(hosts/<host>.json),
    C(summary.md), C(junit.xml), C(metrics.prom) and C(report.html) (module_utils/ncclprep/report/),
    and points C(<dest>/latest) at the run.
  - Returns the overall status; the playbook fails the run when it is FAIL.
options:
  dest: {type: path, required: true, description: Reports folder.}
  hosts: {type: list, elements: str, required: true, description: Every host the run was meant to cover.}
  records:
    type: dict
    required: true
    description:
      - "host -> HostRecord (module_utils/ncclprep/model.py): {alive, facts, intent, ssh, probe, smoke},
        with intent keyed by concern name (concerns.CONCERNS); built by the filter
        ncclprep_host_records."
      - A host of O(hosts) with no record or no facts is reported unreachable (C(host.reachable) FAIL).
  min_busbw_gbps: {type: float, description: "busbw floor in GB/s at the largest size; null: no floor."}
  expect_net:
    type: str
    choices: [ib, socket]
    description: "The network NCCL must use (collective.transport: FAIL where NCCL fell back to another); null: any."
  net_limits:
    type: dict
    default: {}
    description:
      - "Limits of the net.* checks: max_latency_us (TCP round-trip p50, microseconds), slow_z and slow_ratio
        (a bandwidth is slow below this modified z-score and this fraction of the median), min_gbps (a
        bandwidth floor in GB/s), link_floor_ratio (a floor of this fraction of the slower end's link
        speed, where ethtool shows it). Absent keys keep their defaults (50, -3.5, 0.5, none, 0.1); null: no limit."
  tuning:
    type: path
    description:
      - "The record of an C(ncclprep tune) run (reports/tune-*/tuning.json, on the controller): the report's
        Tuning section (cluster.json C(tuning), summary.md, report.html). Null: none."
  textfile_dir:
    type: path
    description:
      - "A node_exporter textfile-collector folder (its C(--collector.textfile.directory)): the run's metrics.prom
        is also written there as C(ncclprep.prom), atomically (a temp file, then rename); null: not written."
      - The folder must exist on the controller.
author: ncclprep contributors
"""

EXAMPLES = r"""
- name: Write the reports
  cluster_report:
    dest: "{{ playbook_dir }}/../reports"
    hosts: "{{ ansible_play_hosts_all }}"
    records: "{{ hostvars | ncclprep_host_records(ansible_play_hosts_all, ansible_play_hosts,
                                                    ncclprep_concerns | map(attribute='name') | list) }}"
    textfile_dir: /var/lib/prometheus/node-exporter
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
status: {description: PASS or FAIL, returned: always, type: str}
report_dir: {description: The run folder, returned: always, type: str}
checks: {description: Every check, returned: always, type: list}
problems: {description: One line per FAIL or HANG check, returned: always, type: list}
files:
  description: "The files written: cluster, summary, junit, metrics, html (paths in the run folder) and textfile
    (the metrics in textfile_dir, or null)."
  returned: always
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ncclprep.checks import BAD, evaluate
from ansible.module_utils.ncclprep.report import TEXTFILE_NAME, build_cluster, utc_stamp, write_reports
from ansible.module_utils.ncclprep.tune.decide import report_section


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            hosts=dict(type="list", elements="str", required=True),
            records=dict(type="dict", required=True),
            min_busbw_gbps=dict(type="float"),
            net_limits=dict(type="dict", default={}),
            expect_net=dict(type="str", choices=["ib", "socket"]),
            textfile_dir=dict(type="path"),
            tuning=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    records = {h: (p["records"].get(h) or {}) for h in p["hosts"]}
    try:
        checks = evaluate(records, p["hosts"], p["min_busbw_gbps"], p["net_limits"], p["expect_net"])
    except TypeError as exc:
        module.fail_json(msg=f"net_limits={p['net_limits']}, expect_net={p['expect_net']}: {exc}")
    if p["textfile_dir"] is not None and not os.path.isdir(p["textfile_dir"]):
        module.fail_json(msg=f"textfile_dir={p['textfile_dir']}: no such folder on the controller; give "
                             "node_exporter's --collector.textfile.directory, or null", checks=checks)
    cluster = build_cluster(checks, p["hosts"], records, utc_stamp(),
                            limits={"min_busbw_gbps": p["min_busbw_gbps"], "expect_net": p["expect_net"],
                                    "net_limits": p["net_limits"]})
    if p["tuning"]:
        try:
            with open(p["tuning"], encoding="utf-8") as fh:
                cluster["tuning"] = report_section(json.load(fh))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            module.fail_json(msg=f"tuning={p['tuning']}: cannot read the tuning record: {exc}", checks=checks)
    problems = [f"{c['status']} {c['id']} [{', '.join(c['hosts'])}]: {c['message']}"
                for c in checks if c["status"] in BAD]
    try:
        run = write_reports(p["dest"], cluster, records, cluster["generated_at"], textfile_dir=p["textfile_dir"])
    except OSError as exc:
        module.fail_json(msg=f"cannot write reports under dest={p['dest']} (textfile_dir={p['textfile_dir']}): {exc}",
                         checks=checks)
    files = {k: os.path.join(run, name) for k, name in (("cluster", "cluster.json"), ("summary", "summary.md"),
                                                         ("junit", "junit.xml"), ("metrics", "metrics.prom"),
                                                         ("html", "report.html"))}
    files["textfile"] = os.path.join(p["textfile_dir"], TEXTFILE_NAME) if p["textfile_dir"] else None
    module.exit_json(changed=True, status=cluster["status"], report_dir=run, checks=checks,
                     problems=problems, files=files)


if __name__ == "__main__":
    main()
