#!/usr/bin/python
# Copyright: ncclprep contributors
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: managed_files
short_description: Write the files a role manages
description:
  - Every entry of O(files) carries what the controller rendered from the role's own
    C(<role>_managed_files) list and this inventory (the C(ncclprep_managed_files) lookup).
  - "Each role, in site.yml, writes every whole file (kinds C(file) and C(copy))
    that differs, atomically (a temp file in the same folder, then a rename), owned by root with the
    entry's mode, making a missing parent folder (0755, root); it leaves a file that matches
    untouched. One module run for all of a role's files, where a template or copy task per file
    ran two modules each. Check mode reports what would change; C(--diff) shows it."
  - "The comparison of every kind (C(file), C(copy), C(block), C(lines)) against the node is the
    preflight engine's (check drift.files, on the record site.yml writes of these files):
    module_utils/ncclprep/drift.py, which holds the rules of both."
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
  state:
    type: str
    choices: [present]
    default: present
    description:
      - present, write the whole files that differ (kinds file and copy only).
author: ncclprep contributors
"""

EXAMPLES = r"""
- name: Ensure the NCCL files hold the settings
  managed_files:
    state: present
    files: "{{ query('ncclprep_managed_files', 'nccl_env', write=true) }}"
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
changed_paths:
  description: The files O(state=present) wrote or whose mode or owner it set (would, in check mode).
  returned: always
  type: list
"""

import socket

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ncclprep.drift import ensure


def _shown(row: dict) -> str:
    """What --diff prints for a file state=present changed: its diff, or what else was set."""
    if row["diff"]:
        return "\n".join(row["diff"]) + "\n"
    if row["state"] == "missing":
        return f"{row['path']}: missing, written whole\n"
    return (f"{row['path']}: mode {row['mode_found']} -> {row['mode_expected']}, "
            f"owner {row['owner_found']} -> 0:0 (root)\n")


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type="list", elements="dict", required=True),
            max_diff_lines=dict(type="int", default=40),
            state=dict(type="str", choices=["present"], default="present"),
        ),
        supports_check_mode=True,
    )
    rows = []
    for i, entry in enumerate(module.params["files"]):
        missing = [k for k in ("concern", "path") if k not in entry]
        if missing:
            module.fail_json(msg=f"{socket.gethostname()}: files[{i}] lacks {missing}: {sorted(entry)}")
        try:
            result = ensure(entry, module.check_mode, module.params["max_diff_lines"])
        except (ValueError, OSError) as exc:
            module.fail_json(msg=f"{socket.gethostname()}: files[{i}] ({entry.get('concern')}): {exc}",
                             files=rows)
        rows.append(dict(result, concern=entry["concern"]))
    changed = [r for r in rows if r.get("changed")]
    out = dict(changed=bool(changed), files=rows, changed_paths=[r["path"] for r in changed])
    if module._diff and changed:
        out["diff"] = [{"prepared": _shown(r)} for r in changed]
    module.exit_json(**out)


if __name__ == "__main__":
    main()
