"""What the concerns' readers read for the roles' conditions and validate.yml's checks
(``read`` of module_utils/ncclprep/concerns/<concern>.py, run by library/concern_facts.py and
node.read_node): where nic_mtu persists the MTU, the host keys ssh_trust records in every node's
known_hosts, the firewall's rules and listeners, nccl_env's files; and each reader's options
checked against its own OPTIONS."""

from __future__ import annotations

import os
import shutil

import pytest
from ansible.module_utils.ncclprep import concerns
from ansible.module_utils.ncclprep.concerns import firewall, nccl_env
from ansible.module_utils.ncclprep.concerns.nic_mtu import netplan_netdef_type, nic_persist, persist_manager, read_mtu
from ansible.module_utils.ncclprep.concerns.ssh_trust import read_account, ssh_folder_problem

import ncclprep

ED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKxulkEfovnGyAAneOt8Z/7XR7ws22inGYvUujwDbrGX"


class Runner:
    """A fake command runner: nmcli answers ``nmcli``; every call is recorded."""

    def __init__(self, nmcli=(0, "Wired connection 1\n", "")):
        self.nmcli, self.calls = nmcli, []

    def __call__(self, argv, timeout):
        self.calls.append((argv, timeout))
        if argv[0] == "nmcli":
            return self.nmcli
        if argv[:2] == ["ip", "-j"]:
            return 0, '[{"mtu": 1500, "min_mtu": 68, "max_mtu": 9000}]', ""
        return 127, "", "not found"


