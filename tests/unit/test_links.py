"""Port counters and GIDs read from recorded sysfs trees (module_utils/ncclprep/portstate.py),
the links.rdma / links.counters checks, tools.findings and dataset.path (with real folders)."""

from __future__ import annotations

import os
import threading

from ansible.module_utils.ncclprep.checks import evaluate
from ansible.module_utils.ncclprep.checks.dataset import check_dataset
from ansible.module_utils.ncclprep.checks.links import check_counters, check_rdma
from ansible.module_utils.ncclprep.checks.tools import check_tools
from ansible.module_utils.ncclprep.model import Context
from ansible.module_utils.ncclprep.node import dataset as dataset_mod
from ansible.module_utils.ncclprep.portstate import counter_growth, read_counters, read_gids

CTX = Context(all_hosts=("n1", "n2", "n3"))
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"


def write(root, rel, text):
    path = os.path.join(str(root), rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text + "\n")


def roce_tree(root, link_downed=0, symbol=0, carrier=2, v2=True):
    """A ConnectX RoCE port as sysfs shows it: GIDs 0/1 (link-local v1/v2), 2/3 (IPv4 v1/v2),
    4-5 unused; the netdev eth2 with its carrier and error counters."""
    port = "class/infiniband/mlx5_0/ports/1"
    for name, value in {"link_downed": link_downed, "symbol_error": symbol, "port_rcv_errors": 0,
                        "link_error_recovery": 0, "port_xmit_discards": 7}.items():
        write(root, f"{port}/counters/{name}", str(value))
    gids = {0: ("IB/RoCE v1", "fe80:0000:0000:0000:0e42:a1ff:fe5b:1c2a"),
            1: ("RoCE v2" if v2 else "IB/RoCE v1", "fe80:0000:0000:0000:0e42:a1ff:fe5b:1c2a"),
            2: ("IB/RoCE v1", "0000:0000:0000:0000:0000:ffff:0a00:0005"),
            3: ("RoCE v2" if v2 else "IB/RoCE v1", "0000:0000:0000:0000:0000:ffff:0a00:0005")}
    for idx, (kind, gid) in gids.items():
        write(root, f"{port}/gid_attrs/types/{idx}", kind)
        write(root, f"{port}/gids/{idx}", gid)
        write(root, f"{port}/gid_attrs/ndevs/{idx}", "eth2")
    os.makedirs(os.path.join(str(root), port, "gid_attrs", "types", "4"), exist_ok=True)  # unreadable: a folder
    write(root, f"{port}/gids/5", ZERO)
    write(root, f"{port}/gid_attrs/types/5", "IB/RoCE v1")
    write(root, "class/net/eth2/carrier_changes", str(carrier))
    for name in ("rx_errors", "tx_errors", "rx_crc_errors"):
        write(root, f"class/net/eth2/statistics/{name}", "0")


def test_counters_and_gids_from_a_recorded_roce_port(tmp_path):
    roce_tree(tmp_path, link_downed=1, symbol=12)
    got = read_counters(str(tmp_path), ["eth2", "absent0"])
    assert got["rdma"]["mlx5_0/1"]["link_downed"] == 1
    assert got["rdma"]["mlx5_0/1"]["symbol_error"] == 12
    assert got["rdma"]["mlx5_0/1"]["port_xmit_discards"] == 7
    assert got["rdma"]["mlx5_0/1"]["local_link_integrity_errors"] is None  # the driver shows none
    assert got["net"] == {"eth2": {"carrier_changes": 2, "rx_errors": 0, "tx_errors": 0, "rx_crc_errors": 0}}
    gids = read_gids(str(tmp_path))["mlx5_0/1"]
    assert [(g["index"], g["type"]) for g in gids] == [(0, "IB/RoCE v1"), (1, "RoCE v2"), (2, "IB/RoCE v1"),
                                                       (3, "RoCE v2")]
    assert gids[3]["gid"].endswith("0a00:0005") and gids[3]["netdev"] == "eth2"


def test_no_rdma_device_reads_empty(tmp_path):
    assert read_counters(str(tmp_path), []) == {"rdma": {}, "net": {}}
    assert read_gids(str(tmp_path)) == {}


