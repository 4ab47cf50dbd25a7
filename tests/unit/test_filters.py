"""Filter functions called directly (the plugin file imported as Ansible would)."""
import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.module_utils.ncclprep.concerns.firewall import ruleset
from conftest import REPO, load_source

filters = load_source("ncclprep_filters", "filter_plugins/ncclprep.py")
F = filters.FilterModule().filters()

FACTS = {"interfaces": ["lo", "eth0", "bond0"], "lo": {"ipv4": {"address": "127.0.0.1"}, "mtu": 65536},
         "eth0": {"ipv4": {"address": "192.168.5.2"}, "mtu": 1500},
         "bond0": {"ipv4": {"address": "10.0.0.4"}, "mtu": 9000}}


def test_data_plane_found_from_cidr_or_named_interface():
    dp = F["ncclprep_data_plane"](FACTS, "10.0.0.0/24", None, "node4")
    assert dp == {"interface": "bond0", "address": "10.0.0.4", "cidr": "10.0.0.0/24", "prefix": 24, "mtu": 9000}
    assert F["ncclprep_data_plane"](FACTS, "10.0.0.0/24", "bond0", "node4")["interface"] == "bond0"


@pytest.mark.parametrize("cidr,iface,message", [
    (None, None, "node4: data_plane_cidr is not set"),
    ("10.0.0.0/33", None, "node4: data_plane_cidr='10.0.0.0/33' is invalid"),
    ("10.1.0.0/24", None, "node4: no interface has an address in data_plane_cidr='10.1.0.0/24'"),
    ("10.0.0.0/24", "eth9", "node4: data_plane_interface='eth9' does not exist"),
    ("10.0.0.0/24", "eth0", "node4: data_plane_interface='eth0' has no address in data_plane_cidr='10.0.0.0/24'"),
])
def test_data_plane_errors_name_host_variable_and_value(cidr, iface, message):
    with pytest.raises(AnsibleFilterError, match=message.replace("[", r"\[").replace(".", r"\.")):
        F["ncclprep_data_plane"](FACTS, cidr, iface, "node4")


@pytest.mark.parametrize("name", ["eth0;id", "e$(id)", "eth0%i", "a`b`", "-eth0", "\u00e9th0"])
def test_a_data_plane_interface_whose_name_a_script_would_run_is_refused(name):
    """Review (security, low): Linux takes ';$()|&%' in a netdev name, and the name went unquoted
    into root scripts (rps_rfs), a unit's ExecStart (numa_pinning; systemd expands '%') and
    netplan. The data plane, the one source of the interface every role uses, refuses it."""
    facts = {"interfaces": ["lo", name], "lo": {"ipv4": {"address": "127.0.0.1"}},
             name.replace("-", "_"): {"ipv4": {"address": "10.0.0.4"}, "mtu": 9000}}
    with pytest.raises(AnsibleFilterError) as err:
        F["ncclprep_data_plane"](facts, "10.0.0.0/24", None, "node4")
    assert str(err.value) == (
        f"node4: data-plane interface {name!r}: ncclprep writes its name into root scripts, unit files and "
        "netplan, and takes only 1 to 15 of A-Z a-z 0-9 _ . - (not starting with . or -); rename the "
        "interface (a udev rule or netplan set-name)")
    good = {**facts, "interfaces": ["lo", "bond0.100"], "bond0.100": facts[name.replace("-", "_")]}
    assert F["ncclprep_data_plane"](good, "10.0.0.0/24", None, "node4")["interface"] == "bond0.100"


def test_sysctl_value_rejects_yaml_booleans_naming_key_and_host():
    assert F["ncclprep_sysctl_value"]("4096\t87380", "net.ipv4.tcp_rmem", "n1") == "4096 87380"
    with pytest.raises(AnsibleFilterError, match="n1: sysctl net.ipv4.tcp_mtu_probing: boolean True"):
        F["ncclprep_sysctl_value"](True, "net.ipv4.tcp_mtu_probing", "n1")


def test_cpu_mask_filters():
    assert F["ncclprep_cpulist_to_mask"]("0-15", 40) == "00,0000ffff"
    assert F["ncclprep_mask_to_cpulist"]("ffffffff,00000000") == "32-63"
    assert F["ncclprep_cpulist"]("0-2,5") == [0, 1, 2, 5]
    with pytest.raises(AnsibleFilterError, match="outside 0..7"):
        F["ncclprep_cpulist_to_mask"]([9], 8)


