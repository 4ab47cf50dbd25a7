"""The offline doctor (module_utils/ncclprep/doctor/, ``ncclprep doctor``): every real case in
shared/cases read and diagnosed as its INDEX.md says, several nodes compared, and no input of any
kind (random, cut short, empty, binary) ever ends in a traceback."""

from __future__ import annotations

import io
import json
import os
import random

import pytest
from ansible.module_utils.ncclprep import doctor
from ansible.module_utils.ncclprep.doctor import (
    KINDS,
    as_json,
    compare,
    decode_input,
    detect_kind,
    diagnose_text,
    render_text,
)
from ansible.module_utils.ncclprep.parsers import nccl_log as doctor_nccl_log
from conftest import CASES

from ncclprep.doctor_cmd import doctor_main

#: Every case file: (relative path, kind, exit status, strings the text output must hold, strings it must not).
CASE_EXPECTATIONS = [
    ("ibstat/hdr-one-port-disabled.txt", "ibstat", 0,
     ["WARN mlx5_1: mlx5_1 port 1 is down", "its printed rate 10 is not a link speed",
      "only 1 of 2 HCAs usable (mlx5_0), 200 Gb/s in total", "mlx5_0 port 1 Active/LinkUp 200 Gb/s, InfiniBand, "
      "LID 569, SM LID 393", "rate field 10 (not a link speed", "[host hdr-one-port-disabled]"], ["210 Gb/s"]),
    ("ibstat/down-port-no-rate.txt", "ibstat", 0,
     ["WARN mlx5_8: mlx5_8 port 1 is down (state Down, physical state Disabled)", "it prints no rate (unknown)",
      "rate not printed (unknown), link layer not printed"], []),
    ("ibstat/ibstatus-roce-bond-25g.txt", "ibstat", 0,
     ["ibstatus layout", "mlx5_bond_0 port 1 ACTIVE/LinkUp 25 Gb/s, Ethernet, LID 0, SM LID 0",
      "normal for RoCE", "nothing wrong found"], ["no subnet manager", "\n  FAIL ", "\n  WARN "]),
    ("ibv_devinfo/roce-bond-active-mtu-1024.txt", "ibv_devinfo", 0,
     ["mlx5_bond_0 (fw 16.28.2006, vendor part 4119): port 1 PORT_ACTIVE, max_mtu 4096, active_mtu 1024, "
      "link layer Ethernet", "runs active_mtu 1024 although 4096 is possible", ">= 4200 for active_mtu 4096",
      "  > \t\t\tactive_mtu:\t\t1024 (3)"], []),
    ("nccl_log/socket-docker-bridges-selected.txt", "nccl_log", 1,
     ["NCCL socket interfaces (16): bond0 (10.0.0.1), 11 br-* container/virtual interfaces, 4 veth* with IPv6 "
      "link-local addresses", "FAIL", "15 container/virtual interfaces", "fix: set NCCL_SOCKET_IFNAME=bond0",
      "  > [0]bond0:10.0.0.1<0>"], []),
    ("nccl_log/socket-ifname-missing.txt", "nccl_log", 1,
     ["FAIL eth2: NCCL_SOCKET_IFNAME=eth2 names an interface that does not exist on this host",
      "family 59936 is only a symptom", "  > [trainer3]:node03:1958:1958 [3] NCCL INFO NCCL_SOCKET_IFNAME set by "
      "environment to eth2", "[host node03]"], []),
    ("nccl_log/ib-completion-error-12.txt", "nccl_log", 1,
     ["NET/IB completion error 12 (IBV_WC_RETRY_EXC_ERR): transport retry timeout",
      "cannot reach each other although the socket bootstrap worked", "NCCL_IB_GID_INDEX", "RoCE v2 GID",
      "often 3", "vendor err 129"], []),
    ("nccl_log/rings-p2p-and-net-socket.txt", "nccl_log", 0,
     ["log lines of 2 hosts: node01, node02", "rings 00, 01", "P2P/IPC inside a host, NET/Socket between hosts",
      "15 -> 0", "7 -> 8", "(no IB/RDMA in use)"], ["NET/IB between"]),
    ("torch_dist/port-29500-in-use.txt", "torch_dist", 1,
     ["bind to [::]:29500 failed (errno 98", "bind to 0.0.0.0:29500 failed (errno 98",
      "port 29500 is already in use on this host", "pick a free port", "let torchrun choose"], []),
    ("torch_dist/rdzv-client-timeout.txt", "torch_dist", 1,
     ["rdzv_backend c10d, rdzv_endpoint 10.0.0.1:2222, min_nodes 2, max_nodes 2",
      "timed out after 60 s connecting to the c10d store at 10.0.0.1:2222: no node hosted it",
      "did not recognise 10.0.0.1 as its own address", "open port 2222 to every node", "RendezvousConnectionError",
      "traceback is cut short"], []),
    ("torch_dist/master-hostname-unresolvable.txt", "torch_dist", 1,
     ["FAIL job-0001.internal: the master host name job-0001.internal is not resolvable here (gai error -2",
      "resolve on every other node", "or use an address"], ["cannot connect to job-0001.internal"]),
    ("nccl_tests/allreduce-3node-healthy-tail.txt", "nccl_tests", 0,
     ["6 rows", "busbw 95.5 to 96.69 GB/s", "#wrong total 0", "out of bounds values: 0 OK",
      "avg bus bandwidth 84.8558", "peak busbw 96.69 GB/s", "4 x 200 Gb/s", "97% used",
      "it is not the figure to compare with the line rate"], ["\n  FAIL "]),
    ("nccl_tests/allreduce-wrong-results.txt", "nccl_tests", 1,
     ["FAIL", "data corruption: #wrong 237858 (out-of-place) and 238038 (in-place) at 524288 B", "(1 elided)",
      "far under even a 100 Gb/s link (~12.5 GB/s busbw)", "sizes up to 524288 B"], []),
    ("topo/3gpu-nvlink-bridge-2nic.txt", "topo", 0,
     ["3 GPUs and 2 NICs announced", "NIC legend: NIC0=mlx5_0, NIC1=mlx5_1", "GPU0, GPU1, GPU2: CPU affinity 64-71, "
      "NUMA 1", "NV4", "WARN GPU0: GPU0: the nearest NIC (NIC0 (mlx5_0), NIC1 (mlx5_1)) is only NODE distance",
      "WARN GPU1:", "INFO GPU2: GPU2: nearest NIC NIC0 (mlx5_0), NIC1 (mlx5_1) at PHB"], ["WARN GPU2"]),
    ("topo/8gpu-nvswitch-12nic-truncated.txt", "topo", 0,
     ["8 GPUs and 12 NICs announced", "truncated input: 4 of 8 GPU rows parsed",
      "GPU0, GPU1: CPU affinity 48-63,176-191, NUMA 3", "GPU2, GPU3: CPU affinity 16-31,144-159, NUMA 1",
      "NV12 x6", "GPU0: nearest NIC NIC0, NIC1 at PXB", "GPU2: nearest NIC NIC2, NIC3 at PXB"], []),
    ("netplan/roce-port-mtu-4096.yaml", "netplan", 0,
     ["enp1s0f0np0 (ethernets): addresses 10.0.0.1/24, mtu 4096", "netdev MTU 4096 gives RoCE active_mtu 2048",
      "set mtu: 4200 (or 9000)"], []),
    ("sysctl/untuned-host-net.txt", "sysctl", 0,
     ["untuned host", "net.core.somaxconn 128 (recommended 65535)", "net.core.netdev_budget 300",
      "net.core.netdev_max_backlog 1000", "net.core.rmem_max 212992", "net.core.wmem_max 212992",
      "net.ipv4.tcp_rmem 4096 87380 6291456", "RFS off (net.core.rps_sock_flow_entries 0)",
      "strict reverse-path filter", "default ARP settings", "risky on a multi-NIC host",
      "net.ipv4.ip_local_port_range 32768 60999", "  > net.core.somaxconn = 128"], []),
    ("ip_link/ip-a-mtu-ib0-down.txt", "ip_link", 0,
     ["lo UNKNOWN mtu 65536", "eno1 UP mtu 1500", "eno2 DOWN mtu 1500", "eno4 DOWN mtu 1500", "ib0 DOWN mtu 4092",
      "WARN ib0: ib0 is DOWN", "MTU 4092 is a normal IPoIB MTU, not a fault by itself"], ["WARN eno"]),
    ("numa_lscpu/numactl-2-socket.txt", "numa_lscpu", 0,
     ["2 NUMA nodes: node0 CPUs 0-31, 773271 MiB; node1 CPUs 32-63, 774028 MiB", "distances [[10, 32], [32, 10]]",
      "balanced: nothing to flag", "nothing wrong found"], ["\n  WARN ", "\n  FAIL "]),
    ("ufw/status-verbose-subnet-allowed.txt", "ufw", 0,
     ["ufw active, logging on (low), default deny incoming / allow outgoing", "Anywhere ALLOW IN from 10.0.0.0/24",
      "65432/tcp ALLOW IN from Anywhere (v6)", "peers in 10.0.0.0/24 reach every port",
      "a PASS for a cluster in 10.0.0.0/24"], ["\n  FAIL "]),
]


