import pytest
from ansible.module_utils.ncclprep.sysctl import normalize, parse_sysctl_a, proc_path, read_live


def test_untuned_host_case_reads_correct_values(case):
    values, unparsed = parse_sysctl_a(case("sysctl/untuned-host-net.txt"))
    assert values["net.core.somaxconn"] == "128"
    assert values["net.core.netdev_budget"] == "300"
    assert values["net.core.netdev_max_backlog"] == "1000"
    assert values["net.core.rmem_max"] == values["net.core.wmem_max"] == "212992"
    assert values["net.ipv4.tcp_rmem"].split()[2] == "6291456"
    assert values["net.core.rps_sock_flow_entries"] == "0"
    assert values["net.ipv4.ip_local_port_range"] == "32768 60999"
    assert values["net.ipv4.conf.all.rp_filter"] == values["net.ipv4.conf.default.rp_filter"] == "1"
    for key in ("arp_ignore", "arp_filter", "arp_announce"):
        assert values[f"net.ipv4.conf.all.{key}"] == "0"
    assert values["net.ipv4.ip_local_reserved_ports"] == ""  # empty value kept, not dropped
    assert unparsed == []


def test_unknown_lines_are_kept_as_unparsed_never_raised():
    values, unparsed = parse_sysctl_a("net.core.somaxconn = 4096\nsysctl: permission denied on key x\n\n")
    assert values == {"net.core.somaxconn": "4096"}
    assert unparsed == ["sysctl: permission denied on key x"]


def test_normalize_collapses_whitespace_and_rejects_booleans():
    assert normalize("4096\t87380\t6291456") == "4096 87380 6291456"
    assert normalize(65535) == "65535"
    assert normalize([4096, 65536, 1]) == "4096 65536 1"
    with pytest.raises(TypeError, match="boolean"):
        normalize(True)


def test_proc_path_and_read_live(tmp_path):
    assert proc_path("net.core.somaxconn") == "/proc/sys/net/core/somaxconn"
    with pytest.raises(ValueError, match="not a sysctl key"):
        proc_path("somaxconn")
    (tmp_path / "net" / "core").mkdir(parents=True)
    (tmp_path / "net" / "core" / "somaxconn").write_text("4096\n")
    live = read_live(["net.core.somaxconn", "net.core.netdev_budget"], root=str(tmp_path))
    assert live == {"net.core.somaxconn": "4096", "net.core.netdev_budget": None}


@pytest.mark.parametrize("key,value,available,error", [
    ("net.ipv4.tcp_congestion_control", "brr", ["reno", "cubic"], "not offered by this kernel"),
    ("net.ipv4.tcp_congestion_control", "bbr", ["reno", "cubic", "bbr"], None),
    ("net.core.somaxconn", "lots", None, "non-numeric 'lots'"),
    ("net.ipv4.tcp_rmem", "4096 87380 16M", None, "non-numeric '16M'"),
    ("net.ipv4.tcp_rmem", [4096, 87380, 16777216], None, None),
    ("net.ipv4.tcp_mtu_probing", True, None, "YAML boolean True"),
    ("net.core.somaxconn", "", None, "empty value"),
    ("net.core.default_qdisc", "fq", None, None),
    ("net.core.default_qdisc", "fq codel", None, "not a single word"),
])
def test_check_value(key, value, available, error):
    from ansible.module_utils.ncclprep.sysctl import check_value

    got = check_value(key, value, available)
    if error is None:
        assert got is None
    else:
        assert error in got


def test_brr_suggests_bbr():
    from ansible.module_utils.ncclprep.sysctl import check_value

    assert "did you mean 'bbr'?" in check_value("net.ipv4.tcp_congestion_control", "brr", ["reno", "cubic"])
