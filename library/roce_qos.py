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

import copy
import os
import socket

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ncclprep.parsers.dcb import parse_dcb_apptrust, parse_dcb_pfc, trust_from_order
from ansible.module_utils.ncclprep.parsers.mlnx_qos import parse_mlnx_qos
from ansible.module_utils.ncclprep.roce import (
    ECN_KINDS,
    TOOLS,
    choose_tool,
    commands,
    ecn_dir,
    ecn_writes,
    find_roce_ports,
    format_map,
    format_state,
    plan,
    read_ecn,
    show_commands,
    unmanaged,
)


class StepError(Exception):
    """A command or write that failed; the message names host, interface and step."""


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


class Runner:
    """Runs argv lists through coreutils ``timeout`` so that no command can block past the deadline."""

    def __init__(self, module: AnsibleModule, host: str, paths: dict, timeout: float) -> None:
        self.module, self.host, self.paths, self.timeout = module, host, paths, timeout
        self.timeout_bin = module.get_bin_path("timeout")
        if not self.timeout_bin:
            module.fail_json(msg=f"{host}: coreutils 'timeout' is not on PATH; it bounds every command "
                                 "of this module (option timeout)")

    def run(self, netdev: str, argv: list) -> tuple:
        """Run ``argv`` (argv[0] a tool name) for ``netdev``; returns (rc, stdout, stderr).

        Raises StepError when it ran past the deadline (``timeout`` exits 124).
        """
        real = [self.timeout_bin, "-k", "2", f"{self.timeout:g}", self.paths.get(argv[0], argv[0])] + argv[1:]
        rc, out, err = self.module.run_command(real)
        if rc in (124, 137):
            raise StepError(f"{self.host}: {netdev}: '{' '.join(argv)}' did not finish within "
                            f"{self.timeout:g} s (option timeout)")
        return rc, out, err


def read_state(runner: Runner, netdev: str, tool: str, sysfs: str, driver: str | None, warn: bool = True) -> tuple:
    """Current state of ``netdev`` and the reasons for what could not be read: (state, reasons).

    With ``warn``, the warnings mlnx_qos prints are passed on as module warnings.
    """
    host = runner.host
    cmds = show_commands(netdev, tool)
    reasons: dict = {}
    if tool == "dcb":
        rc, out, err = runner.run(netdev, cmds["pfc"])
        if rc != 0:
            raise StepError(f"{host}: {netdev}: '{' '.join(cmds['pfc'])}' failed (rc {rc}): {_last_line(err or out)}")
        pfc = parse_dcb_pfc(out)
        if all(v is None for v in pfc.values()):
            raise StepError(f"{host}: {netdev}: no prio_pfc in the output of '{' '.join(cmds['pfc'])}': {out[:200]!r}")
        rc, out, err = runner.run(netdev, cmds["apptrust"])
        trust = trust_from_order(parse_dcb_apptrust(out)) if rc == 0 else None
        if trust is None:
            reasons["trust"] = (f"'{' '.join(cmds['apptrust'])}' gave no trust order (rc {rc}: "
                                f"{_last_line(err or out) or 'no output'}); driver {driver or 'unknown'} may not "
                                "support DCB apptrust (mlx5 does not): use tool=mlnx_qos there")
    else:
        rc, out, err = runner.run(netdev, cmds["mlnx_qos"])
        if rc != 0:
            raise StepError(f"{host}: {netdev}: '{' '.join(cmds['mlnx_qos'])}' failed (rc {rc}): "
                            f"{_last_line(err or out)}")
        parsed = parse_mlnx_qos(out)
        pfc, trust = parsed["pfc"], parsed["trust"]
        for line in parsed["warnings"] if warn else []:  # e.g. lldpad running may overwrite the settings
            runner.module.warn(f"{host}: {netdev}: mlnx_qos says: {line}")
        if all(v is None for v in pfc.values()):
            raise StepError(f"{host}: {netdev}: no 'PFC configuration' enabled row in the output of "
                            f"'{' '.join(cmds['mlnx_qos'])}'")
        if trust is None:
            reasons["trust"] = ("mlnx_qos shows no trust state ('Priority trust state' missing or none)"
                                + (f": {'; '.join(parsed['warnings'])}" if parsed["warnings"] else ""))
    state = {"pfc": pfc, "trust": trust, **read_ecn(netdev, sysfs)}
    for what in ECN_KINDS:
        if state[what] is None:
            reasons[what] = (f"{ecn_dir(netdev, what, sysfs)} does not exist (the ECN switches come with "
                             f"NVIDIA's mlx5 driver; driver here: {driver or 'unknown'})")
    return state, reasons