def case_path(rel: str) -> str:
    path = os.path.join(CASES, rel)
    if not os.path.exists(path):
        pytest.skip(f"case file {path} not present")
    return path


def run(argv, stdin_bytes: bytes = b"") -> tuple[int, str]:
    """doctor_main with captured output; the exit status and everything it printed."""
    out = io.StringIO()
    stdin = io.TextIOWrapper(io.BytesIO(stdin_bytes), encoding="utf-8")
    rc = doctor_main(list(argv), stdin=stdin, stdout=out)
    return rc, out.getvalue()


def test_every_case_file_is_listed():
    if not os.path.isdir(CASES):
        pytest.skip("shared/cases not present")
    files = sorted(os.path.relpath(os.path.join(d, f), CASES) for d, _, fs in os.walk(CASES) for f in fs
                   if f != "INDEX.md")
    assert files == sorted(rel for rel, *_ in CASE_EXPECTATIONS)


@pytest.mark.parametrize("rel,kind,rc,present,absent", CASE_EXPECTATIONS, ids=[c[0] for c in CASE_EXPECTATIONS])
def test_case_is_read_and_diagnosed_as_index_says(rel, kind, rc, present, absent):
    path = case_path(rel)
    with open(path, encoding="utf-8") as fh:
        assert detect_kind(fh.read(), path) == kind
    code, text = run([path])
    assert f"{path}: {kind} (" in text
    for needle in present:
        assert needle in text, f"{needle!r} missing from:\n{text}"
    for needle in absent:
        assert needle not in text, f"{needle!r} present in:\n{text}"
    assert code == rc, text
    assert "Traceback" not in text.replace("Traceback (most recent call last)", "")
    assert text.rstrip().splitlines()[-1].startswith("doctor: 1 input, ")


