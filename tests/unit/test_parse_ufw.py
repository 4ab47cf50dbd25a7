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


def test_user_rules_tuples_with_interface_comment_app_and_v6():
    """ufw's own rule file, as ufw 0.36 wrote it (tests/fixtures/firewall): the comment is hex,
    an interface rides on the direction (in_eth0), an application rule has two fields more."""
    import os

    from ansible.module_utils.ncclprep.parsers.ufw import parse_ufw_user_rules

    import ncclprep

    folder = os.path.join(ncclprep.REPO_ROOT, "tests", "fixtures", "firewall")
    with open(os.path.join(folder, "user.rules")) as fh:
        rules = parse_ufw_user_rules(fh.read())
    assert rules[0] == {"action": "allow", "route": False, "proto": "any", "port": None, "to": "0.0.0.0/0",
                        "from": "10.0.0.0/24", "from_port": None, "app": None, "direction": "in",
                        "interface": "eth0", "comment": "ncclprep: cluster traffic (NCCL, Gloo, rendezvous)",
                        "v6": False}
    assert (rules[3]["app"], rules[3]["port"], rules[3]["comment"]) == ("OpenSSH", "22", None)
    assert [r["action"] for r in rules] == ["allow", "allow", "allow", "allow", "allow", "limit", "allow", "deny"]
    with open(os.path.join(folder, "user6.rules")) as fh:
        v6 = parse_ufw_user_rules(fh.read(), v6=True)
    assert [(r["from"], r["port"], r["proto"], r["v6"]) for r in v6] == [
        ("::/0", "22", "tcp", True), ("::/0", None, "any", True), ("::/0", "2222", "tcp", True),
        ("fd00::/64", "9100", "any", True)]
    odd = parse_ufw_user_rules("### tuple ### allow_log-all tcp 22 0.0.0.0/0 any 0.0.0.0/0 in comment=zz\n"
                               "### tuple ### route:allow any any 0.0.0.0/0 any 10.0.0.0/8 in_eth0!out_eth1\n"
                               "### tuple ### too few fields\n-A ufw-user-input -j ACCEPT\n")
    assert [(r["action"], r["route"], r["comment"]) for r in odd] == [("allow", False, "zz"), ("allow", True, None)]
