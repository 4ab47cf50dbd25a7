#!/usr/bin/python
# Copyright: ncclprep contributors
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: managed_files
short_description: Compare the files site.yml manages with what it would write now
description:
  - Read-only. Every entry of O(files) carries the content the controller rendered from the
    role's own template and this inventory (validate.yml renders it with the template lookup);
    this module reads the node's file and reports whether it matches, with a unified diff
    when it does not (a hand edit after provisioning, or an inventory change not applied yet).
  - Rules in module_utils/ncclprep/drift.py.
options:
  files:
    type: list
    elements: dict
    required: true
    description: "Each {concern, path, content, mode}: the concern (role) that writes it, the file, the
      expected text, the expected octal mode (null: not compared)."
  max_diff_lines: {type: int, default: 40, description: Lines of unified diff kept per file.}
author: ncclprep contributors
"""

EXAMPLES = r"""
- name: Compare the NCCL config with what nccl_env would write
  managed_files:
    files:
      - {concern: nccl_env, path: /etc/nccl.conf, mode: "0644",
         content: "{{ lookup('ansible.builtin.template', 'roles/nccl_env/templates/nccl.conf.j2') }}"}
"""

RETURN = r"""
files:
  description: "One row per file - concern, path, state (ok, differs, missing, mode, unreadable), diff
    (unified, expected first), mode_expected, mode_found."
  returned: always
  type: list
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ncclprep.drift import compare


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
        missing = [k for k in ("concern", "path", "content") if k not in entry]
        if missing:
            module.fail_json(msg=f"files[{i}] lacks {missing}: {sorted(entry)}")
        result = compare(str(entry["path"]), str(entry["content"]), entry.get("mode"), module.params["max_diff_lines"])
        rows.append(dict(result, concern=entry["concern"]))
    module.exit_json(changed=False, files=rows)


if __name__ == "__main__":
    main()
