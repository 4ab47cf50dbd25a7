"""The firewall role's rule set and its safety checks (module_utils/ncclprep/concerns/firewall.py)."""

from ansible.module_utils.ncclprep.concerns.firewall import allows, ruleset, unsafe_rules

IFACES = {"eth0": ["10.0.0.11"], "eno1": ["192.168.10.11"], "lo": ["127.0.0.1"]}


def rules(admin=("192.168.10.0/24",), sources=("10.0.0.0/24",), extra=()):
    return ruleset("10.0.0.0/24", "eth0", [29400, 29500], list(sources), list(admin), 22, list(extra))


def test_ruleset_order_and_shape():
    r = rules(extra=[{"from": "10.9.0.0/16", "port": 9100}])
    assert [(x["from"], x["port"], x["proto"], x["interface"], x["var"]) for x in r] == [
        ("10.0.0.0/24", None, "any", "eth0", "firewall_cluster_cidr"),
        ("10.0.0.0/24", 29400, "tcp", None, "firewall_rendezvous_sources"),
        ("10.0.0.0/24", 29500, "tcp", None, "firewall_rendezvous_sources"),
        ("192.168.10.0/24", 22, "tcp", None, "firewall_admin_cidrs"),
        ("10.9.0.0/16", 9100, "tcp", None, "firewall_extra_rules"),
    ]


def test_allows_follows_interface_port_and_source():
    r = rules()
    assert allows(r, "10.0.0.12", 41234, "eth0")          # cluster peer, ephemeral NCCL port
    assert not allows(r, "10.0.0.12", 41234, "eno1")      # same peer on the management NIC: only listed ports
    assert allows(r, "10.0.0.12", 29400, "eno1")          # ... such as the rendezvous
    assert allows(r, "192.168.10.5", 22, "eno1")          # admin SSH
    assert not allows(r, "192.168.10.5", 2222, "eno1")
    assert not allows(r, "172.16.0.9", 22, "eno1")        # not an admin network


def test_safe_rules_over_the_admin_network_pass():
    assert unsafe_rules(rules(), "node1", connection="192.168.10.5 50000 192.168.10.11 22", interfaces=IFACES) == []
    # the controller inside the cluster CIDR, arriving on the data-plane NIC: the cluster rule keeps it
    assert unsafe_rules(rules(admin=()), "node1", connection="10.0.0.1 50000 10.0.0.11 22", interfaces=IFACES) == []


def test_lockout_of_the_controller_is_refused_naming_host_and_address():
    errs = unsafe_rules(rules(admin=("192.168.20.0/24",)), "node1",
                          connection="192.168.10.5 50000 192.168.10.11 22", interfaces=IFACES)
    assert errs == ["node1: the rules would lock the controller out: its SSH connection from 192.168.10.5 to "
                    "192.168.10.11:22 (interface eno1) matches no allow rule; add a CIDR holding 192.168.10.5 "
                    "to firewall_admin_cidrs"]
    # the controller in the cluster CIDR but arriving on another interface: the cluster rule does not apply
    assert unsafe_rules(rules(admin=()), "node1", connection="10.0.0.1 50000 192.168.10.11 22",
                          interfaces=IFACES) != []


def test_world_open_rules_are_refused_unless_allowed():
    r = rules(admin=("0.0.0.0/0",), extra=[{"from": "::/0", "port": 9100}])
    errs = unsafe_rules(r, "node2")
    assert len(errs) == 2
    assert errs[0].startswith("node2: firewall_admin_cidrs opens SSH from the admin network to the whole Internet "
                              "(0.0.0.0/0)")
    assert "firewall_extra_rules" in errs[1] and "(::/0)" in errs[1]
    assert unsafe_rules(r, "node2", allow_world=True) == []


def test_bad_cidr_port_and_proto_name_variable_and_value():
    r = rules(admin=("192.168.10.300/24",), extra=[{"from": "10.9.0.0/16", "port": 70000, "proto": "sctp"}])
    errs = unsafe_rules(r, "node3")
    assert any(e.startswith("node3: firewall_admin_cidrs='192.168.10.300/24'") for e in errs)
    assert "node3: firewall_extra_rules port=70000 is not a TCP/UDP port (valid: 1..65535)" in errs
    assert "node3: firewall_extra_rules proto='sctp' (valid: tcp, udp, any)" in errs


