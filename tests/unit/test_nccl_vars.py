import pytest
from ansible.module_utils.ncclprep.concerns.nccl_env import check_env, ifname_matches, value_problem

IFACES = ["lo", "eth0", "eth1", "docker0", "bond0", "br-3fa1"]


@pytest.mark.parametrize("spec,exact_only,chosen", [
    ("eth", False, ["eth0", "eth1"]),
    ("=eth0", False, ["eth0"]),
    ("=eth0,bond0", False, ["eth0", "bond0"]),
    ("^docker,lo,br-", False, ["eth0", "eth1", "bond0"]),
    ("^=docker0", False, ["lo", "eth0", "eth1", "bond0", "br-3fa1"]),
    ("=eth2", False, []),
    ("bond0", True, ["bond0"]),
    ("eth", True, []),
])
def test_ifname_syntax_as_nccl_documents_it(spec, exact_only, chosen):
    assert ifname_matches(spec, IFACES, exact_only) == chosen


def test_typo_gets_the_closest_known_name():
    errors, _, _ = check_env({"NCCL_SOCKET_IFNAM": "=eth0"}, IFACES)
    assert errors == ["NCCL_SOCKET_IFNAM==eth0: unknown NCCL variable; did you mean NCCL_SOCKET_IFNAME?"]


def test_deprecated_names_are_mapped_with_a_warning():
    errors, warnings, eff = check_env({"NCCL_ASYNC_ERROR_HANDLING": 1, "NCCL_BLOCKING_WAIT": "1"})
    assert errors == []
    assert warnings == ["NCCL_ASYNC_ERROR_HANDLING=1 is deprecated: written as TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
                        "NCCL_BLOCKING_WAIT=1 is deprecated: written as TORCH_NCCL_BLOCKING_WAIT=1"]
    assert eff == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "TORCH_NCCL_BLOCKING_WAIT": "1"}


def test_enumerated_values_and_missing_interface():
    errors, _, _ = check_env({"NCCL_ALGO": "Ring,Treee", "NCCL_DEBUG": "verbose", "NCCL_PROTO": "^LL128",
                              "NCCL_SOCKET_IFNAME": "=eth2", "GLOO_SOCKET_IFNAME": "eth0"}, IFACES)
    assert errors == [
        "NCCL_ALGO=Ring,Treee: 'Treee' not one of COLLNET, COLLNETCHAIN, COLLNETDIRECT, NVLS, NVLSTREE, PAT, RING, "
        "TREE",
        "NCCL_DEBUG=verbose: 'verbose' not one of ABORT, INFO, TRACE, VERSION, WARN",
        "NCCL_SOCKET_IFNAME==eth2 selects no interface on this host "
        "(interfaces: lo, eth0, eth1, docker0, bond0, br-3fa1)",
    ]


def test_socket_ifname_missing_case_is_caught_before_launch(case):
    """shared/cases/nccl_log/socket-ifname-missing.txt: NCCL_SOCKET_IFNAME=eth2 on a host without eth2."""
    assert "NCCL_SOCKET_IFNAME set by environment to eth2" in case("nccl_log/socket-ifname-missing.txt")
    errors, _, _ = check_env({"NCCL_SOCKET_IFNAME": "eth2"}, ["lo", "eth0", "eth1"])
    assert errors == ["NCCL_SOCKET_IFNAME=eth2 selects no interface on this host (interfaces: lo, eth0, eth1)"]


@pytest.mark.parametrize("name,value,problem", [
    ("NCCL_IB_DISABLE", "2", "NCCL_IB_DISABLE=2: not 0 or 1 (a switch)"),
    ("NCCL_P2P_DISABLE", "yes", "NCCL_P2P_DISABLE=yes: not 0 or 1 (a switch)"),
    ("NCCL_BUFFSIZE", "4MB", "NCCL_BUFFSIZE=4MB: not an integer (valid: an integer >= 1)"),
    ("NCCL_BUFFSIZE", "0", "NCCL_BUFFSIZE=0: out of range (valid: an integer >= 1)"),
    ("NCCL_NTHREADS", "100", "NCCL_NTHREADS=100: out of range (valid: 64, 128, 256, 512)"),
    ("NCCL_IB_TIMEOUT", "32", "NCCL_IB_TIMEOUT=32: out of range (valid: an integer 1..31)"),
    ("NCCL_IB_RETRY_CNT", "8", "NCCL_IB_RETRY_CNT=8: out of range (valid: an integer 0..7)"),
    ("NCCL_PROTO", "Fast", "NCCL_PROTO=Fast: 'Fast' not one of LL, LL128, SIMPLE"),
    ("NCCL_IB_DISABLE", "1", None), ("NCCL_BUFFSIZE", "4194304", None), ("NCCL_BUFFSIZE", "0x400000", None),
    ("NCCL_NTHREADS", "256", None), ("NCCL_IB_TIMEOUT", "22", None), ("NCCL_PROTO", "^LL128", None),
    ("NCCL_IB_HCA", "mlx5_0:1", None),  # no documented form checked here
])
def test_switches_integers_and_enumerations_as_the_nccl_guide_documents_them(name, value, problem):
    assert value_problem(name, value) == problem
    errors, _, _ = check_env({name: value})
    assert errors == ([problem] if problem else [])


