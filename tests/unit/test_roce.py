"""roce_qos: RoCE port discovery, dcb / mlnx_qos parsing, the plan, and the module run as Ansible runs it.

The files under tests/fixtures/roce/ are built from the documented formats, not captured on a
RoCE host (there is none here): ``dcb -j pfc show`` / ``dcb -j apptrust show`` follow iproute2's
dcb/dcb_pfc.c and dcb/dcb_apptrust.c (``prio_pfc`` an array of 8 booleans, ``order`` an array of
selector names) and dcb-pfc(8) / dcb-apptrust(8); the ``mlnx_qos -i IF`` texts follow the printing
code of Mellanox/mlnx-tools python/mlnx_qos and published outputs of it. The sysfs trees are
built under tmp_path in the layout of the kernel's sysfs-class-infiniband ABI and NVIDIA's ECN
documentation. ``dcb`` and ``mlnx_qos`` are fakes on a tmp PATH that print those fixtures and
record their argv.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from ansible.module_utils.ncclprep.concerns.roce_qos import (
    choose_tool,
    commands,
    ecn_writes,
    format_state,
    plan,
    read_ecn,
    show_commands,
    unmanaged,
)
from ansible.module_utils.ncclprep.parsers.dcb import parse_dcb_apptrust, parse_dcb_pfc, trust_from_order
from ansible.module_utils.ncclprep.parsers.mlnx_qos import parse_mlnx_qos
from ansible.module_utils.ncclprep.sysfs import find_roce_ports, list_rdma_ports
from conftest import read_fixture

import ncclprep

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "roce")
MODULE = os.path.join(ncclprep.REPO_ROOT, "library", "roce_qos.py")
NETDEV = "enp1s0f0np0"
OFF = {p: False for p in range(8)}
ON3 = {**OFF, 3: True}
DESIRED = {"pfc_priority": 3, "trust": "dscp", "ecn": True}


def fixture(name: str) -> str:
    return read_fixture(os.path.join("roce", name))


def write(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def make_sysfs(root, roce: bool = True, ib: bool = True, ecn: str | None = "0"):
    """A sysfs tree: mlx5_0 port 1 RoCE (netdev NETDEV, mlx5_core), mlx5_1 port 1 InfiniBand (ib0).

    Returns ``root``. ``ecn`` is the value of every ECN enable file, or None for no ecn/ directory.
    """
    drivers = root / "bus" / "pci" / "drivers" / "mlx5_core"
    drivers.mkdir(parents=True, exist_ok=True)
    devices = [("mlx5_0", "0000:01:00.0", NETDEV, "Ethernet")] if roce else []
    devices += [("mlx5_1", "0000:02:00.0", "ib0", "InfiniBand")] if ib else []
    for dev, pci, netdev, layer in devices:
        pci_dir = root / "devices" / "pci0000:00" / pci
        net_dir = pci_dir / "net" / netdev
        net_dir.mkdir(parents=True)
        (pci_dir / "driver").symlink_to(drivers)
        (root / "class" / "net").mkdir(parents=True, exist_ok=True)
        (root / "class" / "net" / netdev).symlink_to(net_dir)
        ib_dir = root / "class" / "infiniband" / dev
        ib_dir.mkdir(parents=True)
        (ib_dir / "device").symlink_to(pci_dir)
        write(ib_dir / "ports" / "1" / "link_layer", f"{layer}\n")
        write(ib_dir / "ports" / "1" / "state", "4: ACTIVE\n")
        if layer == "Ethernet" and ecn is not None:
            for proto in ("roce_np", "roce_rp"):
                for prio in range(8):
                    write(net_dir / "ecn" / proto / "enable" / str(prio), f"{ecn}\n")
    return root


# ---------------------------------------------------------------- ports


def test_find_roce_ports_reads_the_ethernet_port_and_leaves_out_infiniband(tmp_path):
    root = make_sysfs(tmp_path)
    assert find_roce_ports(str(root)) == [
        {"device": "mlx5_0", "port": 1, "netdev": NETDEV, "link_layer": "Ethernet", "state": "ACTIVE",
         "driver": "mlx5_core"}]
    every = list_rdma_ports(str(root))
    assert [(p["device"], p["link_layer"], p["netdev"]) for p in every] == [
        ("mlx5_0", "Ethernet", NETDEV), ("mlx5_1", "InfiniBand", "ib0")]


def test_find_roce_ports_without_class_infiniband_or_only_ib(tmp_path):
    assert find_roce_ports(str(tmp_path / "nothing")) == []
    assert find_roce_ports(str(make_sysfs(tmp_path / "ib", roce=False))) == []


def test_port_without_netdev_driver_or_state_gets_none(tmp_path):
    port = tmp_path / "class" / "infiniband" / "rxe0" / "ports" / "1"
    write(port / "link_layer", "Ethernet\n")
    assert find_roce_ports(str(tmp_path)) == [
        {"device": "rxe0", "port": 1, "netdev": None, "link_layer": "Ethernet", "state": None, "driver": None}]


def test_two_netdevs_on_one_function_are_told_apart_by_dev_port(tmp_path):
    pci = tmp_path / "devices" / "0000:03:00.0"
    write(pci / "net" / "eth2" / "dev_port", "0\n")
    write(pci / "net" / "eth3" / "dev_port", "1\n")
    dev = tmp_path / "class" / "infiniband" / "mlx4_0"
    dev.mkdir(parents=True)
    (dev / "device").symlink_to(pci)
    for n in ("1", "2"):
        write(dev / "ports" / n / "link_layer", "Ethernet\n")
    assert [(p["port"], p["netdev"]) for p in find_roce_ports(str(tmp_path))] == [(1, "eth2"), (2, "eth3")]


# ---------------------------------------------------------------- parsers


def test_parse_dcb_pfc_fixtures():
    assert parse_dcb_pfc(fixture("dcb_pfc_all_off.json")) == OFF
    assert parse_dcb_pfc(fixture("dcb_pfc_prio3.json")) == ON3
    assert parse_dcb_pfc(fixture("dcb_pfc_pretty_stats.json")) == {**ON3, 4: True}


def test_parse_dcb_pfc_never_invents_a_value():
    unknown = {p: None for p in range(8)}
    assert parse_dcb_pfc("") == unknown
    assert parse_dcb_pfc("Attribute not found: No such file or directory") == unknown
    assert parse_dcb_pfc('{"pfc_cap":8}') == unknown
    assert parse_dcb_pfc('{"prio_pfc":[true,false,false]}') == {0: True, 1: False, 2: False, **{p: None for p in
                                                                                              range(3, 8)}}
    assert parse_dcb_pfc('{"prio_pfc":["off","off","off","on","off","off","off","off"]}') == ON3


def test_parse_dcb_apptrust_fixtures_and_trust():
    assert parse_dcb_apptrust(fixture("dcb_apptrust_pcp.json")) == ["pcp"]
    assert parse_dcb_apptrust(fixture("dcb_apptrust_dscp_pcp.json")) == ["dscp", "pcp"]
    assert parse_dcb_apptrust(fixture("dcb_apptrust_empty.json")) == []
    assert parse_dcb_apptrust("garbage") is None
    assert [trust_from_order(o) for o in (["dscp", "pcp"], ["pcp"], [], None)] == ["dscp", "pcp", "none", None]


def test_parse_mlnx_qos_dscp_prio3():
    parsed = parse_mlnx_qos(fixture("mlnx_qos_dscp_prio3.txt"))
    assert parsed["trust"] == "dscp" and parsed["pfc"] == ON3
    assert parsed["dcbx"] == "OS controlled" and parsed["cable_len"] == 7
    assert parsed["unparsed"] == [] and parsed["warnings"] == []


def test_parse_mlnx_qos_pcp_all_off():
    parsed = parse_mlnx_qos(fixture("mlnx_qos_pcp.txt"))
    assert (parsed["trust"], parsed["pfc"], parsed["unparsed"]) == ("pcp", OFF, [])


def test_parse_mlnx_qos_without_trust_support_reports_none_and_warnings():
    parsed = parse_mlnx_qos(fixture("mlnx_qos_no_trust.txt"))
    assert parsed["trust"] is None and parsed["pfc"] == OFF and parsed["unparsed"] == []
    assert parsed["warnings"] == [
        "****** WARNING: lldpad service is running and may overwrite your settings ******",
        "Priority trust state is not supported on your system",
        "Buffers commands are not supported on your system"]


def test_parse_mlnx_qos_unknown_lines_and_missing_values():
    parsed = parse_mlnx_qos("Interface name is required\nUsage: mlnx_qos -i <interface> [options]\n")
    assert parsed["trust"] is None and parsed["pfc"] == {p: None for p in range(8)}
    assert parsed["unparsed"] == ["Interface name is required", "Usage: mlnx_qos -i <interface> [options]"]


# ---------------------------------------------------------------- plan


def state(pfc=None, trust="dscp", ecn=True):
    ecn_map = {p: ecn for p in range(8)}
    return {"pfc": dict(ON3) if pfc is None else pfc, "trust": trust, "ecn_np": dict(ecn_map), "ecn_rp": dict(ecn_map)}


def test_plan_puts_pfc_on_priority_3_only():
    current = state(pfc={**OFF, 0: True, 4: True})
    assert plan(current, DESIRED) == [{"what": "pfc", "from": {**OFF, 0: True, 4: True}, "to": ON3}]


def test_plan_already_correct_state_has_no_changes():
    assert plan(state(), DESIRED) == []
    assert unmanaged(state(), DESIRED) == []


def test_plan_trust_pcp_to_dscp_and_ecn_on_the_roce_priority_only():
    changes = plan(state(trust="pcp", ecn=False), DESIRED)
    assert [c["what"] for c in changes] == ["trust", "ecn_np", "ecn_rp"]
    assert changes[0] == {"what": "trust", "from": "pcp", "to": "dscp"}
    assert changes[1]["from"] == OFF and changes[1]["to"] == ON3


def test_plan_ecn_false_leaves_ecn_alone_and_unreadable_values_are_not_planned():
    assert plan(state(ecn=False), dict(DESIRED, ecn=False)) == []
    blind = {"pfc": {p: None for p in range(8)}, "trust": None, "ecn_np": None, "ecn_rp": None}
    assert plan(blind, DESIRED) == []
    assert unmanaged(blind, DESIRED) == ["pfc", "trust", "ecn_np", "ecn_rp"]
    assert unmanaged(blind, dict(DESIRED, ecn=False)) == ["pfc", "trust"]


def test_plan_rejects_a_priority_outside_0_7():
    with pytest.raises(ValueError, match="pfc_priority=8 is outside 0..7"):
        plan(state(), dict(DESIRED, pfc_priority=8))


# ---------------------------------------------------------------- commands


def test_dcb_commands():
    changes = plan(state(pfc=OFF, trust="pcp"), DESIRED)
    assert commands(NETDEV, changes, "dcb") == [
        ["dcb", "pfc", "set", "dev", NETDEV, "prio-pfc", "0:off", "1:off", "2:off", "3:on", "4:off", "5:off",
         "6:off", "7:off"],
        ["dcb", "apptrust", "set", "dev", NETDEV, "order", "dscp"]]
    assert show_commands(NETDEV, "dcb") == {"pfc": ["dcb", "-j", "pfc", "show", "dev", NETDEV],
                                            "apptrust": ["dcb", "-j", "apptrust", "show", "dev", NETDEV]}


def test_mlnx_qos_commands():
    changes = plan(state(pfc=OFF, trust="pcp"), DESIRED)
    assert commands(NETDEV, changes, "mlnx_qos") == [
        ["mlnx_qos", "-i", NETDEV, "--trust", "dscp", "--pfc", "0,0,0,1,0,0,0,0"]]
    only_pfc = plan(state(pfc=OFF), DESIRED)
    assert commands(NETDEV, only_pfc, "mlnx_qos") == [["mlnx_qos", "-i", NETDEV, "--pfc", "0,0,0,1,0,0,0,0"]]
    assert commands(NETDEV, [], "mlnx_qos") == [] and commands(NETDEV, [], "dcb") == []
    assert show_commands(NETDEV, "mlnx_qos") == {"mlnx_qos": ["mlnx_qos", "-i", NETDEV]}
    with pytest.raises(ValueError, match="not one of"):
        commands(NETDEV, [], "lldptool")


def test_ecn_writes_and_read_ecn(tmp_path):
    root = make_sysfs(tmp_path)
    current = state(ecn=False)
    assert read_ecn(NETDEV, str(root)) == {"ecn_np": current["ecn_np"], "ecn_rp": current["ecn_rp"]}
    writes = ecn_writes(NETDEV, plan(current, DESIRED), str(root))
    assert writes == [(f"{root}/class/net/{NETDEV}/ecn/roce_np/enable/3", "1"),
                      (f"{root}/class/net/{NETDEV}/ecn/roce_rp/enable/3", "1")]
    assert read_ecn("ib0", str(root)) == {"ecn_np": None, "ecn_rp": None}


def test_choose_tool():
    both = {"dcb": "/usr/sbin/dcb", "mlnx_qos": "/usr/bin/mlnx_qos"}
    assert choose_tool("auto", ["mlx5_core"], both) == ("mlnx_qos", None)
    assert choose_tool("auto", ["mlx5_core", "bnxt_en"], both) == ("dcb", None)
    assert choose_tool("auto", ["mlx5_core"], dict(both, mlnx_qos=None)) == ("dcb", None)
    assert choose_tool("auto", ["bnxt_en"], dict(both, dcb=None)) == ("mlnx_qos", None)
    tool, why = choose_tool("auto", ["mlx5_core"], {"dcb": None, "mlnx_qos": None})
    assert tool is None and "dcb" in why and "mlnx_qos" in why and "PATH" in why
    assert choose_tool("dcb", ["mlx5_core"], dict(both, dcb=None)) == (None, "dcb is not on PATH")


def test_format_state_for_the_diff():
    text = format_state(NETDEV, {"pfc": ON3, "trust": None, "ecn_np": None, "ecn_rp": ON3})
    assert text.splitlines() == [f"{NETDEV} pfc: 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off",
                                 f"{NETDEV} trust: unknown", f"{NETDEV} ecn_np: unknown",
                                 f"{NETDEV} ecn_rp: 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off"]


# ---------------------------------------------------------------- the module, as Ansible runs it

FAKE_DCB = """
import json, os, sys
state_path = os.environ["FAKE_ROCE_STATE"]
with open(state_path) as fh:
    state = json.load(fh)
