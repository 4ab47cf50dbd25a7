#!/usr/bin/python
# Copyright: ncclprep contributors
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: roce_qos
short_description: PFC on one priority, trust DSCP and ECN on the RoCE ports of a node
description:
  - Finds the RoCE ports from sysfs (C(/sys/class/infiniband/*/ports/*/link_layer) is C(Ethernet)) and,
    on their netdevs, puts PFC on exactly O(pfc_priority) (off on the other seven), sets the priority
    trust state to O(trust), and with O(ecn) enables RoCE ECN at the notification and reaction points
    on O(pfc_priority) through mlx5's C(/sys/class/net/<if>/ecn/roce_np|roce_rp/enable/<prio>) files.
  - Uses C(mlnx_qos) (NVIDIA mlnx-tools) or iproute2's C(dcb) (C(dcb pfc), C(dcb apptrust)).
  - A host without a RoCE port, or with RoCE ports but neither tool, is skipped with a stated reason
    (C(skipped=true), C(skip_reason)); that is not a failure.
  - A setting the driver cannot show (trust through C(dcb apptrust) on mlx5, ECN files on a driver
    without them) is not changed; it is listed in RV(unsupported) with the reason and warned about.
  - Reads the current state first and changes only what differs; in check mode it reports the changes
    and a diff without making them. After changing, it reads the state again and fails if it still differs.
options:
  interfaces:
    type: list
    elements: str
    default: []
    description: Netdevs to configure; each must be the netdev of a RoCE port. Empty means every RoCE port's netdev.
  pfc_priority: {type: int, default: 3, description: "Priority (0..7) that carries RoCE: PFC on, ECN on."}
  trust: {type: str, default: dscp, choices: [dscp, pcp], description: Priority trust state.}
  ecn: {type: bool, default: true, description: "Enable ECN on O(pfc_priority); false leaves ECN as it is."}
  tool:
    type: str
    default: auto
    choices: [auto, dcb, mlnx_qos]
    description:
      - C(auto) takes C(mlnx_qos) when it is on PATH and every port is mlx5, else C(dcb), else C(mlnx_qos).
      - A named tool that is not on PATH is an error.
  sysfs_root: {type: path, default: /sys, description: Root of the sysfs tree to read and write (tests use a fake one).}
  timeout: {type: float, default: 10.0, description: Deadline in seconds for each command.}
  into:
    type: dict
    description:
      - "The current C(ansible_facts.ncclprep). When given (the role's facts step, in check mode), the
        result also sets C(ansible_facts.ncclprep.roce_qos) = C({ports, changes, unsupported, skipped,
        skip_reason, tool}): the live state as a plan of what differs from the options. The
        result's own C(skipped) is then left out (Ansible would take the task for skipped and drop
        the facts)."
author: ncclprep contributors
"""

EXAMPLES = r"""
- name: Ensure PFC on priority 3, trust DSCP and ECN on every RoCE port
  roce_qos:
    pfc_priority: 3

- name: Ensure lossless RoCE on one port with dcb
  roce_qos:
    interfaces: [enp1s0f0np0]
    tool: dcb
"""

RETURN = r"""
ports:
  description: "RoCE ports found: [{device, port, netdev, link_layer, state, driver}]."
  returned: always
  type: list
  elements: dict
changes:
  description: "Per netdev, the changes planned (check mode) or made: {netdev: [{what (pfc, trust, ecn_np,
    ecn_rp), from, to}]}; PFC and ECN values are {priority: bool}."
  returned: always
  type: dict
unsupported:
  description: "Per netdev, what could not be read and so was not managed: {netdev: [{what, reason}]}."
  returned: always
  type: dict
skipped:
  description:
    - True when the host has no RoCE port, or no tool to configure it.
    - Left out of the result when O(into) is given; it is then C(ansible_facts.ncclprep.roce_qos.skipped).
  returned: when O(into) is not given
  type: bool
