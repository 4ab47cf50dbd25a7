"""numa_pinning core: topology from fake sysfs trees, the binding map, the IRQ plan, the module."""

import json
import os

import pytest
from ansible.module_utils.ncclprep import concerns
from ansible.module_utils.ncclprep.concerns.numa_pinning import (
    binding_map,
    irq_affinity_plan,
    irqs_off,
    numa_intent,
    read_numa,
    read_topology,
    render_binding,
)
from ansible.module_utils.ncclprep.parsers.topo import parse_topo

# The topo case's rows: GPU0-1 on NUMA 3, GPU2-3 on NUMA 1 (not a function of the GPU index).
TOPO_NODES = {0: "0-15,128-143", 1: "16-31,144-159", 2: "32-47,160-175", 3: "48-63,176-191"}
TOPO_GPUS = [("0000:17:00.0", 3), ("0000:3d:00.0", 3), ("0000:49:00.0", 1), ("0000:5d:00.0", 1)]


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w" if isinstance(text, str) else "wb") as fh:
        fh.write(text)


def pci_device(sysfs, addr, vendor="0x15b3", pclass="0x020000", numa_node=None, local_cpulist=None, driver=None,
               irqs=()):
    """A fake /sys/devices/pci0000:00/<addr> folder, linked from /sys/bus/pci/devices/<addr>."""
    dev = os.path.join(sysfs, "devices", "pci0000:00", addr)
    write(os.path.join(dev, "vendor"), vendor + "\n")
    write(os.path.join(dev, "class"), pclass + "\n")
    if numa_node is not None:
        write(os.path.join(dev, "numa_node"), f"{numa_node}\n")
    if local_cpulist is not None:
        write(os.path.join(dev, "local_cpulist"), local_cpulist + "\n")
    if driver:
        drv = os.path.join(sysfs, "bus", "pci", "drivers", driver)
        os.makedirs(drv, exist_ok=True)
        os.symlink(drv, os.path.join(dev, "driver"))
    if irqs:
        os.makedirs(os.path.join(dev, "msi_irqs"))
        for irq in irqs:
            write(os.path.join(dev, "msi_irqs", str(irq)), "msix\n")
    os.makedirs(os.path.join(sysfs, "bus", "pci", "devices"), exist_ok=True)
    os.symlink(dev, os.path.join(sysfs, "bus", "pci", "devices", addr))
    return dev


def net(sysfs, name, dev=None):
    """A /sys/class/net/<name> entry; with ``dev`` its ``device`` link points at that PCI folder."""
    path = os.path.join(sysfs, "class", "net", name)
    write(os.path.join(path, "mtu"), "1500\n")
    if dev:
        os.symlink(dev, os.path.join(path, "device"))


def base(sysfs, nodes, online):
    for node, cpus in nodes.items():
        write(os.path.join(sysfs, "devices", "system", "node", f"node{node}", "cpulist"), cpus + "\n")
    write(os.path.join(sysfs, "devices", "system", "cpu", "online"), online + "\n")


@pytest.fixture
def two_socket(tmp_path):
    """numactl-2-socket case: node0 CPUs 0-31, node1 32-63; one mlx5 NIC on node 1, lo; no GPU."""
    sysfs = str(tmp_path / "sys")
    base(sysfs, {0: "0-31", 1: "32-63"}, "0-63")
    dev = pci_device(sysfs, "0000:86:00.0", numa_node=1, local_cpulist="32-63", driver="mlx5_core",
                     irqs=[131, 129, 130, 128])
    net(sysfs, "ens2f0", dev)
    net(sysfs, "lo")
    return sysfs


