from ansible.module_utils.ncclprep.parsers.nccl_log import diagnose_nccl_log, parse_nccl_log, transports_used


def test_socket_interface_list_with_docker_bridges(case):
    parsed = parse_nccl_log(case("nccl_log/socket-docker-bridges-selected.txt"))
    assert parsed["unparsed"] == []
    ifaces = parsed["socket_interfaces"]
    assert len(ifaces) == 16 and [i["index"] for i in ifaces] == list(range(16))
    assert ifaces[0] == {"index": 0, "name": "bond0", "address": "10.0.0.1", "port": 0}
    assert sum(i["name"].startswith("br-") for i in ifaces) == 11
    veths = [i for i in ifaces if i["name"].startswith("veth")]
    assert len(veths) == 4 and all(i["address"].startswith("fe80::") for i in veths)
    assert veths[0]["address"] == "fe80::bbbb:1%veth6163fba"


def test_docker_bridges_diagnosis_names_bond0(case):
    findings = diagnose_nccl_log(parse_nccl_log(case("nccl_log/socket-docker-bridges-selected.txt")), host="n1")
    assert [(f["id"], f["severity"], f["subject"]) for f in findings] == [("nccl.socket_virtual_ifaces", "FAIL", "n1")]
    f = findings[0]
    assert f["real"] == ["bond0"] and len(f["virtual"]) == 15 and f["suggested_ifname"] == "bond0"
    assert "NCCL_SOCKET_IFNAME=bond0" in f["remediation"]


def test_socket_lists_of_several_hosts_name_each_interface_once():
    """Two hosts' logs pasted together, each listing eth0 and docker0: one real NIC, eth0, to suggest."""
    text = ("a:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]docker0:172.17.0.1<0>\n"
            "b:2:2 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0> [1]docker0:172.17.0.1<0>\n")
    f = diagnose_nccl_log(parse_nccl_log(text))[0]
    assert f["real"] == ["eth0"] and f["virtual"] == ["docker0"] and f["suggested_ifname"] == "eth0"
    assert "uses 1 container/virtual interfaces (docker0) next to eth0" in f["message"]


def test_socket_ifname_missing(case):
    parsed = parse_nccl_log(case("nccl_log/socket-ifname-missing.txt"))
    assert parsed["unparsed"] == []
    assert parsed["env"] == {"NCCL_SOCKET_IFNAME": "eth2"}
    assert parsed["errors"] == [{"error": "ncclInternalError", "message": "Internal check failed."}]
    assert parsed["socket_family_errors"] == [59936]
    findings = diagnose_nccl_log(parsed)
    assert [(f["id"], f["severity"], f["subject"]) for f in findings] == [
        ("nccl.socket_ifname_missing", "FAIL", "eth2")]
    assert "does not exist" in findings[0]["message"] and "only a symptom" in findings[0]["message"]
    assert findings[0]["family"] == 59936


def test_ib_completion_error_12(case):
    parsed = parse_nccl_log(case("nccl_log/ib-completion-error-12.txt"))
    assert parsed["unparsed"] == []
    [warn] = parsed["warnings"]
    assert warn["source"] == "transport/net_ib.cc:839" and warn["cuda_dev"] == 0
    [err] = parsed["ib_completion_errors"]
    assert (err["error"], err["opcode"], err["len"], err["vendor_err"]) == (12, 1, 0, 129)
    assert err["status"] == "IBV_WC_RETRY_EXC_ERR"
    [f] = diagnose_nccl_log(parsed)
    assert (f["id"], f["severity"], f["error"]) == ("nccl.ib_completion_error", "FAIL", 12)
    assert "retry timeout" in f["message"] and "socket bootstrap worked" in f["message"]
    assert "NCCL_IB_GID_INDEX" in f["remediation"] and "often 3" in f["remediation"]


def test_newer_ib_completion_formats():
    newer = ("n1:1:2 [0] NCCL WARN NET/IB: Got completion from peer 10.0.0.2<4711> with status=12 opcode=1 len=0 "
             "vendor err 129 (Send)")
    newest = ("n1:1:2 [0] NCCL WARN NET/IB: Got completion from peer 10.0.0.2<4711> with "
              "status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_RDMA_WRITE(1) vendor_err=129 hca mlx5_0")
    errs = parse_nccl_log(newer + "\n" + newest)["ib_completion_errors"]
    assert [(e["peer"], e["error"], e["opcode"], e["len"], e["vendor_err"]) for e in errs] == [
        ("10.0.0.2<4711>", 12, 1, 0, 129), ("10.0.0.2<4711>", 12, 1, None, 129)]


