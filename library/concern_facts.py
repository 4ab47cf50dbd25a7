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
    its C(tasks/intent.yml) computes the desired state from variables and these facts only, and
    validate.yml's check compares the two."
  - "One concern (O(concern) and its options), or several in one run (O(concerns)); validate.yml reads
    every concern of a node in one module run with each role's C(<role>_reader) options (its
    C(vars/main.yml)), which the role's C(tasks/facts.yml) reads with too."
  - Ansible replaces a top-level fact wholesale, so the caller passes the current
    C(ansible_facts.ncclprep) in O(into) and gets it back with each concern added or replaced.
  - Never changes anything; runs in check mode too and always returns C(changed=false). Every
    command has a deadline (O(timeout)).
options:
  concern:
    type: str
    description: Which concern's state to read; valid are the keys of READERS in module_utils/ncclprep/concern_facts.py.
  concerns:
    type: dict
    description: "Several concerns in one run instead of O(concern): C({<concern>: {<option>: value}}), each entry
      taking the options below (defaults as below); a bad entry fails the run naming the concern."
  into: {type: dict, default: {}, description: The current ansible_facts.ncclprep to add the concern to.}
  interface: {type: str, description: "Interface (nic_mtu, rps_rfs, numa_pinning: whose queues, MTU or IRQs)."}
  map_file: {type: path, description: numa_pinning's installed binding map to read.}
  backend: {type: str, default: auto, description: "firewall: firewall_backend (auto, ufw, nftables)."}
  user: {type: str, default: root, description: "ssh_trust: the account whose home holds the cluster key."}
  host_key_types:
    type: list
    elements: str
    default: []
    description: "ssh_trust: host key types whose /etc/ssh/ssh_host_<type>_key.pub is read (host_keys)."
  key_name: {type: str, description: "ssh_trust: the cluster key's file name under ~/.ssh (checked not to be a link)."}
  persist:
    type: str
    default: auto
    choices: [auto, netplan, ifupdown, networkmanager, none]
    description: "nic_mtu: nic_mtu_persist, the managers asked which one defines the interface (persist.manager)."
  netplan_file: {type: path, description: "nic_mtu: nic_mtu's own netplan drop-in, not counted as a definition."}
  timeout: {type: float, default: 10.0, description: Deadline in seconds for each command.}
  listening:
    type: list
    elements: dict
    description: "firewall: the TCP listeners community.general.listen_ports_facts read (its C(tcp_listen)
      facts), kept as C(listening) [{port, address, pid, name}] for the check firewall.ports_free."
  env_files:
    type: list
    elements: path
    default: []
    description: "nccl_env: the launch env file and /etc/nccl.conf, read as they are on the node (C(files)),
      for the check nccl_env.ifname."
author: ncclprep contributors
"""

EXAMPLES = r"""
- name: Read the firewall state
  concern_facts:
    concern: firewall
    backend: "{{ firewall_backend }}"
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
  description: "C(ncclprep): O(into) with C(<concern>) set to the reader's result (see
    module_utils/ncclprep/concern_facts.py for each shape)."
  returned: always
  type: dict
"""

import socket

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.ncclprep import concern_facts as readers
from ansible.module_utils.ncclprep.hostinfo import subprocess_runner


def requests(params: dict) -> dict[str, dict]:
    """``{concern: its options, defaults filled}`` from the module's parameters: ``concern`` with
    the flat options, or every entry of ``concerns`` validated against concern_facts.READER_SPEC (module_utils). Raises
    ValueError naming the concern and what is wrong (unknown concern, bad or unknown option)."""
    if params.get("concerns") is None:
        return {params["concern"]: {k: params.get(k) for k in readers.READER_SPEC}}
    out = {}
    for concern, options in params["concerns"].items():
        if concern not in readers.READERS:
            raise ValueError(f"concerns: {concern!r} is not a concern this module reads "
                             f"(valid: {', '.join(sorted(readers.READERS))})")
        result = ArgumentSpecValidator(readers.READER_SPEC).validate(dict(options or {}))
        if result.error_messages:
            raise ValueError(f"concerns.{concern}: {'; '.join(result.error_messages)}")
        out[concern] = result.validated_parameters
    return out


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            concern=dict(type="str", choices=sorted(readers.READERS)),
            concerns=dict(type="dict"),
            into=dict(type="dict", default={}),
            **readers.READER_SPEC,
        ),
        required_one_of=[("concern", "concerns")],
        mutually_exclusive=[("concern", "concerns")],
        supports_check_mode=True,
    )
    me = socket.gethostname()
    facts = dict(module.params["into"] or {})
    try:
        wanted = requests(module.params)
    except ValueError as exc:
        module.fail_json(msg=f"{me}: {exc}")
    for concern, p in wanted.items():
        if concern == "numa_pinning" and not p["map_file"]:
            module.fail_json(msg=f"{me}: concern=numa_pinning needs map_file")
        try:
            facts[concern] = readers.READERS[concern](subprocess_runner, p)
        except ValueError as exc:
            module.fail_json(msg=f"{me}: {concern}: {exc}")
    module.exit_json(changed=False, ansible_facts={"ncclprep": facts})


if __name__ == "__main__":
    main()
