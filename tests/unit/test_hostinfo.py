"""hostinfo: the node's own tools read under deadlines through the parsers (node_facts' ``hostinfo``).

Commands are faked: ``which`` finds only the tools a test names and ``runner`` answers with the
real outputs of ../shared/cases (or an exit status / timeout). The sysfs trees are built under
tmp_path in the layout of the kernel's sysfs-class-infiniband ABI. The last tests run the real
subprocess runner and node_facts itself through ``ansible`` on localhost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from ansible.module_utils.ncclprep.node.hostinfo import (
    TIMEOUT_RC,
    collect,
    gpu_topology,
    ib_ports,
    ibv_devinfo,
    ip_links,
    link,
    netplan,
    numactl,
    read_ib_sysfs,
    run_tool,
    subprocess_runner,
)

import ncclprep

READINGS = ("ib_ports", "ibv_devinfo", "numactl", "gpu_topology", "ip_links", "netplan")
#: Readings node_facts documents: READINGS plus ``link``, there only with a data-plane interface.
DOCUMENTED = READINGS + ("link",)


class Fakes:
    """``which`` and ``runner`` for a node that has the tools in ``answers``: {tool: (rc, stdout, stderr)}."""

    def __init__(self, answers: dict) -> None:
        self.answers, self.calls = answers, []

    def which(self, name: str) -> str | None:
        return f"/usr/bin/{name}" if name in self.answers else None

    def runner(self, argv: list, timeout: float) -> tuple:
        self.calls.append((argv, timeout))
        return self.answers[os.path.basename(argv[0])]


class ArgvFakes(Fakes):
    """Fakes answering per command line: ``answers`` is {"tool arg ...": (rc, stdout, stderr)}."""

    def which(self, name: str) -> str | None:
        return f"/usr/bin/{name}" if any(key.split()[0] == name for key in self.answers) else None

    def runner(self, argv: list, timeout: float) -> tuple:
        self.calls.append((argv, timeout))
        return self.answers[" ".join([os.path.basename(argv[0]), *argv[1:]])]


def ok(text: str) -> tuple:
    return 0, text, ""


def write(path, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def make_port(sysfs, dev: str, port: int, state: str, phys: str, rate: str, layer: str, lid="0x0", sm_lid="0x0",
              netdev: str | None = None) -> None:
    base = os.path.join(sysfs, "class", "infiniband", dev, "ports", str(port))
    for name, value in (("state", state), ("phys_state", phys), ("rate", rate), ("link_layer", layer),
                        ("lid", lid), ("sm_lid", sm_lid)):
        write(os.path.join(base, name), value + "\n")
    if netdev:
        write(os.path.join(sysfs, "class", "infiniband", dev, "device", "net", netdev, "dev_port"), "0\n")


def ids(reading: dict) -> list:
    return [(f["id"], f["severity"], f["subject"]) for f in reading["findings"]]


def test_a_node_without_any_of_the_tools_gets_none_everywhere_and_nothing_runs(tmp_path):
    fakes = Fakes({})
    out = collect(fakes.runner, fakes.which, 5, "n1", sysfs=str(tmp_path), netplan_dir=str(tmp_path / "netplan"))
    assert out == {name: None for name in READINGS}
    assert fakes.calls == []


def test_ibstat_hdr_one_port_disabled_flags_mlx5_1_and_does_not_count_its_rate(case):
    fakes = Fakes({"ibstat": ok(case("ibstat/hdr-one-port-disabled.txt"))})
    reading = ib_ports(fakes.runner, fakes.which, 7, "n1")
    assert fakes.calls == [(["/usr/bin/ibstat"], 7)]
    assert (reading["source"], reading["error"], reading["data"]["layout"]) == ("ibstat", None, "ibstat")
    ports = {p["device"]: p for p in reading["data"]["ports"]}
    assert (ports["mlx5_0"]["state"], ports["mlx5_0"]["rate_gbps"], ports["mlx5_0"]["base_lid"]) == ("Active", 200, 569)
    assert (ports["mlx5_1"]["state"], ports["mlx5_1"]["physical_state"], ports["mlx5_1"]["base_lid"]) == \
        ("Down", "Disabled", 65535)
    assert ids(reading) == [("ib.port_down", "WARN", "mlx5_1"), ("ib.usable_hcas", "INFO", "n1")]
    down, usable = reading["findings"]
    assert down["host"] == "n1" and down["rate_gbps"] is None
    assert usable["usable"] == ["mlx5_0"] and usable["total_rate_gbps"] == 200


def test_ibstat_down_port_without_rate_lines_reads_rate_none(case):
    fakes = Fakes({"ibstat": ok(case("ibstat/down-port-no-rate.txt"))})
    reading = ib_ports(fakes.runner, fakes.which, 5, "n1")
    (port,) = reading["data"]["ports"]
    assert (port["device"], port["state"], port["rate_gbps"], port["link_layer"]) == ("mlx5_8", "Down", None, None)
    assert ("ib.port_down", "WARN", "mlx5_8") in ids(reading)


def test_ibstatus_is_the_fallback_and_roce_lid_0_is_not_no_subnet_manager(case):
    fakes = Fakes({"ibstatus": ok(case("ibstat/ibstatus-roce-bond-25g.txt"))})
    reading = ib_ports(fakes.runner, fakes.which, 5, "n1")
    assert reading["source"] == "ibstatus" and reading["data"]["layout"] == "ibstatus"
    (port,) = reading["data"]["ports"]
    assert (port["device"], port["state"], port["physical_state"], port["rate_gbps"], port["link_layer"]) == \
        ("mlx5_bond_0", "ACTIVE", "LinkUp", 25, "Ethernet")
    assert (port["base_lid"], port["sm_lid"]) == (0, 0)
    assert reading["findings"] == []


def test_without_ibstat_the_sysfs_ports_are_read_in_the_same_shape(tmp_path):
    sysfs = str(tmp_path)
    make_port(sysfs, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand", "0x239", "0x189")
    make_port(sysfs, "mlx5_1", 1, "1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)", "InfiniBand", "0xffff", "0x0")
    assert read_ib_sysfs(sysfs) == [
        {"device": "mlx5_0", "port": 1, "state": "ACTIVE", "physical_state": "LinkUp", "rate_gbps": 200.0,
         "link_layer": "InfiniBand", "base_lid": 569, "sm_lid": 393},
        {"device": "mlx5_1", "port": 1, "state": "DOWN", "physical_state": "Disabled", "rate_gbps": 10.0,
         "link_layer": "InfiniBand", "base_lid": 65535, "sm_lid": 0}]
    reading = ib_ports(Fakes({}).runner, Fakes({}).which, 5, "n1", sysfs=sysfs)
    assert reading["source"] == os.path.join(sysfs, "class", "infiniband")
    assert reading["data"]["layout"] == "sysfs"
    assert ids(reading) == [("ib.port_down", "WARN", "mlx5_1"), ("ib.usable_hcas", "INFO", "n1")]
    assert reading["findings"][1]["total_rate_gbps"] == 200  # the down port's "10" is not a speed


def test_sysfs_port_with_missing_or_odd_files_gets_none_and_no_crash(tmp_path):
    base = tmp_path / "class" / "infiniband" / "mlx5_2" / "ports" / "1"
    base.mkdir(parents=True)
    (base / "state").write_text("garbled\n")
    (base / "lid").write_text("not-hex\n")
    (port,) = read_ib_sysfs(str(tmp_path))
    assert port == {"device": "mlx5_2", "port": 1, "state": "garbled", "physical_state": None, "rate_gbps": None,
                    "link_layer": None, "base_lid": None, "sm_lid": None}


def test_a_tool_that_runs_past_its_deadline_is_an_error_naming_it_not_a_failure():
    fakes = Fakes({"ibstat": (TIMEOUT_RC, "", "killed after 5 s"), "nvidia-smi": (TIMEOUT_RC, "", "")})
    reading = ib_ports(fakes.runner, fakes.which, 5, "n1")
    assert reading == {"source": "ibstat", "error": "ibstat ran past its deadline of 5 s", "data": None,
                       "findings": []}
    assert gpu_topology(fakes.runner, fakes.which, 5)["error"] == "nvidia-smi topo -m ran past its deadline of 5 s"


def test_nvidia_smi_without_a_driver_is_an_error_with_its_last_line_and_absent_on_cpu_nodes():
    message = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n")
    fakes = Fakes({"nvidia-smi": (9, "", message)})
    reading = gpu_topology(fakes.runner, fakes.which, 10)
    assert reading["data"] is None and reading["error"].startswith("nvidia-smi topo -m exited 9: NVIDIA-SMI has failed")
    assert gpu_topology(Fakes({}).runner, Fakes({}).which, 10) is None


def test_gpu_topology_reads_the_truncated_8gpu_matrix(case):
    fakes = Fakes({"nvidia-smi": ok(case("topo/8gpu-nvswitch-12nic-truncated.txt"))})
    reading = gpu_topology(fakes.runner, fakes.which, 10, "n1")
    assert fakes.calls[0][0] == ["/usr/bin/nvidia-smi", "topo", "-m"]
    data = reading["data"]
    assert (data["announced_gpus"], data["announced_nics"], data["truncated"]) == (8, 12, True)
    assert list(data["gpus"]) == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert data["gpus"]["GPU0"]["numa_affinity"] == 3 and data["gpus"]["GPU2"]["numa_affinity"] == 1
    assert any(f["id"].startswith("topo.") for f in reading["findings"])


def test_gpu_topology_3gpu_nic_distances(case):
    fakes = Fakes({"nvidia-smi": ok(case("topo/3gpu-nvlink-bridge-2nic.txt"))})
    assert ids(gpu_topology(fakes.runner, fakes.which, 10, "n1")) == [
        ("topo.nic_far", "WARN", "GPU0"), ("topo.nic_far", "WARN", "GPU1"), ("topo.nic_near", "INFO", "GPU2")]


def test_ibv_devinfo_roce_active_mtu_1024_says_the_netdev_mtu_is_too_small(case):
    fakes = Fakes({"ibv_devinfo": ok(case("ibv_devinfo/roce-bond-active-mtu-1024.txt"))})
    reading = ibv_devinfo(fakes.runner, fakes.which, 5, "n1")
    (hca,) = reading["data"]["hcas"]
    (port,) = hca["ports"]
    assert (hca["hca_id"], hca["fw_ver"], hca["vendor_part_id"]) == ("mlx5_bond_0", "16.28.2006", 4119)
    assert (port["state"], port["max_mtu"], port["active_mtu"], port["link_layer"]) == \
        ("PORT_ACTIVE", 4096, 1024, "Ethernet")
    (capped,) = [f for f in reading["findings"] if f["id"] == "ibv.roce_mtu_capped"]
    assert capped["netdev_mtu_needed"] == 4200 and capped["host"] == "n1"


def test_numactl_two_socket_host_reads_both_nodes_and_flags_nothing(case):
    fakes = Fakes({"numactl": ok(case("numa_lscpu/numactl-2-socket.txt"))})
    reading = numactl(fakes.runner, fakes.which, 5, "n1")
    assert fakes.calls[0][0] == ["/usr/bin/numactl", "-H"]
    data = reading["data"]
    assert [n["cpus"] for n in data["nodes"]] == [list(range(32)), list(range(32, 64))]
    assert [n["size_mib"] for n in data["nodes"]] == [773271, 774028]
    assert data["distances"] == [[10, 32], [32, 10]]
    assert data["unparsed"] == ["root@node3:~# LANG=C numactl --hardware"]
    assert reading["findings"] == []


def test_ip_links_ib0_down_is_flagged_and_its_4092_mtu_is_normal(case):
    fakes = Fakes({"ip": ok(case("ip_link/ip-a-mtu-ib0-down.txt"))})
    reading = ip_links(fakes.runner, fakes.which, 5, "n1")
    assert fakes.calls[0][0] == ["/usr/bin/ip", "addr", "show"]
    links = {link["name"]: link for link in reading["data"]["links"]}
    assert (links["lo"]["mtu"], links["eno1"]["state"], links["eno1"]["mtu"]) == (65536, "UP", 1500)
    assert [links[n]["state"] for n in ("eno2", "eno3", "eno4")] == ["DOWN"] * 3
    assert (links["ib0"]["state"], links["ib0"]["mtu"]) == ("DOWN", 4092)
    assert ids(reading) == [("ip.ipoib_down", "WARN", "ib0")]


IFCONFIG_OLD = """\
eth0      Link encap:Ethernet  HWaddr 00:25:90:AB:12:34
          inet addr:10.0.0.5  Bcast:10.0.0.255  Mask:255.255.255.0
          UP BROADCAST RUNNING MULTICAST  MTU:1500  Metric:1
          collisions:0 txqueuelen:1000