def test_rings_old_format_transports(case):
    parsed = parse_nccl_log(case("nccl_log/rings-p2p-and-net-socket.txt"))
    assert parsed["unparsed"] == []
    hops = parsed["hops"]
    assert {h["host"] for h in hops} == {"node01", "node02"}
    assert {h["channel"] for h in hops} == {0, 1}
    ranks = {h["src"] for h in hops} | {h["dst"] for h in hops}
    devices = {h[k] for h in hops for k in ("src_dev", "dst_dev") if h[k] is not None}
    assert max(ranks) == 15 and devices == set(range(1, 8))  # 2 hosts x 8 GPUs (trimmed: no line shows GPU 0)
    net = [(h["src"], h["dst"]) for h in hops if h["transport"].startswith("NET/")]
    assert sorted(net) == [(7, 8), (15, 0)]
    assert {h["transport"] for h in hops if h["transport"].startswith("NET/")} == {"NET/Socket/0"}
    assert all(h["transport"] == "P2P/IPC" for h in hops if not h["transport"].startswith("NET/"))
    assert hops[0] == {"host": "node01", "kind": "Ring", "channel": 0, "src": 3, "src_dev": 3, "dst": 2,
                       "dst_dev": 2, "direction": None, "transport": "P2P/IPC"}
    assert hops[11]["src_dev"] is None and hops[11]["direction"] == "send"
    assert transports_used(hops) == {"intra_host": ["P2P/IPC"], "inter_host": ["NET/Socket"]}
    [f] = diagnose_nccl_log(parsed)
    assert (f["id"], f["severity"]) == ("nccl.transports", "INFO")
    assert f["message"] == ("transports used: P2P/IPC inside a host, NET/Socket between hosts "
                            "(no IB/RDMA in use)")


def test_channel_format_other_warns_and_garbled_lines():
    text = ("n1:10:11 [7] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA\n"
            "n1:10:11 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
            "n1:10:11 [0] NCCL WARN Cuda failure 'out of memory'\n"
            "n1:10:11 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
            "\x00\x01 garbled [3]\n")
    parsed = parse_nccl_log(text)
    assert parsed["unparsed"] == ["\x00\x01 garbled [3]"]
    assert parsed["bootstrap"] == {"interface": "eth0", "address": "10.0.0.1"}
    assert [(h["kind"], h["channel"], h["dst_dev"], h["transport"]) for h in parsed["hops"]] == [
        ("Channel", 0, 0, "NET/IB/0/GDRDMA"), ("Channel", 1, 1, "P2P/CUMEM/read")]
    assert transports_used(parsed["hops"]) == {"intra_host": ["P2P/CUMEM"], "inter_host": ["NET/IB"]}
    findings = diagnose_nccl_log(parsed)
    assert [(f["id"], f["severity"], f["subject"]) for f in findings] == [
        ("nccl.cuda_oom", "FAIL", "host"), ("nccl.transports", "INFO", "host")]
    assert "no IB/RDMA" not in findings[1]["message"]


# The library lines in the formats NCCL prints them, old (2.5: a bare version line) and new
# (2.19+: prefixed, RoCE HCAs, a net plugin; 2.20+: merged NICs), neutral names and addresses.
OLD_IB = """\
n1:24570:24907 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation
n1:24570:24907 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:192.168.0.1<0>
NCCL version 2.5.6+cuda10.0
n1:24570:24907 [0] NCCL INFO Channel 00 : 0[0] -> 1[0] [send] via NET/IB/0
"""
NEW_ROCE = """\
n2:460770:460770 [0] NCCL INFO Bootstrap : Using enp1s0np0:10.0.0.2<0>
n2:460770:460770 [0] NCCL INFO NCCL version 2.19.3+cuda12.3
n2:460770:460842 [0] NCCL INFO NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB enp1s0np0:10.0.0.2<0>
n2:460770:460842 [0] NCCL INFO Using non-device net plugin version 0
n2:460770:460842 [0] NCCL INFO Using network IB
n2:460770:460842 [0] NCCL INFO GPU Direct RDMA Enabled for GPU 0 / HCA 0 (distance 4 <= 5), read 0 mode Default
n2:460770:460842 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/IB/0/GDRDMA
"""
MERGED_PLUGIN = """\
n3:1884:2298 [0] NCCL INFO NET/IB : Using [0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE} [1]={[2] mlx5_0:1/RoCE} [RO]; \
OOB bond0.5:10.0.0.3<0>
n3:1884:2298 [0] NCCL INFO Using network IBext_v8
n3:1884:2298 [0] NCCL INFO Channel 00/0 : 1[0] -> 2[0] [receive] via NET/IBext_v8/1
"""
SOCKET = """\
n4:10:10 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
n4:10:20 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.4<0>
n4:10:20 [0] NCCL INFO Using network Socket
n4:10:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0
"""


