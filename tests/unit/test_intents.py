"""Each concern's intent (``intent`` of module_utils/ncclprep/concerns/<concern>.py, through
concerns.intent): the desired state from the role's variables, the membership and the declared
node facts, with the values the roles' Jinja gave before it moved to Python (issue 24, item 5)."""

from __future__ import annotations

import pytest
from ansible.module_utils.ncclprep import concerns

MEMBERS = {"node1": {"address": "10.0.0.1", "name": "gpu-a", "fqdn": "gpu-a.lab"},
           "node2": {"address": "10.0.0.2", "name": "node2", "fqdn": None},
           "node3": {"address": None, "name": "node3", "fqdn": None}}
DATA_PLANE = {"interface": "eth1", "address": "10.0.0.1"}


def test_host_names_publishes_every_member_with_its_domain_and_own_name():
    v = {"host_names_hosts": None, "host_names_domain": "cluster", "host_names_include_hostname": True,
         "data_plane_members": MEMBERS}
    assert concerns.intent("host_names", v, None) == [
        {"host": "node1", "address": "10.0.0.1", "names": ["node1.cluster", "node1", "gpu-a"]},
        {"host": "node2", "address": "10.0.0.2", "names": ["node2.cluster", "node2"]},
        {"host": "node3", "address": None, "names": ["node3.cluster", "node3"]}]
    v.update(host_names_hosts=["node2", "node9"], host_names_domain="", host_names_include_hostname=False)
    assert concerns.intent("host_names", v, None) == [{"host": "node2", "address": "10.0.0.2", "names": ["node2"]},
                                                      {"host": "node9", "address": None, "names": ["node9"]}]


def test_nic_mtu_sysctl_roce_and_torch_take_their_variables():
    assert concerns.intent("nic_mtu", {"nic_mtu_value": "4096", "data_plane": DATA_PLANE}, None) == {
        "interface": "eth1", "mtu": 4096}
    with pytest.raises(ValueError):
        concerns.intent("nic_mtu", {"nic_mtu_value": "jumbo", "data_plane": DATA_PLANE}, None)
    assert concerns.intent("sysctl_tuning", {"sysctl_tuning_settings": {"a.b": 1, "c.d": "2"},
                                             "sysctl_tuning_overrides": {"c.d": 3}}, None) == {"a.b": 1, "c.d": 3}
    roce = {"roce_qos_interfaces": [], "roce_qos_pfc_priority": 3, "roce_qos_trust": "dscp", "roce_qos_ecn": True,
            "roce_qos_tool": "auto"}
    assert concerns.intent("roce_qos", roce, None) == {"interfaces": [], "priority": 3, "trust": "dscp", "ecn": True,
                                                       "tool": "auto"}
    assert concerns.intent("torch_runtime", {"torch_runtime_version": "2.13.0", "torch_runtime_venv": "/opt/v"},
                           None) == {"version": "2.13.0", "python": "/opt/v/bin/python",
                                     "torchrun": "/opt/v/bin/torchrun"}


def test_rps_rfs_spreads_the_flow_table_over_the_queue_names():
    facts = {"interface": "eth1", "exists": True, "local_cpus": "0-3", "online_cpus": "0-7", "possible_cpus": "0-7",
             "queues": {"rx-1": {"rps_cpus": "", "rps_flow_cnt": 0}, "rx-0": {"rps_cpus": "5", "rps_flow_cnt": 9}}}
    v = {"rps_rfs_cpus": None, "rps_rfs_flow_cnt": None,
         "sysctl_tuning_intent": {"net.core.rps_sock_flow_entries": "65536"}}
    assert concerns.intent("rps_rfs", v, facts) == {"interface": "eth1", "queues": ["rx-0", "rx-1"], "cpus": "0-3",
                                                    "mask": "0f", "flow_cnt": 32768}
    v.update(rps_rfs_cpus="4-7", sysctl_tuning_intent=None)
    assert concerns.intent("rps_rfs", v, facts)["cpus"] == "4-7"
    assert concerns.intent("rps_rfs", v, facts)["flow_cnt"] == 16384  # 32768, the kernel's table, over 2 queues
    assert concerns.intent("rps_rfs", dict(v, rps_rfs_flow_cnt=100), facts)["flow_cnt"] == 100
    with pytest.raises(ValueError):
        concerns.intent("rps_rfs", dict(v, rps_rfs_cpus="eight"), facts)


