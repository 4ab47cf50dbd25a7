import pytest
from ansible.module_utils.ncclprep.parsers import netplan
from ansible.module_utils.ncclprep.parsers.netplan import diagnose_netplan, parse_netplan, read_netplan


def test_roce_port_mtu_4096_reading(case):
    pytest.importorskip("yaml")
    parsed = parse_netplan(case("netplan/roce-port-mtu-4096.yaml"))
    assert parsed["error"] is None and parsed["unparsed"] == [] and parsed["version"] == 2
    assert parsed["interfaces"] == [{"name": "enp1s0f0np0", "kind": "ethernets", "addresses": ["10.0.0.1/24"],
                                     "mtu": 4096, "dhcp4": False, "dhcp6": None, "members": []}]


def test_roce_port_mtu_4096_gives_active_mtu_2048(case):
    pytest.importorskip("yaml")
    parsed = parse_netplan(case("netplan/roce-port-mtu-4096.yaml"))
    for roce in (None, ["enp1s0f0np0"]):
        [f] = diagnose_netplan(parsed, roce_interfaces=roce, host="n1")
        assert (f["id"], f["severity"], f["subject"]) == ("netplan.roce_mtu", "WARN", "enp1s0f0np0")
        assert (f["mtu"], f["roce_active_mtu"], f["recommended_mtu"]) == (4096, 2048, 4200)
        assert "4200 (or 9000)" in f["remediation"]
    assert diagnose_netplan(parsed, roce_interfaces=["ens9"]) == []


def test_read_netplan_walks_a_loaded_dict_and_keeps_unknown_parts():
    doc = {"network": {"version": 2, "renderer": "networkd", "foo": 1,
                       "bonds": {"bond0": {"interfaces": ["enp1", "enp2"], "mtu": 9000,
                                           "addresses": [{"10.0.0.9/24": {"lifetime": 0}}]}},
                       "ethernets": {"enp1": None, "enp3": {"mtu": "big"}}}}
    parsed = read_netplan(doc)
    assert parsed["unparsed"] == ["network.foo", "network.ethernets.enp1", "network.ethernets.enp3.mtu"]
    bond, enp3 = parsed["interfaces"]
    assert (bond["name"], bond["members"], bond["mtu"], bond["addresses"]) == \
        ("bond0", ["enp1", "enp2"], 9000, ["10.0.0.9/24"])
    assert enp3["mtu"] is None
    assert diagnose_netplan(parsed) == []  # 9000 gives active_mtu 4096
    assert read_netplan(["not", "a", "dict"])["unparsed"] == ["network (missing or not a mapping)"]


def test_garbled_yaml_and_missing_pyyaml(monkeypatch):
    pytest.importorskip("yaml")
    bad = parse_netplan("network:\n  ethernets: [unclosed\n")
    assert bad["error"].startswith("YAML error") and bad["interfaces"] == []
    assert bad["unparsed"] == ["network:", "  ethernets: [unclosed"]
    monkeypatch.setattr(netplan, "yaml", None)
    missing = parse_netplan("network:\n  version: 2\n")
    assert missing["error"] == "PyYAML is not importable" and missing["unparsed"] == ["network:", "  version: 2"]