def test_growth_names_the_counter_and_its_delta_and_a_reset():
    before = {"rdma": {"mlx5_0/1": {"link_downed": 3, "symbol_error": 10, "port_rcv_errors": None}},
              "net": {"eth2": {"carrier_changes": 2, "rx_errors": 5}}}
    after = {"rdma": {"mlx5_0/1": {"link_downed": 4, "symbol_error": 10, "port_rcv_errors": 9}},
             "net": {"eth2": {"carrier_changes": 4, "rx_errors": 0}}}
    assert counter_growth(before, after) == {"grew": {"rdma mlx5_0/1": {"link_downed": 1},
                                                      "net eth2": {"carrier_changes": 2}},
                                             "reset": ["net eth2"]}
    assert counter_growth(before, before) == {"grew": {}, "reset": []}
    assert counter_growth(None, after) == {"grew": {}, "reset": []}


def ports(rate=200.0, state="ACTIVE", layer="InfiniBand", device="mlx5_0"):
    return {"device": device, "port": 1, "state": state,
            "physical_state": "LinkUp" if state == "ACTIVE" else "Disabled",
            "rate_gbps": rate, "link_layer": layer, "base_lid": 5, "sm_lid": 1}


def rec(plist, gids=None, nccl=None, findings=(), counters=None, after=None):
    facts = {"hostinfo": {"ib_ports": {"source": "ibstat", "error": None, "data": {"ports": plist},
                                       "findings": list(findings)}},
             "rdma_gids": gids or {}}
    if counters is not None:
        facts["counters"] = counters
    return {"facts": facts, "intent": {"nccl_env": nccl}, "counters": after}


def test_rdma_names_the_port_trained_down_with_the_clusters_rate():
    records = {"n1": rec([ports()]), "n2": rec([ports(rate=100.0)]), "n3": rec([ports()])}
    c = check_rdma(records, CTX)
    assert c["status"] == "FAIL" and c["hosts"] == ["n2"]
    assert "mlx5_0/1 at 100 Gb/s, the cluster's InfiniBand ports at 200 Gb/s" in c["message"]
    ok = check_rdma({h: rec([ports()]) for h in ("n1", "n2", "n3")}, CTX)
    assert ok["status"] == "PASS" and ok["measured"] == {"ports": 3, "rate_gbps": {"InfiniBand": 200.0}}


def test_rdma_roce_gid_index_must_be_roce_v2(tmp_path):
    roce_tree(tmp_path)
    good = read_gids(str(tmp_path))
    v1_only = {"mlx5_0/1": [dict(g, type="IB/RoCE v1") for g in good["mlx5_0/1"]]}
    port = ports(rate=100.0, layer="Ethernet")
    records = {"n1": rec([port], good, {"NCCL_IB_GID_INDEX": "3"}),
               "n2": rec([port], good, {"NCCL_IB_GID_INDEX": "2"}),
               "n3": rec([port], v1_only, {})}
    c = check_rdma(records, CTX)
    assert c["status"] == "FAIL" and c["hosts"] == ["n2", "n3"]
    assert c["measured"]["n2"] == ["mlx5_0/1: NCCL_IB_GID_INDEX=2 is not a RoCE v2 GID (RoCE v2 at 1, 3)"]
    assert "no RoCE v2 GID" in c["measured"]["n3"][0]


def test_rdma_a_down_port_warns_and_no_port_skips():
    warn = {"id": "ib.port_down", "severity": "WARN", "message": "mlx5_1 port 1 is down"}
    c = check_rdma({"n1": rec([ports(), ports(state="DOWN", device="mlx5_1")], findings=[warn]),
                    "n2": rec([ports()])}, CTX)
    assert c["status"] == "WARN" and c["hosts"] == ["n1"] and c["measured"] == {"n1": ["mlx5_1 port 1 is down"]}
    assert check_rdma({"n1": {"facts": {"hostinfo": {"ib_ports": None}}}}, CTX)["status"] == "SKIP"


def test_counters_fail_names_host_port_and_growth():
    base = {"rdma": {"mlx5_0/1": {"link_downed": 0, "symbol_error": 4}}, "net": {"eth1": {"carrier_changes": 2}}}
    flapped = {"rdma": {"mlx5_0/1": {"link_downed": 1, "symbol_error": 90}}, "net": {"eth1": {"carrier_changes": 4}}}
    records = {"n1": rec([], counters=base, after=base), "n2": rec([], counters=base, after=flapped)}
    c = check_counters(records, CTX)
    assert c["status"] == "FAIL" and c["hosts"] == ["n2"]
    assert c["measured"] == {"n2": {"rdma mlx5_0/1": {"link_downed": 1, "symbol_error": 86},
                                    "net eth1": {"carrier_changes": 2}}}
    assert "link went down on n2" in c["message"] and "symbol_error +86" in c["message"]
    quiet = check_counters({"n1": rec([], counters=base, after=base)}, CTX)
    assert quiet["status"] == "PASS" and quiet["measured"] == {"ports": 2}
    assert check_counters({"n1": rec([], counters=base)}, CTX)["status"] == "SKIP"


