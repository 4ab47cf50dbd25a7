import pytest
from ansible.module_utils.ncclprep.envfile import parse_env, read_env_file
from ansible.module_utils.ncclprep.netutil import ansible_facts_addresses, iface_for_cidr, parse_cidr


def test_iface_for_cidr_picks_the_interface_in_the_network():
    addrs = {"lo": ["127.0.0.1/8"], "eth0": ["192.168.1.5/24"], "bond0": ["10.0.0.7/24", "fe80::1/64"]}
    assert iface_for_cidr(addrs, "10.0.0.0/24") == ("bond0", "10.0.0.7")
    assert iface_for_cidr(addrs, "10.0.1.0/24") is None
    with pytest.raises(ValueError, match="not a CIDR: '10.0.0/33'"):
        parse_cidr("10.0.0/33")


def test_ansible_facts_addresses_reads_setup_layout():
    facts = {"interfaces": ["lo", "eth0", "br-x"],
             "eth0": {"ipv4": {"address": "10.0.0.2"}, "ipv4_secondaries": [{"address": "10.0.0.9"}],
                      "ipv6": [{"address": "fe80::2"}]},
             "br_x": {"ipv4": {"address": "172.17.0.1"}}}
    assert ansible_facts_addresses(facts) == {
        "lo": [], "eth0": ["10.0.0.2", "10.0.0.9", "fe80::2"], "br-x": ["172.17.0.1"]}


def test_env_file_values_are_taken_literally_and_bad_lines_refused(tmp_path):
    """The value is everything after the first "=", as the launcher's read loop takes it: no
    quote removed and nothing expanded (review F2: the launcher sourced the file while
    nccl_probe read it literally, so jobs and probes ran with different environments)."""
    text = "# c\nNCCL_DEBUG=WARN\nNCCL_SOCKET_IFNAME==eth0\n\nNCCL_X='q'\nNCCL_Y=a$(id)\n"
    assert parse_env(text) == {"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "=eth0", "NCCL_X": "'q'",
                               "NCCL_Y": "a$(id)"}
    path = tmp_path / "nccl.env"
    path.write_text("OK=1\nnot a line\n")
    with pytest.raises(ValueError, match=r"nccl.env:2: not KEY=VALUE"):
        read_env_file(str(path))
