"""ssh outcomes read from OpenSSH's own messages, and the argv of a check."""

import pytest
from ansible.module_utils.ncclprep.sshmesh import classify, ssh_argv


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
    assert argv[-2:] == ["node2", "true"] and argv[argv.index("-i") + 1] == "/root/.ssh/id_ed25519_ncclprep"
