#!/usr/bin/python
# Copyright: ncclprep contributors
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ssh_mesh
short_description: SSH from this node to every peer with host keys checked and no prompt (read-only)
description:
  - Runs the system ssh client to each target, as mpirun or pdsh would, with C(BatchMode=yes) (never
    prompt) and C(StrictHostKeyChecking=yes) (an unknown or changed host key fails), each under a
    deadline.
  - Targets are taken in the order given (the caller orders them in rounds, sshmesh.peer_order, so
    every node is the target of about one login per round), O(parallel) hosts at once, the names of
    one host one after the other; a reset before the key exchange (sshd's MaxStartups under a burst)
    is retried O(retries) times after a short random pause, any other failure that may pass (a
    timeout, a refused connection, no route, an unknown error) once; a refused key, a host key
    and a name that does not resolve are not retried. A login that passed only on a retry keeps
    its earlier tries' errors in C(retried) (ssh.trust then WARNs).
  - Each result says why a login failed (host key unknown or changed, key refused, name not
    resolved, timeout, refused) from OpenSSH's own messages.
  - Never changes anything; runs in check mode too and always returns C(changed=false).
options:
  targets:
    type: list
    elements: dict
    required: true
    description: "C({host, name}): inventory host and the name or address to log in to."
  user: {type: str, description: Remote account; null is the local account's name.}
  identity: {type: path, description: Private key; null lets ssh's own configuration choose.}
  port: {type: int, default: 22, description: SSH port.}
  known_hosts: {type: path, description: Known hosts file to check against; null is ssh's own configuration.}
  timeout:
    type: float
    default: 15.0
    description: Deadline in seconds for each login, retries included (the connect timeout is a third of it).
  parallel: {type: int, default: 4, description: Hosts logged in to at once.}
  retries:
    type: int
    default: 2
    description: >-
      Retries of a login the peer reset before the key exchange (sshd's MaxStartups); 0 also turns
      off the one retry of other transient failures.
author: ncclprep contributors
"""

EXAMPLES = r"""
- name: Log in to every peer
  ssh_mesh:
    targets: [{host: node2, name: node2}, {host: node2, name: 10.0.0.12}]
    identity: /root/.ssh/id_ed25519_ncclprep
"""

RETURN = r"""
results:
  description: "Per target: {host, name, attempts, retried (each earlier try's cause and ssh's last line), ok, cause
    (null, host_key_unknown, host_key_changed, auth_denied, unresolved, timeout, refused, unreachable, deadline,
    error), explanation, stderr, seconds}."
  returned: always
  type: list
  elements: dict
"""

import concurrent.futures
import random
import socket
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ncclprep.sshmesh import TRANSIENT, classify, is_reset, ssh_argv


def attempt(target: dict, p: dict) -> dict:
    """One login, inside one deadline. A reset before the key exchange (sshd's MaxStartups) is
    retried up to p["retries"] times after a short random pause; any other failure that may
    pass (TRANSIENT causes) once. Each failed try before the last is kept in ``retried``
    ("<cause>: <ssh's last line>"), the evidence of a login that passed only on a retry."""
    argv = ssh_argv(target["name"], p["user"], p["identity"], p["port"], max(1, int(p["timeout"] / 3)),
                    p["known_hosts"])
    start = time.monotonic()
    tries = resets = others = 0
    retried = []
    while True:
        tries += 1
        left = p["timeout"] - (time.monotonic() - start)
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=max(1.0, left))
            rc, stderr = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, stderr = None, (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        verdict = classify(rc, stderr)
        if verdict["ok"] or rc is None or time.monotonic() - start > p["timeout"] / 2:
            break
        if is_reset(stderr) and resets < p["retries"]:
            resets += 1
        elif verdict["cause"] in TRANSIENT and not others and p["retries"] > 0:
            others += 1
        else:
            break
        retried.append(f"{'reset' if is_reset(stderr) else verdict['cause']}: "
                       f"{(stderr.strip().splitlines() or [''])[-1][:200]}")
        time.sleep(random.uniform(0.2, 1.0) * tries)
    return dict(host=target.get("host"), name=target["name"], stderr=stderr.strip()[-2000:], attempts=tries,
                retried=retried, seconds=round(time.monotonic() - start, 3), **verdict)


def run_in_rounds(targets: list, p: dict) -> list:
    """Log in to the targets' hosts in the order given (peer_order's rounds), at most
    p["parallel"] hosts at once, the names of one host one after the other; results in
    the targets' order."""
    by_host: dict = {}
    for i, t in enumerate(targets):
        by_host.setdefault(t.get("host") or t["name"], []).append((i, t))
    results: list = [None] * len(targets)

    def one_host(items):
        for i, t in items:
            results[i] = attempt(t, p)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(p["parallel"], len(by_host) or 1))) as pool:
        list(pool.map(one_host, by_host.values()))
    return results


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            targets=dict(type="list", elements="dict", required=True),
            user=dict(type="str"),
            identity=dict(type="path"),
            port=dict(type="int", default=22),
            known_hosts=dict(type="path"),
            timeout=dict(type="float", default=15.0),
            parallel=dict(type="int", default=4),
            retries=dict(type="int", default=2),
        ),
        supports_check_mode=True,
    )
    p = module.params
    me = socket.gethostname()
    for t in p["targets"]:
        if not t.get("name"):
            module.fail_json(msg=f"{me}: targets: entry {t!r} has no name (valid: {{host, name}})")
    if module.get_bin_path("ssh") is None:
        module.fail_json(msg=f"{me}: no ssh client on PATH (openssh-client)")
    if p["parallel"] < 1 or p["retries"] < 0:
        module.fail_json(msg=f"{me}: parallel={p['parallel']}, retries={p['retries']}: valid: parallel >= 1, "
                             "retries >= 0")
    module.exit_json(changed=False, results=run_in_rounds(p["targets"], p))


if __name__ == "__main__":
    main()
