from ansible.module_utils.ncclprep.parsers.topo import diagnose_topo, nearest_nics, parse_topo


def test_3gpu_nvlink_bridge_2nic_reading(case):
    parsed = parse_topo(case("topo/3gpu-nvlink-bridge-2nic.txt"))
    assert parsed["unparsed"] == ["[nccl-tests]$ nvidia-smi topo -m"]
    assert (parsed["announced_gpus"], parsed["announced_nics"], parsed["truncated"]) == (3, 2, False)
    assert list(parsed["gpus"]) == ["GPU0", "GPU1", "GPU2"] and list(parsed["nics"]) == ["NIC0", "NIC1"]
    assert parsed["gpus"]["GPU0"]["links"]["GPU1"] == "NV4"
    assert parsed["gpus"]["GPU2"]["links"]["NIC0"] == parsed["gpus"]["GPU2"]["links"]["NIC1"] == "PHB"
    assert parsed["nics"]["NIC0"]["links"]["NIC1"] == "PIX"
    for gpu in parsed["gpus"].values():
        assert (gpu["cpu_affinity"], gpu["cpus"], gpu["numa_affinity"], gpu["gpu_numa_id"]) == \
            ("64-71", list(range(64, 72)), 1, None)
    assert set(parsed["nics"]["NIC0"]) == {"links"}  # NIC rows have no affinity columns
    assert parsed["nic_names"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert parsed["legend"]["NV#"] == "Connection traversing a bonded set of # NVLinks" and len(parsed["legend"]) == 7


def test_3gpu_diagnosis_gpu0_gpu1_only_node_gpu2_nearest(case):
    parsed = parse_topo(case("topo/3gpu-nvlink-bridge-2nic.txt"))
    assert nearest_nics(parsed, "GPU0") == ("NODE", ["NIC0", "NIC1"])
    assert nearest_nics(parsed, "GPU2") == ("PHB", ["NIC0", "NIC1"])
    findings = diagnose_topo(parsed, host="n1")
    assert [(f["id"], f["severity"], f["subject"], f["distance"]) for f in findings] == [
        ("topo.nic_far", "WARN", "GPU0", "NODE"), ("topo.nic_far", "WARN", "GPU1", "NODE"),
        ("topo.nic_near", "INFO", "GPU2", "PHB")]
    assert findings[0]["nearest"] == ["NIC0 (mlx5_0)", "NIC1 (mlx5_1)"]


def test_8gpu_truncated_reading(case):
    parsed = parse_topo(case("topo/8gpu-nvswitch-12nic-truncated.txt"))
    assert parsed["unparsed"] == ["$ nvidia-smi topo -m"]
    assert (parsed["announced_gpus"], parsed["announced_nics"], parsed["truncated"]) == (8, 12, True)
    assert list(parsed["gpus"]) == ["GPU0", "GPU1", "GPU2", "GPU3"] and parsed["nics"] == {}
    gpus = parsed["gpus"]
    assert all(code == "NV12" for g in gpus.values() for col, code in g["links"].items()
               if col.startswith("GPU") and code != "X")
    nic_cols = [f"NIC{i}" for i in range(12)]
    pxb = {name: [c for c in nic_cols if g["links"][c] == "PXB"] for name, g in gpus.items()}
    assert pxb == {"GPU0": ["NIC0", "NIC1"], "GPU1": ["NIC0", "NIC1"], "GPU2": ["NIC2", "NIC3"],
                   "GPU3": ["NIC2", "NIC3"]}
    assert all(g["links"][c] in ("PXB", "SYS") for g in gpus.values() for c in nic_cols)
    # NUMA node is read per row, not a function of the GPU index
    assert [(g["cpu_affinity"], g["numa_affinity"]) for g in gpus.values()] == [
        ("48-63,176-191", 3), ("48-63,176-191", 3), ("16-31,144-159", 1), ("16-31,144-159", 1)]
    assert gpus["GPU0"]["cpus"] == list(range(48, 64)) + list(range(176, 192))


def test_8gpu_truncated_diagnosis(case):
    findings = diagnose_topo(parse_topo(case("topo/8gpu-nvswitch-12nic-truncated.txt")))
    assert findings[0]["id"] == "topo.truncated" and findings[0]["severity"] == "WARN"
    assert "4 of 8 GPU rows parsed" in findings[0]["message"]
    assert (findings[0]["gpu_rows"], findings[0]["announced_gpus"]) == (4, 8)
    assert [(f["subject"], f["severity"], f["distance"]) for f in findings[1:]] == [
        ("GPU0", "INFO", "PXB"), ("GPU1", "INFO", "PXB"), ("GPU2", "INFO", "PXB"), ("GPU3", "INFO", "PXB")]


def test_garbled_rows_and_old_nic_names():
    text = ("\tGPU0\tmlx5_0\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tSYS\t0-7\tN/A\n"
            "mlx5_0\tSYS\n"
            "GPU1\tNV\x00garbage\n"
            "Legend:\n  X    = Self\n  what is this\n")
    parsed = parse_topo(text)
    assert parsed["columns"] == ["GPU0", "mlx5_0"]
    assert parsed["gpus"]["GPU0"]["numa_affinity"] is None and parsed["gpus"]["GPU0"]["cpus"] == list(range(8))
    assert parsed["nics"] == {}  # the mlx5_0 row has too few cells
    assert parsed["unparsed"] == ["mlx5_0\tSYS", "GPU1\tNV\x00garbage", "  what is this"]
    assert parsed["truncated"] is True
    [trunc, far] = diagnose_topo(parsed)
    assert "1 of 1 GPU rows parsed, 0 of 1 NIC rows" in trunc["message"]
    assert (far["subject"], far["distance"], far["nearest"]) == ("GPU0", "SYS", ["mlx5_0"])
    assert parse_topo("")["columns"] == []