def test_no_ssh_connection_skips_the_lockout_check_only_when_ansible_does_not_come_over_ssh():
    """Review F3: under become the gathered environment had no SSH_CONNECTION (sudo drops it) and
    the lockout check was skipped without a word; over SSH an unknown address is now refused."""
    assert unsafe_rules(rules(admin=()), "node1", connection=None) == []
    assert unsafe_rules(rules(admin=()), "node1", connection=None, over_ssh=True) == [
        "node1: cannot tell where the controller's SSH connection comes from (SSH_CONNECTION is empty for the "
        "login account), so whether these rules would lock it out is unknown; set firewall_controller_address "
        "to the address the nodes see it connect from"]
    # firewall_controller_address given: "<address> 0 - <ssh port>", no interface known
    assert unsafe_rules(rules(), "node1", connection="192.168.10.5 0 - 22", interfaces=IFACES, over_ssh=True) == []
    assert unsafe_rules(rules(admin=("192.168.20.0/24",)), "node1", connection="192.168.10.5 0 - 22",
                          interfaces=IFACES, over_ssh=True)[0].startswith(
        "node1: the rules would lock the controller out: its SSH connection from 192.168.10.5 to -:22")


def test_a_comment_or_interface_that_would_inject_a_rule_is_refused():
    """Review F6: an extra rule's comment 'x"\n tcp dport 1-65535 accept comment "y' rendered a bare
    accept-everything line into the nft table, and nft -c took it."""
    bad = 'x"\n tcp dport 1-65535 accept comment "y'
    errs = unsafe_rules(rules(extra=[{"from": "10.77.29.0/24", "port": 9100, "comment": bad}]), "node1")
    assert errs == [f"node1: firewall_extra_rules comment={bad!r}: only letters, digits, spaces and .,:()/- (at "
                    "most 64), since nft and ufw would read a quote or a newline as a rule of its own"]
    errs = unsafe_rules(rules(extra=[{"from": "10.9.0.0/16", "port": 9100, "interface": 'eth0" accept #'}]),
                          "node1", interfaces=IFACES)
    assert errs == ["node1: firewall_extra_rules interface='eth0\" accept #' is not an interface name (letters, "
                    "digits, _.@-, at most 15)"]
    errs = unsafe_rules(rules(extra=[{"from": "10.9.0.0/16", "port": 9100, "interface": "eth9"}]), "node1",
                          interfaces=IFACES)
    assert errs == ["node1: firewall_extra_rules interface='eth9' does not exist on this host (interfaces: eno1, "
                    "eth0, lo)"]
    ok = [{"from": "10.9.0.0/16", "port": 9100, "interface": "eno1", "comment": "node exporter (9100/tcp)"}]
    assert unsafe_rules(rules(extra=ok), "node1", interfaces=IFACES) == []


def test_sources_near_the_whole_internet_are_refused_like_the_world():
    """Review: 0.0.0.0/1 plus 128.0.0.0/1 (all of IPv4) passed the exact 0.0.0.0/0 match."""
    errs = unsafe_rules(rules(admin=("0.0.0.0/1", "128.0.0.0/1")), "node1")
    assert errs == [
        "node1: firewall_admin_cidrs opens SSH from the admin network to 2147483648 addresses (0.0.0.0/1, shorter "
        "than /8): close to the whole Internet; name the networks that need it, or set firewall_allow_world: true",
        "node1: firewall_admin_cidrs opens SSH from the admin network to 2147483648 addresses (128.0.0.0/1, shorter "
        "than /8): close to the whole Internet; name the networks that need it, or set firewall_allow_world: true"]
    assert unsafe_rules(rules(admin=("10.0.0.0/8",)), "node1") == []
    assert "2001::/3" in unsafe_rules(rules(extra=[{"from": "2001::/3", "port": 22}]), "node1")[0]
    assert unsafe_rules(rules(admin=("0.0.0.0/1", "128.0.0.0/1")), "node1", allow_world=True) == []


def test_cluster_rule_must_hold_every_node():
    """Found by a break-it round: a cluster CIDR of 10.0.0.128/25 was accepted for nodes at .11-.13."""
    r = ruleset("10.0.0.128/25", "eth0", [29400], ["10.0.0.128/25"], ["192.168.10.0/24"])
    members = {"node1": "10.0.0.11", "node2": "10.0.0.12", "node3": "10.0.0.200"}
    assert unsafe_rules(r, "node1", members=members) == [
        "node1: firewall_cluster_cidr=10.0.0.128/25 does not hold the data-plane address of node1 (10.0.0.11), "
        "node2 (10.0.0.12): those nodes could not reach the others' NCCL/Gloo ports; use a CIDR holding every node"]
    assert unsafe_rules(rules(), "node1", members=members) == []


