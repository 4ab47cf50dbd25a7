from ansible.module_utils.ncclprep.parsers.numa_lscpu import diagnose_numa, parse_lscpu, parse_numactl_hardware


def test_numactl_2_socket_reading(case):
    parsed = parse_numactl_hardware(case("numa_lscpu/numactl-2-socket.txt"))
    assert parsed["available"] == 2
    assert parsed["unparsed"] == ["root@node3:~# LANG=C numactl --hardware"]  # the leading prompt line
    node0, node1 = parsed["nodes"]
    assert (node0["node"], node0["cpus"], node0["size_mib"], node0["free_mib"]) == (0, list(range(32)), 773271, 678823)
    assert (node1["node"], node1["cpus"], node1["size_mib"], node1["free_mib"]) == (1, list(range(32, 64)), 774028,
                                                                                   684984)
    assert parsed["distances"] == [[10, 32], [32, 10]]


def test_balanced_two_socket_host_has_nothing_to_flag(case):
    assert diagnose_numa(parse_numactl_hardware(case("numa_lscpu/numactl-2-socket.txt"))) == []


def test_unbalanced_host_memory_only_node_and_garbled_lines():
    text = ("available: 3 nodes (0-2)\nnode 0 cpus: 0 1 2 3\nnode 0 size: 1000 MB\nnode 1 cpus: 4 5\n"
            "node 1 size: 500 MB\nnode 2 cpus:\nnode 2 size: 2000 MB\nnode 2 free: lots\n"
            "node distances:\nnode   0   1   2\n  0:  10  21  14\n  1:  21  10\n")
    parsed = parse_numactl_hardware(text)
    assert parsed["unparsed"] == ["node 2 free: lots"]
    assert parsed["nodes"][2] == {"node": 2, "cpus": [], "size_mib": 2000, "free_mib": None}
    assert parsed["distances"] == [[10, 21, 14], [21, 10]]
    findings = diagnose_numa(parsed, host="n9")
    assert [(f["id"], f["severity"], f["subject"]) for f in findings] == [
        ("numa.cpu_imbalance", "WARN", "n9"), ("numa.memory_imbalance", "WARN", "n9"),
        ("numa.memory_only_node", "INFO", "node2"), ("numa.distances_asymmetric", "WARN", "n9")]
    assert parse_numactl_hardware("No NUMA available on this system\n")["unparsed"] == [
        "No NUMA available on this system"]


# util-linux 2.23 (CentOS 7): one flat list, values aligned with spaces.
LSCPU_OLD = """\
Architecture:          x86_64
CPU op-mode(s):        32-bit, 64-bit
Byte Order:            Little Endian
CPU(s):                128
On-line CPU(s) list:   0-127
Thread(s) per core:    2
Core(s) per socket:    32
Socket(s):             2
NUMA node(s):          2
Vendor ID:             GenuineIntel
CPU family:            6
Model:                 106
Model name:            Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz
Stepping:              6
CPU MHz:               2600.000
BogoMIPS:              5200.00
Virtualization:        VT-x
L1d cache:             48K
L1i cache:             32K
L2 cache:              1280K
L3 cache:              49152K
NUMA node0 CPU(s):     0-31,64-95
NUMA node1 CPU(s):     32-63,96-127
Flags:                 fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov
"""

# util-linux 2.37 (Ubuntu 22.04): sections with an empty value, keys indented under them; SMT off.
LSCPU_NEW = """\
Architecture:            x86_64
  CPU op-mode(s):        32-bit, 64-bit
  Address sizes:         52 bits physical, 57 bits virtual
  Byte Order:            Little Endian
CPU(s):                  192
  On-line CPU(s) list:   0-95
  Off-line CPU(s) list:  96-191
Vendor ID:               AuthenticAMD
  Model name:            AMD EPYC 9454 48-Core Processor
    CPU family:          25
    Model:               17
    Thread(s) per core:  1
    Core(s) per socket:  48
    Socket(s):           2
    Stepping:            1
    BogoMIPS:            5491.67
    Flags:               fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov
Virtualization features:
  Virtualization:        AMD-V
Caches (sum of all):
  L1d:                   3 MiB (96 instances)
  L1i:                   3 MiB (96 instances)
  L2:                    96 MiB (96 instances)
  L3:                    512 MiB (16 instances)
NUMA:
  NUMA node(s):          4
  NUMA node0 CPU(s):     0-23
  NUMA node1 CPU(s):     24-47
  NUMA node2 CPU(s):     48-71
  NUMA node3 CPU(s):     72-95
Vulnerabilities:
  Itlb multihit:         Not affected
  Spectre v1:            Mitigation; usercopy/swapgs barriers and __user pointer sanitization
"""