skip_reason:
  description: Why the host was skipped; null when it was not.
  returned: always
  type: str
tool:
  description: The tool used (dcb or mlnx_qos); null when skipped.
  returned: always
  type: str
ansible_facts:
  description: "C(ncclprep): O(into) with C(roce_qos) = C({ports, changes, unsupported, skipped, skip_reason,
    tool}), the values above (roles/roce_qos/tasks/facts.yml reads them in check mode)."
  returned: when O(into) is given
  type: dict
"""

import socket

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ncclprep.concerns.roce_qos import (
    TOOLS,
    RoceInputError,
    Runner,
    StepError,
    commands,
    ecn_writes,
    format_map,
    last_line,
    plan,
    read_state,
    survey,
)
from ansible.module_utils.ncclprep.node.hostinfo import subprocess_runner


def apply(runner: Runner, netdev: str, tool: str, changes: list, sysfs: str) -> None:
    """Run the tool's set commands and write the ECN files for ``changes``; raises StepError."""
    for argv in commands(netdev, changes, tool):
        rc, out, err = runner.run(netdev, argv)
        if rc != 0:
            raise StepError(f"{runner.host}: {netdev}: '{' '.join(argv)}' failed (rc {rc}): {last_line(err or out)}")
    for path, value in ecn_writes(netdev, changes, sysfs):
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(value)
        except OSError as exc:
            raise StepError(f"{runner.host}: {netdev}: cannot write {value} to {path}: {exc}") from exc


def _show(value) -> str:
    return format_map(value) if isinstance(value, dict) or value is None else str(value)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            interfaces=dict(type="list", elements="str", default=[]),
            pfc_priority=dict(type="int", default=3),
            trust=dict(type="str", default="dscp", choices=["dscp", "pcp"]),
            ecn=dict(type="bool", default=True),
            tool=dict(type="str", default="auto", choices=["auto", *TOOLS]),
            sysfs_root=dict(type="path", default="/sys"),
            timeout=dict(type="float", default=10.0),
            into=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    host = socket.gethostname()
    sysfs = p["sysfs_root"]

    def finish(**res) -> None:
        """Exit; with into given (the facts step), the state read also goes to
        ansible_facts.ncclprep.roce_qos."""
        if p["into"] is not None:
            facts = {k: res.get(k) for k in ("ports", "changes", "unsupported", "skipped", "skip_reason", "tool")}
            res["ansible_facts"] = {"ncclprep": dict(p["into"], roce_qos=facts)}
            # Ansible takes a result with skipped=true for a skipped task and drops its facts:
            # in the facts step, "skipped" lives in ansible_facts.ncclprep.roce_qos only.
            res.pop("skipped", None)
        module.exit_json(**res)

    options = {k: p[k] for k in ("interfaces", "pfc_priority", "trust", "ecn", "tool", "timeout")}
    try:
        result, runner, drivers = survey(options, subprocess_runner, module.get_bin_path, host, sysfs, module.warn)
    except (RoceInputError, StepError) as exc:
        module.fail_json(msg=str(exc), **exc.result)
    if runner is None or module.check_mode or not result["changed"]:
        finish(**result)

    desired = {"pfc_priority": p["pfc_priority"], "trust": p["trust"], "ecn": p["ecn"]}
    tool = result["tool"]
    try:
        for netdev, changes in result["changes"].items():
            if changes:
                apply(runner, netdev, tool, changes, sysfs)
        for netdev, changes in result["changes"].items():
            if not changes:
                continue
            state, _ = read_state(runner, netdev, tool, sysfs, drivers[netdev], warn=False)
            left = plan(state, desired)
            if left:
                what = "; ".join(f"{c['what']} is {_show(c['from'])}, expected {_show(c['to'])}" for c in left)
                raise StepError(f"{host}: {netdev}: after {tool} the state still differs: {what}")
    except StepError as exc:
        module.fail_json(msg=str(exc), **result)
    finish(**result)


if __name__ == "__main__":
    main()