@pytest.mark.parametrize("rel,kind", [(c[0], c[1]) for c in CASE_EXPECTATIONS], ids=[c[0] for c in CASE_EXPECTATIONS])
def test_case_kind_found_from_content_without_a_name(rel, kind):
    with open(case_path(rel), encoding="utf-8") as fh:
        text = fh.read()
    assert detect_kind(text) == kind
    assert diagnose_text(text)["kind"] == kind


def test_healthy_allreduce_with_line_rate_is_healthy_and_average_not_held_against_it():
    code, text = run(["--line-rate", "800", case_path("nccl_tests/allreduce-3node-healthy-tail.txt")])
    assert code == 0
    assert "INFO allreduce-3node-healthy-tail: healthy: peak busbw 96.69 GB/s reaches 97% of the 100 GB/s line rate" \
        in text
    assert "Avg bus bandwidth 84.8558 GB/s averages all sizes" in text and "low_busbw" not in text


def test_wrong_results_with_a_100g_line_rate_is_far_under_12_5_gbs():
    code, text = run(["--line-rate", "100", case_path("nccl_tests/allreduce-wrong-results.txt")])
    assert code == 1
    assert "WARN allreduce-wrong-results: peak busbw 0.92 GB/s is far under the 12.5 GB/s line rate" in text


def test_down_port_rate_is_not_counted_as_speed_in_json():
    code, text = run(["--json", case_path("ibstat/hdr-one-port-disabled.txt")])
    data = json.loads(text)
    assert code == 0 and data["schema_version"] == 1 and data["status"] == "warn"
    [inp] = data["inputs"]
    down = [f for f in inp["findings"] if f["id"] == "ib.port_down"]
    assert [(f["subject"], f["rate_gbps"], f["host"]) for f in down] == [("mlx5_1", None, "hdr-one-port-disabled")]
    usable = [f for f in inp["findings"] if f["id"] == "ib.usable_hcas"][0]
    assert usable["usable"] == ["mlx5_0"] and usable["total_rate_gbps"] == 200
    assert "                Rate: 10" in down[0]["evidence"]