ib0       Link encap:UNSPEC  HWaddr 80-00-00-48-FE-80-00-00-00-00-00-00-00-00-00-00
          UP BROADCAST MULTICAST  MTU:2044  Metric:1
"""
LSCPU = ("CPU(s):              64\nOn-line CPU(s) list: 0-63\nSocket(s):           2\nNUMA node(s):        2\n"
         "NUMA node0 CPU(s):   0-31\nNUMA node1 CPU(s):   32-63\n")
P2P_CNS = (" \tGPU0\tGPU1\t\n GPU0\tX\tCNS\t\n GPU1\tCNS\tX\t\n\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n"
           "  CNS  = Chipset not supported\n")
ETHTOOL = ("Settings for enp65s0f0np0:\n\tSupported link modes:   25000baseCR/Full\n\t                        "
           "100000baseCR4/Full\n\tSpeed: 100000Mb/s\n\tDuplex: Full\n\tAuto-negotiation: on\n"
           "\tPort: Direct Attach Copper\n\tLink detected: yes\n")
ETHTOOL_I = "driver: mlx5_core\nfirmware-version: 22.36.1010 (MT_0000000359)\nbus-info: 0000:41:00.0\n"


def test_without_ip_ifconfig_is_read_into_the_same_links_and_ib0_down_is_flagged():
    fakes = Fakes({"ifconfig": ok(IFCONFIG_OLD)})
    reading = ip_links(fakes.runner, fakes.which, 5, "n1")
    assert fakes.calls == [(["/usr/bin/ifconfig", "-a"], 5)]
    assert (reading["source"], reading["error"], reading["data"]["layout"]) == ("ifconfig -a", None, "net-tools 1.60")
    links = {lk["name"]: lk for lk in reading["data"]["links"]}
    assert (links["eth0"]["mtu"], links["eth0"]["state"], links["eth0"]["addresses"][0]["address"]) == (
        1500, "UP", "10.0.0.5/24")
    assert (links["ib0"]["state"], links["ib0"]["mtu"]) == ("DOWN", 2044)
    assert ids(reading) == [("ip.ipoib_down", "WARN", "ib0")]


def test_ip_is_preferred_and_ifconfig_is_not_run_when_ip_is_there_or_fails():
    fakes = Fakes({"ip": (1, "", "RTNETLINK answers: Operation not permitted\n"), "ifconfig": ok(IFCONFIG_OLD)})
    reading = ip_links(fakes.runner, fakes.which, 5)
    assert reading["source"] == "ip addr show" and reading["error"].startswith("ip addr show exited 1")
    assert [argv for argv, _ in fakes.calls] == [["/usr/bin/ip", "addr", "show"]]


def test_without_numactl_lscpu_gives_the_node_cpus_in_the_numactl_shape():
    fakes = Fakes({"lscpu": ok(LSCPU)})
    reading = numactl(fakes.runner, fakes.which, 5, "n1")
    assert fakes.calls == [(["/usr/bin/lscpu"], 5)] and reading["source"] == "lscpu"
    data = reading["data"]
    assert [n["cpus"] for n in data["nodes"]] == [list(range(32)), list(range(32, 64))]
    assert [n["size_mib"] for n in data["nodes"]] == [None, None] and data["distances"] is None
    assert (data["available"], data["sockets"], data["cpu_count"]) == (2, 2, 64)
    assert reading["findings"] == []
    failing = Fakes({"numactl": (1, "", "No NUMA available on this system\n"), "lscpu": ok(LSCPU)})
    assert numactl(failing.runner, failing.which, 5)["error"] == "numactl -H exited 1: No NUMA available on this system"
    assert len(failing.calls) == 1  # a numactl that answers is not replaced by lscpu


def test_gpu_topology_adds_the_p2p_read_matrix_and_its_findings(case):
    fakes = ArgvFakes({"nvidia-smi topo -m": ok(case("topo/3gpu-nvlink-bridge-2nic.txt")),
                       "nvidia-smi topo -p2p r": ok(P2P_CNS)})
    reading = gpu_topology(fakes.runner, fakes.which, 10, "n1")
    assert [argv for argv, _ in fakes.calls] == [["/usr/bin/nvidia-smi", "topo", "-m"],
                                                 ["/usr/bin/nvidia-smi", "topo", "-p2p", "r"]]
    p2p = reading["data"]["p2p"]
    assert (p2p["source"], p2p["error"], p2p["data"]["capability"]) == ("nvidia-smi topo -p2p r", None, "r")
    assert p2p["data"]["matrix"]["GPU0"]["GPU1"] == "CNS"
    assert ids(reading) == [("topo.nic_far", "WARN", "GPU0"), ("topo.nic_far", "WARN", "GPU1"),
                            ("topo.nic_near", "INFO", "GPU2"), ("topo.p2p_unsupported", "WARN", "GPU0-GPU1")]
    assert reading["findings"][-1]["host"] == "n1" and "Chipset not supported" in reading["findings"][-1]["message"]


def test_a_driver_without_p2p_status_keeps_topo_m_and_says_why_p2p_is_missing(case):
    fakes = ArgvFakes({"nvidia-smi topo -m": ok(case("topo/3gpu-nvlink-bridge-2nic.txt")),
                       "nvidia-smi topo -p2p r": (2, "", "Invalid combination of input arguments.\n")})
    reading = gpu_topology(fakes.runner, fakes.which, 10, "n1")
    assert reading["error"] is None and list(reading["data"]["gpus"]) == ["GPU0", "GPU1", "GPU2"]
    assert reading["data"]["p2p"] == {
        "source": "nvidia-smi topo -p2p r", "data": None,
        "error": "nvidia-smi topo -p2p r exited 2: Invalid combination of input arguments."}
    assert [f["id"] for f in reading["findings"]] == ["topo.nic_far", "topo.nic_far", "topo.nic_near"]
    hung = ArgvFakes({"nvidia-smi topo -m": ok(case("topo/3gpu-nvlink-bridge-2nic.txt")),
                      "nvidia-smi topo -p2p r": (TIMEOUT_RC, "", "")})
    assert gpu_topology(hung.runner, hung.which, 10)["data"]["p2p"]["error"] == \
        "nvidia-smi topo -p2p r ran past its deadline of 10 s"


def test_link_reads_ethtool_settings_and_driver_of_the_data_plane_interface():
    fakes = ArgvFakes({"ethtool enp65s0f0np0": ok(ETHTOOL), "ethtool -i enp65s0f0np0": ok(ETHTOOL_I)})
    reading = link(fakes.runner, fakes.which, 5, "enp65s0f0np0", "n1")
    assert [argv for argv, _ in fakes.calls] == [["/usr/bin/ethtool", "enp65s0f0np0"],
                                                 ["/usr/bin/ethtool", "-i", "enp65s0f0np0"]]
    data = reading["data"]
    assert (reading["source"], data["interface"], data["speed_mbps"], data["link_detected"]) == (
        "ethtool enp65s0f0np0", "enp65s0f0np0", 100000, True)
    assert data["supported_modes"] == ["25000baseCR/Full", "100000baseCR4/Full"]
    driver = data["driver"]
    assert (driver["source"], driver["error"], driver["data"]["driver"], driver["data"]["bus_info"]) == (
        "ethtool -i enp65s0f0np0", None, "mlx5_core", "0000:41:00.0")
    assert reading["findings"] == []


def test_link_without_carrier_is_a_fail_and_bad_names_never_reach_ethtool():
    down = ETHTOOL.replace("enp65s0f0np0", "eth9").replace("Speed: 100000Mb/s", "Speed: Unknown!") \
        .replace("Link detected: yes", "Link detected: no")
    fakes = ArgvFakes({"ethtool eth9": ok(down), "ethtool -i eth9": ok(ETHTOOL_I)})
    reading = link(fakes.runner, fakes.which, 5, "eth9", "n2")
    assert ids(reading) == [("ethtool.no_link", "FAIL", "eth9")] and reading["findings"][0]["host"] == "n2"
    for bad in ("-i", "eth0 eth1", "a/b", "x" * 16, ""):
        reading = link(fakes.runner, fakes.which, 5, bad)
        assert reading["data"] is None and "is not a network interface name" in reading["error"]
    assert len(fakes.calls) == 2
    assert link(Fakes({}).runner, Fakes({}).which, 5, "eth0") is None
    failing = ArgvFakes({"ethtool eth0": (75, "", "netlink error: no device matches name (offset 24)\n")})
    reading = link(failing.runner, failing.which, 5, "eth0")
    assert reading["error"] == "ethtool eth0 exited 75: netlink error: no device matches name (offset 24)"
    assert len(failing.calls) == 1  # no ethtool -i after a failed settings read


def test_collect_adds_the_link_reading_only_when_given_the_data_plane_interface(tmp_path):
    fakes = ArgvFakes({"ethtool bond0": ok(ETHTOOL.replace("enp65s0f0np0", "bond0")), "ethtool -i bond0": ok("")})
    out = collect(fakes.runner, fakes.which, 3, "n1", sysfs=str(tmp_path), netplan_dir=str(tmp_path / "np"),
                  interface="bond0")
    assert set(out) == set(READINGS) | {"link"}
    assert out["link"]["data"]["interface"] == "bond0" and out["link"]["data"]["driver"]["data"]["driver"] is None
    assert all(out[name] is None for name in READINGS)
    assert "link" not in collect(fakes.runner, fakes.which, 3, sysfs=str(tmp_path), netplan_dir=str(tmp_path / "np"))


def test_netplan_mtu_4096_on_a_roce_port_recommends_4200(case, tmp_path):
    netplan_dir = tmp_path / "netplan"
    write(str(netplan_dir / "50-roce.yaml"), case("netplan/roce-port-mtu-4096.yaml"))
    write(str(netplan_dir / "ignored.txt"), "not yaml\n")
    reading = netplan(str(netplan_dir), ["enp1s0f0np0"], "n1")
    path = str(netplan_dir / "50-roce.yaml")
    (iface,) = reading["data"]["files"][path]["interfaces"]
    assert (iface["name"], iface["addresses"], iface["mtu"]) == ("enp1s0f0np0", ["10.0.0.1/24"], 4096)
    (finding,) = reading["findings"]
    assert (finding["id"], finding["severity"], finding["subject"], finding["file"]) == \
        ("netplan.roce_mtu", "WARN", "enp1s0f0np0", path)
    assert "4200" in finding["remediation"]
    assert netplan(str(netplan_dir), [], "n1")["findings"] == []  # no RoCE port here: nothing to judge
    assert netplan(str(tmp_path / "absent")) is None


def test_collect_judges_netplan_against_the_roce_netdevs_from_sysfs(case, tmp_path):
    sysfs = str(tmp_path / "sys")
    make_port(sysfs, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "100 Gb/sec (4X EDR)", "Ethernet", netdev="enp1s0f0np0")
    write(str(tmp_path / "netplan" / "50-roce.yaml"), case("netplan/roce-port-mtu-4096.yaml"))
    fakes = Fakes({"ip": ok("1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN\n")})
    out = collect(fakes.runner, fakes.which, 3, "n1", sysfs=sysfs, netplan_dir=str(tmp_path / "netplan"))
    assert set(out) == set(READINGS)
    assert ids(out["netplan"]) == [("netplan.roce_mtu", "WARN", "enp1s0f0np0")]
    assert out["ib_ports"]["data"]["layout"] == "sysfs" and out["ib_ports"]["findings"] == []
    assert (out["ibv_devinfo"], out["numactl"], out["gpu_topology"]) == (None, None, None)
    assert out["ip_links"]["error"] is None and all(t == 3 for _, t in fakes.calls)


def test_run_tool_names_the_command_and_its_exit_status():
    fakes = Fakes({"numactl": (1, "", "libnuma: Warning\nNo NUMA available on this system\n")})
    assert run_tool(fakes.runner, fakes.which, ["numactl", "-H"], 5) == \
        ("numactl -H", None, "numactl -H exited 1: No NUMA available on this system")
    assert run_tool(fakes.runner, fakes.which, ["ibstat"], 5) == (None, None, None)


def test_subprocess_runner_kills_a_command_at_its_deadline():
    start = time.monotonic()
    rc, _, err = subprocess_runner(["sleep", "10"], 0.5)
    assert rc == TIMEOUT_RC and "0.5 s" in err and time.monotonic() - start < 5
    assert subprocess_runner(["sh", "-c", "echo $LC_ALL; exit 3"], 5) == (3, "C\n", "")
    assert subprocess_runner(["/nonexistent/tool"], 5)[0] == 127


def test_node_facts_returns_hostinfo_on_this_machine_without_failing(tmp_path):
    """node_facts as Ansible runs it: hostinfo is there, whatever tools this machine lacks."""
    env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(ncclprep.REPO_ROOT, "ansible.cfg"),
           "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"}
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", "-m", "node_facts",
         "-a", json.dumps({"node": {"cidr": "10.255.255.0/24"}})],
        env=env, capture_output=True, text=True, timeout=180, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    hostinfo = result["ansible_facts"]["ncclprep"]["hostinfo"]
    assert set(hostinfo) == set(READINGS)
    assert hostinfo["ip_links"] is None or hostinfo["ip_links"]["error"] is None
    assert result["changed"] is False


@pytest.mark.parametrize("name", DOCUMENTED)
def test_every_reading_is_documented_in_node_facts_return(name):
    with open(os.path.join(ncclprep.REPO_ROOT, "library", "node_facts.py"), encoding="utf-8") as fh:
        assert f"C({name})" in fh.read()