@pytest.fixture
def eight_gpu(tmp_path):
    """The first four GPUs of the 8gpu-nvswitch topo case, plus an NVSwitch and a NIC that are not GPUs."""
    sysfs = str(tmp_path / "sys")
    base(sysfs, TOPO_NODES, "0-63,128-191")
    for addr, node in reversed(TOPO_GPUS):
        pci_device(sysfs, addr, vendor="0x10de", pclass="0x030200", numa_node=node, local_cpulist=TOPO_NODES[node],
                   driver="nvidia")
    pci_device(sysfs, "0000:06:00.0", vendor="0x10de", pclass="0x068000", numa_node=0)  # NVSwitch bridge
    nic = pci_device(sysfs, "0000:0c:00.0", numa_node=3, local_cpulist=TOPO_NODES[3], driver="mlx5_core",
                     irqs=[200, 201])
    net(sysfs, "ibp12s0", nic)
    return sysfs


def test_two_socket_topology_reads_every_source(two_socket):
    topo = read_topology(two_socket)
    assert topo["numa_nodes"] == {"0": "0-31", "1": "32-63"}
    assert topo["online_cpus"] == "0-63"
    assert topo["nics"] == {
        "ens2f0": {"numa_node": 1, "local_cpulist": "32-63", "pci": "0000:86:00.0", "driver": "mlx5_core",
                   "irqs": [128, 129, 130, 131]},
        "lo": {"numa_node": None, "local_cpulist": None, "pci": None, "driver": None, "irqs": []},
    }
    assert topo["gpus"] == [] and topo["unparsed"] == []
    json.dumps(topo)  # survives the trip to the controller


def test_without_gpus_ranks_spread_over_two_nodes_in_blocks(two_socket):
    topo = read_topology(two_socket)
    assert [e["numa_node"] for e in binding_map(topo, 4)] == [0, 0, 1, 1]
    assert [e["cpus"] for e in binding_map(topo, 4)] == ["0-31", "0-31", "32-63", "32-63"]
    assert [e["numa_node"] for e in binding_map(topo, 3)] == [0, 0, 1]
    assert binding_map(topo, 1) == [{"local_rank": 0, "numa_node": 0, "cpus": "0-31", "gpu": None}]
    assert {e["gpu"] for e in binding_map(topo, 4)} == {None}


def test_gpu_map_follows_each_gpus_sysfs_node_not_its_index(eight_gpu):
    topo = read_topology(eight_gpu)
    assert [g["pci"] for g in topo["gpus"]] == [a for a, _ in TOPO_GPUS]  # PCI bus order, NVSwitch left out
    binding = binding_map(topo, 4)
    assert [(e["local_rank"], e["numa_node"], e["cpus"], e["gpu"]) for e in binding] == [
        (0, 3, "48-63,176-191", "0000:17:00.0"), (1, 3, "48-63,176-191", "0000:3d:00.0"),
        (2, 1, "16-31,144-159", "0000:49:00.0"), (3, 1, "16-31,144-159", "0000:5d:00.0")]
    assert [e["gpu"] for e in binding_map(topo, 2)] == ["0000:17:00.0", "0000:3d:00.0"]


def test_gpu_map_agrees_with_nvidia_smi_topo_case(eight_gpu, case):
    parsed = parse_topo(case("topo/8gpu-nvswitch-12nic-truncated.txt"))
    binding = binding_map(read_topology(eight_gpu), 4)
    for entry in binding:
        row = parsed["gpus"][f"GPU{entry['local_rank']}"]
        assert (entry["numa_node"], entry["cpus"]) == (row["numa_affinity"], row["cpu_affinity"])


def test_more_ranks_than_gpus_names_both_numbers(eight_gpu):
    with pytest.raises(ValueError, match=r"5 local ranks but only 4 GPU"):
        binding_map(read_topology(eight_gpu), 5)


@pytest.mark.parametrize("nproc", [0, -1])
def test_nproc_below_one_is_an_error(two_socket, nproc):
    with pytest.raises(ValueError, match=f"got {nproc}"):
        binding_map(read_topology(two_socket), nproc)


