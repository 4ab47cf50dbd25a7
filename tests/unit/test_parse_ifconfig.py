"""ifconfig -a in both net-tools layouts, read into parse_ip_link's shape and judged by diagnose_ip_link."""

from ansible.module_utils.ncclprep.parsers.ifconfig import parse_ifconfig
from ansible.module_utils.ncclprep.parsers.ip_link import diagnose_ip_link, parse_ip_link

# net-tools 2.10 (Ubuntu 22.04): a RoCE port, an IPoIB port administratively up without carrier, lo.
NEW = """\
enp65s0f0np0: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 9000
        inet 10.0.0.5  netmask 255.255.255.0  broadcast 10.0.0.255
        inet6 fe80::ba3f:d2ff:fe10:2a4c  prefixlen 64  scopeid 0x20<link>
        ether b8:3f:d2:10:2a:4c  txqueuelen 1000  (Ethernet)
        RX packets 1843002  bytes 2113402771 (2.1 GB)
        RX errors 0  dropped 12  overruns 0  frame 0
        TX packets 902113  bytes 98221131 (98.2 MB)
        TX errors 0  dropped 0 overruns 0  carrier 0  collisions 0

ib0: flags=4099<UP,BROADCAST,MULTICAST>  mtu 4092
        infiniband 00:00:10:29:FE:80:00:00:00:00:00:00:00:00:00:00:00:00:00:00  txqueuelen 256  (InfiniBand)
        RX packets 0  bytes 0 (0.0 B)
        RX errors 0  dropped 0  overruns 0  frame 0
        TX packets 0  bytes 0 (0.0 B)
        TX errors 0  dropped 0 overruns 0  carrier 0  collisions 0

lo: flags=73<UP,LOOPBACK,RUNNING>  mtu 65536
        inet 127.0.0.1  netmask 255.0.0.0
        inet6 ::1  prefixlen 128  scopeid 0x10<host>
        loop  txqueuelen 1000  (Local Loopback)
        RX packets 3301  bytes 402113 (402.1 KB)
        RX errors 0  dropped 0  overruns 0  frame 0
        TX packets 3301  bytes 402113 (402.1 KB)
        TX errors 0  dropped 0 overruns 0  carrier 0  collisions 0
"""

# net-tools 1.60 (CentOS 6 / Ubuntu 14.04): Ethernet, IPoIB as UNSPEC with its warning, lo.
OLD = """\
Ifconfig uses the ioctl access method to get the full address information, which limits hardware addresses to 8 bytes.
Because Infiniband address has 20 bytes, only the first 8 bytes are displayed correctly.
Ifconfig is obsolete! For replacement check ip.
eth0      Link encap:Ethernet  HWaddr 00:25:90:AB:12:34
          inet addr:10.0.0.5  Bcast:10.0.3.255  Mask:255.255.252.0
          inet6 addr: fe80::225:90ff:feab:1234/64 Scope:Link
          UP BROADCAST RUNNING MULTICAST  MTU:1500  Metric:1
          RX packets:123456 errors:0 dropped:0 overruns:0 frame:0
          TX packets:65432 errors:0 dropped:0 overruns:0 carrier:0
          collisions:0 txqueuelen:1000
          RX bytes:98765432 (94.1 MiB)  TX bytes:1234567 (1.1 MiB)
          Interrupt:16 Memory:fb5e0000-fb600000

ib0       Link encap:UNSPEC  HWaddr 80-00-00-48-FE-80-00-00-00-00-00-00-00-00-00-00
          inet addr:10.1.0.5  Bcast:10.1.255.255  Mask:255.255.0.0
          BROADCAST MULTICAST  MTU:2044  Metric:1
          RX packets:0 errors:0 dropped:0 overruns:0 frame:0
          TX packets:0 errors:0 dropped:0 overruns:0 carrier:0
          collisions:0 txqueuelen:256
          RX bytes:0 (0.0 b)  TX bytes:0 (0.0 b)

lo        Link encap:Local Loopback
          inet addr:127.0.0.1  Mask:255.0.0.0
          inet6 addr: ::1/128 Scope:Host
          UP LOOPBACK RUNNING  MTU:65536  Metric:1
          RX packets:80 errors:0 dropped:0 overruns:0 frame:0
          TX packets:80 errors:0 dropped:0 overruns:0 carrier:0
          collisions:0 txqueuelen:0
          RX bytes:5600 (5.4 KiB)  TX bytes:5600 (5.4 KiB)
"""


