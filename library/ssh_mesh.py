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
    prompt) and C(StrictHostKeyChecking=yes) (an unknown or changed host key fails), all targets at
    once, each under a deadline.
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
    description: Deadline in seconds for each login (the connect timeout is a third of it).
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
  description: "Per target: {host, name, ok, cause (null, host_key_unknown, host_key_changed, auth_denied,
    unresolved, timeout, refused, unreachable, deadline, error), explanation, stderr, seconds}."
  returned: always
  type: list
  elements: dict
"""

import concurrent.futures
import socket
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ncclprep.sshmesh import classify, ssh_argv


def attempt(target: dict, p: dict) -> dict:
    argv = ssh_argv(target["name"], p["user"], p["identity"], p["port"], max(1, int(p["timeout"] / 3)),
                    p["known_hosts"])
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=p["timeout"])
        rc, stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stderr = None, (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
    return dict(host=target.get("host"), name=target["name"], stderr=stderr.strip()[-2000:],
                seconds=round(time.monotonic() - start, 3), **classify(rc, stderr))


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            targets=dict(type="list", elements="dict", required=True),
            user=dict(type="str"),
            identity=dict(type="path"),
            port=dict(type="int", default=22),
            known_hosts=dict(type="path"),
            timeout=dict(type="float", default=15.0),
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
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(32, max(1, len(p["targets"])))) as pool:
        results = list(pool.map(lambda t: attempt(t, p), p["targets"]))
    module.exit_json(changed=False, results=results)


if __name__ == "__main__":
    main()
