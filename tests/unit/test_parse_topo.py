import pytest
from ansible.module_utils.ncclprep.parsers.topo import (
    P2P_STATUS,
    diagnose_topo,
    diagnose_topo_p2p,
    nearest_nics,
    parse_topo,
    parse_topo_p2p,
)
from conftest import read_fixture


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


P2P_LEGEND = ("\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n"
              "  GNS  = GPU not supported\n  TNS  = Topology not supported\n  NS   = Not supported\n"
              "  DR   = Disabled by regkey\n  U    = Unknown\n")
# nvidia-smi topo -p2p r on an 8-GPU NVSwitch board: every line led by a space, cells and lines end in a tab.
P2P_8_OK = (" \t" + "".join(f"GPU{i}\t" for i in range(8)) + "\n"
            + "".join(f" GPU{i}\t" + "".join("X\t" if j == i else "OK\t" for j in range(8)) + "\n" for i in range(8))
            + P2P_LEGEND)
# Two PCIe GPUs of a model without P2P, space-aligned as a terminal copy shows it (older legend, no DR).
P2P_2_GNS = """\
        GPU0    GPU1
 GPU0   X       GNS
 GPU1   GNS     X

Legend:

  X    = Self
  OK   = Status Ok
  CNS  = Chipset not supported
  GNS  = GPU not supported
  TNS  = Topology not supported
  NS   = Not supported
  U    = Unknown
"""


def test_p2p_read_matrix_of_8_nvswitch_gpus_all_ok():
    parsed = parse_topo_p2p(P2P_8_OK, "r")
    assert parsed["capability"] == "r" and parsed["gpus"] == [f"GPU{i}" for i in range(8)]
    assert parsed["unparsed"] == [] and parsed["truncated"] is False
    assert parsed["matrix"]["GPU3"]["GPU3"] == "X" and parsed["matrix"]["GPU3"]["GPU7"] == "OK"
    assert sum(code == "OK" for row in parsed["matrix"].values() for code in row.values()) == 56
    assert parsed["legend"] == P2P_STATUS  # the newer driver's legend, DR included
    assert diagnose_topo_p2p(parsed, host="n1") == []


def test_gpus_without_p2p_are_one_warning_per_pair_citing_the_legend():
    parsed = parse_topo_p2p("$ nvidia-smi topo -p2p w\n" + P2P_2_GNS)
    assert parsed["capability"] == "w"  # from the echoed command line, which stays unparsed
    assert parsed["unparsed"] == ["$ nvidia-smi topo -p2p w"]
    assert parsed["matrix"] == {"GPU0": {"GPU0": "X", "GPU1": "GNS"}, "GPU1": {"GPU0": "GNS", "GPU1": "X"}}
    assert "DR" not in parsed["legend"] and parsed["legend"]["GNS"] == "GPU not supported"
    [f] = diagnose_topo_p2p(parsed, host="ws1")
    assert (f["id"], f["severity"], f["subject"], f["host"], f["pair"]) == (
        "topo.p2p_unsupported", "WARN", "GPU0-GPU1", "ws1", ["GPU0", "GPU1"])
    assert f["codes"] == {"GPU0->GPU1": "GNS", "GPU1->GPU0": "GNS"} and f["capability"] == "w"
    assert f["message"] == "GPU0 and GPU1: P2P write not OK: GNS (GPU not supported) both ways"
    assert "host memory" in f["remediation"]


def test_mixed_codes_one_direction_and_a_code_only_the_legend_knows():
    text = (" \tGPU0\tGPU1\tGPU2\t\n GPU0\tX\tOK\tCNS\t\n GPU1\tOK\tX\tTNS\t\n GPU2\tCNS\tZZ\tX\t\n"
            + P2P_LEGEND + "  ZZ   = Something new\n")
    parsed = parse_topo_p2p(text, "n")
    assert parsed["unparsed"] == [] and parsed["matrix"]["GPU2"]["GPU1"] == "ZZ"
    findings = diagnose_topo_p2p(parsed)
    assert [(f["subject"], f["codes"]) for f in findings] == [
        ("GPU0-GPU2", {"GPU0->GPU2": "CNS", "GPU2->GPU0": "CNS"}),
        ("GPU1-GPU2", {"GPU1->GPU2": "TNS", "GPU2->GPU1": "ZZ"})]
    assert findings[1]["message"] == ("GPU1 and GPU2: P2P NVLink not OK: GPU1->GPU2 TNS (Topology not supported), "
                                      "GPU2->GPU1 ZZ (Something new)")
    assert findings[0]["host"] is None and "chipset" in findings[0]["remediation"]