def by_name(parsed: dict) -> dict:
    return {link["name"]: link for link in parsed["links"]}


def test_new_layout_reads_flags_mtu_addresses_with_prefix_lengths_and_hardware_lines():
    parsed = parse_ifconfig(NEW)
    assert parsed["layout"] == "net-tools 2" and parsed["unparsed"] == []
    links = by_name(parsed)
    assert list(links) == ["enp65s0f0np0", "ib0", "lo"]
    roce = links["enp65s0f0np0"]
    assert (roce["flags"], roce["mtu"], roce["state"], roce["qlen"]) == (
        ["UP", "BROADCAST", "RUNNING", "MULTICAST"], 9000, "UP", 1000)
    assert (roce["link_type"], roce["mac"]) == ("ether", "b8:3f:d2:10:2a:4c")
    assert roce["addresses"] == [{"family": "inet", "address": "10.0.0.5/24", "scope": None},
                                 {"family": "inet6", "address": "fe80::ba3f:d2ff:fe10:2a4c/64", "scope": "link"}]
    ib0 = links["ib0"]
    assert (ib0["state"], ib0["mtu"], ib0["link_type"], ib0["qlen"]) == ("DOWN", 4092, "infiniband", 256)
    assert ib0["mac"] == "00:00:10:29:fe:80" + ":00" * 14
    lo = links["lo"]
    assert (lo["link_type"], lo["mac"], lo["mtu"], lo["state"]) == ("loopback", None, 65536, "UP")
    assert [a["address"] for a in lo["addresses"]] == ["127.0.0.1/8", "::1/128"]
    assert lo["addresses"][1]["scope"] == "host"


def test_ifconfig_links_have_exactly_the_keys_of_ip_links_with_what_ifconfig_does_not_print_none():
    ip_keys = set(parse_ip_link("2: eth0: <UP> mtu 1500 qdisc mq state UP\n")["links"][0])
    for text in (NEW, OLD):
        for link in parse_ifconfig(text)["links"]:
            assert set(link) == ip_keys
            assert (link["index"], link["parent"], link["qdisc"], link["master"]) == (None, None, None, None)


def test_old_layout_reads_link_encap_hwaddr_mask_and_the_flags_line():
    parsed = parse_ifconfig(OLD)
    assert parsed["layout"] == "net-tools 1.60"
    assert parsed["unparsed"] == OLD.splitlines()[:3]  # the IPoIB warning, not an interface
    links = by_name(parsed)
    eth0 = links["eth0"]
    assert (eth0["link_type"], eth0["mac"], eth0["mtu"], eth0["state"], eth0["qlen"]) == (
        "ether", "00:25:90:ab:12:34", 1500, "UP", 1000)
    assert eth0["flags"] == ["UP", "BROADCAST", "RUNNING", "MULTICAST"]
    assert eth0["addresses"] == [{"family": "inet", "address": "10.0.0.5/22", "scope": None},
                                 {"family": "inet6", "address": "fe80::225:90ff:feab:1234/64", "scope": "link"}]
    ib0 = links["ib0"]
    assert (ib0["link_type"], ib0["flags"], ib0["mtu"], ib0["state"]) == ("unspec", ["BROADCAST", "MULTICAST"], 2044,
                                                                        "DOWN")
    assert ib0["mac"] == "80-00-00-48-fe-80" + "-00" * 10 and ib0["addresses"][0]["address"] == "10.1.0.5/16"
    assert (links["lo"]["link_type"], links["lo"]["qlen"], links["lo"]["addresses"][1]["scope"]) == (
        "loopback", 0, "host")


def test_ipoib_down_is_found_by_the_ip_link_diagnosis_in_both_layouts():
    new = diagnose_ip_link(parse_ifconfig(NEW), host="n2")
    assert [(f["id"], f["severity"], f["subject"], f["mtu"]) for f in new] == [("ip.ipoib_down", "WARN", "ib0", 4092)]
    assert "no carrier" in new[0]["message"]  # UP without RUNNING
    old = diagnose_ip_link(parse_ifconfig(OLD), host="n2")
    assert [(f["id"], f["subject"]) for f in old] == [("ip.ipoib_down", "ib0")]
    assert "administratively down" in old[0]["message"]  # no UP flag; 2044 is a normal IPoIB MTU