args = sys.argv[1:]
with open(os.environ["FAKE_ROCE_LOG"], "a") as fh:
    fh.write(json.dumps(["dcb"] + args) + "\\n")
if args[:1] == ["-j"]:
    args = args[1:]
obj, verb, dev, rest = args[0], args[1], args[3], args[4:]
if verb == "show":
    if obj == "pfc":
        with open(state["pfc_fixture"]) as fh:
            data = json.load(fh)
        data["prio_pfc"] = state["pfc"]
        print(json.dumps(data))
    elif state["order"] is None:
        print("Attribute not found: No such file or directory", file=sys.stderr)
        sys.exit(1)
    else:
        print(json.dumps({"order": state["order"]}))
    sys.exit(0)
if obj == "pfc":
    for item in rest[1:]:
        prio, value = item.split(":")
        state["pfc"][int(prio)] = value == "on"
else:
    state["order"] = rest[1:]
with open(state_path, "w") as fh:
    json.dump(state, fh)
"""

FAKE_MLNX_QOS = """
import json, os, re, sys
state_path = os.environ["FAKE_ROCE_STATE"]
with open(state_path) as fh:
    state = json.load(fh)
args = sys.argv[1:]
with open(os.environ["FAKE_ROCE_LOG"], "a") as fh:
    fh.write(json.dumps(["mlnx_qos"] + args) + "\\n")
