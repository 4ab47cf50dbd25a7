"""The roce_qos concern: RoCE ports and their lossless QoS, PFC on one priority, trust DSCP, ECN.

Reading: ``survey`` (the roce_qos module, and node.read_node beside the readers of the other
concerns). Intent: ``intent``. Check: ``roce.qos``.

Reading and planning live here (a sysfs tree given as an argument; the tools run through a
runner given as an argument, each under a deadline: ``survey``), so that the ``roce_qos`` module
and ``ncclprep node check`` read a node alike; the text that ``dcb`` and ``mlnx_qos`` print is
parsed in ``parsers/dcb.py`` and ``parsers/mlnx_qos.py``; the module alone writes (its ``apply``).
Sources of the rules:

- Ports: the kernel's RDMA sysfs ABI (Documentation/ABI/stable/sysfs-class-infiniband):
  ``/sys/class/infiniband/<dev>/ports/<n>/link_layer`` is ``Ethernet`` on a RoCE port and
  ``InfiniBand`` on an IB port; ``ports/<n>/state`` reads like ``4: ACTIVE``;
  ``<dev>/device`` is the PCI function, whose ``net/`` holds the netdev and whose ``driver``
  link names the driver (``mlx5_core``).
- ``dcb`` (iproute2 >= 6.1 for ``apptrust``): dcb-pfc(8) ``dcb pfc set dev DEV prio-pfc
  PRIO:{on|off} ...``; dcb-apptrust(8) ``dcb apptrust set dev DEV order SEL-LIST``. With
  ``-j`` (dcb(8)) ``pfc show`` prints one object whose ``prio_pfc`` is an array of 8 booleans,
  priority 0 first (iproute2 dcb/dcb_pfc.c, dcb_print_array_on_off), and ``apptrust show``
  prints ``{"order": ["dscp", ...]}`` (dcb/dcb_apptrust.c).
- ``mlnx_qos`` (Mellanox/NVIDIA mlnx-tools, python/mlnx_qos): ``mlnx_qos -i IF`` prints
  ``Priority trust state: dscp`` and a ``PFC configuration:`` table whose ``enabled`` row holds
  one 0/1 per priority 0..7; ``mlnx_qos -i IF --trust dscp --pfc 0,0,0,1,0,0,0,0`` sets both.
  It prints ``Priority trust state: none`` when the driver cannot report trust.
- ECN: NVIDIA MLNX_OFED / DOCA "Explicit Congestion Notification":
  ``/sys/class/net/<if>/ecn/roce_np/enable/<prio>`` (notification point) and
  ``.../ecn/roce_rp/enable/<prio>`` (reaction point), ``0`` or ``1`` per priority 0..7. These
  files come with NVIDIA's mlx5 driver; a netdev without them has no ECN switch to manage.

Shapes used throughout: a priority map is ``{prio (int 0..7): bool | None}`` (None: not
readable); a port state is ``{"pfc": map | None, "trust": str | None, "ecn_np": map | None,
"ecn_rp": map | None}`` where None means "cannot be read on this netdev, not managed".
Standard library only: this module also runs on the nodes.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable

from ansible.module_utils.ncclprep.model import (
    Check,
    Context,
    HostRecord,
    facts_of,
    intent_of,
    majority,
    make_check,
    verdict,
)
from ansible.module_utils.ncclprep.options import coerce
from ansible.module_utils.ncclprep.parsers import PRIORITIES
from ansible.module_utils.ncclprep.parsers.dcb import parse_dcb_apptrust, parse_dcb_pfc, trust_from_order
from ansible.module_utils.ncclprep.parsers.mlnx_qos import parse_mlnx_qos
from ansible.module_utils.ncclprep.sysfs import find_roce_ports, read_text

TOOLS = ("dcb", "mlnx_qos")
ECN_KINDS = {"ecn_np": "roce_np", "ecn_rp": "roce_rp"}
MLX5_DRIVERS = ("mlx5_core",)


def read_ecn(netdev: str, sysfs: str = "/sys") -> dict:
    """ECN switches of ``netdev``: ``{"ecn_np": map | None, "ecn_rp": map | None}``.

    Each map reads ``<sysfs>/class/net/<netdev>/ecn/<roce_np|roce_rp>/enable/<prio>``
    (``1`` on, ``0`` off; another value or an unreadable file gives None for that priority).
    A netdev without the ``enable`` directory gets None: it has no ECN switch (NVIDIA MLNX_OFED /
    DOCA ECN documentation; only NVIDIA's mlx5 driver creates these files).
    """
    out: dict = {}
    for what in ECN_KINDS:
        base = ecn_dir(netdev, what, sysfs)
        if not os.path.isdir(base):
            out[what] = None
            continue
        values = {}
        for prio in PRIORITIES:
            raw = read_text(os.path.join(base, str(prio)))
            values[prio] = {"1": True, "0": False}.get(raw) if raw is not None else None
        out[what] = values
    return out


def ecn_dir(netdev: str, what: str, sysfs: str = "/sys") -> str:
    """``<sysfs>/class/net/<netdev>/ecn/<roce_np|roce_rp>/enable`` for ``what`` ecn_np / ecn_rp."""
    return os.path.join(sysfs, "class", "net", netdev, "ecn", ECN_KINDS[what], "enable")


def choose_tool(requested: str, drivers: list, found: dict) -> tuple:
    """Pick the QoS tool: returns ``(tool | None, reason | None)``.

    ``requested`` is ``auto``, ``dcb`` or ``mlnx_qos``; ``drivers`` the drivers of the ports
    to configure; ``found`` maps tool name to its path or None (not on PATH). ``auto`` takes
    ``mlnx_qos`` when it is found and every port is mlx5 (mlnx_qos is NVIDIA's tool for its
    NICs, and mlx5 has no apptrust support in the kernel's dcbnl ops, so ``dcb apptrust`` cannot
    set trust there), else ``dcb``, else ``mlnx_qos`` if only that is found. A named tool is
    used only if found. ``reason`` says why no tool was chosen (it names the missing tools).
    """
    if requested in TOOLS:
        if found.get(requested):
            return requested, None
        return None, f"{requested} is not on PATH"
    all_mlx5 = bool(drivers) and all(d in MLX5_DRIVERS for d in drivers)
    if found.get("mlnx_qos") and all_mlx5:
        return "mlnx_qos", None
    if found.get("dcb"):
        return "dcb", None
    if found.get("mlnx_qos"):
        return "mlnx_qos", None
    return None, ("neither dcb (iproute2 >= 6.1) nor mlnx_qos (NVIDIA mlnx-tools / MLNX_OFED) is on PATH")


def show_commands(netdev: str, tool: str) -> dict:
    """Read-only commands that show ``netdev``'s QoS state, as ``{key: argv}``.

    dcb: ``{"pfc": [dcb, -j, pfc, show, dev, IF], "apptrust": [dcb, -j, apptrust, show, dev,
    IF]}``; mlnx_qos: ``{"mlnx_qos": [mlnx_qos, -i, IF]}``. argv[0] is the bare tool name.
    Raises ValueError for another tool.
    """
    if tool == "dcb":
        return {"pfc": ["dcb", "-j", "pfc", "show", "dev", netdev],
                "apptrust": ["dcb", "-j", "apptrust", "show", "dev", netdev]}
    if tool == "mlnx_qos":
        return {"mlnx_qos": ["mlnx_qos", "-i", netdev]}
    raise ValueError(f"tool {tool!r} is not one of {TOOLS}")


def desired_pfc(pfc_priority: int) -> dict:
    """``{prio: prio == pfc_priority}``: PFC on exactly the RoCE priority. Raises ValueError outside 0..7."""
    if pfc_priority not in PRIORITIES:
        raise ValueError(f"pfc_priority={pfc_priority!r} is outside 0..7")
    return {p: p == pfc_priority for p in PRIORITIES}


def _readable(value) -> bool:
    return value is not None and not (isinstance(value, dict) and all(v is None for v in value.values()))


def plan(port_state: dict, desired: dict) -> list:
    """Changes that bring one netdev from ``port_state`` to ``desired``; [] when nothing differs.

    ``port_state``: ``{"pfc": map | None, "trust": str | None, "ecn_np": map | None,
    "ecn_rp": map | None}`` (maps ``{prio: bool | None}``). ``desired``: ``{"pfc_priority":
    0..7, "trust": "dscp" | "pcp", "ecn": bool}``. Returns ``[{"what": "pfc" | "trust" |
    "ecn_np" | "ecn_rp", "from": current, "to": target}]`` in that order. Rules: PFC on exactly
    ``pfc_priority`` and off on the other seven; trust equal to ``desired["trust"]``; with
    ``ecn`` true, ECN enabled at the notification and reaction points on ``pfc_priority`` (the
    RoCE priority) and the other priorities left as they are; ``ecn`` false leaves ECN alone.
    A state value that is None (or a map of only None) cannot be read and is not planned; see
    ``unmanaged``. Raises ValueError for a pfc_priority outside 0..7.
    """
    changes: list = []
    prio = desired["pfc_priority"]
    target_pfc = desired_pfc(prio)
    pfc = port_state.get("pfc")
    if _readable(pfc) and {p: pfc.get(p) for p in PRIORITIES} != target_pfc:
        changes.append({"what": "pfc", "from": {p: pfc.get(p) for p in PRIORITIES}, "to": target_pfc})
    trust = port_state.get("trust")
    if trust is not None and trust != desired["trust"]:
        changes.append({"what": "trust", "from": trust, "to": desired["trust"]})
    if desired.get("ecn"):
        for what in ECN_KINDS:
            current = port_state.get(what)
            if current is None:
                continue
            current = {p: current.get(p) for p in PRIORITIES}
            if current[prio] is not True:
                changes.append({"what": what, "from": current, "to": {**current, prio: True}})
    return changes


def unmanaged(port_state: dict, desired: dict) -> list:
    """What ``desired`` asks for that ``port_state`` cannot show: a list of ``what`` names.

    ``pfc`` or ``trust`` when None (or a map of only None); ``ecn_np`` / ``ecn_rp`` when None
    and ``desired["ecn"]`` is true. ``plan`` makes no change for these; the caller reports them.
    """
    out = []
    if not _readable(port_state.get("pfc")):
        out.append("pfc")
    if port_state.get("trust") is None:
        out.append("trust")
    if desired.get("ecn"):
        out.extend(what for what in ECN_KINDS if port_state.get(what) is None)
    return out


def _by_what(changes: list) -> dict:
    return {c["what"]: c for c in changes}


def commands(netdev: str, changes: list, tool: str) -> list:
    """argv lists that make the ``pfc`` and ``trust`` changes of ``plan`` with ``tool``.

    dcb (dcb-pfc(8), dcb-apptrust(8)): ``[dcb, pfc, set, dev, IF, prio-pfc, 0:off, ..., 7:off]``
    with all eight priorities, then ``[dcb, apptrust, set, dev, IF, order, dscp]``.
    mlnx_qos (mlnx-tools python/mlnx_qos): one ``[mlnx_qos, -i, IF, --trust, dscp, --pfc,
    0,0,0,1,0,0,0,0]`` carrying whichever of the two changed. ECN changes are sysfs writes,
    see ``ecn_writes``. [] when there is nothing to run. argv[0] is the bare tool name.
    Raises ValueError for another tool.
    """
    if tool not in TOOLS:
        raise ValueError(f"tool {tool!r} is not one of {TOOLS}")
    by = _by_what(changes)
    pfc, trust = by.get("pfc"), by.get("trust")
    if tool == "dcb":
        out = []
        if pfc:
            out.append(["dcb", "pfc", "set", "dev", netdev, "prio-pfc"]
                       + [f"{p}:{'on' if pfc['to'][p] else 'off'}" for p in PRIORITIES])
        if trust:
            out.append(["dcb", "apptrust", "set", "dev", netdev, "order", trust["to"]])
        return out
    argv = ["mlnx_qos", "-i", netdev]
    if trust:
        argv += ["--trust", trust["to"]]
    if pfc:
        argv += ["--pfc", ",".join("1" if pfc["to"][p] else "0" for p in PRIORITIES)]
    return [argv] if len(argv) > 3 else []


def ecn_writes(netdev: str, changes: list, sysfs: str = "/sys") -> list:
    """``[(path, value)]`` sysfs writes for the ``ecn_np`` / ``ecn_rp`` changes of ``plan``.

    One write per priority whose target differs from the current value:
    ``(<sysfs>/class/net/<IF>/ecn/roce_np/enable/<prio>, "1")`` (``"0"`` to turn off).
    Source: NVIDIA MLNX_OFED / DOCA ECN documentation.
    """
    out = []
    for change in changes:
        if change["what"] not in ECN_KINDS:
            continue
        base = ecn_dir(netdev, change["what"], sysfs)
        for prio in PRIORITIES:
            target = change["to"].get(prio)
            if target is not None and target != change["from"].get(prio):
                out.append((os.path.join(base, str(prio)), "1" if target else "0"))
    return out


def format_map(prio_map: dict | None) -> str:
    """``0:off 1:off 2:off 3:on ...`` (``?`` for an unknown priority); ``unknown`` for None."""
    if prio_map is None:
        return "unknown"
    words = {True: "on", False: "off", None: "?"}
    return " ".join(f"{p}:{words[prio_map.get(p)]}" for p in PRIORITIES)


def format_state(netdev: str, state: dict) -> str:
    """Lines ``<IF> pfc: 0:off ...``, ``<IF> trust: dscp``, ``<IF> ecn_np: ...`` for a diff."""
    lines = [f"{netdev} pfc: {format_map(state.get('pfc'))}",
             f"{netdev} trust: {state.get('trust') or 'unknown'}"]
    lines += [f"{netdev} {what}: {format_map(state.get(what))}" for what in ECN_KINDS]
    return "\n".join(lines) + "\n"


class StepError(Exception):
    """A command or write that failed; the message names host, interface and step."""


def last_line(text: str) -> str:
    """The last line of ``text`` that is not blank, stripped ("" for none): a tool's error."""
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


class Runner:
    """Runs the tools' argv lists for one host, each under the deadline ``timeout`` (seconds).

    ``run(argv, timeout) -> (rc, stdout, stderr)`` runs a command and kills it at its deadline
    with rc 124 (hostinfo.subprocess_runner); ``paths``: tool name -> its path; ``warn(text)``
    passes on what a tool warns about (None: dropped).
    """

    def __init__(self, run: Callable, host: str, paths: dict, timeout: float,
                 warn: Callable[[str], None] | None = None) -> None:
        self.run_argv, self.host, self.paths, self.timeout = run, host, paths, timeout
        self.warn = warn or (lambda text: None)

    def run(self, netdev: str, argv: list) -> tuple:
        """Run ``argv`` (argv[0] a tool name) for ``netdev``; returns (rc, stdout, stderr).

        Raises StepError when it ran past the deadline (rc 124, or 137 from a kill).
        """
        rc, out, err = self.run_argv([self.paths.get(argv[0], argv[0])] + argv[1:], self.timeout)
        if rc in (124, 137):
            raise StepError(f"{self.host}: {netdev}: '{' '.join(argv)}' did not finish within "
                            f"{self.timeout:g} s (option timeout)")
        return rc, out, err


def read_state(runner: Runner, netdev: str, tool: str, sysfs: str, driver: str | None, warn: bool = True) -> tuple:
    """Current state of ``netdev`` and the reasons for what could not be read: (state, reasons).

    With ``warn``, the warnings mlnx_qos prints are passed on to the runner's ``warn``.
    """
    host = runner.host
    cmds = show_commands(netdev, tool)
    reasons: dict = {}
    if tool == "dcb":
        rc, out, err = runner.run(netdev, cmds["pfc"])
        if rc != 0:
            raise StepError(f"{host}: {netdev}: '{' '.join(cmds['pfc'])}' failed (rc {rc}): {last_line(err or out)}")
        pfc = parse_dcb_pfc(out)
        if all(v is None for v in pfc.values()):
            raise StepError(f"{host}: {netdev}: no prio_pfc in the output of '{' '.join(cmds['pfc'])}': {out[:200]!r}")
        rc, out, err = runner.run(netdev, cmds["apptrust"])
        trust = trust_from_order(parse_dcb_apptrust(out)) if rc == 0 else None
        if trust is None:
            reasons["trust"] = (f"'{' '.join(cmds['apptrust'])}' gave no trust order (rc {rc}: "
                                f"{last_line(err or out) or 'no output'}); driver {driver or 'unknown'} may not "
                                "support DCB apptrust (mlx5 does not): use tool=mlnx_qos there")
    else:
        rc, out, err = runner.run(netdev, cmds["mlnx_qos"])
        if rc != 0:
            raise StepError(f"{host}: {netdev}: '{' '.join(cmds['mlnx_qos'])}' failed (rc {rc}): "
                            f"{last_line(err or out)}")
        parsed = parse_mlnx_qos(out)
        pfc, trust = parsed["pfc"], parsed["trust"]
        for line in parsed["warnings"] if warn else []:  # e.g. lldpad running may overwrite the settings
            runner.warn(f"{host}: {netdev}: mlnx_qos says: {line}")
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


class RoceInputError(ValueError):
    """Input this host cannot take (a named interface that is no RoCE netdev, a named tool not on
    PATH, a priority outside 0..7); the message names the host, option and what is valid."""


#: The options of a reading (the roce_qos module's, but ``sysfs_root`` and ``into``), as an
#: argument spec: survey converts them as the module's spec does (options.coerce).
SURVEY_SPEC = {"interfaces": {"type": "list", "elements": "str", "default": []},
               "pfc_priority": {"type": "int", "default": 3},
               "trust": {"type": "str", "default": "dscp", "choices": ["dscp", "pcp"]},
               "ecn": {"type": "bool", "default": True},
               "tool": {"type": "str", "default": "auto", "choices": ["auto", *TOOLS]},
               "timeout": {"type": "float", "default": 10.0}}


def survey(options: dict, run: Callable, which: Callable, host: str, sysfs: str = "/sys",
           warn: Callable[[str], None] | None = None) -> tuple:
    """Read this host's RoCE ports and plan what differs from ``options`` (SURVEY_SPEC's keys):
    ``(result, runner, drivers)``.

    ``result``: ``{changed, ports, changes{netdev: [{what, from, to}]}, unsupported{netdev:
    [{what, reason}]}, skipped, skip_reason, tool, diff{before, after}}`` (the module's return and,
    but ``changed`` and ``diff``, the facts ``ansible_facts.ncclprep.roce_qos``); ``runner`` and
    ``drivers`` (netdev -> driver) are for applying, None when skipped. A host without a RoCE port
    or without a tool is skipped with a reason. ``run``: a runner as ``Runner`` takes; ``which(name)
    -> path | None``. Raises RoceInputError for bad input and StepError for a command that failed
    or ran past its deadline (both naming the host); ``exc.result`` holds what was read so far.
    """
    result = {"changed": False, "ports": [], "changes": {}, "unsupported": {}, "skipped": False,
              "skip_reason": None, "tool": None}

    def refuse(exc: Exception) -> Exception:
        exc.result = result
        return exc

    try:
        p = coerce(SURVEY_SPEC, options, host)
    except ValueError as exc:
        raise refuse(RoceInputError(str(exc))) from None

    if not 0 <= p["pfc_priority"] <= 7:
        raise refuse(RoceInputError(f"{host}: pfc_priority={p['pfc_priority']} is outside 0..7"))
    if p["timeout"] <= 0:
        raise refuse(RoceInputError(f"{host}: timeout={p['timeout']} must be a number of seconds > 0"))
    ports = find_roce_ports(sysfs)
    result["ports"] = ports
    ib_root = os.path.join(sysfs, "class", "infiniband")
    if not ports:
        where = "does not exist" if not os.path.isdir(ib_root) else "has no port with link_layer Ethernet"
        if p["interfaces"]:
            # named interfaces are a promise that RoCE is here: a host without it is an error, not a skip
            raise refuse(RoceInputError(
                f"{host}: interfaces: {', '.join(repr(b) for b in p['interfaces'])} named, but this host has no "
                f"RoCE port ({ib_root} {where}); valid here: [] (nothing to configure)"))
        return dict(result, skipped=True, skip_reason=f"no RoCE port: {ib_root} {where}"), None, None
    drivers: dict = {}
    for port in ports:
        if port["netdev"]:
            drivers.setdefault(port["netdev"], port["driver"])
    if p["interfaces"]:
        bad = [name for name in p["interfaces"] if name not in drivers]
        if bad:
            raise refuse(RoceInputError(
                f"{host}: interfaces: {', '.join(repr(b) for b in bad)} {'is' if len(bad) == 1 else 'are'} not "
                f"the netdev of a RoCE port; valid here: {sorted(drivers)}"))
        netdevs = list(dict.fromkeys(p["interfaces"]))
    else:
        netdevs = list(drivers)
    if not netdevs:
        names = ", ".join(f"{q['device']}/{q['port']}" for q in ports)
        return dict(result, skipped=True,
                    skip_reason=f"RoCE port(s) {names} have no netdev under {ib_root}/*/device/net"), None, None
    found = {name: which(name) for name in TOOLS}  # None when not on PATH (or /sbin dirs)
    tool, why = choose_tool(p["tool"], [drivers[n] for n in netdevs], found)
    if tool is None:
        if p["tool"] != "auto":
            raise refuse(RoceInputError(
                f"{host}: tool={p['tool']}: {why}; on PATH: "
                f"{[n for n, path in found.items() if path] or 'neither dcb nor mlnx_qos'}"))
        why = f"RoCE netdev(s) {', '.join(netdevs)} found but {why}"
        return dict(result, skipped=True, skip_reason=why), None, None
    result["tool"] = tool
    desired = {"pfc_priority": p["pfc_priority"], "trust": p["trust"], "ecn": p["ecn"]}
    runner = Runner(run, host, {n: path for n, path in found.items() if path}, p["timeout"], warn)
    before, after = [], []
    try:
        for netdev in netdevs:
            state, reasons = read_state(runner, netdev, tool, sysfs, drivers[netdev])
            result["changes"][netdev] = plan(state, desired)
            missing = [{"what": w, "reason": reasons.get(w, "could not be read")} for w in unmanaged(state, desired)]
            if missing:
                result["unsupported"][netdev] = missing
                for item in missing:
                    runner.warn(f"{host}: {netdev}: {item['what']} not managed: {item['reason']}")
            before.append(format_state(netdev, state))
            after.append(format_state(netdev, after_state(state, result["changes"][netdev])))
    except StepError as exc:
        raise refuse(exc) from None
    result["changed"] = any(result["changes"].values())
    result["diff"] = {"before": "".join(before), "after": "".join(after)}
    return result, runner, {n: drivers[n] for n in netdevs}


def after_state(state: dict, changes: list) -> dict:
    """``state`` with ``changes`` applied (for the diff)."""
    out = copy.deepcopy(state)
    for change in changes:
        out[change["what"]] = copy.deepcopy(change["to"])
    return out


def check(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """roce.qos: intent ``roce_qos`` (None: role off) against facts ``roce_qos``.

    intent ``roce_qos``: {interfaces, priority, trust, ecn, tool} (the role's variables).
    facts ``roce_qos``: the roce_qos module's read in check mode {ports [{device, port,
    netdev}], changes{netdev: [{what, from, to}]} (what differs from the intent now),
    unsupported, skipped, skip_reason, tool}. FAIL names each host with a pending change
    (message: host and netdev with what would change); PASS measures host -> managed netdevs
    and names the hosts without RoCE; SKIP (with the most common reason) when no host has a
    RoCE port to manage.
    """
    wanted = {h: intent_of(r, "roce_qos") for h, r in sorted(records.items()) if intent_of(r, "roce_qos")}
    rows = {h: facts_of(records[h]).get("roce_qos") for h in wanted if facts_of(records[h]).get("roce_qos")}
    if not rows:
        return []
    pending = {h: {dev: [c["what"] for c in ch] for dev, ch in (n.get("changes") or {}).items() if ch}
               for h, n in rows.items()}
    pending = {h: v for h, v in pending.items() if v}
    managed = [h for h, n in rows.items() if not n.get("skipped")]
    skipped = {h: n.get("skip_reason") for h, n in rows.items() if n.get("skipped")}
    if not pending and not managed:
        return [make_check("roce.qos", "SKIP", measured=skipped, message="not applicable: " + majority(skipped))]
    first = wanted[next(iter(rows))]
    note = f"; no RoCE on {', '.join(sorted(skipped))}" if skipped else ""
    return [verdict(
        "roce.qos", pending, measured={h: rows[h].get("changes") for h in pending},
        expected={"pfc_priority": first.get("priority"), "trust": first.get("trust")},
        message="RoCE QoS differs from intent on "
                + "; ".join(f"{h}: " + ", ".join(f"{d} {'/'.join(w)}" for d, w in sorted(v.items()))
                            for h, v in sorted(pending.items())),
        remediation=f"re-run site.yml (role roce_qos) on {', '.join(sorted(pending))}",
        passed=f"PFC, trust and ECN as intended on the RoCE ports of {len(managed)} hosts{note}",
        passed_measured={h: [p.get("netdev") for p in rows[h].get("ports") or []] for h in managed},
        passed_expected=None)]


# This concern's entry in the registry (concerns/__init__.py).
SWITCH = "roce_qos_enabled"
DATA_PLANE = False
FACTS = True
IDS = ("roce.qos",)


#: The variables the intent is computed from (concerns.intent hands over these only).
INTENT_VARS = ("roce_qos_interfaces", "roce_qos_pfc_priority", "roce_qos_trust", "roce_qos_ecn", "roce_qos_tool")
#: The facts it takes from the node: none (the ports' QoS is what it sets).
INTENT_FACTS = ()


def intent(v: dict, node: dict) -> dict:
    """``{interfaces, priority, trust, ecn, tool}``: the role's variables as they are (``survey``
    checks and converts them)."""
    return {"interfaces": v["roce_qos_interfaces"], "priority": v["roce_qos_pfc_priority"],
            "trust": v["roce_qos_trust"], "ecn": v["roce_qos_ecn"], "tool": v["roce_qos_tool"]}
