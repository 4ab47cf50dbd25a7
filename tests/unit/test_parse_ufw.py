import pytest
from ansible.module_utils.ncclprep.parsers.ufw import diagnose_ufw, parse_ufw_status


def test_status_verbose_subnet_allowed_reading(case):
    parsed = parse_ufw_status(case("ufw/status-verbose-subnet-allowed.txt"))
    assert parsed["unparsed"] == ["$ sudo ufw status verbose "]
    assert (parsed["status"], parsed["logging"], parsed["logging_level"]) == ("active", "on", "low")
    assert parsed["default"] == {"incoming": "deny", "outgoing": "allow", "routed": None}
    assert parsed["new_profiles"] == "skip"
    rules = [(r["to"], r["action"], r["direction"], r["from"], r["v6"], r["port"], r["proto"])
             for r in parsed["rules"]]
    assert rules == [("Anywhere", "ALLOW", "IN", "10.0.0.0/24", False, None, None),
                     ("65432/tcp", "ALLOW", "IN", "Anywhere", False, "65432", "tcp"),
                     ("65432/udp", "ALLOW", "IN", "Anywhere", False, "65432", "udp"),
                     ("65432/tcp", "ALLOW", "IN", "Anywhere", True, "65432", "tcp"),
                     ("65432/udp", "ALLOW", "IN", "Anywhere", True, "65432", "udp")]


def test_peers_in_subnet_reach_every_port(case):
    parsed = parse_ufw_status(case("ufw/status-verbose-subnet-allowed.txt"))
    [f] = diagnose_ufw(parsed, "10.0.0.0/24", host="n1")
    assert (f["id"], f["severity"], f["subject"], f["host"]) == ("ufw.cluster_allowed", "INFO", "10.0.0.0/24", "n1")
    assert f["rule"]["from"] == "10.0.0.0/24"
    assert [f["id"] for f in diagnose_ufw(parsed, "10.0.0.128/25")] == ["ufw.cluster_allowed"]
    [blocked] = diagnose_ufw(parsed, "10.0.1.0/24")
    assert (blocked["id"], blocked["severity"]) == ("ufw.cluster_blocked", "FAIL")
    assert "ufw allow from 10.0.1.0/24" in blocked["remediation"]
    with pytest.raises(ValueError):
        diagnose_ufw(parsed, "not-a-cidr")


def test_deny_first_inactive_numbered_and_garbled_lines():
    text = ("Status: active\nDefault: allow (incoming), allow (outgoing), disabled (routed)\n"
            "[ 1] Anywhere                   DENY IN     10.0.0.0/16                # lockdown\n"
            "[ 2] Anywhere                   ALLOW IN    10.0.0.0/24\n"
            "ERROR: problem running ufw-init\n")
    parsed = parse_ufw_status(text)
    assert parsed["unparsed"] == ["ERROR: problem running ufw-init"]
    assert parsed["default"] == {"incoming": "allow", "outgoing": "allow", "routed": "disabled"}
    assert parsed["rules"][0]["comment"] == "lockdown" and parsed["rules"][0]["from"] == "10.0.0.0/16"
    assert [f["id"] for f in diagnose_ufw(parsed, "10.0.0.0/24")] == ["ufw.cluster_blocked"]
    assert [f["id"] for f in diagnose_ufw(parse_ufw_status("Status: inactive\n"), "10.0.0.0/24")] == ["ufw.inactive"]
    only_default = parse_ufw_status("Status: active\nDefault: allow (incoming), allow (outgoing)\n")
    assert diagnose_ufw(only_default, "10.0.0.0/24")[0]["id"] == "ufw.cluster_allowed"


def test_cluster_rule_bound_to_the_data_plane_interface():
    """`ufw allow in on eth0 from CIDR` (the firewall role's cluster rule) shows as "Anywhere on eth0"."""
    text = ("Status: active\nDefault: deny (incoming), allow (outgoing), deny (routed)\n\n"
            "To                         Action      From\n--                         ------      ----\n"
            "Anywhere on eth0           ALLOW IN    10.77.31.8/29              # ncclprep: cluster traffic\n"
            "22/tcp                     ALLOW IN    10.77.31.1                 # ncclprep: SSH\n")
    parsed = parse_ufw_status(text)
    assert parsed["rules"][0]["to"] == "Anywhere on eth0" and parsed["unparsed"] == []
    assert [f["id"] for f in diagnose_ufw(parsed, "10.77.31.8/29", interface="eth0")] == ["ufw.cluster_allowed"]
    # peers arriving on another interface are not covered by it
    assert [f["id"] for f in diagnose_ufw(parsed, "10.77.31.8/29", interface="eth1")] == ["ufw.cluster_blocked"]
    assert [f["id"] for f in diagnose_ufw(parsed, "10.77.31.8/29")] == ["ufw.cluster_blocked"]