def test_old_flat_lscpu_reads_nodes_counts_and_online_list_in_the_numactl_shape():
    parsed = parse_lscpu(LSCPU_OLD)
    assert parsed["unparsed"] == []
    assert (parsed["available"], parsed["cpu_count"], parsed["sockets"], parsed["cores_per_socket"],
            parsed["threads_per_core"]) == (2, 128, 2, 32, 2)
    assert parsed["online"] == list(range(128)) and parsed["offline"] is None
    assert parsed["nodes"] == [
        {"node": 0, "cpus": list(range(32)) + list(range(64, 96)), "size_mib": None, "free_mib": None},
        {"node": 1, "cpus": list(range(32, 64)) + list(range(96, 128)), "size_mib": None, "free_mib": None}]
    assert parsed["distances"] is None
    assert parsed["fields"]["Model name"] == "Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz"
    assert set(parse_numactl_hardware("")) <= set(parsed)  # every key diagnose_numa reads is there
    assert diagnose_numa(parsed, host="n1") == []


def test_new_sectioned_lscpu_reads_indented_keys_and_the_offline_list():
    parsed = parse_lscpu(LSCPU_NEW)
    assert parsed["unparsed"] == []
    assert (parsed["available"], parsed["cpu_count"], parsed["sockets"], parsed["threads_per_core"]) == (4, 192, 2, 1)
    assert parsed["online"] == list(range(96)) and parsed["offline"] == list(range(96, 192))
    assert [(n["node"], n["cpus"][0], n["cpus"][-1], len(n["cpus"])) for n in parsed["nodes"]] == [
        (0, 0, 23, 24), (1, 24, 47, 24), (2, 48, 71, 24), (3, 72, 95, 24)]
    assert "NUMA" not in parsed["fields"] and parsed["fields"]["L3"] == "512 MiB (16 instances)"
    assert parsed["fields"]["Spectre v1"].startswith("Mitigation; usercopy")
    assert diagnose_numa(parsed) == []


def test_the_blanks_lscpu_pads_section_headers_with_change_nothing():
    padded = LSCPU_NEW.replace(":\n", ":         \n")  # "NUMA:                    "
    assert padded != LSCPU_NEW and parse_lscpu(padded) == parse_lscpu(LSCPU_NEW)


def test_lscpu_unbalanced_nodes_and_a_cpu_less_node_are_judged_by_diagnose_numa():
    text = ("NUMA node(s):        3\nNUMA node0 CPU(s):   0-15\nNUMA node1 CPU(s):   16-27\n"
            "NUMA node2 CPU(s):   \n")
    parsed = parse_lscpu(text)
    assert [n["cpus"] for n in parsed["nodes"]] == [list(range(16)), list(range(16, 28)), []]
    assert [(f["id"], f["subject"]) for f in diagnose_numa(parsed, host="n7")] == [
        ("numa.cpu_imbalance", "n7"), ("numa.memory_only_node", "node2")]


def test_tab_aligned_truncated_lscpu_keeps_the_lines_it_could_read():
    text = ("[admin@n5 ~]$ lscpu\nCPU(s):\t\t128\nSocket(s):\t\t2\nNUMA node(s):\t\t2\n"
            "NUMA node0 CPU(s):\t0-31,64-95\nNUMA node1 CPU(s):\t32-63,96-1\nNUMA node1 C")
    parsed = parse_lscpu(text)
    assert parsed["unparsed"] == ["[admin@n5 ~]$ lscpu", "NUMA node1 CPU(s):\t32-63,96-1", "NUMA node1 C"]
    assert (parsed["cpu_count"], parsed["sockets"], parsed["available"]) == (128, 2, 2)
    assert [n["node"] for n in parsed["nodes"]] == [0]  # the cut-off node1 list makes no node
    assert "NUMA node1 CPU(s)" not in parsed["fields"]
    assert parse_lscpu("Socket(s):  two\n")["sockets"] is None
    assert parse_lscpu("")["nodes"] == []