def test_json_output_parses_back_with_every_field():
    code, text = run(["--json", case_path("nccl_log/socket-docker-bridges-selected.txt")])
    data = json.loads(text)
    assert code == 1 and data["status"] == "fail" and data["summary"]["FAIL"] == 1
    [inp] = data["inputs"]
    assert set(inp) >= {"source", "kind", "read", "findings", "unparsed_count", "error", "notes", "host"}
    [f] = inp["findings"]
    assert f["id"] == "nccl.socket_virtual_ifaces" and f["suggested_ifname"] == "bond0"
    assert f["evidence"][0] == "INFO NET/Socket : Using" and data["comparisons"] == []
    assert "facts" not in inp


# --- several inputs, several nodes ---------------------------------------------------------------------

LOG_A = """n1:101:101 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
n1:101:101 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0
n1:101:101 [0] NCCL INFO NCCL_IB_GID_INDEX set by environment to 3
NCCL version 2.18.3+cuda12.2
n1:101:110 [0] NCCL INFO comm 0x55a1 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x9ad9 - Init START
n1:102:111 [1] NCCL INFO comm 0x55a2 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 1c000 commId 0x9ad9 - Init START
"""
LOG_B = """n2:201:201 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0
n2:201:201 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
n2:201:210 [0] NCCL INFO comm 0x77b1 rank 2 nranks 4 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x9ad9 - Init START
"""


def test_two_logs_with_different_nccl_versions_fail_and_name_both_hosts():
    results = [diagnose_text(LOG_A, "a.log"), diagnose_text(LOG_B, "b.log")]
    assert [r["host"] for r in results] == ["n1", "n2"]
    found = {f["id"]: f for f in compare(results)}
    v = found["compare.nccl_version"]
    assert v["severity"] == "FAIL" and v["versions"] == {"2.18.3": ["n1"], "2.21.5": ["n2"]}
    assert v["evidence"] == ["n1 (a.log): NCCL version 2.18.3", "n2 (b.log): NCCL version 2.21.5"]
    env = found["compare.nccl_env"]
    assert env["subject"] == "NCCL_IB_GID_INDEX" and env["values"] == {"n1": "3", "n2": None}


def test_rank_that_never_arrived_is_named_across_logs(tmp_path):
    (tmp_path / "a.log").write_text(LOG_A)
    (tmp_path / "b.log").write_text(LOG_B)
    code, text = run([str(tmp_path / "a.log"), str(tmp_path / "b.log")])
    assert code == 1
    assert "FAIL ranks: rank 3 (of 4 ranks) never started ncclCommInitRank (seen on n1, n2)" in text
    assert "across the 2 inputs:" in text and "doctor: 2 inputs, 2 FAIL, 1 WARN" in text


def test_many_ranks_in_one_log_with_one_missing():
    lines = [f"node{1 + r // 4}:{100 + r}:{200 + r} [{r % 4}] NCCL INFO comm 0x{r:04x} rank {r} nranks 8 cudaDev "
             f"{r % 4} busId {r}000 - Init START" for r in range(8) if r != 5]
    result = diagnose_text("\n".join(lines) + "\n", "all-ranks.log")
    assert result["kind"] == "nccl_log" and "communicator init lines of ranks 0-4, 6-7 (nranks 8)" in result["read"]
    [f] = compare([result])
    assert (f["id"], f["severity"], f["missing"]) == ("compare.rank_missing", "FAIL", [5])


def test_ranks_silent_after_init_complete_only_logged_nothing():
    lines = [f"h:1:{r} [{r}] NCCL INFO comm 0x1 rank {r} nranks 4 cudaDev {r} busId {r}000 - Init COMPLETE"
             for r in (0, 1)]
    [f] = compare([diagnose_text("\n".join(lines), "x.log")])
    assert (f["id"], f["severity"], f["missing"]) == ("compare.ranks_not_logged", "INFO", [2, 3])


def test_one_ranks_own_log_says_nothing_about_the_others():
    line = "h:1:1 [3] NCCL INFO comm 0x1 rank 3 nranks 16 cudaDev 3 busId 3000 - Init START\n"
    assert compare([diagnose_text(line, "r3.log")]) == []


