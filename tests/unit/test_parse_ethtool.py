"""ethtool <dev> and ethtool -i <dev>: link settings, driver information and the link diagnosis."""

import pytest
from ansible.module_utils.ncclprep.parsers.ethtool import (
    DRIVER_KEYS,
    diagnose_ethtool,
    parse_ethtool,
    parse_ethtool_driver,
    speed_gbps,
)

# ethtool 6.x on a ConnectX-6 Dx port at 100 Gb/s (tab-indented, link modes over several lines),
# run without root: the wake-on-lan query fails and says so.
MLX5_100G = """\
Settings for enp65s0f0np0:
\tSupported ports: [ Backplane ]
\tSupported link modes:   1000baseKX/Full
\t                        10000baseKR/Full
\t                        25000baseCR/Full
\t                        50000baseCR2/Full
\t                        100000baseCR4/Full
\tSupported pause frame use: Symmetric
\tSupports auto-negotiation: Yes
\tSupported FEC modes: None\t RS\t BASER
\tAdvertised link modes:  100000baseCR4/Full
\tAdvertised pause frame use: Symmetric
\tAdvertised auto-negotiation: Yes
\tAdvertised FEC modes: RS
\tLink partner advertised link modes:  Not reported
\tLink partner advertised pause frame use: No
\tLink partner advertised auto-negotiation: Yes
\tLink partner advertised FEC modes: Not reported
\tSpeed: 100000Mb/s
\tLanes: 4
\tDuplex: Full
\tAuto-negotiation: on
\tPort: Direct Attach Copper
\tPHYAD: 0
\tTransceiver: internal
Cannot get wake-on-lan settings: Operation not permitted
\tCurrent message level: 0x00000004 (4)
\t\t\t       link
\tLink detected: yes
"""

# ethtool 3.15 (CentOS 7) on a 10G port with the cable pulled: speed and duplex unknown.
IXGBE_NO_LINK = """\
Settings for eth2:
\tSupported ports: [ FIBRE ]
\tSupported link modes:   10000baseT/Full
\tSupported pause frame use: No
\tSupports auto-negotiation: No
\tAdvertised link modes:  10000baseT/Full
\tAdvertised pause frame use: No
\tAdvertised auto-negotiation: No
\tSpeed: Unknown!
\tDuplex: Unknown! (255)
\tPort: FIBRE
\tPHYAD: 0
\tTransceiver: external
\tAuto-negotiation: off
\tSupports Wake-on: d
\tWake-on: d
\tCurrent message level: 0x00000007 (7)
\t\t\t       drv probe link
\tLink detected: no
"""

# A virtio NIC in a VM: link up, no speed.
VIRTIO = "Settings for ens3:\n\tSupported ports: [  ]\n\tSpeed: Unknown!\n\tDuplex: Unknown! (255)\n" \
         "\tPort: Other\n\tAuto-negotiation: off\n\tLink detected: yes\n"

MLX5_DRIVER = """\
driver: mlx5_core
version: 5.15.0-91-generic
firmware-version: 22.36.1010 (MT_0000000359)
expansion-rom-version:
bus-info: 0000:41:00.0
supports-statistics: yes
supports-test: yes
supports-eeprom-access: no
supports-register-dump: no
supports-priv-flags: yes
"""


def test_mlx5_100g_settings_speed_modes_and_every_field_kept():
    parsed = parse_ethtool(MLX5_100G)
    assert parsed["interface"] == "enp65s0f0np0"
    assert (parsed["speed_mbps"], parsed["duplex"], parsed["port"], parsed["link_detected"],
            parsed["auto_negotiation"]) == (100000, "Full", "Direct Attach Copper", True, True)
    assert parsed["supported_modes"] == ["1000baseKX/Full", "10000baseKR/Full", "25000baseCR/Full",
                                         "50000baseCR2/Full", "100000baseCR4/Full"]
    assert parsed["advertised_modes"] == ["100000baseCR4/Full"]
    assert parsed["fields"]["Lanes"] == "4" and parsed["fields"]["Supported FEC modes"] == "None RS BASER"
    assert parsed["fields"]["Current message level"] == "0x00000004 (4) link"
    assert parsed["fields"]["Link partner advertised link modes"] == "Not reported"
    assert parsed["unparsed"] == ["Cannot get wake-on-lan settings: Operation not permitted"]
    assert speed_gbps(parsed) == 100.0 and speed_gbps(25000) == 25.0
    assert diagnose_ethtool(parsed, host="n1") == []