def test_truncated_p2p_matrix_keeps_the_cells_read_and_says_so():
    cut = P2P_8_OK.split(" GPU5\t")[0] + " GPU5\tOK\tOK\tO"
    parsed = parse_topo_p2p(cut, "r")
    assert parsed["truncated"] is True and parsed["legend"] == {}
    assert list(parsed["matrix"]) == ["GPU0", "GPU1", "GPU2", "GPU3", "GPU4", "GPU5"]
    assert parsed["matrix"]["GPU5"] == {"GPU0": "OK", "GPU1": "OK"}  # "O" is no code
    assert parsed["unparsed"] == [" GPU5\tOK\tOK\tO"]
    [trunc] = diagnose_topo_p2p(parsed, host="n3")  # the cells read are all OK
    assert (trunc["id"], trunc["severity"], trunc["rows_read"], trunc["announced_gpus"]) == (
        "topo.p2p_truncated", "WARN", 5, 8)
    assert "5 of 8 GPU rows" in trunc["message"]


def test_p2p_parser_reads_nothing_from_a_topo_m_matrix_or_empty_text(case):
    parsed = parse_topo_p2p(case("topo/3gpu-nvlink-bridge-2nic.txt"))
    assert (parsed["gpus"], parsed["matrix"], parsed["truncated"]) == ([], {}, False)
    assert diagnose_topo_p2p(parsed) == []
    assert parse_topo_p2p("") == {"capability": None, "gpus": [], "matrix": {}, "legend": {}, "truncated": False,
                                  "unparsed": []}
    extra = parse_topo_p2p(" \tGPU0\tGPU1\n GPU0\tX\tOK\tOK\n GPU1\tOK\tX\n GPU7\tOK\n")
    assert extra["matrix"] == {"GPU0": {"GPU0": "X", "GPU1": "OK"}, "GPU1": {"GPU0": "OK", "GPU1": "X"}}
    assert extra["unparsed"] == [" GPU0\tX\tOK\tOK", " GPU7\tOK"] and extra["truncated"] is False
    with pytest.raises(ValueError, match="capability 'x'"):
        parse_topo_p2p("", "x")


def test_h200_with_an_underlined_header_reads_its_one_gpu():
    """nvidia-smi 580 on an H200, piped: the header row wrapped in ESC[4m .. ESC[0m. Read as it
    was, the header's first cell was '\\x1b[4mGPU0' and nothing was parsed (found on a GPU machine)."""
    parsed = parse_topo(read_fixture("topo/h200-1gpu-underlined-header.txt"))
    assert parsed["columns"] == ["GPU0"] and parsed["affinity_columns"] == list(
        ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID"))
    assert (parsed["announced_gpus"], parsed["announced_nics"], parsed["truncated"]) == (1, 0, False)
    assert parsed["gpus"] == {"GPU0": {"links": {"GPU0": "X"}, "cpu_affinity": "0-15", "cpus": list(range(16)),
                                       "numa_affinity": 0, "gpu_numa_id": None}}
    assert parsed["nics"] == {} and len(parsed["legend"]) == 7 and parsed["unparsed"] == []
    assert diagnose_topo(parsed, "gpu1") == []


def test_h200_p2p_read_matrix_with_an_underlined_header():
    parsed = parse_topo_p2p(read_fixture("topo/h200-1gpu-p2p-r.txt"), "r")
    assert parsed["gpus"] == ["GPU0"] and parsed["matrix"] == {"GPU0": {"GPU0": "X"}}
    assert parsed["truncated"] is False and parsed["unparsed"] == [] and len(parsed["legend"]) == 7