def test_two_sysctl_files_with_a_differing_value():
    base = "net.core.somaxconn = 4096\nnet.core.netdev_budget = 600\nnet.ipv4.tcp_mem = 1 2 3\nkernel.hostname = {}\n"
    one = diagnose_text(base.format("a"), "node1-sysctl.txt")
    two = diagnose_text(base.format("b").replace("somaxconn = 4096", "somaxconn = 128").replace("1 2 3", "4 5 6"),
                        "node2-sysctl.txt")
    assert (one["kind"], one["host"], two["host"]) == ("sysctl", "node1-sysctl", "node2-sysctl")
    [f] = compare([one, two])
    assert (f["id"], f["subject"]) == ("compare.sysctl", "net.core.somaxconn")
    assert f["values"] == {"node1-sysctl": "4096", "node2-sysctl": "128"}
    assert f["evidence"] == ["node1-sysctl (node1-sysctl.txt): net.core.somaxconn = 4096",
                             "node2-sysctl (node2-sysctl.txt): net.core.somaxconn = 128"]


def test_host_option_names_standard_input():
    code, text = run(["--host", "gpu7", "-"], LOG_B.replace("n2:", "").encode())
    assert "<stdin>: nccl_log" in text and code == 0


def test_torch_output_naming_missing_ranks():
    text = ("RuntimeError: [Rank 0]: Rank 3 failed to pass monitoredBarrier in 30000 ms\n"
            "torch.distributed.DistStoreError: Timed out initializing process group in store based barrier on rank: 0,"
            " for key: store_based_barrier_key:1 (world_size=4, worker_count=3, timeout=0:30:00)\n")
    r = diagnose_text(text, "rank0.log")
    assert r["kind"] == "torch_dist"
    missing = [f for f in r["findings"] if f["id"] == "torch.ranks_missing"]
    assert [f["missing"] for f in missing] == [[3], None]
    assert "only 3 of 4 ranks joined (1 never arrived" in missing[1]["message"]
    assert "monitoredBarrier" in missing[0]["evidence"][0]


# --- inputs that cannot be read, or only partly ----------------------------------------------------------

def test_empty_input_is_a_clear_error():
    code, text = run(["-"], b"")
    assert code == 2 and "<stdin>: empty input: nothing to read" in text and "Traceback" not in text


def test_missing_file_and_directory(tmp_path):
    code, text = run([str(tmp_path / "nope.txt"), str(tmp_path)])
    # a folder is read file by file (a job's debug folder); an empty one is said to be so
    assert code == 2 and "nope.txt: no such file" in text and "a folder with no file in it" in text


def test_binary_file(tmp_path):
    path = tmp_path / "core.bin"
    path.write_bytes(bytes(range(256)) * 8)
    code, text = run([str(path)])
    assert code == 2 and "binary input" in text and "Traceback" not in text


def test_unknown_kind_text():
    code, text = run(["-"], b"the job hung, no idea why\nplease help\n")
    assert code == 2 and "not a kind of input the doctor knows" in text and "--kind" in text


def test_usage_errors_exit_2_and_help_lists_the_kinds():
    assert run(["--kind", "nonsense", "x"])[0] == 2
    assert run(["--line-rate", "fast"])[0] == 2
    code, text = run(["--help"])
    assert code == 0 and all(k in text for k in KINDS) and "exit status" in text


def test_forced_kind_on_text_of_another_kind_reads_nothing_and_says_so():
    r = diagnose_text("hello world\n", "x.txt", kind="ibstat")
    assert r["error"] is None and r["kind"] == "ibstat"
    assert any("no HCA port read" in n for n in r["notes"])


def test_parser_exception_is_reported_naming_file_and_kind(monkeypatch):
    def boom(text):
        raise KeyError("port")

    monkeypatch.setattr(doctor.readers, "parse_ib_status", boom)
    r = diagnose_text("CA 'mlx5_0'\n\tPort 1:\n\t\tState: Active\n", "node1-ibstat.txt")
    assert r["kind"] == "ibstat"
    assert r["error"].startswith("node1-ibstat.txt: reading it as ibstat failed inside the parser (KeyError")
    text = render_text([r], [])
    assert "error: node1-ibstat.txt: reading it as ibstat failed" in text and "Traceback" not in text
    assert doctor.exit_status([r], []) == 2