if "--trust" in args:
    state["order"] = [args[args.index("--trust") + 1]]
if "--pfc" in args:
    state["pfc"] = [v == "1" for v in args[args.index("--pfc") + 1].split(",")]
with open(state_path, "w") as fh:
    json.dump(state, fh)
with open(state["mlnx_qos_fixture"]) as fh:
    text = fh.read()
text = re.sub(r"Priority trust state: \\w+", "Priority trust state: " + state["order"][0], text)
text = re.sub(r"enabled( +\\d)+", "enabled     " + "   ".join("1" if v else "0" for v in state["pfc"]), text)
print(text, end="")
"""


class Host:
    """A fake node: sysfs tree, fake tools on PATH, and a runner for the module in a subprocess."""

    def __init__(self, tmp_path, tools=("dcb",), pfc=None, order=("pcp",), qos_text="mlnx_qos_pcp.txt", **tree):
        self.tmp = tmp_path
        self.sysfs = make_sysfs(tmp_path / "sys", **tree)
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        for name in tools:
            script = self.bin / name
            script.write_text(f"#!{sys.executable}\n" + {"dcb": FAKE_DCB, "mlnx_qos": FAKE_MLNX_QOS}[name])
            script.chmod(script.stat().st_mode | stat.S_IXUSR)
        self.state = tmp_path / "tool_state.json"
        self.log = tmp_path / "tool_argv.log"
        self.log.write_text("")
        self.state.write_text(json.dumps({
            "pfc": pfc if pfc is not None else json.loads(fixture("dcb_pfc_all_off.json"))["prio_pfc"],
            "order": list(order) if order is not None else None,
            "pfc_fixture": os.path.join(FIXTURES, "dcb_pfc_all_off.json"),
            "mlnx_qos_fixture": os.path.join(FIXTURES, qos_text)}))

    def run(self, check_mode=False, **args):
        argsfile = self.tmp / "args.json"
        argsfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(
            {"sysfs_root": str(self.sysfs)}, _ansible_check_mode=check_mode, **args)}))
        env = dict(os.environ, PATH=str(self.bin) + os.pathsep + os.environ.get("PATH", ""),
                   FAKE_ROCE_STATE=str(self.state), FAKE_ROCE_LOG=str(self.log))
        boot = ("import runpy, sys, ncclprep; path = sys.argv[1]; sys.argv = [path, sys.argv[2]]; "
                "runpy.run_path(path, run_name='__main__')")
        out = subprocess.run([sys.executable, "-c", boot, MODULE, str(argsfile)], env=env, capture_output=True,
                             text=True, timeout=60)
        assert out.stdout.strip(), out.stderr
        return json.loads(out.stdout[out.stdout.index("{"):])

    def calls(self, verb=None):
        rows = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [r for r in rows if verb is None or verb in r]

    def ecn(self, proto, prio):
        return (self.sysfs / "class" / "net" / NETDEV / "ecn" / proto / "enable" / str(prio)).read_text().strip()


def test_module_skips_a_host_without_roce(tmp_path):
    host = Host(tmp_path, roce=False)
    res = host.run()
    assert res["changed"] is False and res["skipped"] is True and "failed" not in res
    assert res["skip_reason"] == (f"no RoCE port: {host.sysfs}/class/infiniband has no port with "
                                  "link_layer Ethernet")
    assert res["ports"] == [] and res["tool"] is None and host.calls() == []


def test_module_skips_a_host_without_any_rdma_device(tmp_path):
    host = Host(tmp_path, roce=False, ib=False)
    res = host.run()
    assert res["skipped"] is True and res["changed"] is False
    assert res["skip_reason"] == f"no RoCE port: {host.sysfs}/class/infiniband does not exist"


def test_module_check_mode_reports_changes_and_calls_no_set(tmp_path):
    host = Host(tmp_path)
    res = host.run(check_mode=True, tool="dcb")
    assert res["changed"] is True and res["skipped"] is False and res["tool"] == "dcb"
    assert [c["what"] for c in res["changes"][NETDEV]] == ["pfc", "trust", "ecn_np", "ecn_rp"]
    assert host.calls("set") == []
    assert [c[:3] for c in host.calls()] == [["dcb", "-j", "pfc"], ["dcb", "-j", "apptrust"]]
    assert f"{NETDEV} pfc: 0:off 1:off 2:off 3:on" in res["diff"]["after"]
    assert f"{NETDEV} trust: pcp" in res["diff"]["before"]
    assert host.ecn("roce_np", 3) == "0"


def test_module_run_calls_the_dcb_set_commands_writes_ecn_and_is_idempotent(tmp_path):
    host = Host(tmp_path)
    res = host.run(tool="dcb")
    assert res["changed"] is True and "failed" not in res, res
    assert host.calls("set") == [
        ["dcb", "pfc", "set", "dev", NETDEV, "prio-pfc", "0:off", "1:off", "2:off", "3:on", "4:off", "5:off",
         "6:off", "7:off"],
        ["dcb", "apptrust", "set", "dev", NETDEV, "order", "dscp"]]
    assert [host.ecn(proto, p) for proto in ("roce_np", "roce_rp") for p in (2, 3)] == ["0", "1", "0", "1"]
    again = host.run(tool="dcb")
    assert again["changed"] is False and again["changes"] == {NETDEV: []}
    assert len(host.calls("set")) == 2


def test_module_dcb_on_mlx5_without_apptrust_leaves_trust_and_says_why(tmp_path):
    host = Host(tmp_path, order=None)
    res = host.run(tool="dcb", ecn=False)
    assert res["changed"] is True and "failed" not in res, res
    [item] = res["unsupported"][NETDEV]
    assert item["what"] == "trust" and "apptrust" in item["reason"] and "tool=mlnx_qos" in item["reason"]
    assert [c[1] for c in host.calls("set")] == ["pfc"]
    assert f"{NETDEV}: trust not managed: " in json.dumps(res["warnings"])  # ansible-core 2.19 nests them


def test_module_auto_prefers_mlnx_qos_on_mlx5(tmp_path):
    host = Host(tmp_path, tools=("dcb", "mlnx_qos"), ecn=None)
    res = host.run(check_mode=True)
    assert res["tool"] == "mlnx_qos" and res["changed"] is True
    assert host.calls() == [["mlnx_qos", "-i", NETDEV]]
    assert [u["what"] for u in res["unsupported"][NETDEV]] == ["ecn_np", "ecn_rp"]
    res = host.run()
    assert host.calls()[2] == ["mlnx_qos", "-i", NETDEV, "--trust", "dscp", "--pfc", "0,0,0,1,0,0,0,0"]
    assert res["changed"] is True and "failed" not in res, res
    assert host.run()["changed"] is False


def test_module_mlnx_qos_without_trust_support_sets_pfc_and_passes_on_its_warnings(tmp_path):
    host = Host(tmp_path, tools=("mlnx_qos",), order=("none",), qos_text="mlnx_qos_no_trust.txt")
    res = host.run(ecn=False)
    assert res["tool"] == "mlnx_qos" and res["changed"] is True and "failed" not in res, res
    assert host.calls()[1] == ["mlnx_qos", "-i", NETDEV, "--pfc", "0,0,0,1,0,0,0,0"]
    [item] = res["unsupported"][NETDEV]
    assert item["what"] == "trust" and "Priority trust state is not supported on your system" in item["reason"]
    assert "mlnx_qos says: ****** WARNING: lldpad service is running" in json.dumps(res["warnings"])


def test_module_fails_when_the_state_still_differs_after_the_change(tmp_path):
    host = Host(tmp_path)
    script = host.bin / "dcb"
    script.write_text(script.read_text().replace('state["pfc"][int(prio)] = value == "on"', "pass"))
    res = host.run(tool="dcb", ecn=False)
    assert res["failed"] is True
    assert f": {NETDEV}: after dcb the state still differs: pfc is 0:off" in res["msg"]
    assert "expected 0:off 1:off 2:off 3:on" in res["msg"]


def test_module_rejects_an_interface_that_is_not_a_roce_netdev_before_any_change(tmp_path):
    host = Host(tmp_path)
    res = host.run(tool="dcb", interfaces=["ib0"])
    assert res["failed"] is True
    assert "interfaces: 'ib0' is not the netdev of a RoCE port" in res["msg"] and NETDEV in res["msg"]
    assert host.calls() == []


def test_module_rejects_a_named_interface_on_a_host_without_roce(tmp_path):
    """Found by a break-it round: the host without RoCE used to skip and accept any named interface."""
    host = Host(tmp_path, roce=False, ib=False)
    res = host.run(interfaces=["eth0"])
    assert res["failed"] is True and res.get("skipped") is not True
    assert res["msg"].endswith(f"interfaces: 'eth0' named, but this host has no RoCE port "
                               f"({host.sysfs}/class/infiniband does not exist); valid here: [] (nothing to configure)")
    assert host.calls() == []


def test_module_names_the_command_that_ran_past_the_timeout(tmp_path):
    host = Host(tmp_path)
    script = host.bin / "dcb"
    script.write_text(script.read_text().replace("import json, os, sys", "import json, os, sys, time\ntime.sleep(5)"))
    res = host.run(tool="dcb", timeout=0.5)
    assert res["failed"] is True
    assert f"{NETDEV}: 'dcb -j pfc show dev {NETDEV}' did not finish within 0.5 s (option timeout)" in res["msg"]