@pytest.mark.parametrize("name,value,problem", [
    # review F2: each of these reached `source` in the launcher and ran, or broke every launch
    ("NCCL_IB_HCA", "mlx5_0;touch /tmp/pwned", "' ' ';' not allowed in a launch value"),
    ("NCCL_DEBUG_FILE", "/tmp/x$(id)", "'$' '(' ')' not allowed in a launch value"),
    ("NCCL_TOPO_FILE", "/tmp/`id`", "'`' not allowed in a launch value"),
    ("TORCH_NCCL_TRACE_BUFFER_SIZE", "1|2", "'|' not allowed in a launch value"),
    ("MY_TAG", "a b", "not a variable of NCCL, Gloo, PyTorch, OpenMP, CUDA or UCX"),
    ("LD_PRELOAD", "/tmp/evil.so", "not a variable of NCCL, Gloo, PyTorch, OpenMP, CUDA or UCX"),
    ("BASH_ENV", "/tmp/x", "not a variable of NCCL"),
    ("PATH", "/tmp", "not a variable of NCCL"),
    ("PYTHONPATH", "/tmp", "not a variable of NCCL"),
    ("nccl_debug", "INFO", "not an environment variable name"),
])
def test_launch_values_a_shell_would_run_and_names_outside_the_prefixes_are_refused(name, value, problem):
    errors, _, effective = check_env({name: value})
    assert len(errors) == 1 and errors[0].startswith(f"{name}=") and problem in errors[0], errors
    assert name not in effective


def test_every_documented_value_form_stays_accepted():
    env = {"NCCL_SOCKET_IFNAME": "^=docker0,lo", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_DEBUG_FILE":
           "/var/log/nccl.%h.%p.log", "NCCL_DEBUG_SUBSYS": "INIT,NET", "OMP_NUM_THREADS": "8",
           "CUDA_VISIBLE_DEVICES": "0,1", "UCX_TLS": "rc,cuda_copy", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE":
           "{dir}/nccl_trace_rank_", "NCCL_IB_TC": "106"}
    errors, _, effective = check_env(env)
    assert errors == [] and effective["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"


def test_debugging_class_variables_warn_quoting_nccls_docs_and_the_socket_product_is_capped():
    """NCCL's env.rst: NCCL_ALGO, NCCL_PROTO, NCCL_BUFFSIZE and the channel counts "should generally
    not be set for production code" (a warning); NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD at
    most 64 (an error). NCCL_IB_DISABLE, set on purpose without InfiniBand, is not warned about."""
    errors, warnings, eff = check_env({"NCCL_PROTO": "Simple", "NCCL_MAX_NCHANNELS": 8, "NCCL_IB_DISABLE": 1,
                                       "NCCL_DEBUG": "WARN"})
    assert errors == [] and eff["NCCL_PROTO"] == "Simple"
    assert warnings == [f"{v}: NCCL's documentation lists it among the debugging variables, which \"should generally "
                        "not be set for production code\" (NCCL env.rst): keep it only for a measured reason"
                        for v in ("NCCL_MAX_NCHANNELS=8", "NCCL_PROTO=Simple")]
    errors, _, _ = check_env({"NCCL_SOCKET_NTHREADS": 8, "NCCL_NSOCKS_PERTHREAD": 16})
    assert errors == ["NCCL_SOCKET_NTHREADS=8 x NCCL_NSOCKS_PERTHREAD=16 = 128 sockets: valid: at most 64 "
                      "(NCCL env.rst)"]
    assert check_env({"NCCL_SOCKET_NTHREADS": 4, "NCCL_NSOCKS_PERTHREAD": 16})[0] == []


def test_the_tuner_plugin_and_its_csv_are_taken():
    """`ncclprep tune --nccl-tuner` writes a CSV for NCCL's example tuner: nccl_env_overrides must take
    NCCL_TUNER_PLUGIN and NCCL_TUNER_CONFIG_FILE (refused as unknown before)."""
    errors, warnings, eff = check_env({"NCCL_TUNER_PLUGIN": "libnccl-tuner-example.so",
                                       "NCCL_TUNER_CONFIG_FILE": "/etc/ncclprep/nccl-tuner.csv"})
    assert errors == [] and warnings == []
    assert eff["NCCL_TUNER_CONFIG_FILE"] == "/etc/ncclprep/nccl-tuner.csv"