def after_state(state: dict, changes: list) -> dict:
    """``state`` with ``changes`` applied (for the diff)."""
    out = copy.deepcopy(state)
    for change in changes:
        out[change["what"]] = copy.deepcopy(change["to"])
    return out


def apply(runner: Runner, netdev: str, tool: str, changes: list, sysfs: str) -> None:
    """Run the tool's set commands and write the ECN files for ``changes``; raises StepError."""
    for argv in commands(netdev, changes, tool):
        rc, out, err = runner.run(netdev, argv)
        if rc != 0:
            raise StepError(f"{runner.host}: {netdev}: '{' '.join(argv)}' failed (rc {rc}): {_last_line(err or out)}")
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

    if not 0 <= p["pfc_priority"] <= 7:
        module.fail_json(msg=f"{host}: pfc_priority={p['pfc_priority']} is outside 0..7")
    if p["timeout"] <= 0:
        module.fail_json(msg=f"{host}: timeout={p['timeout']} must be a number of seconds > 0")
    sysfs = p["sysfs_root"]
    result = {"changed": False, "ports": [], "changes": {}, "unsupported": {}, "skipped": False,
              "skip_reason": None, "tool": None}

    ports = find_roce_ports(sysfs)
    result["ports"] = ports
    ib_root = os.path.join(sysfs, "class", "infiniband")
    if not ports:
        where = "does not exist" if not os.path.isdir(ib_root) else "has no port with link_layer Ethernet"
        if p["interfaces"]:
            # named interfaces are a promise that RoCE is here: a host without it is an error, not a skip
            module.fail_json(msg=f"{host}: interfaces: {', '.join(repr(b) for b in p['interfaces'])} "
                                 f"named, but this host has no RoCE port ({ib_root} {where}); "
                                 "valid here: [] (nothing to configure)", **result)
        finish(**dict(result, skipped=True, skip_reason=f"no RoCE port: {ib_root} {where}"))

    drivers: dict = {}
    for port in ports:
        if port["netdev"]:
            drivers.setdefault(port["netdev"], port["driver"])
    if p["interfaces"]:
        bad = [name for name in p["interfaces"] if name not in drivers]
        if bad:
            module.fail_json(msg=f"{host}: interfaces: {', '.join(repr(b) for b in bad)} "
                                 f"{'is' if len(bad) == 1 else 'are'} not the netdev of a RoCE port; "
                                 f"valid here: {sorted(drivers)}", **result)
        netdevs = list(dict.fromkeys(p["interfaces"]))
    else:
        netdevs = list(drivers)
    if not netdevs:
        names = ", ".join(f"{q['device']}/{q['port']}" for q in ports)
        finish(**dict(result, skipped=True,
                      skip_reason=f"RoCE port(s) {names} have no netdev under {ib_root}/*/device/net"))

    found = {name: module.get_bin_path(name) for name in TOOLS}  # None when not on PATH (or /sbin dirs)
    tool, why = choose_tool(p["tool"], [drivers[n] for n in netdevs], found)
    if tool is None:
        if p["tool"] != "auto":
            module.fail_json(msg=f"{host}: tool={p['tool']}: {why}; on PATH: "
                                 f"{[n for n, path in found.items() if path] or 'neither dcb nor mlnx_qos'}",
                             **result)
        finish(**dict(result, skipped=True,
                      skip_reason=f"RoCE netdev(s) {', '.join(netdevs)} found but {why}"))
    result["tool"] = tool

    desired = {"pfc_priority": p["pfc_priority"], "trust": p["trust"], "ecn": p["ecn"]}
    runner = Runner(module, host, {n: path for n, path in found.items() if path}, p["timeout"])
    states, before, after = {}, [], []
    try:
        for netdev in netdevs:
            state, reasons = read_state(runner, netdev, tool, sysfs, drivers[netdev])
            states[netdev] = state
            result["changes"][netdev] = plan(state, desired)
            missing = [{"what": w, "reason": reasons.get(w, "could not be read")} for w in unmanaged(state, desired)]
            if missing:
                result["unsupported"][netdev] = missing
                for item in missing:
                    module.warn(f"{host}: {netdev}: {item['what']} not managed: {item['reason']}")
            before.append(format_state(netdev, state))
            after.append(format_state(netdev, after_state(state, result["changes"][netdev])))
    except StepError as exc:
        module.fail_json(msg=str(exc), **result)

    result["changed"] = any(result["changes"].values())
    result["diff"] = {"before": "".join(before), "after": "".join(after)}
    if module.check_mode or not result["changed"]:
        finish(**result)

    try:
        for netdev in netdevs:
            if result["changes"][netdev]:
                apply(runner, netdev, tool, result["changes"][netdev], sysfs)
        for netdev in netdevs:
            if not result["changes"][netdev]:
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