def test_sysctl_errors_name_host_key_and_value():
    errs = F["ncclprep_sysctl_errors"]({"net.ipv4.tcp_congestion_control": "brr", "net.core.somaxconn": 4096,
                                        "net.ipv4.tcp_mtu_probing": True}, "reno cubic", "node2")
    assert len(errs) == 2
    assert errs[0].startswith("node2: net.ipv4.tcp_congestion_control='brr': congestion control 'brr'")
    assert errs[1] == "node2: net.ipv4.tcp_mtu_probing=True: YAML boolean True is not a sysctl value " \
                      "(quote strings, use 0/1)"
    assert F["ncclprep_sysctl_errors"]({"net.core.somaxconn": 4096}, None, "n") == []


def test_a_sysctl_this_kernel_does_not_have_is_named_with_the_closest_name():
    known = ["net.core.somaxconn", "net.ipv4.tcp_rmem"]
    errs = F["ncclprep_sysctl_errors"]({"net.core.somaxcon": 4096, "net.core.no_such_knob": 1,
                                        "net.ipv4.tcp_rmem": "4096 87380 16777216"}, None, "node1", known)
    assert errs == ["node1: net.core.no_such_knob=1: no such sysctl on this kernel (sysctl -a lists the names)",
                    "node1: net.core.somaxcon=4096: no such sysctl on this kernel; did you mean net.core.somaxconn?"]
    assert F["ncclprep_sysctl_errors"]({"net.core.no_such_knob": 1}, None, "node1", None) == []  # names not read
    # host-global keys a container's network namespace hides (sysctl -N -a leaves them out) are not unknown
    assert F["ncclprep_sysctl_errors"]({"net.core.netdev_budget": 600, "net.core.rps_sock_flow_entries": 32768},
                                       None, "node1", known) == []


def test_a_sysctl_key_that_is_not_a_dotted_name_is_refused_even_without_the_kernel_s_names():
    """Review (section 7): the key's form was checked only against ``sysctl -N -a``; when that
    failed, a key with a newline went into the drop-in and ended its comment line."""
    errs = F["ncclprep_sysctl_errors"]({"net.core.somaxconn\nkernel.x": 1, "net.core.somaxconn": 4096}, None, "n1",
                                       None)
    assert errs == ["n1: not a sysctl key: 'net.core.somaxconn\\nkernel.x' (expected dotted name like "
                    "net.core.somaxconn)"]


def test_nccl_env_check_names_the_host():
    out = F["ncclprep_nccl_env_check"]({"NCCL_SOCKET_IFNAM": "=eth0", "NCCL_ASYNC_ERROR_HANDLING": "1"},
                                       ["lo", "eth0"], "node2")
    assert out["errors"] == ["node2: NCCL_SOCKET_IFNAM==eth0: unknown NCCL variable; did you mean NCCL_SOCKET_IFNAME?"]
    assert out["warnings"][0].startswith("node2: NCCL_ASYNC_ERROR_HANDLING=1 is deprecated")
    assert out["effective"] == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


def test_nccl_env_check_checks_the_debug_settings_too():
    """Review: nccl_env_debug_settings went into nccl-debug.env unchecked ("A-B" aborted every
    --debug launch, a ";" value ran); the role's defaults pass, nulls are dropped."""
    defaults = yaml.safe_load(open(os.path.join(REPO, "roles/nccl_env/defaults/main.yml")))
    ok = F["ncclprep_nccl_env_check"]({}, None, "node1", defaults["nccl_env_debug_settings"])
    assert ok["errors"] == []
    out = F["ncclprep_nccl_env_check"]({}, None, "node1", {"A-B": "1", "NCCL_DEBUG_FILE": "x;id", "NCCL_DEBUG": None})
    assert out["errors"] == [
        "node1: nccl_env_debug_settings A-B=1: not an environment variable name (A-Z, 0-9 and _, not starting with "
        "a digit)",
        "node1: nccl_env_debug_settings NCCL_DEBUG_FILE='x;id': ';' not allowed in a launch value (valid characters: "
        "A-Za-z0-9_.,:=^/%+@{}-)"]