def write(root, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def test_netplan_that_defines_the_interface_is_chosen_and_ncclprep_own_drop_in_does_not_count(tmp_path):
    root = str(tmp_path)
    write(tmp_path, "/etc/netplan/60-ncclprep-mtu.yaml", "network:\n  ethernets:\n    eth0:\n      mtu: 9000\n")
    run = Runner(nmcli=(0, "--\n", ""))
    out = nic_persist(run, "eth0", "auto", "/etc/netplan/60-ncclprep-mtu.yaml", root=root)
    assert out == {"manager": "none", "netplan": [], "netplan_type": None, "ifupdown": [], "nm_connection": "--"}
    write(tmp_path, "/etc/netplan/50-cloud-init.yaml",
          "network:\n  version: 2\n  ethernets:\n    eth0:\n      dhcp4: true\n")
    out = nic_persist(run, "eth0", "auto", "/etc/netplan/60-ncclprep-mtu.yaml", root=root)
    assert out == {"manager": "netplan", "netplan": ["/etc/netplan/50-cloud-init.yaml"], "netplan_type": "ethernets",
                   "ifupdown": [], "nm_connection": "--"}
    # the name is matched literally: eth0x1 is not the VLAN eth0.1 (grep -E read the dot as any character)
    write(tmp_path, "/etc/netplan/70-other.yaml", "network:\n  ethernets:\n    eth0x1:\n      dhcp4: true\n")
    assert nic_persist(run, "eth0.1", "netplan", None, root=root)["manager"] == "none"
    assert nic_persist(run, "eth0x1", "netplan", None, root=root)["netplan"] == ["/etc/netplan/70-other.yaml"]


BONDED = """network:
  version: 2
  ethernets:
    eno1: {dhcp4: false}
    eno2:
      dhcp4: false
  bonds:
    bond0:   # the data plane
      interfaces: [eno1, eno2]
      mtu: 1500
  vlans:
    "bond0.100":
      id: 100
      link: bond0
  bridges:
    br0:
      interfaces:
        - bond0.100
"""


@pytest.mark.parametrize("interface,kind", [("bond0", "bonds"), ("bond0.100", "vlans"), ("br0", "bridges"),
                                            ("eno2", "ethernets"), ("eno1", "ethernets"), ("interfaces", None),
                                            ("id", None)])
def test_the_netplan_device_type_of_the_interface_is_read_for_the_drop_in(interface, kind):
    """Review F4: nic_mtu wrote its drop-in under ethernets for a bond, and netplan refused the whole
    configuration ("Updated definition 'bond0' changes device type"). Keys inside a definition
    (interfaces, id) are not definitions."""
    assert netplan_netdef_type(BONDED, interface) == kind


def test_nic_persist_reports_a_bond_under_bonds(tmp_path):
    write(tmp_path, "/etc/netplan/01-bond.yaml", BONDED)
    out = nic_persist(Runner(nmcli=(1, "", "")), "bond0", "auto", "/etc/netplan/60-ncclprep-mtu.yaml",
                      root=str(tmp_path))
    assert out["manager"] == "netplan" and out["netplan_type"] == "bonds"


def test_ifupdown_is_chosen_after_netplan_and_only_the_managers_nic_mtu_persist_allows_are_asked(tmp_path):
    root = str(tmp_path)
    write(tmp_path, "/etc/network/interfaces.d/eth1", "auto eth1\niface eth1 inet manual\n")
    write(tmp_path, "/etc/network/interfaces", "source /etc/network/interfaces.d/*\niface eth10 inet dhcp\n")
    run = Runner()
    out = nic_persist(run, "eth1", "auto", None, root=root)
    assert out == {"manager": "ifupdown", "netplan": [], "netplan_type": None,
                   "ifupdown": ["/etc/network/interfaces.d/eth1"], "nm_connection": "Wired connection 1"}
    assert [argv for argv, _ in run.calls] == [
        ["nmcli", "--get-values", "GENERAL.CONNECTION", "device", "show", "eth1"]]
    run = Runner()
    out = nic_persist(run, "eth1", "networkmanager", None, timeout=3.0, root=root)
    assert out == {"manager": "networkmanager", "netplan": [], "netplan_type": None, "ifupdown": [],
                   "nm_connection": "Wired connection 1"}
    assert run.calls[0][1] == 3.0
    run = Runner()
    assert nic_persist(run, "eth1", "none", None, root=root)["manager"] == "none" and run.calls == []


def test_networkmanager_counts_only_when_nmcli_names_a_connection():
    assert persist_manager("auto", [], [], "--") == "none"
    assert persist_manager("auto", [], [], "") == "none"
    assert persist_manager("auto", ["/etc/netplan/a.yaml"], ["/etc/network/interfaces"], "c") == "netplan"
    assert persist_manager("auto", [], ["/etc/network/interfaces"], "c") == "ifupdown"
    with pytest.raises(ValueError, match="nic_mtu_persist='systemd-networkd': valid: auto, netplan"):
        persist_manager("systemd-networkd", [], [], "")
    # nmcli missing or timed out: no connection
    run = Runner(nmcli=(127, "", "No such file"))
    assert nic_persist(run, "eth0", "networkmanager", None, root="/nonexistent")["nm_connection"] == ""


def test_nic_mtu_facts_carry_the_persistence_and_none_without_an_interface(tmp_path):
    write(tmp_path, "/etc/network/interfaces", "allow-hotplug ens1\niface ens1 inet static\n")
    out = read_mtu(Runner(nmcli=(10, "", "")), "ens1", persist="auto", root=str(tmp_path), sysfs=str(tmp_path))
    assert out["mtu"] == 1500 and out["persist"]["manager"] == "ifupdown"
    assert read_mtu(Runner(), None)["persist"] == {"manager": "none", "netplan": [], "ifupdown": [],
                                                   "nm_connection": ""}


def test_ssh_trust_reads_the_host_keys_of_the_types_asked_in_that_order(tmp_path):
    write(tmp_path, "/etc/ssh/ssh_host_ed25519_key.pub", f"{ED} root@node1\n")
    write(tmp_path, "/etc/ssh/ssh_host_rsa_key.pub", "garbage\n")
    out = read_account("root", ["ecdsa", "ed25519", "rsa"], root=str(tmp_path))
    # ecdsa has no file, rsa's is not a key line: left out as the role's read left them out
    assert out["host_keys"] == [ED] and out["user"] == "root" and out["home"] == "/root"
    assert read_account("no-such-user-ncclprep", [], root=str(tmp_path)) == {
        "user": "no-such-user-ncclprep", "home": None, "host_keys": [], "ssh_dir_problem": None}


def test_a_linked_or_foreign_ssh_folder_is_named_and_never_followed(tmp_path):
    """Review F5: an account that links ~/.ssh to /usr/local/bin had root chown that folder. The
    reader names a link, a folder of another owner and a link to the key inside; it follows none."""
    home = tmp_path / "home"
    home.mkdir()
    uid = os.getuid()
    assert ssh_folder_problem(str(home), uid, ["k"]) is None  # absent: the role makes it
    target = tmp_path / "usr-local-bin"
    target.mkdir()
    (home / ".ssh").symlink_to(target)
    assert ssh_folder_problem(str(home), uid) == f"{home}/.ssh is a symbolic link (to {target})"
    (home / ".ssh").unlink()
    (home / ".ssh").mkdir()
    assert ssh_folder_problem(str(home), uid + 1) == (
        f"{home}/.ssh is owned by uid {uid}, not the account's uid {uid + 1}")
    (home / ".ssh" / "k.pub").symlink_to("/etc/shadow")
    assert ssh_folder_problem(str(home), uid, ["k", "k.pub"]) == (
        f"{home}/.ssh/k.pub is a symbolic link (to /etc/shadow)")
    assert ssh_folder_problem(str(home), uid, ["k"]) is None
    assert os.stat(target).st_uid == uid and sorted(os.listdir(target)) == []


def test_an_absent_ssh_folder_the_account_cannot_make_is_named_before_any_change(tmp_path):
    """The role makes ~/.ssh as the account (review N11), not as root: a home the account does not
    own or may not write, or none at all, is named by validate.yml instead of failing mid-run."""
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    uid = os.getuid() or 4242  # an account other than root: root makes its .ssh anywhere
    if os.getuid() == 0:
        os.chown(home, uid, -1)
    assert ssh_folder_problem(str(home), uid) is None
    assert ssh_folder_problem(str(tmp_path / "nohome"), 0) is None
    fix = f"make {home}/.ssh a folder the account owns (mode 0700) first"
    assert ssh_folder_problem(str(home), uid + 1) == (
        f"{home}/.ssh is missing and the account cannot make it: its home {home} is not a folder it owns "
        f"and may write (uid {uid}, mode 0755): {fix}")
    home.chmod(0o555)
    assert ssh_folder_problem(str(home), uid).endswith(f"(uid {uid}, mode 0555): {fix}")
    home.chmod(0o755)
    assert ssh_folder_problem(str(tmp_path / "nohome"), uid) == (
        f"{tmp_path}/nohome/.ssh is missing and its home {tmp_path}/nohome cannot be used (No such file or "
        f"directory): make {tmp_path}/nohome/.ssh a folder the account owns (mode 0700) first")


def test_the_registry_reads_each_concern_with_its_own_options():
    assert concerns.read("nic_mtu", Runner(), {"interface": "eth0", "timeout": "2", "persist": "none"})[
        "persist"]["manager"] == "none"
    assert concerns.read("ssh_trust", Runner(), {"host_key_types": "ed25519"})["host_keys"] == []


def test_firewall_facts_keep_the_tcp_listeners_that_listen_ports_facts_read(tmp_path):
    """listen_ports_facts' tcp_listen entries (ss: one per process and address) are kept as
    {port, address, pid, name}; an entry without a numeric port is dropped; not read: None."""
    tcp_listen = [{"address": "0.0.0.0", "name": "sshd", "pid": 1, "port": 22, "protocol": "tcp", "user": "root",
                   "stime": "Tue Dec  1 22:04:28 2026"},
                  {"address": "*", "name": "python3", "pid": 4242, "port": 29400, "protocol": "tcp"},
                  {"address": "*", "name": "odd", "pid": 7, "port": "?"}, "not a dict"]
    read = firewall.read_rules(Runner(), "ufw", root=str(tmp_path), listening=tcp_listen)
    assert read["listening"] == [{"port": 22, "address": "0.0.0.0", "pid": 1, "name": "sshd"},
                                 {"port": 29400, "address": "*", "pid": 4242, "name": "python3"}]
    assert firewall.read_rules(Runner(), "ufw", root=str(tmp_path))["listening"] is None
    params = {"backend": "ufw", "timeout": 2.0, "listening": tcp_listen[:1]}
    assert concerns.read("firewall", Runner(), params)["listening"][0]["name"] == "sshd"


def test_nccl_env_facts_read_the_launch_files_as_they_are(tmp_path):
    env = tmp_path / "nccl.env"
    env.write_text("# managed\nGLOO_SOCKET_IFNAME=eth0\nNCCL_DEBUG=WARN\n")
    bad = tmp_path / "bad.conf"
    bad.write_text("this is not KEY=VALUE\n")
    read = nccl_env.read_env(procfs=str(tmp_path), env_files=[str(env), str(tmp_path / "absent"), str(bad)])
    assert read["gpus"] == 0
    assert read["files"][0] == {"path": str(env), "values": {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN"}}
    assert read["files"][1] == {"path": str(tmp_path / "absent"), "values": None}
    assert read["files"][2]["values"].startswith(f"unreadable: {bad}:1: not KEY=VALUE")


def test_ufw_facts_read_its_own_rule_files_and_ipv6_setting(tmp_path):
    """Review F7: with ufw the reader also takes ufw's rules as it keeps them (user.rules, user6.rules,
    fixtures from a real ufw) and IPV6= of /etc/default/ufw; a node without them gives None."""
    (tmp_path / "usr" / "sbin").mkdir(parents=True)
    (tmp_path / "usr" / "sbin" / "ufw").write_text("")
    assert firewall.read_rules(Runner(), "ufw", root=str(tmp_path))["ufw_rules"] is None
    fixtures = os.path.join(ncclprep.REPO_ROOT, "tests", "fixtures", "firewall")
    (tmp_path / "etc" / "ufw").mkdir(parents=True)
    (tmp_path / "etc" / "default").mkdir()
    shutil.copy(os.path.join(fixtures, "user.rules"), tmp_path / "etc" / "ufw" / "user.rules")
    (tmp_path / "etc" / "default" / "ufw").write_text('# comment\nIPV6=no\nDEFAULT_INPUT_POLICY="DROP"\n')
    read = firewall.read_rules(Runner(), "ufw", root=str(tmp_path))
    assert read["ufw_ipv6"] == "no"
    assert read["ufw_defaults"] is None  # `ufw status verbose` did not answer
    assert [(r["action"], r["from"], r["port"], r["v6"]) for r in read["ufw_rules"]] == [
        ("allow", "10.0.0.0/24", None, False), ("allow", "192.168.10.0/24", "22", False),
        ("allow", "192.168.20.0/24", "22", False), ("allow", "0.0.0.0/0", "22", False),
        ("allow", "0.0.0.0/0", None, False), ("limit", "0.0.0.0/0", "2222", False),
        ("allow", "10.1.0.0/16", "6000:6007", False), ("deny", "10.9.9.9", None, False)]
    shutil.copy(os.path.join(fixtures, "user6.rules"), tmp_path / "etc" / "ufw" / "user6.rules")
    assert [r["from"] for r in firewall.read_rules(Runner(), "ufw", root=str(tmp_path))["ufw_rules"]
            if r["v6"]] == ["::/0", "::/0", "::/0", "fd00::/64"]
    nft = firewall.read_rules(Runner(), "nftables", root=str(tmp_path))
    assert nft["ufw_rules"] is None and nft["ufw_ipv6"] is None and nft["ufw_defaults"] is None


@pytest.mark.parametrize("status, defaults", [
    ("Status: active\nLogging: on (low)\nDefault: reject (incoming), allow (outgoing), disabled (routed)\n"
     "New profiles: skip\n", {"incoming": "reject", "outgoing": "allow"}),
    ("Status: inactive\n", None),
])
def test_ufw_facts_give_the_default_policies_an_active_ufw_prints(tmp_path, status, defaults):
    """The firewall role runs `ufw default` only for a policy that differs (each reloads the
    firewall: 4.6 s of a re-run with nothing to change): the facts carry the policies an active
    ufw prints; an inactive one prints none (the role enables it, a change either way)."""
    (tmp_path / "usr" / "sbin").mkdir(parents=True)
    (tmp_path / "usr" / "sbin" / "ufw").write_text("")

    def run(argv, timeout):
        return (0, status, "") if argv[:2] == ["ufw", "status"] else (127, "", "not found")

    assert firewall.read_rules(run, "ufw", root=str(tmp_path))["ufw_defaults"] == defaults


def test_each_reader_takes_its_own_options_only():
    """Issue 24, item 1: a reader's options are checked against its concern's OPTIONS, not a union of
    every reader's: rps_rfs given firewall's ``backend`` is refused (the union let it through and
    dropped it), as is an unknown concern; defaults and Ansible's conversions are applied."""
    assert concerns.reader_options("nic_mtu", {"interface": "eth0", "timeout": "2"}) == {
        "interface": "eth0", "persist": "auto", "netplan_file": None, "timeout": 2.0}
    assert concerns.reader_options("rps_rfs", {"interface": "eth1"}) == {"interface": "eth1"}
    for concern, options, message in [
        ("roce_qos", {}, "'roce_qos' is not a concern read here (valid: nic_mtu, rps_rfs, numa_pinning, ssh_trust, "
                         "firewall, nccl_env, slurm_health)"),
        ("nic_mtu", {"persist": "systemd"}, "nic_mtu: persist='systemd'; valid: auto, netplan, ifupdown, "
                                            "networkmanager, none"),
        ("rps_rfs", {"interface": "eth0", "backend": "ufw"}, "rps_rfs: unknown option(s) ['backend']; valid: "
                                                             "['interface']"),
    ]:
        with pytest.raises(ValueError) as err:
            concerns.reader_options(concern, options)
        assert str(err.value) == message
    with pytest.raises(ValueError, match="needs map_file"):
        concerns.read("numa_pinning", Runner(), {"interface": "eth0"})
