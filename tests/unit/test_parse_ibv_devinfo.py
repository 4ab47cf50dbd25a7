from ansible.module_utils.ncclprep.parsers.ibv_devinfo import diagnose_ibv_devinfo, parse_ibv_devinfo, roce_active_mtu


def test_roce_bond_reading(case):
    parsed = parse_ibv_devinfo(case("ibv_devinfo/roce-bond-active-mtu-1024.txt"))
    assert parsed["unparsed"] == []
    [hca] = parsed["hcas"]
    assert (hca["hca_id"], hca["fw_ver"], hca["vendor_part_id"], hca["phys_port_cnt"]) == \
        ("mlx5_bond_0", "16.28.2006", 4119, 1)
    [port] = hca["ports"]
    assert (port["port"], port["state"], port["state_code"]) == (1, "PORT_ACTIVE", 4)
    assert (port["max_mtu"], port["active_mtu"], port["link_layer"]) == (4096, 1024, "Ethernet")
    assert (port["sm_lid"], port["port_lid"]) == (0, 0)


def test_roce_active_mtu_1024_means_netdev_mtu_too_small(case):
    findings = diagnose_ibv_devinfo(parse_ibv_devinfo(case("ibv_devinfo/roce-bond-active-mtu-1024.txt")), host="n2")
    assert [(f["id"], f["severity"], f["subject"], f["host"]) for f in findings] == [
        ("ibv.roce_mtu_capped", "WARN", "mlx5_bond_0", "n2")]
    f = findings[0]
    assert (f["active_mtu"], f["max_mtu"], f["netdev_mtu_needed"]) == (1024, 4096, 4200)
    assert ">= 4200" in f["remediation"]


def test_roce_active_mtu_rule_of_the_kernel():
    assert [roce_active_mtu(m) for m in (1500, 4096, 4191, 4192, 4200, 9000, 300)] == \
        [1024, 2048, 2048, 4096, 4096, 4096, None]


def test_verbose_gids_and_garbled_lines():
    text = ("hca_id:\tmlx5_0\n\tport:\t1\n\t\t\tstate:\t\t\tPORT_DOWN (1)\n\t\t\tGID[  3]:\t\tfe80::1, RoCE v2\n"
            "\t\t\t\t\tBAD_PKEY_CNTR\n\t\t\tactive_mtu:\t\tbig\n")
    parsed = parse_ibv_devinfo("No IB devices found\n" + text)
    assert parsed["unparsed"] == ["\t\t\t\t\tBAD_PKEY_CNTR"]
    assert parsed["found"] == 0  # "No IB devices found": ibv_devinfo's count, read
    port = parsed["hcas"][0]["ports"][0]
    assert port["gids"] == [{"index": 3, "gid": "fe80::1", "type": "RoCE v2"}]
    assert port["active_mtu"] is None and port["max_mtu"] is None and port["state"] == "PORT_DOWN"
    [f] = diagnose_ibv_devinfo(parsed)
    assert (f["id"], f["severity"], f["subject"]) == ("ibv.port_not_active", "WARN", "mlx5_0")