def tool_rec(**readings):
    return {"facts": {"hostinfo": readings}}


def test_tools_findings_fail_warn_pass_and_rdma_left_to_links():
    numa_warn = {"source": "numactl -H", "error": None, "data": {},
                 "findings": [{"severity": "WARN", "message": "NUMA nodes have different CPU counts: {0: 32, 1: 16}",
                               "remediation": "check for offline CPUs"}]}
    fine = {"source": "ip addr show", "error": None, "data": {}, "findings": [{"severity": "INFO", "message": "x"}]}
    failed = {"source": "nvidia-smi topo -m", "error": "exit 9", "data": None, "findings": []}
    ib_fail = {"source": "ibstat", "error": None, "data": {}, "findings": [{"severity": "FAIL", "message": "no SM"}]}
    c = check_tools({"n1": tool_rec(numactl=numa_warn, ip_links=fine), "n2": tool_rec(gpu_topology=failed),
                     "n3": tool_rec(ip_links=fine, ib_ports=ib_fail)}, CTX)[0]
    assert c["status"] == "WARN" and c["hosts"] == ["n1", "n2"]
    assert c["measured"]["n2"][0]["message"] == "nvidia-smi topo -m: exit 9"
    assert "numactl: NUMA nodes have different CPU counts" in c["message"]
    assert c["remediation"].startswith("check for offline CPUs")
    ok = check_tools({"n1": tool_rec(ip_links=fine, netplan=None)}, CTX)[0]
    assert ok["status"] == "PASS" and ok["measured"] == {"n1": ["ip_links"]}
    assert check_tools({"n1": tool_rec(ib_ports=ib_fail)}, CTX)[0]["status"] == "SKIP"


def test_dataset_read_on_real_folders(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "shard-000.bin").write_bytes(b"\x00" * 16)
    (tmp_path / "empty").mkdir()
    got = dataset_mod.read_dataset(str(data), 5)
    assert got["readable"] and got["kind"] == "dir" and got["entries"] == 1 and got["hung"] is False
    assert got["sample"] == str(data / "shard-000.bin")
    missing = dataset_mod.read_dataset(str(tmp_path / "nope"), 5)
    assert missing["exists"] is False and missing["readable"] is False and missing["error"] == "does not exist"
    records = {"n1": {"facts": {"dataset": got}},
               "n2": {"facts": {"dataset": missing}},
               "n3": {"facts": {"dataset": dataset_mod.read_dataset(str(tmp_path / "empty"), 5)}}}
    c = check_dataset(records, CTX)[0]
    assert c["status"] == "FAIL" and c["hosts"] == ["n2", "n3"]
    assert c["measured"]["n2"] == "does not exist" and "empty folder" in c["measured"]["n3"]
    ok = check_dataset({"n1": {"facts": {"dataset": got}}}, CTX)[0]
    assert ok["status"] == "PASS" and ok["measured"] == {"n1": 1}
    assert check_dataset({"n1": {"facts": {"dataset": None}}}, CTX)[0]["status"] == "SKIP"


def test_dataset_hung_mount_is_a_hang_inside_the_deadline(monkeypatch):
    gate = threading.Event()
    monkeypatch.setattr(dataset_mod, "_read", lambda path: (gate.wait(30), {})[1])
    got = dataset_mod.read_dataset("/mnt/dead-nfs", 0.2)
    gate.set()
    assert got["hung"] is True and "did not answer within 0.2 s" in got["error"]
    c = check_dataset({"n1": {"facts": {"dataset": got}}, "n2": {"facts": {"dataset": None}}}, CTX)[0]
    assert c["status"] == "HANG" and c["hosts"] == ["n1"]


def test_evaluate_reports_the_new_checks_in_order():
    ids = [c["id"] for c in evaluate({"n1": rec([ports()], counters={"rdma": {}, "net": {}},
                                                after={"rdma": {}, "net": {}})}, ["n1"])]
    assert ids.index("host.reachable") < ids.index("links.rdma") < ids.index("links.counters") \
        < ids.index("tools.findings") < ids.index("dataset.path")