def test_rps_rfs_cpus_none_turns_rps_and_rfs_off():
    """`rps_rfs_cpus: none`: mask 0 and no flows on every rx queue (ncclprep tune's RPS/RFS off; a
    CPU list "none" failed to parse before). The facts of such a queue read back as cpus "" and 0."""
    facts = {"interface": "eth1", "exists": True, "local_cpus": "0-3", "online_cpus": "0-7", "possible_cpus": "0-7",
             "queues": {"rx-0": {"rps_cpus": "", "rps_flow_cnt": 0}}}
    v = {"rps_rfs_cpus": "none", "rps_rfs_flow_cnt": None, "sysctl_tuning_intent": None}
    assert concerns.intent("rps_rfs", v, facts) == {"interface": "eth1", "queues": ["rx-0"], "cpus": "",
                                                    "mask": "00", "flow_cnt": 0}


def test_ssh_trust_allows_the_members_and_records_every_name():
    v = {"ssh_trust_user": "root", "ssh_trust_key_name": "id_ncclprep", "ssh_trust_from": None,
         "data_plane_members": MEMBERS}
    assert concerns.intent("ssh_trust", v, {"home": "/root", "host_keys": ["x"]}) == {
        "user": "root", "home": "/root", "key": "/root/.ssh/id_ncclprep", "from": "10.0.0.1,10.0.0.2",
        "names": {"node1": ["node1", "gpu-a", "gpu-a.lab", "10.0.0.1"], "node2": ["node2", "10.0.0.2"]}}
    got = concerns.intent("ssh_trust", dict(v, ssh_trust_from="10.0.0.0/24"), {"home": None})
    assert got["key"] == "/nonexistent/.ssh/id_ncclprep" and got["from"] == "10.0.0.0/24"


def test_firewall_lets_in_the_members_own_addresses_unless_a_network_is_named():
    v = {"firewall_cluster_cidr": None, "firewall_rendezvous_ports": [29400], "firewall_rendezvous_sources": None,
         "firewall_admin_cidrs": [], "firewall_ssh_port": "22", "firewall_extra_rules": [],
         "data_plane": DATA_PLANE, "data_plane_cidr": "10.0.0.0/24", "data_plane_members": MEMBERS}
    got = concerns.intent("firewall", v, {"backend": "ufw", "rc": 0, "stdout": "Status: active"})
    assert got["backend"] == "ufw" and got["cluster_cidr"] == "10.0.0.0/24"
    assert got["unknown_in"] == "10.0.0.0/24"  # node3 has no address this run: its rules cannot name it
    assert sorted({(r["from"], r["port"], r["interface"]) for r in got["rules"]}, key=str) == [
        ("10.0.0.1", 29400, None), ("10.0.0.1", None, "eth1"), ("10.0.0.2", 29400, None), ("10.0.0.2", None, "eth1")]
    named = concerns.intent("firewall", dict(v, firewall_cluster_cidr="10.0.0.0/16"), {"backend": "nftables"})
    assert named["unknown_in"] is None and named["cluster_cidr"] == "10.0.0.0/16"
    assert sorted({(r["from"], r["port"]) for r in named["rules"]}, key=str) == [("10.0.0.0/16", 29400),
                                                                                 ("10.0.0.0/16", None)]


def test_an_intent_without_its_variables_or_facts_fails_instead_of_guessing():
    with pytest.raises(TypeError):
        concerns.intent("nic_mtu", {"data_plane": DATA_PLANE}, None)  # nic_mtu_value undefined: int(None)
    with pytest.raises(KeyError):
        concerns.intent("gpu_clocks", {}, None)


def test_nccl_env_resolves_the_interfaces_drops_nulls_and_renames_deprecated_names():
    v = {"nccl_env_settings": {"NCCL_SOCKET_IFNAME": None, "GLOO_SOCKET_IFNAME": None, "NCCL_DEBUG": "WARN",
                               "NCCL_IB_HCA": None, "NCCL_ASYNC_ERROR_HANDLING": 1},
         "nccl_env_overrides": {"NCCL_DEBUG": "INFO", "NCCL_BUFFSIZE": 8388608}, "data_plane": DATA_PLANE}
    assert concerns.intent("nccl_env", v, None) == {
        "NCCL_SOCKET_IFNAME": "=eth1", "GLOO_SOCKET_IFNAME": "eth1", "NCCL_DEBUG": "INFO",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_BUFFSIZE": "8388608"}
    # an entry no reader may take is left out of the intent; validate.yml refuses it before any change
    assert "NCCL_BOGUS" not in concerns.intent("nccl_env", dict(v, nccl_env_overrides={"NCCL_BOGUS": "1"}), None)
