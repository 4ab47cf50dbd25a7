#!/usr/bin/python
# Copyright: ncclprep contributors
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: managed_files
short_description: Compare the files site.yml manages with what it would write now
description:
  - Read-only. Every entry of O(files) carries what the controller rendered from the role's own
    C(<role>_managed_files) list and this inventory (validate.yml renders it with the template and
    file lookups); this module reads the node's file and reports whether it matches, with a
    unified diff when it does not (a hand edit after provisioning, or an inventory change not
    applied yet).
  - "Kinds: C(file) and C(copy), the whole file byte for byte; C(block), only the lines between
    the markers ansible.builtin.blockinfile writes (the rest of the file is other people's);
    C(lines), lines that must be in the file (lineinfile, known_hosts): lines other people added
    are no drift."
  - Rules in module_utils/ncclprep/drift.py.
options:
  files:
    type: list
    elements: dict
    required: true
    description:
      - "Each {concern, path, kind, content, marker, lines, mode}: the concern (role) that writes it,
        the file, the kind (file, copy, block, lines; default file), the expected text (file and
        copy: the whole file; block: the lines between the markers), the block's marker
        (blockinfile's, with {mark} for BEGIN and END), the lines that must be there (lines), the
        expected octal mode (null: not compared)."
  max_diff_lines: {type: int, default: 40, description: Lines of unified diff kept per file.}
author: ncclprep contributors
"""

EXAMPLES = r"""
- name: Compare the NCCL config with what nccl_env would write
  managed_files:
    files:
      - {concern: nccl_env, path: /etc/nccl.conf, mode: "0644",
         content: "{{ lookup('ansible.builtin.template', 'roles/nccl_env/templates/nccl.conf.j2') }}"}

- name: Compare the hosts block and the known host keys
  managed_files:
    files:
      - {concern: host_names, kind: block, path: /etc/hosts, mode: null,
         marker: "# {mark} ncclprep host_names (managed by Ansible)", content: "10.0.0.1 node1\n10.0.0.2 node2\n"}
      - {concern: ssh_trust, kind: lines, path: /etc/ssh/ssh_known_hosts, mode: null,
         lines: ["node1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI...", "node2 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI..."]}
"""

RETURN = r"""
files:
  description:
    - "One row per entry - concern, kind, path, state (ok, differs, absent, missing, mode, unreadable),
      diff (expected first: - what site.yml writes, + what the node has), mode_expected, mode_found;
      block rows add block (the BEGIN marker line), lines rows add lines (how many expected) and
      missing (how many are not there)."
    - "absent: the file is there but the block's markers are not; missing: no such file."
  returned: always
  type: list
"""

import socket

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ncclprep.drift import check


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type="list", elements="dict", required=True),
            max_diff_lines=dict(type="int", default=40),
        ),
        supports_check_mode=True,
    )
    rows = []
    for i, entry in enumerate(module.params["files"]):
        missing = [k for k in ("concern", "path") if k not in entry]
        if missing:
            module.fail_json(msg=f"{socket.gethostname()}: files[{i}] lacks {missing}: {sorted(entry)}")
        try:
            result = check(entry, module.params["max_diff_lines"])
        except ValueError as exc:
            module.fail_json(msg=f"{socket.gethostname()}: files[{i}] ({entry.get('concern')}): {exc}")
        rows.append(dict(result, concern=entry["concern"]))
    module.exit_json(changed=False, files=rows)


if __name__ == "__main__":
    main()
