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

import socket

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ncclprep.probes.sshmesh import run_in_rounds


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