def test_container_gets_one_trivial_map(tmp_path):
    sysfs = str(tmp_path / "sys")
    write(os.path.join(sysfs, "devices", "system", "cpu", "online"), "0-7\n")
    net(sysfs, "eth0")
    net(sysfs, "lo")
    topo = read_topology(sysfs)
    assert topo["numa_nodes"] == {} and topo["gpus"] == [] and topo["unparsed"] == []
    assert topo["nics"]["eth0"] == {"numa_node": None, "local_cpulist": None, "pci": None, "driver": None,
                                    "irqs": []}
    assert binding_map(topo, 2) == [{"local_rank": 0, "numa_node": None, "cpus": "0-7", "gpu": None},
                                    {"local_rank": 1, "numa_node": None, "cpus": "0-7", "gpu": None}]
    plan = irq_affinity_plan(topo, "eth0", "0-7")
    assert irqs_off(plan, {}) == [] and plan["irqs"] == []
    assert plan["reason"] == "no IRQs: eth0 is a virtual interface (no device in sysfs)"
    missing = irq_affinity_plan(topo, "ens1f0", "0-7")
    assert irqs_off(missing, {}) == [] and missing["reason"] == "no interface 'ens1f0' on this host (known: eth0, lo)"


def test_one_node_with_cpus_and_a_memory_only_node_is_a_one_node_map(tmp_path):
    sysfs = str(tmp_path / "sys")
    base(sysfs, {0: "0-7", 1: ""}, "0-7")  # node1: memory only (HBM, CXL)
    topo = read_topology(sysfs)
    assert topo["numa_nodes"] == {"0": "0-7", "1": ""}
    assert [(e["numa_node"], e["cpus"]) for e in binding_map(topo, 2)] == [(0, "0-7"), (0, "0-7")]


def test_numa_node_minus_one_is_unknown_and_falls_back(tmp_path):
    sysfs = str(tmp_path / "sys")
    base(sysfs, {0: "0-7"}, "0-15")
    pci_device(sysfs, "0000:01:00.0", vendor="0x10de", pclass="0x030200", numa_node=-1, local_cpulist="4-7")
    pci_device(sysfs, "0000:02:00.0", vendor="0x10DE", pclass="0x030000", numa_node=-1)
    nic = pci_device(sysfs, "0000:03:00.0", numa_node=-1, local_cpulist="0-15", driver="virtio-pci")
    net(sysfs, "enp3s0", nic)
    topo = read_topology(sysfs)
    assert topo["nics"]["enp3s0"]["numa_node"] is None and topo["nics"]["enp3s0"]["irqs"] == []
    assert topo["gpus"] == [{"pci": "0000:01:00.0", "numa_node": None, "local_cpulist": "4-7"},
                            {"pci": "0000:02:00.0", "numa_node": None, "local_cpulist": None}]
    assert [(e["numa_node"], e["cpus"]) for e in binding_map(topo, 2)] == [(None, "4-7"), (None, "0-15")]
    assert topo["unparsed"] == []
    plan = irq_affinity_plan(topo, "enp3s0", "0-15")
    assert plan["reason"] == "no IRQs: enp3s0 (0000:03:00.0) has no MSI IRQs in sysfs" and irqs_off(plan, {}) == []


def test_irq_plan_compares_cpu_sets_not_strings(two_socket):
    topo = read_topology(two_socket)
    current = {128: "32-63", 129: ",".join(str(c) for c in range(32, 64)), 130: "0-31", "131": None}
    plan = irq_affinity_plan(topo, "ens2f0", "32-47,48-63")
    assert plan == {"interface": "ens2f0", "cpus": "32-63", "irqs": [128, 129, 130, 131], "reason": None}
    assert irqs_off(plan, current) == [130, 131]
    small = irq_affinity_plan(topo, "ens2f0", "0,1,2,3")
    assert irqs_off(small, {128: "0-3", 129: "0-3", 130: "0-3", 131: "garbage"}) == [131] and small["cpus"] == "0-3"


@pytest.mark.parametrize("cpus,match", [("0-3;5", "not a CPU list item"), ("", "empty CPU list"),
                                        ("60-70", "CPU\\(s\\) 64-70 in '60-70' are not online")])