def test_cidr_errors_names_host_variable_and_value():
    f = F["ncclprep_cidr_errors"]
    assert f("10.0.0.0/24, 10.1.0.0/24", "node1", "ssh_trust_from") == []
    [err] = f("10.0.0.0/24,10.1.0.300/24", "node1", "ssh_trust_from")
    assert err.startswith("node1: ssh_trust_from='10.0.0.0/24,10.1.0.300/24': ")
    assert f(None, "node2", "ssh_trust_from") == ["node2: ssh_trust_from=None: no CIDR given"]


def test_firewall_filters_build_rules_and_refuse_a_lockout():
    rules = ruleset("10.0.0.0/24", "bond0", [29400], ["10.0.0.0/24"], [], 22, [])
    assert [(r["from"], r["port"], r["interface"]) for r in rules] == [
        ("10.0.0.0/24", None, "bond0"), ("10.0.0.0/24", 29400, None)]
    # the controller reaches node4 over eth0 (192.168.5.2), which only an admin CIDR would allow
    [err] = F["ncclprep_firewall_errors"](rules, "node4", False, "192.168.5.1 40000 192.168.5.2 22", FACTS)
    assert "lock the controller out" in err and "(interface eth0)" in err
    assert F["ncclprep_firewall_errors"](rules, "node4", False, "10.0.0.1 40000 10.0.0.4 22", FACTS) == []


def test_a_kernel_host_name_or_fqdn_equal_to_another_members_name_is_refused():
    """Review F10: node2 with kernel host name node1, or node1's FQDN, passed, and known_hosts then
    mapped node1 to node2's key on every node; a name with a space or '*' went into ssh_config."""
    dup = F["ncclprep_member_duplicates"]
    assert dup({"node1": {"name": "node1", "fqdn": "node1.lab", "address": "10.0.0.1"},
                "node2": {"name": "node1", "fqdn": "node2.lab", "address": "10.0.0.2"}}) == [
        "node1 (inventory name), node2 (host name) share the name node1: one machine listed twice in the "
        "inventory, or two machines with one name (rename one: hostnamectl set-hostname)"]
    assert dup({"node1": {"name": "a", "fqdn": "Node1.lab", "address": "10.0.0.1"},
                "node2": {"name": "b", "fqdn": "node1.lab", "address": "10.0.0.2"}})[0].startswith(
        "node1 (FQDN), node2 (FQDN) share the name node1.lab")
    assert dup({"node1": {"name": "gpu-01", "fqdn": "gpu-01.c.example", "address": "10.0.0.1"},
                "node2": {"name": "gpu 02*", "fqdn": None, "address": "10.0.0.2"}}) == [
        "node2 reports the host name 'gpu 02*', which is not a host name (RFC 1123: letters, digits and '-' in "
        "dot-separated labels); fix it on the node (hostnamectl)"]
    # the name a machine is listed by and its own host name and FQDN are one machine's
    assert dup({"node1": {"name": "node1", "fqdn": "node1", "address": "10.0.0.1"}}) == []


def test_two_members_with_one_short_name_are_refused():
    """Review N21: node1.a and node1.b passed, and the job preflight and the re-test, which find a
    Slurm node's member by its name or short name, took Slurm's node1 for whichever came first:
    the wrong node measured, struck or resumed. A member's own names may share a first label."""
    dup = F["ncclprep_member_duplicates"]
    assert dup({"node1.a": {"name": None, "fqdn": None, "address": "10.0.0.1"},
                "node1.b": {"name": None, "fqdn": None, "address": "10.0.0.2"}}) == [
        "node1.a (node1.a), node1.b (node1.b) share the short name node1: a Slurm node node1 would be taken for "
        "either by the job preflight and the re-test, so the wrong node could be measured, struck or resumed "
        "(give each member a first label of its own: inventory name, hostnamectl set-hostname)"]
    # by a reported FQDN, without case
    assert dup({"gpu1": {"name": "gpu1", "fqdn": "gpu1.rack1", "address": "10.0.0.1"},
                "gpu2": {"name": "gpu2", "fqdn": "GPU1.rack2", "address": "10.0.0.2"}})[0].startswith(
        "gpu1 (gpu1), gpu2 (gpu1.rack2) share the short name gpu1: ")
    # one clash, one line: names equal in full are named as such only
    assert len(dup({"node1.a": {"name": "node1", "address": "10.0.0.1"},
                    "node1.b": {"name": "node1", "address": "10.0.0.2"}})) == 1
    assert dup({"node1.a": {"name": "node1", "fqdn": "node1.a.lab", "address": "10.0.0.1"},
                "node2.a": {"name": "node2", "fqdn": "node2.a.lab", "address": "10.0.0.2"}}) == []


