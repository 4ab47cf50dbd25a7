from ansible.module_utils.ncclprep.parsers.numa_lscpu import diagnose_numa, parse_numactl_hardware


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