def test_irq_plan_rejects_bad_cpus_saying_what_is_valid(two_socket, cpus, match):
    with pytest.raises(ValueError, match=match) as exc:
        irq_affinity_plan(read_topology(two_socket), "ens2f0", cpus)
    assert "valid: a CPU list such as 0-3,8 of online CPUs (0-63)" in str(exc.value)


def test_odd_files_land_in_unparsed_without_raising(tmp_path):
    sysfs = str(tmp_path / "sys")
    base(sysfs, {0: "0-31"}, "0-63")
    write(os.path.join(sysfs, "devices", "system", "node", "node1", "cpulist"), "zz\n")
    os.makedirs(os.path.join(sysfs, "devices", "system", "node", "node2", "cpulist"))  # unreadable: a directory
    os.makedirs(os.path.join(sysfs, "devices", "system", "node", "node3"))  # cpulist missing
    dev = pci_device(sysfs, "0000:86:00.0", numa_node="abc", local_cpulist="5-2", irqs=[7])
    write(os.path.join(dev, "msi_irqs", "bogus"), "")
    net(sysfs, "ens2f0", dev)
    gpu = pci_device(sysfs, "0000:17:00.0", vendor="0x10de", pclass="0x030200", numa_node=0)
    write(os.path.join(gpu, "local_cpulist"), b"\xff\xfe\n")
    topo = read_topology(sysfs)
    assert topo["numa_nodes"] == {"0": "0-31", "1": None, "2": None, "3": None}
    assert topo["nics"]["ens2f0"]["numa_node"] is None and topo["nics"]["ens2f0"]["local_cpulist"] is None
    assert topo["nics"]["ens2f0"]["irqs"] == [7]
    assert topo["gpus"] == [{"pci": "0000:17:00.0", "numa_node": 0, "local_cpulist": None}]
    node = os.path.join(sysfs, "devices", "system", "node")
    dev = os.path.join(sysfs, "class", "net", "ens2f0", "device")  # paths as read, through the links
    gpu = os.path.join(sysfs, "bus", "pci", "devices", "0000:17:00.0")
    reasons = {item["path"]: item["reason"] for item in topo["unparsed"]}
    assert set(reasons) == {f"{node}/node1/cpulist", f"{node}/node2/cpulist", f"{node}/node3/cpulist",
                            f"{dev}/numa_node", f"{dev}/local_cpulist", f"{dev}/msi_irqs/bogus",
                            f"{gpu}/local_cpulist"}
    assert "not a CPU list item" in reasons[f"{node}/node1/cpulist"]
    assert reasons[f"{node}/node2/cpulist"].startswith("unreadable:")
    assert reasons[f"{node}/node3/cpulist"] == "missing"
    assert reasons[f"{dev}/numa_node"] == "not an integer: 'abc'"
    assert "descending CPU range" in reasons[f"{dev}/local_cpulist"]
    # GPU on node 0 -> node 0's CPUs even though its own local_cpulist was garbage
    assert binding_map(topo, 1) == [{"local_rank": 0, "numa_node": 0, "cpus": "0-31", "gpu": "0000:17:00.0"}]


def test_empty_sysfs_does_not_raise(tmp_path):
    topo = read_topology(str(tmp_path))
    assert topo == {"numa_nodes": {}, "online_cpus": None, "nics": {}, "gpus": [],
                    "unparsed": [{"path": str(tmp_path / "devices/system/cpu/online"), "reason": "missing"}]}
    assert binding_map(topo, 1) == [{"local_rank": 0, "numa_node": None, "cpus": None, "gpu": None}]