def test_old_infiniband_encap_and_a_long_name_that_runs_into_link_encap():
    text = ("ib1       Link encap:InfiniBand  HWaddr A0:00:02:20:FE:80:00:00:00:00:00:00:00:00:00:00:00:00:00:00\n"
            "          inet addr:10.2.0.5  Bcast:10.2.0.255  Mask:255.255.255.0\n"
            "          UP BROADCAST RUNNING MULTICAST  MTU:65520  Metric:1\n"
            "enp129s0f1Link encap:Ethernet  HWaddr 00:25:90:AB:12:35\n"
            "          BROADCAST MULTICAST  MTU:1500  Metric:1\n")
    links = by_name(parse_ifconfig(text))
    assert list(links) == ["ib1", "enp129s0f1"]
    assert (links["ib1"]["link_type"], links["ib1"]["mtu"], links["ib1"]["state"]) == ("infiniband", 65520, "UP")
    assert (links["enp129s0f1"]["link_type"], links["enp129s0f1"]["state"]) == ("ether", "DOWN")
    assert diagnose_ip_link(parse_ifconfig(text)) == []  # 65520 is IPoIB connected mode; eth DOWN is not judged


def test_tab_aligned_and_truncated_output_keeps_what_was_read():
    text = ("$ /sbin/ifconfig -a\n"
            "bond0:\tflags=5187<UP,BROADCAST,RUNNING,MASTER,MULTICAST>\tmtu 1500\n"
            "\tinet 10.0.0.7\tnetmask 255.255.255.0\tbroadcast 10.0.0.255\n"
            "\tether 02:11:22:33:44:55\ttxqueuelen 1000\t(Ethernet)\n"
            "eth1      Link encap:Ethernet  HWaddr 02:11:22:33:44:56\n"
            "          inet addr:10.0.1.7  Bcast:10.0.1.255  Mas\n"
            "          inet addr:10.0.\n"
            "          UP BROADCAST RUNNING SLAVE MULTICAST  MTU:15\n")
    parsed = parse_ifconfig(text)
    assert parsed["layout"] == "net-tools 2"  # the first header's
    assert parsed["unparsed"] == ["$ /sbin/ifconfig -a", "          inet addr:10.0.1.7  Bcast:10.0.1.255  Mas",
                                  "          inet addr:10.0.", "          UP BROADCAST RUNNING SLAVE MULTICAST  MTU:15"]
    bond0, eth1 = parsed["links"]
    assert (bond0["name"], bond0["mtu"], bond0["qlen"], bond0["mac"]) == ("bond0", 1500, 1000, "02:11:22:33:44:55")
    assert "MASTER" in bond0["flags"] and bond0["addresses"][0]["address"] == "10.0.0.7/24"
    # the cut-off netmask leaves the address without a prefix; the cut-off address is not kept
    assert eth1["addresses"] == [{"family": "inet", "address": "10.0.1.7", "scope": None}]
    # the flags line cut before Metric: its flags are kept, its "MTU:15" (1500 cut short?) is not
    assert (eth1["flags"], eth1["state"], eth1["mtu"]) == (["UP", "BROADCAST", "RUNNING", "SLAVE", "MULTICAST"], "UP",
                                                          None)


def test_the_trailing_blanks_net_tools_1_60_prints_change_nothing():
    padded = OLD.replace("\n", "  \n")  # "HWaddr 00:25:90:AB:12:34  ", "collisions:0 txqueuelen:1000 "
    assert parse_ifconfig(padded)["links"] == parse_ifconfig(OLD)["links"]


def test_empty_and_garbage_input():
    assert parse_ifconfig("") == {"links": [], "layout": None, "unparsed": []}
    parsed = parse_ifconfig("ifconfig: command not found\n        inet 10.0.0.1  netmask 255.0.0.0\n")
    assert parsed["links"] == [] and len(parsed["unparsed"]) == 2