def test_library_version_network_hcas_and_gdr_old_and_new():
    from ansible.module_utils.ncclprep.parsers.nccl_log import nccl_path

    old = parse_nccl_log(OLD_IB)
    assert old["versions"] == ["2.5.6"] and old["cuda"] == "10.0"
    assert old["ib_devices"] == [{"device": "mlx5_0", "port": 1, "link_layer": "IB"}]
    assert old["oob"] == {"interface": "ib0", "address": "192.168.0.1"}
    path = nccl_path(old)
    # 2.5 printed no "Using network" line: the NET hop tells
    assert (path["version"], path["network"], path["net"], path["gdr"]) == ("2.5.6", "IB", "ib", None)
    new = nccl_path(parse_nccl_log(NEW_ROCE))
    assert new["version"] == "2.19.3" and new["net"] == "ib" and new["gdr"] is True
    assert new["ib_devices"] == ["mlx5_10:1/RoCE", "mlx5_11:1/RoCE"]
    assert parse_nccl_log(NEW_ROCE)["bootstrap"] == {"interface": "enp1s0np0", "address": "10.0.0.2"}
    merged = parse_nccl_log(MERGED_PLUGIN.replace("\\\n", ""))
    assert [d["device"] for d in merged["ib_devices"]] == ["mlx5_2", "mlx5_3", "mlx5_0"]
    assert nccl_path(merged)["network"] == "IBext_v8" and nccl_path(merged)["net"] == "ib"
    sock = nccl_path(parse_nccl_log(SOCKET))
    assert (sock["net"], sock["socket_interfaces"], sock["transports"]["inter_host"]) == (
        "socket", ["eth0"], ["NET/Socket"])
    # two ranks on two NCCL versions: no single version
    assert nccl_path(parse_nccl_log(OLD_IB + SOCKET))["version"] is None
    for text in (OLD_IB, NEW_ROCE, SOCKET):
        assert parse_nccl_log(text)["unparsed"] == [], text


def test_the_case_logs_still_read_with_the_library_lines(case):
    from ansible.module_utils.ncclprep.parsers.nccl_log import nccl_path

    path = nccl_path(parse_nccl_log(case("nccl_log/rings-p2p-and-net-socket.txt")))
    assert path["net"] == "socket" and path["transports"] == {"intra_host": ["P2P/IPC"], "inter_host": ["NET/Socket"]}


def test_several_nics_listed_and_one_used_between_hosts():
    """Issue 27: NET/IB lists four HCAs (NCCL 2.18's line) but the channels of four ranks between the
    hosts all go through NET/IB/0: three NICs idle. One rank's own log (its nearest NIC only) is not
    judged (review: a per-process NCCL_DEBUG_FILE is the usual case)."""
    head = ("node1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB "
            "[RO]; OOB eth0:10.0.0.1<0>\n"
            "node1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n")
    one_rank = head + "".join(f"node1:1:1 [7] NCCL INFO Channel 0{c}/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA\n"
                              for c in range(2))
    assert "nccl.nics_unused" not in {f["id"] for f in diagnose_nccl_log(parse_nccl_log(one_rank))}
    text = head + "".join(f"node1:1:1 [{r}] NCCL INFO Channel 00/0 : {r}[{r}] -> {r + 8}[{r}] [send] via NET/IB/0\n"
                          for r in range(4, 8))
    found = {f["id"]: f for f in diagnose_nccl_log(parse_nccl_log(text))}
    f = found["nccl.nics_unused"]
    assert f["used"] == ["mlx5_0:1"] and f["idle"] == ["mlx5_1:1", "mlx5_2:1", "mlx5_3:1"]
    assert f["severity"] == "WARN" and "NCCL_IB_HCA" in f["remediation"]
    # all four carrying channels: nothing to say
    busy = head + "".join(f"node1:1:1 [{r}] NCCL INFO Channel 00/0 : {r}[{r}] -> {r + 8}[{r}] [send] via "
                          f"NET/IB/{r - 4}\n" for r in range(4, 8))
    assert "nccl.nics_unused" not in {f["id"] for f in diagnose_nccl_log(parse_nccl_log(busy))}
