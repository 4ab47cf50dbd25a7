#!/usr/bin/python
# Copyright: ncclprep contributors
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: concern_facts
short_description: Read concerns' live state off a node into ansible_facts.ncclprep.<concern> (read-only)
description:
  - "The facts half of intent apart from facts: each role's C(tasks/facts.yml) calls this module,
    its C(tasks/intent.yml) computes the desired state from variables and these facts, and
    validate.yml's check compares the two."
  - "Each concern of O(concerns) is read with its reader (C(read) of module_utils/ncclprep/concerns/<concern>.py),
    its options checked against that module's C(OPTIONS) (an argument spec, defaults filled): the role's
    C(<role>_reader) variable (its C(vars/main.yml)). validate.yml reads every concern of a node in one
    node_facts run with the same options."
  - Ansible replaces a top-level fact wholesale, so the caller passes the current
    C(ansible_facts.ncclprep) in O(into) and gets it back with each concern added or replaced.
  - Never changes anything; runs in check mode too and always returns C(changed=false). Every
    command has a deadline (a reader's C(timeout) option, 10 s by default).
options:
  concerns:
    type: dict
    required: true
    description: "C({<concern>: {<option>: value}}): the concerns to read (those with a reader of their own,
      READERS of module_utils/ncclprep/concerns), each with its options; an unknown concern, an unknown
      option or a bad value fails the run naming the host, concern, option and value."
  into: {type: dict, default: {}, description: The current ansible_facts.ncclprep to add the concerns to.}
author: ncclprep contributors
"""

EXAMPLES = r"""
- name: Read the firewall state
  concern_facts:
    concerns: {firewall: {backend: "{{ firewall_backend }}"}}
    into: "{{ ansible_facts.ncclprep | default({}) }}"

- name: Read two concerns in one run
  concern_facts:
    concerns:
      rps_rfs: {interface: eth0}
      nccl_env: {env_files: [/etc/ncclprep/nccl.env, /etc/nccl.conf]}
    into: "{{ ansible_facts.ncclprep | default({}) }}"
"""

RETURN = r"""
ansible_facts:
  description: "C(ncclprep): O(into) with C(<concern>) set to the reader's result (see the reader of
    module_utils/ncclprep/concerns/<concern>.py for each shape)."
  returned: always
  type: dict
"""

import socket

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ncclprep import concerns
from ansible.module_utils.ncclprep.node.hostinfo import subprocess_runner


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(concerns=dict(type="dict", required=True), into=dict(type="dict", default={})),
        supports_check_mode=True,
    )
    me = socket.gethostname()
    facts = dict(module.params["into"] or {})
    for concern, options in module.params["concerns"].items():
        try:
            facts[concern] = concerns.read(concern, subprocess_runner, options)
        except ValueError as exc:
            module.fail_json(msg=f"{me}: concerns: {exc}")
    module.exit_json(changed=False, ansible_facts={"ncclprep": facts})


if __name__ == "__main__":
    main()
