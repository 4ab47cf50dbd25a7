"""The cluster checks on records shaped like the modules return them."""

import copy
import os

import pytest
import yaml
from ansible.module_utils.ncclprep import checks as checks_pkg
from ansible.module_utils.ncclprep import concerns
from ansible.module_utils.ncclprep.checks import evaluate, make_check, overall, verdict
from ansible.module_utils.ncclprep.parsers.sysctl import parse_sysctl_a

import ncclprep

HOSTS = ["node1", "node2", "node3"]
INTENT = {"net.core.somaxconn": 65535, "net.ipv4.tcp_rmem": "4096 131072 268435456",
          "net.core.netdev_budget": 600}
CONCERNS = [concerns.name_of(c) for c in concerns.CONCERNS]
NCCL_ENV = {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN"}


def intent(**given):
    """A record's intent as report.yml builds it: one key per concern, None where not given."""
    unknown = set(given) - set(CONCERNS)
    assert not unknown, f"not concerns of the registry: {unknown}"
    return {name: given.get(name) for name in CONCERNS}


def _row(op, size, t, busbw, wrong=0):
    return {"op": op, "size_bytes": size, "count": size // 4, "time_us": t, "algbw_gbps": busbw * 0.75,
            "busbw_gbps": busbw, "wrong": wrong}


def healthy():
    records = {}
    for i, h in enumerate(HOSTS):
        records[h] = {
            "facts": {
                "hostname": h,
                "versions": {"torch": "2.13.0+cpu"},
                "data_plane": {"interface": "eth0", "address": f"10.0.0.{i + 1}", "mtu": 1500, "operstate": "up"},
                "interfaces": {"lo": {"mtu": 65536, "operstate": "unknown", "addresses": ["127.0.0.1/8"]},
                               "eth0": {"mtu": 1500, "operstate": "up", "addresses": [f"10.0.0.{i + 1}/24"]}},
                "sysctl_tuning": {"net.core.somaxconn": {"value": "65535", "writable": True},
                           "net.ipv4.tcp_rmem": {"value": "4096 131072 268435456", "writable": True},
                           "net.core.netdev_budget": {"value": None, "writable": False}},
                "host_names": [{"host": o, "name": o, "expected": f"10.0.0.{j + 1}", "addresses": [f"10.0.0.{j + 1}"],
                           "reachable": True, "error": None} for j, o in enumerate(HOSTS)],
            },
            "alive": True,
            "intent": intent(sysctl_tuning=dict(INTENT), torch_runtime={"version": "2.13.0"},
                             nccl_env=dict(NCCL_ENV)),
            "ssh": None,
            "probe": {"status": "PASS", "rank": i, "stage": "done", "missing_ranks": [], "missing_hosts": [],
                      "results": [_row("all_reduce", 4092, 100.0 + i, 0.05),
                                  _row("all_reduce", 16777212, 29000.0 + i * 100, 0.76 - i * 0.01),
                                  {"op": "reduce_scatter", "skipped": "not supported by the gloo backend"}]},
            "smoke": {"status": "PASS", "workers": [{"rank": i, "world_size": 3, "params_identical": True}]},
        }
    return records


def by_id(checks):
    return {c["id"]: c for c in checks}


def test_healthy_cluster_passes_with_no_false_positive():
    checks = evaluate(healthy(), HOSTS)
    assert overall(checks) == "PASS"
    ids = by_id(checks)
    assert ids["sysctl.net.core.netdev_budget"]["status"] == "SKIP"  # host-global in a container
    assert ids["collective.reduce_scatter"]["status"] == "SKIP"
    ar = ids["collective.all_reduce"]
    assert ar["status"] == "PASS"
    # the slowest rank (node3, 29200 us) sets the cluster figure
    assert ar["measured"]["busbw_gbps"] == pytest.approx(0.74)
    assert ar["measured"]["size_bytes"] == 16777212
    assert {c["status"] for c in checks} <= {"PASS", "SKIP"}


def test_somaxconn_fault_on_node2_names_node2_and_the_key():
    rec = healthy()
    rec["node2"]["facts"]["sysctl_tuning"]["net.core.somaxconn"]["value"] = "128"
    checks = evaluate(rec, HOSTS)
    bad = [c for c in checks if c["status"] in ("FAIL", "HANG")]
    assert [c["id"] for c in bad] == ["sysctl.net.core.somaxconn"]
    assert bad[0]["hosts"] == ["node2"]
    assert bad[0]["measured"] == {"node2": "128"}
    assert bad[0]["expected"] == "65535"
    assert "sysctl -w net.core.somaxconn='65535'" in bad[0]["remediation"]
    assert overall(checks) == "FAIL"


def test_read_only_host_global_value_is_skip_not_fail():
    rec = healthy()
    for h in HOSTS:
        rec[h]["facts"]["sysctl_tuning"]["net.core.somaxconn"] = {"value": "4096", "writable": False}
    c = by_id(evaluate(rec, HOSTS))["sysctl.net.core.somaxconn"]
    assert c["status"] == "SKIP"


def test_untuned_host_case_fails_every_undersized_key(case):
    """shared/cases/sysctl/untuned-host-net.txt against the role's default intent."""
    values, _ = parse_sysctl_a(case("sysctl/untuned-host-net.txt"))
    with open(os.path.join(ncclprep.REPO_ROOT, "roles/sysctl_tuning/defaults/main.yml")) as fh:
        intent = yaml.safe_load(fh)["sysctl_tuning_settings"]
    rec = healthy()
    rec["node1"]["intent"]["sysctl_tuning"] = intent
    rec["node1"]["facts"]["sysctl_tuning"] = {k: {"value": values.get(k), "writable": k in values} for k in intent}
    checks = [c for c in evaluate({"node1": rec["node1"]}, ["node1"]) if c["id"].startswith("sysctl.")]
    failed = sorted(c["id"][len("sysctl."):] for c in checks if c["status"] == "FAIL")
    assert failed == sorted([
        "net.core.somaxconn", "net.core.netdev_budget", "net.core.netdev_max_backlog",
        "net.core.rmem_max", "net.core.wmem_max", "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_mtu_probing", "net.core.rps_sock_flow_entries",
        # 212992-byte default socket buffers, and a multi-NIC host's default ARP replies
        "net.core.rmem_default", "net.core.wmem_default",
        "net.ipv4.conf.all.arp_ignore", "net.ipv4.conf.all.arp_announce"])
    # keys not in that capture are SKIP (not visible), never invented
    for key in ("net.core.netdev_budget_usecs", "net.ipv4.tcp_wmem"):
        assert by_id(checks)[f"sysctl.{key}"]["status"] == "SKIP"


def test_unresolvable_rank0_name_on_node3_is_blamed_on_node3():
    rec = healthy()
    rec["node3"]["facts"]["host_names"][0].update(addresses=[], reachable=None,
                                             error="cannot resolve: [Errno -2] Name or service not known")
    c = by_id(evaluate(rec, HOSTS))["names.resolve"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node3"]
    assert "on node3: node1 cannot resolve" in c["message"]


def test_a_name_that_resolves_first_to_loopback_is_named_on_the_node_that_resolves_it():
    """``127.0.1.1 node2`` above the managed block on node2 (Debian's and Ubuntu's default line):
    node2's own name resolves first to loopback there, though its address follows."""
    rec = healthy()
    row = next(r for r in rec["node2"]["facts"]["host_names"] if r["name"] == "node2")
    row["addresses"] = ["127.0.1.1", row["expected"]]
    c = by_id(evaluate(rec, HOSTS))["names.resolve"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node2"]
    assert c["message"] == (f"on node2: node2 resolves first to 127.0.1.1, a loopback address, then "
                            f"{row['expected']}: a rank there advertises loopback to its peers")
    # the data-plane address first (what torch takes), but two answers: issue 41's
    # `hostname --ip-address` hands a batch script both
    row["addresses"] = [row["expected"], "127.0.1.1"]
    c = by_id(evaluate(rec, HOSTS))["names.resolve"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node2"]
    assert c["message"] == (f"on node2: node2 resolves to 2 addresses ({row['expected']}, 127.0.1.1), not one: "
                            "`hostname --ip-address` hands a launcher all of them")
    row["addresses"] = [row["expected"]]
    assert by_id(evaluate(rec, HOSTS))["names.resolve"]["status"] == "PASS"


def test_a_name_on_two_hosts_lines_with_one_address_fails_on_that_node():
    """Issue 41: podman's (or an old provisioning's) line and host_names' block both map node3 to
    its address on node1: the resolver answers twice, `hostname --ip-address` prints it twice."""
    rec = healthy()
    row = next(r for r in rec["node1"]["facts"]["host_names"] if r["name"] == "node3")
    row["addresses"] = [row["expected"], row["expected"]]
    c = by_id(evaluate(rec, HOSTS))["names.resolve"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node1"]
    assert c["message"].startswith(f"on node1: node3 resolves to 2 addresses ({row['expected']}, {row['expected']})")


def test_name_that_resolves_but_does_not_answer_blames_the_target():
    rec = healthy()
    for h in ("node1", "node2"):
        row = rec[h]["facts"]["host_names"][2]
        row.update(reachable=False, error="10.0.0.3:22 unreachable: timed out")
    ids = by_id(evaluate(rec, HOSTS))
    assert ids["names.resolve"]["status"] == "PASS"
    c = ids["names.reachable"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node3"]
    assert c["measured"] == ["link node1 -> node3: 10.0.0.3:22 unreachable: timed out",
                             "link node2 -> node3: 10.0.0.3:22 unreachable: timed out"]
    assert "firewall" in c["remediation"]


def test_host_lost_during_the_run_is_not_reported_reachable():
    rec = healthy()
    for h in HOSTS:
        rec[h]["alive"] = h != "node3"
    c = by_id(evaluate(rec, HOSTS))["host.reachable"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node3"]
    assert "became unreachable during the run" in c["message"]


def test_host_down_before_the_probe_is_not_a_made_up_hang():
    rec = healthy()
    rec["node3"] = {"facts": None, "probe": None, "smoke": None, "alive": False}
    for h in ("node1", "node2"):
        rec[h]["probe"]["hosts"] = ["node1", "node2"]
        rec[h]["smoke"] = None
    ids = by_id(evaluate(rec, HOSTS))
    assert "collective.run" not in ids
    assert ids["collective.all_reduce"]["status"] == "PASS"
    assert ids["collective.all_reduce"]["measured"]["world_size"] == 2
    assert ids["host.reachable"]["hosts"] == ["node3"]


def test_check_mode_results_never_pass():
    rec = healthy()
    for h in HOSTS:
        rec[h]["probe"] = {"status": "SKIP", "rank": 0, "host": h}
        rec[h]["smoke"] = {"status": "SKIP", "workers": []}
    ids = by_id(evaluate(rec, HOSTS))
    assert ids["collective.run"]["status"] == "SKIP"
    assert ids["torchrun.smoke"]["status"] == "SKIP"


def test_smoke_pass_with_no_worker_results_is_a_fail():
    rec = healthy()
    for h in HOSTS:
        rec[h]["smoke"] = {"status": "PASS", "workers": []}
    assert by_id(evaluate(rec, HOSTS))["torchrun.smoke"]["status"] == "FAIL"


def test_mtu_outlier_and_missing_interface_are_named():
    rec = healthy()
    rec["node3"]["facts"]["data_plane"]["mtu"] = 9000
    rec["node2"]["facts"]["data_plane"] = None
    ids = by_id(evaluate(rec, HOSTS))
    assert ids["data_plane.interface"]["status"] == "FAIL"
    assert ids["data_plane.interface"]["hosts"] == ["node2"]
    # node1 1500 vs node3 9000: tie -> the intended MTU decides when set
    for h in HOSTS:
        rec[h]["intent"]["nic_mtu"] = {"interface": "eth0", "mtu": 1500}
    assert by_id(evaluate(rec, HOSTS))["data_plane.mtu"]["hosts"] == ["node3"]


def test_rank_that_never_arrives_is_a_hang_naming_its_host():
    rec = healthy()
    for h in ("node1", "node2"):
        rec[h]["probe"] = {"status": "HANG", "stage": "rendezvous", "missing_ranks": [2],
                           "missing_hosts": ["node3"], "results": []}
    rec["node3"]["probe"] = None
    c = by_id(evaluate(rec, HOSTS))["collective.run"]
    assert c["status"] == "HANG" and c["hosts"] == ["node3"]
    assert "node3 never arrived" in c["message"]


def test_wrong_elements_fail_and_busbw_floor_names_slowest_rank():
    rec = healthy()
    rec["node2"]["probe"]["results"][1]["wrong"] = 237858
    c = by_id(evaluate(rec, HOSTS))["collective.all_reduce"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node2"] and c["measured"]["wrong"] == 237858
    c = by_id(evaluate(healthy(), HOSTS, min_busbw_gbps=12.0))["collective.all_reduce"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node3"]


def test_smoke_hang_and_torch_mismatch():
    rec = healthy()
    rec["node2"]["smoke"] = {"status": "HANG", "error": "torchrun did not finish within 120 s", "workers": []}
    rec["node3"]["facts"]["versions"]["torch"] = "2.12.1"
    ids = by_id(evaluate(rec, HOSTS))
    assert ids["torchrun.smoke"]["status"] == "HANG" and ids["torchrun.smoke"]["hosts"] == ["node2"]
    assert ids["versions.torch"]["status"] == "FAIL" and ids["versions.torch"]["hosts"] == ["node3"]


def test_unreachable_host_is_named():
    rec = healthy()
    rec["node3"] = {"facts": None, "probe": None, "smoke": None}
    ids = by_id(evaluate(rec, HOSTS))
    assert ids["host.reachable"]["status"] == "FAIL" and ids["host.reachable"]["hosts"] == ["node3"]


def test_make_check_rejects_unknown_status():
    with pytest.raises(ValueError, match="OK"):
        make_check("x", "OK")
    assert copy.deepcopy(make_check("x", "WARN", ["b", "a", "a"]))["hosts"] == ["a", "b"]


def _rx_queues(queues):
    """facts rps_rfs (rps_rfs.read_queues) of eth0 with these rx queues."""
    return {"interface": "eth0", "exists": True, "queues": queues, "local_cpus": None, "online_cpus": "0-1",
            "possible_cpus": "0-1"}


def test_rps_rfs_queue_that_differs_is_named():
    rec = healthy()
    for h in HOSTS:
        rec[h]["intent"]["rps_rfs"] = {"cpus": "0-1", "flow_cnt": 32768}
        rec[h]["facts"]["rps_rfs"] = _rx_queues({"rx-0": {"rps_cpus": "0-1", "rps_flow_cnt": 32768}})
    assert by_id(evaluate(rec, HOSTS))["rps_rfs.queues"]["status"] == "PASS"
    rec["node2"]["facts"]["rps_rfs"]["queues"]["rx-0"]["rps_cpus"] = ""
    c = by_id(evaluate(rec, HOSTS))["rps_rfs.queues"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node2"]
    assert c["measured"] == {"node2": {"rx-0": {"rps_cpus": "", "rps_flow_cnt": 32768}}}


def test_probe_port_in_use_is_explained():
    rec = healthy()
    rec["node1"]["probe"] = {"status": "FAIL", "stage": "store", "results": [], "hosts": HOSTS,
                             "error": "DistNetworkError: The server socket has failed to listen on any local network "
                                      "address. port: 29510, useIpv6: false, code: -98, name: EADDRINUSE, "
                                      "message: address already in use"}
    c = by_id(evaluate(rec, HOSTS))["collective.run"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node1"]
    assert c["message"] == "node1: port 29510 is already in use on this host (another job or a stale process)"
    assert "pick a free port" in c["remediation"]


def test_the_rank_that_failed_on_its_own_is_named_not_those_that_waited_for_it():
    """GLOO_SOCKET_IFNAME=eth9 on node2 only (errors as the local cluster's validate.yml gave them):
    node2 cannot bind, node1 and node3 time out waiting for it; collective.run names node2."""
    rec = healthy()
    waited = "DistStoreError: wait timeout after 90000ms, keys: /0//cpu//0/1"
    lost = ("DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server "
            "shutdown or crash?")
    for host, error in (("node1", waited), ("node3", lost),
                        ("node2", "RuntimeError: [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/"
                                  "tcp/device.cc:84] ifa != nullptr. Unable to find address for: eth9")):
        rec[host]["probe"] = {"status": "FAIL", "stage": "init_process_group", "results": [], "hosts": HOSTS,
                              "error": error}
    c = by_id(evaluate(rec, HOSTS))["collective.run"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node2"]
    assert c["message"].startswith("node2: RuntimeError: [enforce fail")
    assert c["message"].endswith("Unable to find address for: eth9 (node1, node3 only waited for it)")
    assert "node1: DistStoreError" in c["measured"]
    # every rank timed out: none is singled out
    for host in HOSTS:
        rec[host]["probe"]["error"] = "RuntimeError: Timed out waiting 90000ms for recv operation to complete"
    assert by_id(evaluate(rec, HOSTS))["collective.run"]["hosts"] == HOSTS


def test_smoke_failure_with_unresolvable_master_is_explained(case):
    rec = healthy()
    rec["node3"]["smoke"] = {"status": "FAIL", "error": "torchrun exited with code 1", "workers": [],
                             "log_tail": case("torch_dist/master-hostname-unresolvable.txt").splitlines()}
    c = by_id(evaluate(rec, HOSTS))["torchrun.smoke"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node3"]
    assert "resolv" in c["message"].lower()


# ---------------------------------------------------------------- numa_pinning and roce_qos

def _numa(rec, installed="0 0 0-31 -", irq=None, current=None):
    """Give a record its numa_pinning intent (numa_pinning.numa_intent) and facts (numa_pinning.read_numa)."""
    rec["intent"]["numa_pinning"] = {
        "binding_text": "# local_rank numa_node cpus gpu\n0 0 0-31 -\n",
        "irq": irq or {"interface": "eth0", "cpus": "0-31", "irqs": [],
                       "reason": "no IRQs: eth0 is a virtual interface (no device in sysfs)"}}
    rec["facts"]["numa_pinning"] = {"installed_text": installed, "irq_affinity": current or {}, "topology": {}}
    return rec


def test_numa_map_and_virtual_nic_pass_and_skip():
    recs = healthy()
    for h in HOSTS:
        _numa(recs[h])
    ids = by_id(evaluate(recs, HOSTS))
    assert ids["numa.binding"]["status"] == "PASS"
    assert ids["numa.binding"]["measured"] == {"node1": 1, "node2": 1, "node3": 1}
    assert ids["numa.irq_affinity"]["status"] == "SKIP"
    assert "eth0 is a virtual interface" in ids["numa.irq_affinity"]["message"]


def test_numa_stale_map_and_unpinned_irqs_name_the_host():
    recs = healthy()
    for h in HOSTS:
        _numa(recs[h], irq={"interface": "ens1", "cpus": "0-31", "irqs": [120, 121], "reason": None},
              current={"120": "0-31", "121": "0-31"})
    # node2: map installed for another topology; node3: never installed; node1: irqbalance moved IRQ 121
    recs["node2"]["facts"]["numa_pinning"]["installed_text"] = "0 1 32-63 -"
    recs["node3"]["facts"]["numa_pinning"]["installed_text"] = None
    recs["node1"]["facts"]["numa_pinning"]["irq_affinity"]["121"] = "40"
    checks = evaluate(recs, HOSTS)
    ids = by_id(checks)
    assert ids["numa.binding"]["status"] == "FAIL"
    assert ids["numa.binding"]["hosts"] == ["node2", "node3"]
    assert ids["numa.binding"]["measured"] == {"node2": ["0 1 32-63 -"], "node3": "not installed"}
    assert ids["numa.irq_affinity"]["status"] == "FAIL"
    assert ids["numa.irq_affinity"]["hosts"] == ["node1"]
    assert ids["numa.irq_affinity"]["measured"] == {"node1": {"121": "40"}}
    assert "node1 (IRQ 121)" in ids["numa.irq_affinity"]["message"]
    assert overall(checks) == "FAIL"


def test_numa_pinned_irqs_pass():
    recs = healthy()
    for h in HOSTS:
        _numa(recs[h], irq={"interface": "ens1", "cpus": "0-31", "irqs": [120], "reason": None},
              current={"120": "0-31"})
    assert by_id(evaluate(recs, HOSTS))["numa.irq_affinity"]["status"] == "PASS"


def test_numa_irq_affinity_is_compared_as_cpu_sets_and_an_unreadable_one_is_off():
    recs = healthy()
    for h in HOSTS:
        _numa(recs[h], irq={"interface": "ens1", "cpus": "0-31", "irqs": [120], "reason": None},
              current={120: "0-15,16-31"})  # int keys as read, before JSON
    recs["node3"]["facts"]["numa_pinning"]["irq_affinity"] = {"120": None}
    c = by_id(evaluate(recs, HOSTS))["numa.irq_affinity"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node3"] and c["measured"] == {"node3": {"120": None}}


def _roce(rec, changes=None, skipped=False):
    """The roce_qos intent (variables only) and facts (the module's read) of one host record."""
    rec["intent"]["roce_qos"] = {"interfaces": [], "priority": 3, "trust": "dscp", "ecn": True, "tool": "auto"}
    rec["facts"]["roce_qos"] = {
        "ports": [] if skipped else [{"device": "mlx5_0", "port": 1, "netdev": "ens1np0"}],
        "changes": changes or {}, "unsupported": {}, "skipped": skipped,
        "skip_reason": "no RoCE port: /sys/class/infiniband does not exist" if skipped else None,
        "tool": None if skipped else "dcb"}
    return rec


def test_roce_skipped_everywhere_is_skip_with_reason():
    recs = healthy()
    for h in HOSTS:
        _roce(recs[h], skipped=True)
    check = by_id(evaluate(recs, HOSTS))["roce.qos"]
    assert check["status"] == "SKIP"
    assert check["message"] == "not applicable: no RoCE port: /sys/class/infiniband does not exist"


def test_roce_pending_change_fails_naming_host_and_netdev():
    recs = healthy()
    for h in HOSTS:
        _roce(recs[h])
    recs["node2"]["facts"]["roce_qos"]["changes"] = {
        "ens1np0": [{"what": "pfc", "from": {"3": False}, "to": {"3": True}},
                    {"what": "trust", "from": "pcp", "to": "dscp"}]}
    check = by_id(evaluate(recs, HOSTS))["roce.qos"]
    assert check["status"] == "FAIL"
    assert check["hosts"] == ["node2"]
    assert check["message"] == "RoCE QoS differs from intent on node2: ens1np0 pfc/trust"


def test_roce_managed_hosts_pass_and_name_hosts_without_roce():
    recs = healthy()
    for h in HOSTS:
        _roce(recs[h], skipped=(h == "node3"))
    check = by_id(evaluate(recs, HOSTS))["roce.qos"]
    assert check["status"] == "PASS"
    assert check["measured"] == {"node1": ["ens1np0"], "node2": ["ens1np0"]}
    assert check["message"].endswith("of 2 hosts; no RoCE on node3")


# ---------------------------------------------------------------- firewall

UFW_OK = ("Status: active\nLogging: on (low)\nDefault: deny (incoming), allow (outgoing), deny (routed)\n"
          "New profiles: skip\n\nTo                         Action      From\n"
          "--                         ------      ----\n"
          "Anywhere on eth0           ALLOW IN    10.0.0.0/24                # ncclprep: cluster traffic\n"
          "22/tcp                     ALLOW IN    192.168.10.0/24            # ncclprep: SSH\n")
FW_RULES = [{"from": "10.0.0.0/24", "port": None, "proto": "any", "interface": "eth0", "comment": "c",
             "var": "firewall_cluster_cidr"}]


def _fw(rec, stdout=UFW_OK, rc=0, backend="ufw"):
    """Give a record its firewall intent and live rule set (facts firewall, firewall.read_rules)."""
    rec["intent"]["firewall"] = {"backend": backend, "cluster_cidr": "10.0.0.0/24", "rules": FW_RULES}
    rec["facts"]["firewall"] = {"tools": {"ufw": backend == "ufw", "nft": backend == "nftables"}, "backend": backend,
                                "rc": rc, "stdout": stdout}
    return rec


def test_firewall_active_default_deny_cluster_allowed_passes():
    recs = healthy()
    for h in HOSTS:
        _fw(recs[h])
    _fw(recs["node3"], _nft_table(_nft_rule(_NFT_ETH0, _NFT_CLUSTER)), backend="nftables")
    check = by_id(evaluate(recs, HOSTS))["firewall.rules"]
    assert check["status"] == "PASS"
    assert check["measured"] == {"node1": "ufw", "node2": "ufw", "node3": "nftables"}


# statements as nft -j prints them (tests/fixtures/firewall/nft-table.json)
_NFT_ETH0 = {"match": {"op": "==", "left": {"meta": {"key": "iifname"}}, "right": "eth0"}}
_NFT_CLUSTER = {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}},
                          "right": {"prefix": {"addr": "10.0.0.0", "len": 24}}}}


def _nft_rule(*stmts, verdict="accept", comment=None):
    rule = {"family": "inet", "table": "ncclprep", "chain": "input", "expr": [*stmts, {verdict: None}]}
    return {"rule": dict(rule, comment=comment) if comment else rule}


def _nft_table(*rules, policy="drop"):
    import json
    return json.dumps({"nftables": [{"table": {"family": "inet", "name": "ncclprep"}},
                                    {"chain": {"family": "inet", "table": "ncclprep", "name": "input",
                                               "policy": policy}}, *rules]})


def test_nft_table_is_read_as_json_not_searched_as_text():
    """Review F7: the check passed when the cluster's address was anywhere in the text (a comment)
    and an unconditional accept opened every port."""
    recs = healthy()
    for h in HOSTS:
        _fw(recs[h], backend="nftables", stdout=_nft_table(_nft_rule(_NFT_ETH0, _NFT_CLUSTER)))
    _fw(recs["node2"], backend="nftables",
        stdout=_nft_table(_nft_rule(comment="ncclprep: cluster 10.0.0.0/24")))
    wide = dict(_NFT_CLUSTER, match=dict(_NFT_CLUSTER["match"], right={"prefix": {"addr": "10.0.0.0", "len": 8}}))
    _fw(recs["node3"], backend="nftables", stdout=_nft_table(_nft_rule(_NFT_ETH0, wide), policy="accept"))
    check = by_id(evaluate(recs, HOSTS))["firewall.rules"]
    assert check["status"] == "FAIL" and check["hosts"] == ["node2", "node3"]
    assert check["measured"] == {
        "node2": "no rule for 10.0.0.0/24 (c); accepts what ncclprep does not intend: accept",
        "node3": "table inet ncclprep's input policy is accept, not drop"}
    _fw(recs["node3"], backend="nftables", stdout=_nft_table(_nft_rule(_NFT_ETH0, wide)))
    assert by_id(evaluate(recs, HOSTS))["firewall.rules"]["measured"]["node3"] == (
        "no rule for 10.0.0.0/24 (c); accepts what ncclprep does not intend: iifname \"eth0\" ip saddr 10.0.0.0/8 "
        "accept")
    _fw(recs["node3"], backend="nftables", stdout="not json")
    assert by_id(evaluate(recs, HOSTS))["firewall.rules"]["measured"]["node3"].startswith(
        "table inet ncclprep not readable: not nft JSON")


def test_the_role_s_own_nft_table_passes():
    """The table the role's template makes, as nft printed it (fixtures/firewall): its fixed
    rules (conntrack, loopback, ICMP) are not allow rules; its other accepts are what it read."""
    from ansible.module_utils.ncclprep.parsers.nft import parse_nft_table

    with open(os.path.join(ncclprep.REPO_ROOT, "tests", "fixtures", "firewall", "nft-table.json")) as fh:
        table = parse_nft_table(fh.read())
    assert table["error"] is None and table["policy"] == "drop"
    allow = [(r["from"], r["port"], r["proto"], r["interface"]) for r in table["rules"] if not r["base"]]
    assert allow == [("10.77.31.8/29", None, "any", "eth0"), ("10.77.31.1", 22, "tcp", None),
                     ("fd00::/64", 9100, "any", None), ("10.0.0.0/8", 5000, "udp", None), (None, None, "any", None)]
    # conntrack, invalid, loopback, ICMP and DHCPv6 replies (review, low findings: an IPv6
    # management network lost its lease under the nft table)
    assert [r["verdict"] for r in table["rules"] if r["base"]] == ["accept", "drop", "accept", "accept", "accept"]
    assert table["rules"][4]["comment"] == "ncclprep: DHCPv6 replies from a link-local server or relay"
    assert table["rules"][5]["comment"] == "ncclprep: cluster traffic (NCCL, Gloo, rendezvous)"
    # the same ports from anywhere are an allow rule of another's, not the fixed rule
    import json

    from ansible.module_utils.ncclprep.parsers.nft import _rule

    with open(os.path.join(ncclprep.REPO_ROOT, "tests", "fixtures", "firewall", "nft-table.json")) as fh:
        raw = json.load(fh)
    dhcp = [o["rule"]["expr"] for o in raw["nftables"] if "DHCPv6" in (o.get("rule") or {}).get("comment", "")][0]
    anywhere = [st for st in dhcp if (st.get("match") or {}).get("left", {}).get("payload", {}).get("field") != "saddr"]
    assert _rule(anywhere)["base"] is False and len(_rule(anywhere)["other"]) == 1


def _ufw_rules():
    from ansible.module_utils.ncclprep.parsers.ufw import parse_ufw_user_rules

    folder = os.path.join(ncclprep.REPO_ROOT, "tests", "fixtures", "firewall")
    with open(os.path.join(folder, "user.rules")) as v4, open(os.path.join(folder, "user6.rules")) as v6:
        return parse_ufw_user_rules(v4.read()) + parse_ufw_user_rules(v6.read(), v6=True)


def test_ufw_allows_beyond_the_intent_and_ipv6_off_fail():
    """Review F7: ``ufw allow from any`` (or a cloud image's ``allow OpenSSH``) next to the role's
    rules, an admin network dropped from the inventory, and IPV6=no all passed."""
    recs = healthy()
    intended = FW_RULES + [{"from": "192.168.10.0/24", "port": 22, "proto": "tcp", "interface": None,
                            "comment": "ncclprep: SSH from the admin network", "var": "firewall_admin_cidrs"}]
    for h in HOSTS:
        _fw(recs[h])
        recs[h]["intent"]["firewall"]["rules"] = intended
        recs[h]["facts"]["firewall"].update(ufw_rules=[r for r in _ufw_rules() if r["comment"]], ufw_ipv6="yes")
    assert by_id(evaluate(recs, HOSTS))["firewall.rules"]["hosts"] == HOSTS  # 192.168.20.0/24 is no longer intended
    assert recs["node1"]["facts"]["firewall"]["ufw_rules"][2]["from"] == "192.168.20.0/24"
    for h in HOSTS:
        del recs[h]["facts"]["firewall"]["ufw_rules"][2]
    assert by_id(evaluate(recs, HOSTS))["firewall.rules"]["status"] == "PASS"
    recs["node1"]["facts"]["firewall"]["ufw_rules"] = _ufw_rules()
    recs["node3"]["facts"]["firewall"]["ufw_ipv6"] = "no"
    check = by_id(evaluate(recs, HOSTS))["firewall.rules"]
    assert check["status"] == "FAIL" and check["hosts"] == ["node1", "node3"]
    node1 = check["measured"]["node1"].split("; ")
    assert node1 == [
        "allows what ncclprep does not intend: allow in proto tcp from 192.168.20.0/24 to any port 22 (ncclprep's, "
        "no longer intended: re-run site.yml)",
        "allows what ncclprep does not intend: allow in from any to any app OpenSSH (remove it: ufw delete allow in "
        "from any to any app OpenSSH, or list it in firewall_extra_rules)",
        "allows what ncclprep does not intend: allow in from any to any (remove it: ufw delete allow in from any to "
        "any, or list it in firewall_extra_rules)",
        "allows what ncclprep does not intend: limit in proto tcp from any to any port 2222 (remove it: ufw delete "
        "limit in proto tcp from any to any port 2222, or list it in firewall_extra_rules)",
        "allows what ncclprep does not intend: allow in proto udp from 10.1.0.0/16 to any port 6000:6007 (remove "
        "it: ufw delete allow in proto udp from 10.1.0.0/16 to any port 6000:6007, or list it in "
        "firewall_extra_rules)",
        "allows what ncclprep does not intend: allow in from any to any app OpenSSH (v6) (remove it: ufw delete "
        "allow in from any to any app OpenSSH, or list it in firewall_extra_rules)",
        "allows what ncclprep does not intend: allow in from any to any (v6) (remove it: ufw delete allow in from "
        "any to any, or list it in firewall_extra_rules)",
        "allows what ncclprep does not intend: limit in proto tcp from any to any port 2222 (v6) (remove it: ufw "
        "delete limit in proto tcp from any to any port 2222, or list it in firewall_extra_rules)",
        "allows what ncclprep does not intend: allow in from fd00::/64 to any port 9100 (v6) (remove it: ufw "
        "delete allow in from fd00::/64 to any port 9100, or list it in firewall_extra_rules)"]
    assert check["measured"]["node3"].startswith("IPV6=no in /etc/default/ufw: ufw filters no IPv6 traffic")


def test_ufw_missing_a_member_s_rule_fails_naming_it():
    """With ufw's own rule files read, every intended rule must be there: one member's rule gone
    (a hand ``ufw delete``) is named, where the CIDR-wide status check had nothing to say."""
    recs = healthy()
    members = [{"from": f"10.0.0.{n}", "port": None, "proto": "any", "interface": "eth0",
                "comment": "ncclprep: cluster node (NCCL, Gloo, rendezvous)", "var": "data_plane_members"}
               for n in (11, 12, 13)]
    live = [{"action": "allow", "route": False, "proto": "any", "port": None, "to": "0.0.0.0/0", "from": r["from"],
             "from_port": None, "app": None, "direction": "in", "interface": "eth0", "comment": r["comment"],
             "v6": False} for r in members]
    for h in HOSTS:
        _fw(recs[h])
        recs[h]["intent"]["firewall"]["rules"] = members
        recs[h]["facts"]["firewall"].update(ufw_rules=list(live), ufw_ipv6="yes")
    assert by_id(evaluate(recs, HOSTS))["firewall.rules"]["status"] == "PASS"
    recs["node2"]["facts"]["firewall"]["ufw_rules"] = live[:2]
    check = by_id(evaluate(recs, HOSTS))["firewall.rules"]
    assert check["hosts"] == ["node2"]
    assert check["measured"] == {"node2": "no rule for 10.0.0.13 on eth0 (ncclprep: cluster node (NCCL, Gloo, "
                                          "rendezvous))"}


def test_firewall_off_open_or_blocking_names_each_host():
    recs = healthy()
    _fw(recs["node1"], UFW_OK.replace("Status: active", "Status: inactive"))
    _fw(recs["node2"], UFW_OK.replace("deny (incoming)", "allow (incoming)"))
    _fw(recs["node3"], rc=1, stdout="", backend="nftables")
    check = by_id(evaluate(recs, HOSTS))["firewall.rules"]
    assert check["status"] == "FAIL"
    assert check["measured"] == {"node1": "ufw is inactive",
                                 "node2": "ufw's incoming default is allow, not deny",
                                 "node3": "nftables table inet ncclprep is not loaded"}
    recs = healthy()
    _fw(recs["node2"], UFW_OK.replace("Anywhere on eth0", "Anywhere on eth1"))
    check = by_id(evaluate(recs, HOSTS))["firewall.rules"]
    assert check["hosts"] == ["node2"] and "cannot reach every port" in check["message"]


def test_firewall_backend_without_its_tool_is_named():
    recs = healthy()
    for h in HOSTS:
        _fw(recs[h])
    _fw(recs["node1"], rc=None, stdout="", backend="nftables")
    check = by_id(evaluate(recs, HOSTS))["firewall.rules"]
    assert check["hosts"] == ["node1"]
    assert check["measured"] == {"node1": "nftables is chosen but its tool (nft) is not installed"}


RDZV_RULES = [{"from": "10.0.0.0/24", "port": port, "proto": "tcp", "interface": None, "comment": "r",
               "var": "firewall_rendezvous_sources"} for port in (29400, 29500)]
SSHD = {"port": 22, "address": "0.0.0.0", "pid": 1, "name": "sshd"}


def test_a_job_port_another_process_holds_is_named_with_host_port_and_process():
    recs = healthy()
    for h in HOSTS:
        _fw(recs[h])
        recs[h]["intent"]["firewall"]["rules"] = FW_RULES + RDZV_RULES
        recs[h]["facts"]["firewall"]["listening"] = [SSHD]
    check = by_id(evaluate(recs, HOSTS))["firewall.ports_free"]
    assert check["status"] == "PASS" and check["measured"] == [29400, 29500]
    assert check["message"] == "TCP 29400, 29500 free on 3 hosts"
    recs["node1"]["facts"]["firewall"]["listening"] = [SSHD, {"port": 29400, "address": "0.0.0.0", "pid": 4242,
                                                              "name": "python3"}]
    recs["node3"]["facts"]["firewall"]["listening"] = [{"port": 29500, "address": "*", "pid": None, "name": None}]
    check = by_id(evaluate(recs, HOSTS))["firewall.ports_free"]
    assert check["status"] == "FAIL" and check["hosts"] == ["node1", "node3"]
    assert check["measured"] == {"node1": {"29400": "python3 (pid 4242) on 0.0.0.0"},
                                 "node3": {"29500": "unknown process (pid ?) on *"}}
    assert check["message"] == ("job ports already taken: node1:29400 held by python3 (pid 4242) on 0.0.0.0; "
                                "node3:29500 held by unknown process (pid ?) on *")
    assert "node1, node3" in check["remediation"]


def test_ports_free_needs_the_listeners_read():
    recs = healthy()
    for h in HOSTS:
        _fw(recs[h])  # facts without "listening" (not read): no check
        recs[h]["intent"]["firewall"]["rules"] = FW_RULES + RDZV_RULES
    assert "firewall.ports_free" not in by_id(evaluate(recs, HOSTS))


# ---------------------------------------------------------------- ssh_trust

def _ssh(src, bad=None):
    out = []
    for dst in HOSTS:
        if dst == src:
            continue
        for name in (dst, f"10.0.0.{HOSTS.index(dst) + 1}"):
            ok = not bad or bad.get((src, dst)) is None
            cause = None if ok else bad[(src, dst)]
            out.append({"host": dst, "name": name, "ok": ok, "cause": cause,
                        "explanation": None if ok else "the peer's host key is not in known_hosts"})
    return out


def test_ssh_mesh_all_logins_pass():
    recs = healthy()
    for h in HOSTS:
        recs[h]["ssh"] = _ssh(h)
    check = by_id(evaluate(recs, HOSTS))["ssh.trust"]
    assert check["status"] == "PASS" and check["measured"] == {"logins": 12}


def test_a_login_that_passed_only_on_a_retry_is_a_warn_with_the_first_try_and_a_failure_still_fails():
    recs = healthy()
    for h in HOSTS:
        recs[h]["ssh"] = _ssh(h)
    recs["node1"]["ssh"][0]["retried"] = ["timeout: ssh: connect to host node2 port 22: Connection timed out"]
    check = by_id(evaluate(recs, HOSTS))["ssh.trust"]
    assert check["status"] == "WARN" and check["hosts"] == ["node1 -> node2"]
    assert check["measured"] == {"node1 -> node2": ["node2: ok on try 2 after timeout: ssh: connect to host node2 "
                                                    "port 22: Connection timed out"]}
    assert check["message"].startswith("1 of 12 node-to-node SSH logins passed only on a retry: node1 -> node2 ")
    # a login that failed on every try is still a FAIL, the retried one beside it does not soften it
    recs["node2"]["ssh"] = _ssh("node2", bad={("node2", "node3"): "host_key_unknown"})
    check = by_id(evaluate(recs, HOSTS))["ssh.trust"]
    assert check["status"] == "FAIL" and check["hosts"] == ["node2 -> node3"]


def test_ssh_mesh_names_the_failing_link_and_leaves_a_dead_host_to_reachable():
    recs = healthy()
    for h in HOSTS:
        recs[h]["ssh"] = _ssh(h, bad={("node1", "node3"): "host_key_unknown", ("node2", "node3"): "host_key_unknown"})
    check = by_id(evaluate(recs, HOSTS))["ssh.trust"]
    assert check["status"] == "FAIL"
    assert check["hosts"] == ["node1 -> node3", "node2 -> node3"]
    assert check["message"].startswith("4 of 12 node-to-node SSH logins failed: node1 -> node3 ")
    # node3 down: its links are host.reachable's business, not ssh.trust's
    recs["node3"]["facts"] = None
    recs["node3"]["ssh"] = None
    checks = by_id(evaluate(recs, HOSTS))
    assert checks["ssh.trust"]["status"] == "PASS" and checks["ssh.trust"]["measured"] == {"logins": 4}
    assert checks["host.reachable"]["hosts"] == ["node3"]


# ---------------------------------------------------------------- nccl_env

def test_nccl_env_on_the_data_plane_interface_passes():
    c = by_id(evaluate(healthy(), HOSTS))["nccl_env.ifname"]
    assert c["status"] == "PASS"
    assert c["measured"]["node1"] == {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0"}


def test_nccl_env_naming_another_interface_or_a_wide_prefix_names_the_host_and_variable():
    rec = healthy()
    for h in HOSTS:
        rec[h]["facts"]["interfaces"]["eth1"] = {"mtu": 1500, "operstate": "up", "addresses": ["192.168.9.2/24"]}
    rec["node2"]["intent"]["nccl_env"]["NCCL_SOCKET_IFNAME"] = "=eth1"
    rec["node3"]["intent"]["nccl_env"]["GLOO_SOCKET_IFNAME"] = "eth0,eth1"
    c = by_id(evaluate(rec, HOSTS))["nccl_env.ifname"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node2", "node3"]
    assert c["measured"] == {
        "node2": ["NCCL_SOCKET_IFNAME==eth1 does not select the data-plane interface eth0 (selects eth1)"],
        "node3": ["GLOO_SOCKET_IFNAME=eth0,eth1 also selects eth1, not only the data-plane interface eth0"]}
    assert "role nccl_env" in c["remediation"] and c["remediation"].endswith("on node2, node3")


def test_nccl_env_unset_interface_is_a_problem_only_beside_another_nic():
    rec = healthy()
    for h in HOSTS:
        del rec[h]["intent"]["nccl_env"]["GLOO_SOCKET_IFNAME"]
    assert by_id(evaluate(rec, HOSTS))["nccl_env.ifname"]["status"] == "PASS"  # eth0 is the only choice
    rec["node1"]["facts"]["interfaces"]["docker0"] = {"mtu": 1500, "operstate": "up", "addresses": ["172.17.0.1/16"]}
    c = by_id(evaluate(rec, HOSTS))["nccl_env.ifname"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node1"]
    assert c["measured"]["node1"] == ["GLOO_SOCKET_IFNAME is unset and this host also has docker0: "
                                      "Gloo picks an interface itself"]


def test_a_launch_file_on_the_node_naming_a_missing_interface_is_named_with_its_file():
    """node2's env file edited to eth9 after provisioning (the intent still says eth0): the files
    as they are on the node are judged too; a file that agrees with the intent adds nothing."""
    rec = healthy()
    for h in HOSTS:
        rec[h]["facts"]["nccl_env"] = {"gpus": 0, "files": [
            {"path": "/etc/ncclprep/nccl.env", "values": {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN"}},
            {"path": "/etc/nccl.conf", "values": {"NCCL_SOCKET_IFNAME": "=eth0"}}]}
    assert by_id(evaluate(rec, HOSTS))["nccl_env.ifname"]["status"] == "PASS"
    files = rec["node2"]["facts"]["nccl_env"]["files"]
    files[0]["values"]["GLOO_SOCKET_IFNAME"] = "eth9"
    files[1]["values"]["NCCL_SOCKET_IFNAME"] = "=eth9"
    c = by_id(evaluate(rec, HOSTS))["nccl_env.ifname"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node2"]
    assert c["measured"] == {"node2": [
        "NCCL_SOCKET_IFNAME==eth9 does not select the data-plane interface eth0 (selects nothing), "
        "set in /etc/nccl.conf",
        "GLOO_SOCKET_IFNAME=eth9 does not select the data-plane interface eth0 (selects nothing), "
        "set in /etc/ncclprep/nccl.env"]}
    # the env file wins over /etc/nccl.conf for NCCL (the environment first), and is Gloo's only source
    files[0]["values"]["NCCL_SOCKET_IFNAME"] = "=eth0"
    files[0]["values"]["GLOO_SOCKET_IFNAME"] = "eth0"
    assert by_id(evaluate(rec, HOSTS))["nccl_env.ifname"]["status"] == "PASS"


def test_nccl_env_without_intent_or_data_plane_is_left_to_other_checks():
    rec = healthy()
    for h in HOSTS:
        rec[h]["intent"]["nccl_env"] = None
    assert "nccl_env.ifname" not in by_id(evaluate(rec, HOSTS))
    rec = healthy()
    rec["node2"]["facts"]["data_plane"] = None
    c = by_id(evaluate(rec, HOSTS))["nccl_env.ifname"]
    assert c["status"] == "PASS" and set(c["measured"]) == {"node1", "node3"}


# ---------------------------------------------------------------- the verdict helper

def test_verdict_fails_naming_the_problems_or_passes():
    bad = verdict("x.y", {"node2": "128", "node1": "64"}, expected="65535", message="m", remediation="r",
                  passed="ok", passed_measured={"n": 3})
    assert bad == {"id": "x.y", "status": "FAIL", "hosts": ["node1", "node2"],
                   "measured": {"node2": "128", "node1": "64"}, "expected": "65535", "message": "m",
                   "remediation": "r"}
    good = verdict("x.y", {}, expected="65535", message="m", remediation="r", passed="ok", passed_measured={"n": 3})
    assert good == {"id": "x.y", "status": "PASS", "hosts": [], "measured": {"n": 3}, "expected": "65535",
                    "message": "ok", "remediation": ""}


def test_verdict_blame_measured_and_pass_expected_can_differ_from_the_problems():
    c = verdict("l", ["link a -> b", "link c -> b"], blame={"b"}, measured=2, expected="all", message="m",
                remediation="r", passed="ok")
    assert c["hosts"] == ["b"] and c["measured"] == 2 and c["expected"] == "all"
    c = verdict("l", [], expected="all", message="m", remediation="r", passed="ok", passed_measured=5,
                passed_expected=5)
    assert (c["status"], c["measured"], c["expected"]) == ("PASS", 5, 5)


# ---------------------------------------------------------------- the registry loop

def test_evaluate_runs_every_registry_entry_in_order_with_its_records(monkeypatch):
    seen = []

    def fake(name):
        def check(records, ctx):
            seen.append((name, sorted(records), ctx.all_hosts, ctx.min_busbw_gbps))
            return [make_check(f"{name}.x", "PASS")]
        return check

    monkeypatch.setattr(checks_pkg, "REGISTRY", (checks_pkg.Entry("b", fake("b"), with_facts_only=False),
                                                 checks_pkg.Entry("a", fake("a"))))
    rec = healthy()
    rec["node3"] = {"facts": None}
    out = checks_pkg.evaluate(rec, HOSTS, 1.5)
    assert [c["id"] for c in out] == ["b.x", "a.x"]
    assert seen == [("b", HOSTS, tuple(HOSTS), 1.5), ("a", ["node1", "node2"], tuple(HOSTS), 1.5)]


def every_concern():
    """``healthy()`` with every concern on: an intent and facts for rps_rfs, roce_qos, numa_pinning,
    firewall, ssh_trust and slurm_health too (each check passes)."""
    rec = healthy()
    lines = {"HealthCheckProgram": "/usr/local/sbin/ncclprep-health", "HealthCheckInterval": 300}
    for h in HOSTS:
        rec[h]["intent"].update(rps_rfs={"cpus": "0-1", "flow_cnt": 1},
                                slurm_health={"config": "/etc/slurm/slurm.conf", "lines": lines})
        rec[h]["facts"]["slurm_health"] = {"config": "/etc/slurm/slurm.conf", "exists": True,
                                           "settings": {"healthcheckprogram": "/usr/local/sbin/ncclprep-health",
                                                        "HealthCheckInterval": "300", "ClusterName": "c"}}
        _roce(rec[h])
        rec[h]["facts"]["rps_rfs"] = _rx_queues({"rx-0": {"rps_cpus": "0-1", "rps_flow_cnt": 1}})
        _fw(_numa(rec[h]))
        rec[h]["ssh"] = _ssh(h)
    return rec


def test_report_order_and_ids_are_the_registry_order():
    ids = [c["id"] for c in evaluate(every_concern(), HOSTS)]
    assert ids == ["host.reachable", "data_plane.interface", "names.resolve", "names.reachable", "data_plane.mtu",
                   "sysctl.net.core.netdev_budget", "sysctl.net.core.somaxconn", "sysctl.net.ipv4.tcp_rmem",
                   "rps_rfs.queues", "numa.binding", "numa.irq_affinity", "roce.qos", "ssh.trust", "firewall.rules",
                   "versions.torch", "nccl_env.ifname", "nccl_env.debug_class", "slurm.health", "links.rdma",
                   "links.counters",
                   "tools.findings",
                   "dataset.path", "drift.files", "net.run", "collective.reduce_scatter",
                   "collective.all_reduce", "collective.transport", "torchrun.smoke"]


def test_address_that_answered_only_on_the_retry_is_a_warning_with_the_first_error():
    rec = healthy()
    row = rec["node1"]["facts"]["host_names"][2]
    row["retried"] = ["10.0.0.3:22 unreachable: [Errno 111] Connection refused"]
    c = by_id(evaluate(rec, HOSTS))["names.reachable"]
    assert c["status"] == "WARN" and c["hosts"] == ["node1 -> node3"]
    assert c["measured"] == {"node1 -> node3": [
        f"{row['name']}: ok on try 2 after 10.0.0.3:22 unreachable: [Errno 111] Connection refused"]}
    assert "answered only on a second try" in c["message"]
    # a failure elsewhere outranks it: FAIL naming the failed target only
    other = rec["node2"]["facts"]["host_names"][0]
    other.update(reachable=False, error="10.0.0.1:22 unreachable: timed out")
    c = by_id(evaluate(rec, HOSTS))["names.reachable"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node1"]


def test_retried_warning_names_the_links_sorted_with_their_evidence_and_cuts_the_list():
    from ansible.module_utils.ncclprep.model import retried_warning, retry_evidence

    retried = {"node3 -> node1": [retry_evidence("node1", ["refused"])],
               "node1 -> node2": [retry_evidence("10.0.0.2", ["timeout", "reset"])]}
    c = retried_warning("ssh.trust", retried, summary="2 of 6 logins passed only on a retry",
                        expected="every login passes on its first try", remediation="re-run", limit=60)
    assert c["status"] == "WARN" and c["hosts"] == ["node1 -> node2", "node3 -> node1"]
    assert c["measured"] == retried
    full = ("node1 -> node2 (10.0.0.2: ok on try 3 after timeout; reset); "
            "node3 -> node1 (node1: ok on try 2 after refused)")
    assert c["message"] == "2 of 6 logins passed only on a retry: " + full[:60]


def test_a_debugging_class_nccl_variable_in_the_launch_environment_is_a_warning():
    """NCCL's env.rst: NCCL_ALGO, NCCL_PROTO, ... "should generally not be set for production code"."""
    c = by_id(evaluate(healthy(), HOSTS))["nccl_env.debug_class"]
    assert c["status"] == "PASS"
    assert c["message"] == "no debugging-class NCCL variable in the launch environment of 3 hosts"
    rec = healthy()
    rec["node2"]["intent"]["nccl_env"]["NCCL_ALGO"] = "Ring"
    rec["node3"]["facts"].setdefault("nccl_env", {})["files"] = [
        {"path": "/etc/ncclprep/nccl.env", "values": {}},
        {"path": "/etc/nccl.conf", "values": {"NCCL_PROTO": "LL128", "NCCL_DEBUG": "WARN"}}]
    c = by_id(evaluate(rec, HOSTS))["nccl_env.debug_class"]
    assert c["status"] == "WARN" and c["hosts"] == ["node2", "node3"]
    assert c["measured"] == {"node2": ["NCCL_ALGO=Ring (ncclprep's nccl_env)"],
                             "node3": ["NCCL_PROTO=LL128 (/etc/nccl.conf)"]}
    assert "should generally not be set for production code" in c["message"]
    assert "ncclprep tune --nccl-tuner" in c["remediation"]


def test_smoke_failure_reads_its_log_as_the_doctor_does():
    """Issue 27 item 5: the smoke job's log read by the doctor's rules: an NCCL error with a known
    cause inside torch's DistBackendError (tests/fixtures/doctor: /dev/shm too small,
    pytorch/torchtitan#853) is the check's message and remediation, with the lines that show it."""
    with open(os.path.join(ncclprep.REPO_ROOT, "tests", "fixtures", "doctor", "nccl_log",
                           "nccl2215-shm-segment-dev-shm-16mb.txt"),
              encoding="utf-8") as fh:
        tail = fh.read().splitlines()
    rec = healthy()
    rec["node2"]["smoke"] = {"status": "FAIL", "error": "torchrun exited with code 1", "workers": [], "log_tail": tail}
    c = by_id(evaluate(rec, HOSTS))["torchrun.smoke"]
    assert c["status"] == "FAIL" and c["hosts"] == ["node2"]
    assert "node2: NCCL could not create its shared-memory segment /dev/shm/nccl-1YsMbG" in c["message"]
    assert "--shm-size=1g" in c["remediation"]