def test_every_comment_written_is_ncclprep_s_so_its_rules_are_its_own():
    """Review F7: the role owns the ufw rules with its comment; an extra rule's comment gets the prefix."""
    r = rules(extra=[{"from": "10.9.0.0/16", "port": 9100, "comment": "node exporter"},
                     {"from": "10.8.0.0/16", "port": 9200}, {"from": "10.7.0.0/16", "comment": "ncclprep: mine"}])
    assert all(x["comment"].startswith("ncclprep: ") for x in r)
    assert [x["comment"] for x in r[-3:]] == ["ncclprep: node exporter", "ncclprep: extra rule", "ncclprep: mine"]


def _live(source, port, proto="tcp", comment="ncclprep: SSH from the admin network", **kw):
    return {"action": "allow", "route": False, "proto": proto, "port": port, "to": "0.0.0.0/0", "from": source,
            "from_port": None, "app": None, "direction": "in", "interface": None, "comment": comment, "v6": False,
            **kw}


def test_ufw_rules_no_longer_intended_are_stale_if_ncclprep_s_and_foreign_otherwise():
    from ansible.module_utils.ncclprep.concerns.firewall import ufw_unintended

    intended = rules(admin=("192.168.10.0/24",))
    live = [_live("10.0.0.0/24", None, "any", "ncclprep: cluster traffic", interface="eth0"),
            _live("10.0.0.0/24", "29400", comment="ncclprep: torch.distributed rendezvous"),
            _live("192.168.10.0/24", "22"),
            _live("192.168.20.0/24", "22"),  # dropped from firewall_admin_cidrs
            _live("10.0.0.0/24", None, "any", "ncclprep: cluster traffic", interface="eth1"),  # other interface
            _live("0.0.0.0/0", None, "any", None),  # ufw allow from any
            _live("0.0.0.0/0", "22", comment=None, app="OpenSSH"),
            _live("10.0.0.0/24", "22", to="10.0.0.5", comment=None),  # to one address only: not the intended rule
            _live("0.0.0.0/0", "23", action="deny", comment=None),  # closes: never compared
            _live("0.0.0.0/0", "24", direction="out", comment=None)]
    out = ufw_unintended(intended, live)
    assert [r["text"] for r in out["stale"]] == ["allow in proto tcp from 192.168.20.0/24 to any port 22",
                                                 "allow in on eth1 from 10.0.0.0/24 to any"]
    assert [r["text"] for r in out["foreign"]] == ["allow in from any to any", "allow in from any to any app OpenSSH",
                                                   "allow in proto tcp from 10.0.0.0/24 to 10.0.0.5 port 22"]
    # the address ufw writes without /32 is the /32 of the inventory
    assert ufw_unintended(rules(admin=("192.168.10.7/32",)), [_live("192.168.10.7", "22")])["stale"] == []




def test_only_the_rules_ufw_does_not_hold_as_written_go_to_the_ufw_module():
    """A re-run of site.yml with nothing to change ran one ufw command per intended rule (9.5 s
    of 58 s on the local cluster): only a rule ufw does not hold with the same source, port,
    protocol, interface and comment is handed to community.general.ufw; a rule from every
    address always is (ufw writes it for IPv6 as well)."""
    from ansible.module_utils.ncclprep.concerns.firewall import ufw_to_add

    intended = rules(admin=("192.168.10.0/24",), extra=[{"from": "0.0.0.0/0", "port": 9100, "comment": "exporter"}])
    held = [_live(r["from"], None if r["port"] is None else str(r["port"]), r["proto"], r["comment"],
                  interface=r.get("interface")) for r in intended]
    assert ufw_to_add(intended, held) == [intended[-1]]  # only the one from every address
    assert ufw_to_add(intended, None) == intended
    # one gone, one with another comment, one to a single address, one denied: each goes to the module
    changed = [dict(held[1], comment="ncclprep: renamed"), dict(held[2], to="10.0.0.5"), dict(held[3], action="deny")]
    assert ufw_to_add(intended, [held[0], *changed, *held[4:]]) == intended[1:4] + [intended[-1]]
    assert ufw_to_add(intended, held[1:]) == [intended[0], intended[-1]]
    # ufw writes a /32 without its suffix
    one = rules(admin=("192.168.10.7/32",))
    assert ufw_to_add(one, [_live(r["from"].removesuffix("/32"), None if r["port"] is None else str(r["port"]),
                                  r["proto"], r["comment"], interface=r.get("interface")) for r in one]) == []


