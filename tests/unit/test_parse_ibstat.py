import pytest
from ansible.module_utils.ncclprep.parsers import finding
from ansible.module_utils.ncclprep.parsers.ibstat import (
    diagnose_ib_ports,
    link_rate_gbps,
    parse_ib_status,
    parse_ibstat,
    parse_ibstatus,
)


def test_hdr_one_port_disabled_reads_both_cas(case):
    parsed = parse_ibstat(case("ibstat/hdr-one-port-disabled.txt"))
    assert parsed["unparsed"] == []
    assert [ca["name"] for ca in parsed["cas"]] == ["mlx5_0", "mlx5_1"]
    up, down = parsed["cas"][0]["ports"][0], parsed["cas"][1]["ports"][0]
    assert (up["port"], up["state"], up["physical_state"], up["rate_gbps"], up["link_layer"]) == \
        (1, "Active", "LinkUp", 200, "InfiniBand")
    assert (up["base_lid"], up["sm_lid"]) == (569, 393)
    assert (down["port"], down["state"], down["physical_state"], down["rate_gbps"]) == (1, "Down", "Disabled", 10)
    assert (down["base_lid"], down["sm_lid"]) == (65535, 0)
    assert parsed["cas"][0]["ca_type"] == "MT4123" and parsed["cas"][0]["num_ports"] == 1


def test_hdr_one_port_disabled_diagnosis_flags_mlx5_1_and_ignores_its_rate(case):
    ports = parse_ib_status(case("ibstat/hdr-one-port-disabled.txt"))["ports"]
    assert link_rate_gbps(ports[0]) == 200
    assert link_rate_gbps(ports[1]) is None  # the "10" of a down port is not a link speed
    findings = diagnose_ib_ports(ports, host="node7")
    assert [(f["id"], f["severity"], f["subject"], f["host"]) for f in findings] == [
        ("ib.port_down", "WARN", "mlx5_1", "node7"), ("ib.usable_hcas", "INFO", "node7", "node7")]
    assert findings[0]["rate_gbps"] is None
    assert findings[1]["usable"] == ["mlx5_0"] and findings[1]["total_rate_gbps"] == 200
    assert "only 1 of 2 HCAs usable" in findings[1]["message"]


def test_down_port_without_rate_and_link_layer_lines(case):
    parsed = parse_ib_status(case("ibstat/down-port-no-rate.txt"))
    assert parsed["layout"] == "ibstat" and parsed["unparsed"] == []
    [port] = parsed["ports"]
    assert (port["device"], port["port"], port["state"], port["physical_state"]) == ("mlx5_8", 1, "Down", "Disabled")
    assert port["rate_gbps"] is None and port["link_layer"] is None and port["base_lid"] is None
    findings = diagnose_ib_ports(parsed["ports"])
    assert findings[0]["id"] == "ib.port_down" and findings[0]["subject"] == "mlx5_8"
    assert findings[0]["rate_gbps"] is None


def test_ibstatus_roce_bond_layout(case):
    text = case("ibstat/ibstatus-roce-bond-25g.txt")
    parsed = parse_ibstatus(text)
    assert parsed["unparsed"] == []
    [port] = parsed["ports"]
    assert (port["device"], port["port"]) == ("mlx5_bond_0", 1)
    assert (port["state"], port["state_code"]) == ("ACTIVE", 4)
    assert (port["physical_state"], port["physical_state_code"]) == ("LinkUp", 5)
    assert (port["rate_gbps"], port["width"], port["link_layer"]) == (25, "1X", "Ethernet")
    assert (port["base_lid"], port["sm_lid"]) == (0, 0)
    assert parse_ib_status(text)["layout"] == "ibstatus"


def test_roce_lid_0_is_not_reported_as_no_subnet_manager(case):
    ports = parse_ib_status(case("ibstat/ibstatus-roce-bond-25g.txt"))["ports"]
    assert diagnose_ib_ports(ports) == []


def test_ib_port_stuck_in_initializing_means_no_subnet_manager():
    text = ("CA 'mlx5_0'\n\tPort 1:\n\t\tState: Initializing\n\t\tPhysical state: LinkUp\n\t\tRate: 200\n"
            "\t\tSM lid: 0\n\t\tLink layer: InfiniBand\n")
    f, summary = diagnose_ib_ports(parse_ib_status(text)["ports"])
    assert (f["id"], f["severity"], f["subject"]) == ("ib.no_subnet_manager", "FAIL", "mlx5_0")
    assert summary["id"] == "ib.usable_hcas" and summary["usable"] == []


def test_garbled_input_keeps_what_it_read():
    text = ("ibstat: command not found\nCA 'mlx5_0'\n\tFirmware version: 20.1\n\t### garbage\n\tPort 1:\n"
            "\t\tState: Active\n")
    parsed = parse_ibstat(text)
    assert parsed["unparsed"] == ["ibstat: command not found", "\t### garbage"]
    assert parsed["cas"][0]["firmware"] == "20.1"
    port = parsed["cas"][0]["ports"][0]
    assert port["state"] == "Active" and port["physical_state"] is None and port["rate_gbps"] is None
    assert parse_ibstatus("Infiniband device 'x' port 1 status:\n\trate:  fast\n")["unparsed"] == ["\trate:  fast"]
    assert parse_ib_status("") == {"layout": "ibstat", "ports": [], "aborted": [], "unparsed": []}


def test_finding_rejects_unknown_severity():
    with pytest.raises(ValueError, match="severity 'PASS'"):
        finding("x.y", "PASS", "mlx5_0", "msg")
