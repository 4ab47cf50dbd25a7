#!/usr/bin/python
# Copyright: ncclprep contributors
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: port_counters
short_description: Read the error counters of the RDMA ports and the data-plane netdev (read-only)
description:
  - Reads the IB PortCounters of every RDMA port (/sys/class/infiniband/<dev>/ports/<n>/counters)
    and carrier_changes, rx_errors, tx_errors and rx_crc_errors of each O(netdevs) from sysfs.
  - validate.yml reads them when it starts (node_facts) and again when the run is over; check
    links.counters names every counter that grew in between. Rules in module_utils/ncclprep/portstate.py.
  - Never changes anything; runs in check mode too and always returns C(changed=false).
options:
  netdevs:
    type: list
    elements: str
    default: []
    description: Netdevs whose counters to read (the data-plane interface).
author: ncclprep contributors
"""

EXAMPLES = r"""
- name: Read the port counters again
  port_counters:
    netdevs: [eth1]
  register: __preflight_counters
"""

RETURN = r"""
counters:
  description: "{rdma: {'<dev>/<port>': {counter: int or null}}, net: {netdev: {counter: int or null}}}: counts
    of events since the driver loaded; null where the driver shows no such counter."
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.ncclprep.portstate import read_counters


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(netdevs=dict(type="list", elements="str", default=[])),
        supports_check_mode=True,
    )
    module.exit_json(changed=False, counters=read_counters("/sys", module.params["netdevs"]))


if __name__ == "__main__":
    main()