def test_a_member_that_cannot_be_reached_keeps_its_rules():
    """Review F13 on the local cluster: with node3 stopped, node3's own rules on node1 and node2
    were reported (validate) and deleted (site.yml) as no longer intended, since this run did not
    know node3's address. With unknown_in, ncclprep's rules from one address inside the cluster
    network stay; anyone else's, and a network-wide one, do not."""
    from ansible.module_utils.ncclprep.concerns.firewall import nft_unintended, ufw_unintended

    intended = ruleset(["10.0.0.11", "10.0.0.12"], "eth0", [29400], ["10.0.0.11", "10.0.0.12"], [])
    node3 = [_live("10.0.0.13", None, "any", "ncclprep: cluster node (NCCL, Gloo, rendezvous)", interface="eth0"),
             _live("10.0.0.13", "29400", comment="ncclprep: torch.distributed rendezvous")]
    others = [_live("10.0.0.14", "22", comment=None), _live("10.0.0.0/24", "29400", comment="ncclprep: old")]
    assert len(ufw_unintended(intended, node3 + others)["stale"]) == 3
    kept = ufw_unintended(intended, node3 + others, unknown_in="10.0.0.0/24")
    assert [r["text"] for r in kept["stale"]] == ["allow in proto tcp from 10.0.0.0/24 to any port 29400"]
    assert [r["text"] for r in kept["foreign"]] == ["allow in proto tcp from 10.0.0.14 to any port 22"]
    assert len(ufw_unintended(intended, node3, unknown_in="10.1.0.0/24")["stale"]) == 2  # outside the network
    table = {"rules": [{"verdict": "accept", "from": "10.0.0.13", "port": None, "proto": "any", "interface": "eth0"},
                       {"verdict": "accept", "from": "10.0.0.0/24", "port": "22", "proto": "tcp"}]}
    assert [r["from"] for r in nft_unintended(intended, table)["foreign"]] == ["10.0.0.13", "10.0.0.0/24"]
    assert [r["from"] for r in nft_unintended(intended, table, "10.0.0.0/24")["foreign"]] == ["10.0.0.0/24"]

def test_by_default_only_the_members_get_in_on_the_data_plane():
    """Review F1/F9: the cluster rule opened every port (the rendezvous store, whose state torch
    unpickles, and the probes' stores) to every host of the data-plane CIDR. Given the members'
    addresses, there is one rule per member and no rule for the network."""
    members = ["10.0.0.11", "10.0.0.12", "10.0.0.13"]
    r = ruleset(members, "eth0", [29400], members, ["192.168.10.0/24"], 22, [])
    assert [(x["from"], x["port"], x["interface"], x["var"]) for x in r] == [
        ("10.0.0.11", None, "eth0", "data_plane_members"), ("10.0.0.12", None, "eth0", "data_plane_members"),
        ("10.0.0.13", None, "eth0", "data_plane_members"), ("10.0.0.11", 29400, None, "firewall_rendezvous_sources"),
        ("10.0.0.12", 29400, None, "firewall_rendezvous_sources"),
        ("10.0.0.13", 29400, None, "firewall_rendezvous_sources"),
        ("192.168.10.0/24", 22, None, "firewall_admin_cidrs")]
    assert allows(r, "10.0.0.12", 29400, "eth0") and not allows(r, "10.0.0.99", 29400, "eth0")
    assert not allows(r, "10.0.0.99", 40000, "eth0")  # a host of the network, not a member: no ephemeral port
    facts_ifaces = {"eth0": ["10.0.0.11"]}
    # the controller at 10.0.0.1 was let in by the CIDR rule; now it needs an admin network
    errs = unsafe_rules(r, "node1", connection="10.0.0.1 50000 10.0.0.11 22", interfaces=facts_ifaces,
                          members={"node1": "10.0.0.11", "node2": "10.0.0.12", "node3": "10.0.0.13"}, over_ssh=True)
    assert errs == ["node1: the rules would lock the controller out: its SSH connection from 10.0.0.1 to "
                    "10.0.0.11:22 (interface eth0) matches no allow rule; add a CIDR holding 10.0.0.1 to "
                    "firewall_admin_cidrs"]
    r = ruleset(members, "eth0", [29400], members, ["10.0.0.1/32"], 22, [])
    assert unsafe_rules(r, "node1", connection="10.0.0.1 50000 10.0.0.11 22", interfaces=facts_ifaces,
                          members={"node1": "10.0.0.11", "node2": "10.0.0.12"}, over_ssh=True) == []