def test_decode_input():
    assert decode_input(b"net.core.somaxconn = 1\n") == ("net.core.somaxconn = 1\n", None)
    assert decode_input(b"a\x00b")[0] is None
    assert decode_input(bytes(range(128, 256)) * 4)[0] is None


@pytest.mark.parametrize("seed", range(12))
def test_random_bytes_never_trace(tmp_path, seed):
    rnd = random.Random(seed)
    path = tmp_path / f"random{seed}.bin"
    path.write_bytes(bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 4000))))
    code, text = run([str(path)])
    assert code == 2 and "Traceback" not in text and f"random{seed}.bin" in text


@pytest.mark.parametrize("seed", range(12))
def test_random_printable_text_never_traces(seed):
    rnd = random.Random(1000 + seed)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .:=[]<>/-_,()'\t\n#"
    text = "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(1, 5000)))
    code, out = run(["-"], text.encode())
    assert code in (0, 1, 2) and "Traceback" not in out and out.rstrip().splitlines()[-1].startswith("doctor: ")
    for kind in KINDS:
        r = diagnose_text(text, "x", kind=kind)
        assert isinstance(r["findings"], list) and json.dumps(as_json([r], compare([r])))


def _truncations(text: str) -> list[str]:
    n = len(text)
    points = sorted({1, 7, n // 5, n // 3, n // 2, 2 * n // 3, n - 3, n - 1})
    return [text[:p] for p in points if 0 < p < n]


@pytest.mark.parametrize("rel", [c[0] for c in CASE_EXPECTATIONS], ids=[c[0] for c in CASE_EXPECTATIONS])
def test_every_case_cut_short_never_traces(rel):
    with open(case_path(rel), encoding="utf-8") as fh:
        full = fh.read()
    for cut in _truncations(full):
        code, out = run(["-"], cut.encode())
        assert code in (0, 1, 2), out
        assert "Traceback" not in out.replace("Traceback (most recent call last)", ""), out
        assert out.rstrip().splitlines()[-1].startswith("doctor: 1 input, ")
        r = diagnose_text(cut, rel)
        assert r["error"] is None or r["error"].startswith(rel)
        json.dumps(as_json([r], compare([r])))


def test_truncated_topo_notes_the_rows_read():
    with open(case_path("topo/3gpu-nvlink-bridge-2nic.txt"), encoding="utf-8") as fh:
        cut = "".join(fh.readlines()[:3])
    r = diagnose_text(cut, "topo.txt")
    assert r["kind"] == "topo"
    assert any(f["id"] == "topo.truncated" and "1 of 3 GPU rows parsed" in f["message"] for f in r["findings"])


def test_cut_nccl_tests_table_notes_missing_summary():
    with open(case_path("nccl_tests/allreduce-3node-healthy-tail.txt"), encoding="utf-8") as fh:
        cut = "".join(fh.readlines()[:3])
    r = diagnose_text(cut, "allreduce.txt")
    assert any("may be cut short" in n for n in r["notes"])


def test_name_is_only_a_weak_hint():
    sysctl_text = "net.core.somaxconn = 128\nnet.core.netdev_budget = 300\n"
    assert detect_kind(sysctl_text, "ibstat-node1.txt") == "sysctl"
    assert detect_kind("nothing here\n", "sysctl.txt") is None


def test_torchrun_output_with_nccl_lines_reads_both():
    text = ("[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, internal error\n"
            "n1:11:11 [1] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth2\n"
            "n1:11:11 [1] NCCL INFO NCCL_DEBUG set by environment to INFO\n"
            "[trainer0|0]:ncclSocketInit: connecting to address  with family 59936 is neither AF_INET(2) nor "
            "AF_INET6(10)\n"
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py FAILED\n")
    r = diagnose_text(text, "job.log")
    assert {r["kind"], *r["also"]} == {"torch_dist", "nccl_log"}
    assert any(f["id"] == "nccl.socket_ifname_missing" and f["subject"] == "eth2" for f in r["findings"])


@pytest.mark.parametrize("kind,text", [
    ("ifconfig", "eth0: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 1500\n"
                 "        inet 10.0.0.5  netmask 255.255.255.0  broadcast 10.0.0.255\n"),
    ("ethtool", "Settings for ens1f0:\n\tSpeed: 100000Mb/s\n\tDuplex: Full\n\tLink detected: no\n"),
    ("numa_lscpu", "Architecture:            x86_64\nCPU(s):                  64\nNUMA node(s):            2\n"
                   "NUMA node0 CPU(s):       0-31\nNUMA node1 CPU(s):       32-47\n"),
    ("topo", " \tGPU0\tGPU1\t\n GPU0\tX\tCNS\t\n GPU1\tCNS\tX\t\n\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n"
             "  CNS  = Chipset not supported\n"),
])
def test_other_tools_are_found_and_judged(kind, text):
    r = diagnose_text(text, "paste")
    assert r["kind"] == kind and r["error"] is None
    ids = {f["id"] for f in r["findings"]}
    assert ids == {"ifconfig": set(), "ethtool": {"ethtool.no_link"}, "numa_lscpu": {"numa.cpu_imbalance"},
                   "topo": {"topo.p2p_unsupported"}}[kind]
    assert all(f["evidence"] for f in r["findings"])


# --- a log holding the socket list more than once (ranks of one host, a restarted job) ----------------

def test_socket_list_printed_twice_is_read_once_and_still_names_the_nic():
    text = open(case_path("nccl_log/socket-docker-bridges-selected.txt"), encoding="utf-8").read()
    [got] = [diagnose_text(text * 2, "twice.txt")]
    [f] = got["findings"]
    assert f["id"] == "nccl.socket_virtual_ifaces" and f["suggested_ifname"] == "bond0"
    assert len(f["virtual"]) == 15 and f["real"] == ["bond0"]
    assert any(line.startswith("NCCL socket interfaces (16): bond0 (10.0.0.1), 11 br-*") for line in got["read"])


def test_a_large_log_with_the_socket_list_repeated_is_read_in_linear_time():
    import time

    text = open(case_path("nccl_log/socket-docker-bridges-selected.txt"), encoding="utf-8").read()
    big = text * 2000  # about 3.4 MB, 36000 interface lines
    started = time.monotonic()
    got = diagnose_text(big, "big.txt")
    assert time.monotonic() - started < 20
    [f] = got["findings"]
    assert f["suggested_ifname"] == "bond0" and f["evidence"][0] == "INFO NET/Socket : Using"


def test_kind_detection_and_decoding_of_30_mb_do_not_scan_it_per_signature():
    import time

    line = "node1:101:101 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
    big = line * (30_000_000 // len(line))
    started = time.monotonic()
    assert decode_input(big.encode())[1] is None and detect_kind(big) == "nccl_log"
    assert time.monotonic() - started < 10


# --- hostile and unusual input (review F14): cut, counted or refused, and said so ---------------------------

NCCL_HEAD = "node1:12:34 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"


def test_a_line_of_100_kb_is_cut_before_the_parsers_and_the_rest_is_still_read():
    """One base64 line of 100 KB went through regexes quadratic in its length (40,000 characters
    took 49 s); now it is cut to MAX_INPUT_LINE first and the note says so."""
    text = NCCL_HEAD + "QUJD" * 25_000 + "\nnode1:12:34 [0] NCCL WARN the last line\n"
    out = diagnose_text(text, "job.log")
    assert out["kind"] == "nccl_log" and out["error"] is None
    assert out["notes"][0] == (f"1 line(s) longer than {doctor.MAX_INPUT_LINE} characters were cut to "
                               f"{doctor.MAX_INPUT_LINE} before reading")
    assert [f["message"] for f in out["findings"] if f["id"] == "nccl.warn"] == ["the last line"]
    assert doctor.cut_long_lines("a\n" + "b" * 5000 + "\nc")[0] == "a\n" + "b" * doctor.MAX_INPUT_LINE + "\nc"


def test_twenty_thousand_warn_lines_are_kinds_with_counts_not_a_finding_each():
    """Each WARN line was a finding, and each finding was looked up in every line: 4,000 lines
    took 11.5 s, growing as the square. Lines that differ only in their numbers are one kind."""
    text = NCCL_HEAD + "".join(f"node1:12:{i} [0] NCCL WARN peer {i} at 0x{i:x} timed out\n" for i in range(20_000))
    text += "".join(f"node1:12:34 [0] NCCL WARN problem {w}\n" for w in
                    ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma "
                     "tau upsilon phi chi psi omega").split())
    warns = [f for f in diagnose_text(text, "job.log")["findings"] if f["id"] == "nccl.warn"]
    assert len(warns) == doctor_nccl_log.MAX_WARN_KINDS + 1
    assert warns[0]["message"] == "peer 0 at 0x0 timed out (and 19999 more like it)" and warns[0]["count"] == 20_000
    assert warns[0]["evidence"][0].endswith("NCCL WARN peer 0 at 0x0 timed out")
    assert warns[-1]["message"] == "5 more kinds of NCCL WARN (5 lines) not listed" and warns[-1]["evidence"] == []
    assert sum(f["count"] for f in warns) == 20_024


def test_a_netplan_alias_bomb_is_refused_not_expanded():
    """378 bytes of nested aliases became 3.8 MB of text, nine times more per level; aliases are
    refused (netplan files need none) with the reason."""
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"] + [
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    text = "network:\n  version: 2\n  ethernets:\n    eth0: {mtu: 9000}\n" + "\n".join(levels) + "\n"
    out = diagnose_text(text, "01-netcfg.yaml", kind="netplan")
    assert out["error"].startswith("01-netcfg.yaml: netplan YAML not readable: YAML error: aliases (*name) are "
                                   "refused")


@pytest.mark.parametrize("through", ["file", "stdin"])
def test_a_file_larger_than_twice_the_read_window_is_read_at_both_ends_and_said_so(tmp_path, monkeypatch, through):
    """The whole file was read, then decoded and split several times (a 2 GB log: gigabytes of
    memory). Its first and last HEAD_TAIL_BYTES are read; the WARN at its end is still found."""
    import ncclprep.doctor_cmd as cmd

    monkeypatch.setattr(cmd, "HEAD_TAIL_BYTES", 64 * 1024)
    filler = "".join(f"node1:12:34 [0] NCCL INFO Channel {i % 32:02d}/0 : 0[0] -> 1[1] via P2P/IPC\n"
                     for i in range(20_000))
    data = (NCCL_HEAD + filler + "node1:12:34 [0] NCCL WARN the job ended here\n").encode()
    path = tmp_path / "big.log"
    path.write_bytes(data)
    rc, out = run(["--json", str(path)]) if through == "file" else run(["--json"], stdin_bytes=data)
    doc = json.loads(out)["inputs"][0]
    skipped = len(data) - 2 * 64 * 1024
    assert doc["notes"][0] == (f"input cut: only its first and last 0 MiB were read; the {skipped / 1e9:.2f} GB "
                               "between them were skipped (split the file, or give the part around the failure)")
    assert [f["message"] for f in doc["findings"] if f["id"] == "nccl.warn"] == ["the job ended here"]
    small = tmp_path / "small.log"
    small.write_bytes(data[:100_000])
    assert not any(n.startswith("input cut") for n in json.loads(run(["--json", str(small)])[1])["inputs"][0]["notes"])


def test_a_job_log_that_forces_nccls_algorithm_and_protocol_is_warned_about():
    """NCCL env.rst's debugging class in a job's log (issue 26): a WARN quoting the lines, no FAIL."""
    log = ("gpu7:4101:4101 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\n"
           "gpu7:4101:4101 [0] NCCL INFO NCCL_ALGO set by environment to Tree\n"
           "gpu7:4101:4101 [0] NCCL INFO NCCL_PROTO set by environment to LL128\n"
           "gpu7:4101:4101 [0] NCCL INFO cudaDriverVersion 12040\n"
           "gpu7:4101:4101 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n")
    result = diagnose_text(log, "rank0.log")
    (f,) = [f for f in result["findings"] if f["id"] == "nccl.debug_class"]
    assert f["severity"] == "WARN"
    assert f["evidence"] == ["gpu7:4101:4101 [0] NCCL INFO NCCL_ALGO set by environment to Tree",
                             "gpu7:4101:4101 [0] NCCL INFO NCCL_PROTO set by environment to LL128"]
    assert f["message"].startswith("the job forces NCCL's own choices: NCCL_ALGO=Tree, NCCL_PROTO=LL128")
    assert "ncclprep tune --nccl-tuner" in f["remediation"]
    assert not [f for f in result["findings"] if f["severity"] == "FAIL"]