def test_render_binding_is_one_line_per_rank_after_a_header(eight_gpu, tmp_path):
    text = render_binding(binding_map(read_topology(eight_gpu), 2))
    assert text == ("# local_rank numa_node cpus gpu\n"
                    "0 3 48-63,176-191 0000:17:00.0\n"
                    "1 3 48-63,176-191 0000:3d:00.0\n")
    container = [{"local_rank": 0, "numa_node": None, "cpus": "0-7", "gpu": None}]
    assert render_binding(container) == "# local_rank numa_node cpus gpu\n0 - 0-7 -\n"


def test_facts_then_intent_give_topology_binding_and_irq_plan(eight_gpu, tmp_path):
    proc = tmp_path / "proc"
    write(str(proc / "irq" / "200" / "smp_affinity_list"), "48-63,176-191\n")
    write(str(proc / "irq" / "201" / "smp_affinity_list"), "0-255\n")
    mapfile = tmp_path / "numa-binding"
    mapfile.write_text("# managed\n# local_rank numa_node cpus gpu\n0 3 48-63 0000:17:00.0\n")
    facts = read_numa("ibp12s0", str(mapfile), sysfs=eight_gpu, procfs=str(proc))
    assert facts["installed_text"] == "0 3 48-63 0000:17:00.0"
    assert facts["irq_affinity"] == {200: "48-63,176-191", 201: "0-255"}
    intent = numa_intent(facts["topology"], None, "ibp12s0", None)
    assert intent["nproc"] == 4  # null -> the number of GPUs
    assert intent["numa_nodes"] == {str(k): v for k, v in TOPO_NODES.items()}
    assert [(e["numa_node"], e["gpu"]) for e in intent["binding"]] == [(n, a) for a, n in TOPO_GPUS]
    assert intent["binding_text"].splitlines()[3] == "2 1 16-31,144-159 0000:49:00.0"
    # intent holds no live state: the IRQ off its CPUs is found by comparing with the facts
    assert intent["irq"] == {"interface": "ibp12s0", "cpus": "48-63,176-191", "irqs": [200, 201], "reason": None}
    assert irqs_off(intent["irq"], facts["irq_affinity"]) == [201]
    assert irqs_off(intent["irq"], {"200": "48-63,176-191", "201": "176-191,48-63"}) == []
    assert irqs_off(intent["irq"], {}) == [200, 201]


def test_container_intent_and_errors_name_host_variable_and_value(tmp_path, eight_gpu):
    sysfs = str(tmp_path / "container")
    write(os.path.join(sysfs, "devices", "system", "cpu", "online"), "0-3\n")
    net(sysfs, "eth0")
    facts = read_numa("eth0", str(tmp_path / "absent"), sysfs=sysfs, procfs=str(tmp_path))
    assert facts["installed_text"] is None and facts["irq_affinity"] == {}
    intent = numa_intent(facts["topology"], None, "eth0", None)
    assert intent["nproc"] == 1
    assert intent["binding"] == [{"local_rank": 0, "numa_node": None, "cpus": "0-3", "gpu": None}]
    assert intent["irq"]["reason"].startswith("no IRQs: eth0 is a virtual interface")
    assert irqs_off(intent["irq"], {}) == []
    gpu_facts = read_numa("ibp12s0", str(tmp_path / "absent"), sysfs=eight_gpu, procfs=str(tmp_path))
    variables = {"numa_pinning_nproc_per_node": 6, "data_plane": {"interface": "ibp12s0"}}
    with pytest.raises(ValueError, match=r"^6 local ranks but only 4 GPU\(s\).*numa_pinning_nproc_per_node=6"):
        concerns.intent("numa_pinning", variables, gpu_facts)
    variables = {"nccl_env_nproc_per_node": "4", "numa_pinning_irq_cpus": "64-70",
                 "data_plane": {"interface": "ibp12s0"}}
    with pytest.raises(ValueError, match=r"^CPU\(s\) 64-70 .*numa_pinning_irq_cpus='64-70'"):
        concerns.intent("numa_pinning", variables, gpu_facts)
    assert concerns.intent("numa_pinning", dict(variables, numa_pinning_irq_cpus=None), gpu_facts)["nproc"] == 4
