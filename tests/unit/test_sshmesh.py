"""ssh outcomes read from OpenSSH's own messages, and the argv of a check."""

import subprocess
import time

import pytest
from ansible.module_utils.ncclprep.probes.sshmesh import classify, is_reset, peer_order, ssh_argv


@pytest.mark.parametrize("stderr,cause", [
    ("No ED25519 host key is known for node2 and you have requested strict checking.\n"
     "Host key verification failed.\n", "host_key_unknown"),
    ("@@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
     "Host key verification failed.\n", "host_key_changed"),
    ("root@10.0.0.12: Permission denied (publickey).\n", "auth_denied"),
    ("ssh: Could not resolve hostname node9: Name or service not known\n", "unresolved"),
    ("ssh: connect to host 10.0.0.13 port 22: Connection timed out\n", "timeout"),
    ("ssh: connect to host 10.0.0.13 port 22: Connection refused\n", "refused"),
    ("ssh: connect to host 10.9.0.1 port 22: No route to host\n", "unreachable"),
])
def test_causes(stderr, cause):
    out = classify(255, stderr)
    assert out["ok"] is False and out["cause"] == cause and out["explanation"]


def test_ok_deadline_and_unknown_text():
    assert classify(0, "") == {"ok": True, "cause": None, "explanation": None}
    assert classify(None, "")["cause"] == "deadline"
    assert classify(1, "something odd\nlast words\n") == {"ok": False, "cause": "error", "explanation": "last words"}


def test_argv_never_prompts_and_checks_host_keys():
    argv = ssh_argv("node2", user="root", identity="/root/.ssh/id_ed25519_ncclprep", connect_timeout=5,
                    known_hosts="/etc/ssh/ssh_known_hosts")
    assert argv[:3] == ["ssh", "-o", "BatchMode=yes"]
    assert "StrictHostKeyChecking=yes" in argv and "GlobalKnownHostsFile=/etc/ssh/ssh_known_hosts" in argv
    assert argv[-3:] == ["--", "node2", "true"] and argv[argv.index("-i") + 1] == "/root/.ssh/id_ed25519_ncclprep"


# --- logins in rounds (the 8-node MaxStartups defect: every node logged in to every other at once)

def _hosts(n):
    return [f"node{i}" for i in range(n)]


@pytest.mark.parametrize("n", [2, 3, 8, 64, 512, 4096])
def test_every_round_is_a_permutation_so_each_target_gets_one_login_per_round(n):
    hosts = _hosts(n)
    limit = None if n <= 64 else 32
    orders = {h: peer_order(hosts, h, limit, seed="run-1") for h in hosts}
    rounds = len(orders[hosts[0]])
    assert rounds == (n - 1 if limit is None else min(limit, n - 1))
    for r in range(rounds):
        targets = [orders[h][r] for h in hosts]
        assert sorted(targets) == sorted(hosts)  # every node the target of exactly one login
        assert all(orders[h][r] != h for h in hosts)


def test_small_clusters_log_in_to_every_peer_and_large_ones_to_a_sample_with_the_ring():
    hosts = _hosts(8)
    assert sorted(peer_order(hosts, "node3")) == sorted(set(hosts) - {"node3"})
    big = _hosts(1000)
    sample = peer_order(big, "node10", limit=16, seed="s")
    assert len(sample) == len(set(sample)) == 16 and sample[:2] == ["node11", "node9"]
    assert peer_order(big, "node10", limit=16, seed="s") == sample  # the same on every call with one seed
    assert peer_order(big, "node10", limit=16, seed="t")[2:] != sample[2:]


def test_peer_order_rejects_a_stranger_and_a_bad_limit():
    with pytest.raises(ValueError, match="'node9' is not one of the 3 members"):
        peer_order(_hosts(3), "node9")
    with pytest.raises(ValueError, match="limit=0"):
        peer_order(_hosts(3), "node0", 0)