def test_pulled_cable_reads_unknown_speed_as_none_and_is_a_fail():
    parsed = parse_ethtool(IXGBE_NO_LINK)
    assert (parsed["interface"], parsed["speed_mbps"], parsed["duplex"], parsed["port"]) == (
        "eth2", None, None, "FIBRE")
    assert (parsed["link_detected"], parsed["auto_negotiation"]) == (False, False)
    assert parsed["supported_modes"] == ["10000baseT/Full"] and parsed["unparsed"] == []
    assert parsed["fields"]["Duplex"] == "Unknown! (255)"
    assert speed_gbps(parsed) is None
    [f] = diagnose_ethtool(parsed, host="n4")
    assert (f["id"], f["severity"], f["subject"], f["host"], f["speed_mbps"]) == ("ethtool.no_link", "FAIL", "eth2",
                                                                                  "n4", None)
    assert "ip link set eth2 up" in f["remediation"]


def test_link_up_with_unknown_speed_is_a_warning_and_lo_without_speed_line_says_nothing():
    [f] = diagnose_ethtool(parse_ethtool(VIRTIO), host="vm1")
    assert (f["id"], f["severity"], f["subject"]) == ("ethtool.speed_unknown", "WARN", "ens3")
    assert "Unknown!" in f["message"]
    lo = parse_ethtool("Settings for lo:\n\tLink detected: yes\n")
    assert (lo["speed_mbps"], lo["link_detected"], lo["supported_modes"]) == (None, True, [])
    assert diagnose_ethtool(lo) == []


def test_prompt_a_second_block_and_a_truncated_tail_keep_what_was_read():
    text = ("root@n1:~# ethtool eth0\n" + MLX5_100G.split("\tDuplex")[0] + "\tDupl")
    parsed = parse_ethtool(text)
    assert parsed["unparsed"] == ["root@n1:~# ethtool eth0", "\tDupl"]  # a cut key is not a continuation
    assert parsed["fields"]["Lanes"] == "4"
    assert (parsed["speed_mbps"], parsed["duplex"], parsed["link_detected"]) == (100000, None, None)
    assert diagnose_ethtool(parsed) == []  # nothing said about a link state that was not read
    two = parse_ethtool(VIRTIO + "Settings for ens4:\n\tLink detected: no\n")
    assert (two["interface"], two["link_detected"]) == ("ens3", True)
    assert two["unparsed"] == ["Settings for ens4:", "\tLink detected: no"]
    assert parse_ethtool("") == {"interface": None, "speed_mbps": None, "duplex": None, "port": None,
                                 "link_detected": None, "auto_negotiation": None, "supported_modes": [],
                                 "advertised_modes": [], "fields": {}, "unparsed": []}


def test_driver_info_reads_driver_firmware_bus_and_yes_no_flags():
    info = parse_ethtool_driver(MLX5_DRIVER)
    assert (info["driver"], info["version"], info["firmware_version"], info["bus_info"]) == (
        "mlx5_core", "5.15.0-91-generic", "22.36.1010 (MT_0000000359)", "0000:41:00.0")
    assert info["expansion_rom_version"] is None
    assert (info["supports_statistics"], info["supports_eeprom_access"], info["supports_priv_flags"]) == (
        True, False, True)
    assert info["unparsed"] == []


def test_driver_info_of_a_missing_device_is_unparsed_and_keys_stay_none():
    info = parse_ethtool_driver("Cannot get driver information: No such device\n")
    assert all(info[k] is None for k in DRIVER_KEYS)
    assert info["unparsed"] == ["Cannot get driver information: No such device"]
    old = parse_ethtool_driver("driver: ixgbe\nversion: 4.4.0-k-rh7.4\nfirmware-version: 0x800003df\n"
                               "bus-info: 0000:03:00.0\nsupports-statistics: maybe\n")
    assert (old["driver"], old["firmware_version"], old["supports_statistics"], old["supports_test"]) == (
        "ixgbe", "0x800003df", None, None)


@pytest.mark.parametrize("value", [None, "100000", True, 1.5])
def test_speed_gbps_of_anything_but_an_int_is_none(value):
    assert speed_gbps(value) is None


def test_space_aligned_copy_reads_the_same_as_tab_indented():
    spaced = parse_ethtool(MLX5_100G.expandtabs(8))
    tabbed = parse_ethtool(MLX5_100G)
    assert spaced["supported_modes"] == tabbed["supported_modes"] and len(spaced["supported_modes"]) == 5
    assert spaced["fields"] == tabbed["fields"] and spaced["speed_mbps"] == 100000


def test_the_trailing_blanks_ethtool_pads_some_lines_with_change_nothing():
    padded = IXGBE_NO_LINK.replace("\n", " \n")
    assert parse_ethtool(padded) == parse_ethtool(IXGBE_NO_LINK)
