from ansible.module_utils.ncclprep.parsers.torch_dist import diagnose_torch_dist, parse_torch_dist


def test_port_29500_in_use(case):
    parsed = parse_torch_dist(case("torch_dist/port-29500-in-use.txt"))
    assert parsed["unparsed"] == [] and parsed["exceptions"] == ["DistNetworkError"]
    assert [(b["host"], b["port"], b["errno"], b["reason"]) for b in parsed["bind_failures"]] == [
        ("[::]", 29500, 98, "Address already in use"), ("0.0.0.0", 29500, 98, "Address already in use")]
    [f] = diagnose_torch_dist(parsed, host="n1")
    assert (f["id"], f["severity"], f["subject"], f["port"]) == ("torch.port_in_use", "FAIL", "n1", 29500)
    assert "already in use" in f["message"] and "free port" in f["remediation"]
    assert "let torchrun choose" in f["remediation"]


def test_rdzv_client_timeout(case):
    parsed = parse_torch_dist(case("torch_dist/rdzv-client-timeout.txt"))
    config = parsed["launch_config"]
    assert (config["rdzv_backend"], config["rdzv_endpoint"], config["min_nodes"], config["max_nodes"]) == \
        ("c10d", "10.0.0.1:2222", 2, 2)
    assert config["log_dir"] is None and config["rdzv_configs"] == "{'timeout': 900}"
    assert parsed["timeouts"] == [{"host": "10.0.0.1", "port": 2222, "timeout_s": 60.0, "similar": None}]
    assert parsed["exceptions"] == ["RendezvousConnectionError"]
    assert "Traceback (most recent call last):" in parsed["unparsed"]  # kept, not interpreted
    [f] = diagnose_torch_dist(parsed)
    assert (f["id"], f["severity"], f["subject"]) == ("torch.rdzv_store_unreachable", "FAIL", "10.0.0.1:2222")
    assert "no node hosted it" in f["message"] and "own names/addresses" in f["remediation"]
    assert "every node" in f["remediation"]


def test_master_hostname_unresolvable(case):
    parsed = parse_torch_dist(case("torch_dist/master-hostname-unresolvable.txt"))
    assert parsed["unparsed"] == []
    assert parsed["resolve_failures"] == [{"host": "job-0001.internal", "port": 50745, "family": "IPv6",
                                           "gai_error": -2, "reason": "Name or service not known", "similar": 24}]
    assert parsed["connect_failures"] == [{"host": "job-0001.internal", "port": 50745, "errno": 22,
                                           "reason": "Invalid argument", "similar": 7}]
    [f] = diagnose_torch_dist(parsed)  # the errno 22 connect failure is only a symptom
    assert (f["id"], f["severity"], f["subject"]) == ("torch.master_unresolvable", "FAIL", "job-0001.internal")
    assert "every node" in f["remediation"] and "use an address" in f["remediation"]


def test_other_failures_and_garbled_lines():
    text = ("garbled \x00 line\n"
            "[W socket.cpp:1] [c10d] The client socket has failed to connect to [10.0.0.2]:29500 "
            "(errno: 111 - Connection refused).\n"
            "[W socket.cpp:1] [c10d] The client socket has failed to connect to [10.0.0.2]:29500 "
            "(errno: 111 - Connection refused).\n"
            "[E socket.cpp:2] [c10d] The client socket has timed out after 30s while trying to connect to "
            "(node9, 29400).\n")
    parsed = parse_torch_dist(text)
    assert parsed["unparsed"] == ["garbled \x00 line"]
    findings = diagnose_torch_dist(parsed)
    assert [(f["id"], f["subject"]) for f in findings] == [("torch.connect_timeout", "node9:29400"),
                                                          ("torch.connect_failed", "10.0.0.2:29500")]
    assert findings[1]["errno"] == 111


def test_torch2_listen_failure_is_a_port_in_use():
    text = ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
            "address. port: 29510, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")
    parsed = parse_torch_dist(text)
    assert parsed["bind_failures"] == [{"host": "*", "port": 29510, "errno": 98,
                                        "reason": "address already in use", "similar": None}]
    findings = diagnose_torch_dist(parsed, host="node1")
    assert [f["id"] for f in findings] == ["torch.port_in_use"]
    assert "port 29510 is already in use" in findings[0]["message"]


def test_the_first_failure_and_what_its_exit_code_says():
    """torchrun's agent line alone (the table cut off, as pasted in lmzpai/roboMamba#10): local rank 5
    killed by SIGKILL, most often the OOM killer; with the table, its Root Cause entry wins."""
    agent = ("E0325 20:57:27.620000 2606 site-packages/torch/distributed/elastic/multiprocessing/api.py:869] failed "
             "(exitcode: -9) local_rank: 5 (pid: 2630) of binary: /root/miniconda3/bin/python\n")
    parsed = parse_torch_dist(agent)
    assert parsed["worker_failures"] == [{"exitcode": -9, "local_rank": 5, "pid": 2630}]
    [f] = [f for f in diagnose_torch_dist(parsed) if f["id"] == "torch.first_failure"]
    assert f["subject"] == "local rank 5 (pid 2630)" and f["exitcode"] == -9 and "OOM killer" in f["message"]
    table = agent + ("Root Cause (first observed failure):\n[0]:\n  time      : 2025-03-25_20:57:27\n"
                     "  host      : node1\n  rank      : 13 (local_rank: 5)\n  exitcode  : -6 (pid: 2630)\n")
    [f] = [f for f in diagnose_torch_dist(parse_torch_dist(table)) if f["id"] == "torch.first_failure"]
    assert (f["subject"], f["rank"], f["exitcode"]) == ("rank 13 (local rank 5)", 13, -6)
    assert "watchdog" in f["message"]