def test_member_duplicates_name_the_machine_listed_twice_and_the_shared_address():
    members = {"node1": {"name": "node1", "address": "10.0.0.1"}, "node2": {"name": "node2", "address": "10.0.0.2"},
               "node4": {"name": "node2", "address": "10.0.0.2"}, "node5": {"name": "node5", "address": "10.0.0.1"},
               "node6": {"name": None, "address": None}, "node7": {"name": None, "address": None}}
    assert F["ncclprep_member_duplicates"](members) == [
        "node1, node5 share the data-plane address 10.0.0.1: one machine listed twice in the inventory, or two "
        "machines with one address (fix the interface's address)",
        "node2, node4 share the data-plane address 10.0.0.2: one machine listed twice in the inventory, or two "
        "machines with one address (fix the interface's address)",
        "node2 (inventory name), node4 (host name) share the name node2: one machine listed twice in the "
        "inventory, or two machines with one name (rename one: hostnamectl set-hostname)"]
    assert F["ncclprep_member_duplicates"]({"a": {"name": "a", "address": "1"}, "b": {"name": "b", "address": "2"}}) \
        == []


def test_the_ufw_stale_filter_hands_community_general_ufw_what_it_takes():
    """ncclprep's own ufw rule no longer intended, with ``to`` as the ufw module takes it (review F7)."""
    intended = ruleset("10.0.0.0/24", "eth0", [29400], ["10.0.0.0/24"], ["192.168.10.0/24"], 22, [])
    live = [{"action": "allow", "route": False, "proto": "tcp", "port": "22", "to": "0.0.0.0/0",
             "from": "192.168.20.0/24", "from_port": None, "app": None, "direction": "in", "interface": None,
             "comment": "ncclprep: SSH from the admin network", "v6": False}]
    stale = F["ncclprep_ufw_stale"](live, intended)
    assert [(r["from"], r["to"], r["port"], r["proto"], r["action"], r["text"]) for r in stale] == [
        ("192.168.20.0/24", "any", "22", "tcp", "allow", "allow in proto tcp from 192.168.20.0/24 to any port 22")]
    assert F["ncclprep_ufw_stale"](None, intended) == []


def test_the_key_pair_comes_from_a_live_member_and_the_pair_most_of_them_hold():
    """Review F13: the pair was always made on and read from the first member, so a dead node1
    failed every host at ssh_trust (run_once delegated to it)."""
    source = F["ncclprep_key_source"]
    members = ["node1", "node2", "node3"]
    # node1 dead: node2 holds the cluster's pair and is read from
    assert source({"node2": "aa", "node3": "aa"}, ["node2", "node3"], members) == "node2"
    # no pair anywhere: the first live member makes it
    assert source({}, ["node1", "node2", "node3"], members) == "node1"
    assert source({"node2": None, "node3": None}, ["node2", "node3"], members) == "node2"
    # node1 back with the pair it held before; node2 and node3 hold the one made while it was down
    assert source({"node1": "old", "node2": "new", "node3": "new"}, members, members) == "node2"
    # a tie: the pair of the earlier member; a fresh node without a pair counts for none
    assert source({"node1": None, "node2": "b", "node3": "c"}, members, members) == "node2"
    with pytest.raises(ValueError, match=r"no cluster member is left in the play \(members: node1, node2, node3\)"):
        source({"node1": "aa"}, ["other"], members)


def test_in_cidr_takes_an_address_inside_the_network_only():
    inside = F["ncclprep_in_cidr"]
    assert inside("10.77.29.11", "10.77.29.0/24") and not inside("10.77.30.11", "10.77.29.0/24")
    assert not inside("", "10.77.29.0/24") and not inside("node1", "10.77.29.0/24")
    assert inside("fd00::5", "fd00::/64") and not inside("10.0.0.1", "not a cidr")
