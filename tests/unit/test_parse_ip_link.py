from ansible.module_utils.ncclprep.parsers.ip_link import diagnose_ip_link, parse_ip_link


def test_ip_a_reading(case):
    parsed = parse_ip_link(case("ip_link/ip-a-mtu-ib0-down.txt"))
    assert parsed["unparsed"] == []
    got = {link["name"]: (link["state"], link["mtu"]) for link in parsed["links"]}
    assert got == {"lo": ("UNKNOWN", 65536), "eno1": ("UP", 1500), "eno2": ("DOWN", 1500), "eno3": ("DOWN", 1500),
                   "eno4": ("DOWN", 1500), "ib0": ("DOWN", 4092)}
    ib0 = parsed["links"][-1]
    assert ib0["flags"] == ["BROADCAST", "MULTICAST"] and ib0["qlen"] == 256 and ib0["index"] == 6


def test_ib0_down_is_flagged_and_its_4092_mtu_is_not(case):
    findings = diagnose_ip_link(parse_ip_link(case("ip_link/ip-a-mtu-ib0-down.txt")), host="n3")
    assert [(f["id"], f["severity"], f["subject"]) for f in findings] == [("ip.ipoib_down", "WARN", "ib0")]
    assert findings[0]["mtu"] == 4092


def test_ip_addr_details_and_garbled_lines():
    text = ("Device \"eth9\" does not exist.\n"
            "3: eth0@if12: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc noqueue master bond0 state UP\n"
            "    link/ether aa:bb:cc:dd:ee:ff brd ff:ff:ff:ff:ff:ff link-netnsid 0\n"
            "    inet 10.0.0.5/24 brd 10.0.0.255 scope global eth0\n"
            "       valid_lft forever preferred_lft forever\n"
            "    inet6 fe80::1/64 scope link\n"
            "    something unexpected\n")
    parsed = parse_ip_link(text)
    assert parsed["unparsed"] == ["Device \"eth9\" does not exist.", "    something unexpected"]
    [link] = parsed["links"]
    assert (link["name"], link["parent"], link["mtu"], link["master"], link["state"]) == \
        ("eth0", "if12", 9000, "bond0", "UP")
    assert (link["link_type"], link["mac"], link["qlen"]) == ("ether", "aa:bb:cc:dd:ee:ff", None)
    assert link["addresses"] == [{"family": "inet", "address": "10.0.0.5/24", "scope": "global"},
                                 {"family": "inet6", "address": "fe80::1/64", "scope": "link"}]
    # a bond's port: the bond is the interface to name
    found = diagnose_ip_link(parsed)
    assert [(f["id"], f["subject"]) for f in found] == [("ip.bond_ports", "bond0"), ("ip.usable", "host")]
    assert found[0]["ports"] == ["eth0"] and found[1]["usable"] == []  # a port is not an interface to use


def test_two_interfaces_on_one_subnet_and_a_port_without_carrier():
    """Issue 27: two NICs in 10.0.0.0/24 (ARP flux), one administratively up without carrier; a
    docker bridge without containers (no carrier either) is not a fault; eno2 down by hand is none."""
    text = ("1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN group default qlen 1000\n"
            "    inet 127.0.0.1/8 scope host lo\n"
            "2: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc mq state UP group default qlen 1000\n"
            "    inet 10.0.0.5/24 brd 10.0.0.255 scope global eth0\n"
            "3: eth1: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc mq state UP group default qlen 1000\n"
            "    inet 10.0.0.6/24 brd 10.0.0.255 scope global eth1\n"
            "4: eth2: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 1500 qdisc mq state DOWN group default qlen 1000\n"
            "5: eno2: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN group default qlen 1000\n"
            "6: docker0: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 1500 qdisc noqueue state DOWN group default\n"
            "    inet 172.17.0.1/16 brd 172.17.255.255 scope global docker0\n")
    found = {f["id"]: f for f in diagnose_ip_link(parse_ip_link(text))}
    assert set(found) == {"ip.same_subnet", "ip.no_carrier", "ip.usable"}
    assert found["ip.same_subnet"]["interfaces"] == ["eth0", "eth1"] and found["ip.same_subnet"]["subnet"] == \
        "10.0.0.0/24"
    assert "ARP flux" in found["ip.same_subnet"]["message"]
    assert found["ip.no_carrier"]["subject"] == "eth2"
    assert found["ip.usable"]["usable"] == ["eth0", "eth1"]