@pytest.mark.parametrize("stderr", ["kex_exchange_identification: read: Connection reset by peer",
                                    "Connection closed by remote host",
                                    "ssh_exchange_identification: Connection closed by remote host"])
def test_a_reset_before_the_key_exchange_is_retried(stderr):
    assert is_reset(stderr)


def test_real_failures_are_not_retried():
    assert not is_reset("Permission denied (publickey).")
    assert not is_reset("Host key verification failed.")


def test_ssh_mesh_retries_a_reset_and_bounds_the_hosts_at_once(monkeypatch):
    import threading

    from ansible.module_utils.ncclprep.probes import sshmesh as mod
    calls, active, peak, lock = {}, [0], [0], threading.Lock()

    def fake_run(argv, **kw):
        target = argv[-2]
        with lock:
            calls[target] = calls.get(target, 0) + 1
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.02)
        with lock:
            active[0] -= 1
        first = calls[target] == 1
        err = "kex_exchange_identification: read: Connection reset by peer" if first and target == "b" else ""
        return subprocess.CompletedProcess(argv, 255 if err else 0, "", err)

    monkeypatch.setattr(mod.subprocess, "run", fake_run)
    monkeypatch.setattr(mod.time, "sleep", lambda s: None)
    p = {"user": None, "identity": None, "port": 22, "known_hosts": None, "timeout": 15.0, "parallel": 2,
         "retries": 2}
    targets = [{"host": h, "name": h} for h in "abcdef"]
    res = mod.run_in_rounds(targets, p)
    assert [r["name"] for r in res] == list("abcdef") and all(r["ok"] for r in res)
    assert res[1]["attempts"] == 2 and res[0]["attempts"] == 1
    assert peak[0] <= 2


def test_ssh_mesh_retries_a_transient_failure_once_and_keeps_its_evidence(monkeypatch):
    """A timeout that clears passes on try 2 with the first try's error kept; a refused SSH port
    is tried twice and still fails; a refused key (not transient) is tried once."""
    from ansible.module_utils.ncclprep.probes import sshmesh as mod
    calls = {}
    errors = {"b": "ssh: connect to host b port 22: Connection timed out",
              "c": "ssh: connect to host c port 22: Connection refused",
              "d": "root@d: Permission denied (publickey)."}

    def fake_run(argv, **kw):
        target = argv[-2]
        calls[target] = calls.get(target, 0) + 1
        err = errors.get(target, "") if (target != "b" or calls[target] == 1) else ""
        return subprocess.CompletedProcess(argv, 255 if err else 0, "", err)

    monkeypatch.setattr(mod.subprocess, "run", fake_run)
    monkeypatch.setattr(mod.time, "sleep", lambda s: None)
    p = {"user": None, "identity": None, "port": 22, "known_hosts": None, "timeout": 15.0, "parallel": 1,
         "retries": 2}
    a, b, c, d = mod.run_in_rounds([{"host": h, "name": h} for h in "abcd"], p)
    assert (a["ok"], a["attempts"], a["retried"]) == (True, 1, [])
    assert (b["ok"], b["attempts"]) == (True, 2)
    assert b["retried"] == ["timeout: ssh: connect to host b port 22: Connection timed out"]
    assert (c["ok"], c["cause"], c["attempts"]) == (False, "refused", 2)
    assert (d["ok"], d["cause"], d["attempts"], d["retried"]) == (False, "auth_denied", 1, [])
    # retries=0: no retry at all
    calls.clear()
    b0 = mod.run_in_rounds([{"host": "b", "name": "b"}], dict(p, retries=0))[0]
    assert (b0["ok"], b0["attempts"]) == (False, 1)


def test_a_target_that_looks_like_an_option_is_a_host_name_to_ssh(tmp_path):
    """Without ``--``, ssh read ``-oProxyCommand=...`` as an option and ran the command."""
    import subprocess

    mark = tmp_path / "ran"
    argv = ssh_argv(f"-oProxyCommand=touch {mark}", connect_timeout=2)
    subprocess.run(argv, capture_output=True, timeout=30)
    assert not mark.exists()
