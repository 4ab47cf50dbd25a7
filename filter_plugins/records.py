"""The preflight's per-host records, built on the controller from every host's variables.

Filter ``ncclprep_host_records`` (roles/preflight/tasks/report.yml): the logic is
``build_record`` in module_utils/ncclprep/model.py, which also defines the record
(``HostRecord``). Like filter_plugins/ncclprep.py, this file puts the repository's src/ on
sys.path and imports the ncclprep package, which makes ``ansible.module_utils.ncclprep``
importable on the controller.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping

_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

# ncclprep must be imported before ansible.module_utils.ncclprep: keep this order.
# isort: off
import ncclprep  # noqa: E402,F401  (extends ansible.module_utils.__path__)
from ansible.errors import AnsibleFilterError  # noqa: E402
from ansible.module_utils.ncclprep.model import build_record  # noqa: E402
# isort: on


def _names(value, what: str) -> list[str]:
    """A list of strings from a list, tuple or generator (``map(attribute='name')``); raises
    AnsibleFilterError naming the argument when it is a string, a mapping or holds a non-string."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise AnsibleFilterError(f"ncclprep_host_records: {what}={value!r} is not a list of names")
    names = list(value)
    bad = [n for n in names if not isinstance(n, str) or not n]
    if bad:
        raise AnsibleFilterError(f"ncclprep_host_records: {what} holds {bad!r}; every item must be a non-empty "
                                 "string")
    return names


def host_records(hostvars: Mapping, all_hosts, alive_hosts, concern_names) -> dict:
    """host -> ``HostRecord`` (model.py) for every host of ``all_hosts``.

    ``hostvars``: Ansible's ``hostvars``; ``all_hosts``: every host the run covers
    (``ansible_play_hosts_all``); ``alive_hosts``: those still in the play
    (``ansible_play_hosts``), the others get ``alive: false``; ``concern_names``: the
    concern names of playbooks/vars/concerns.yml (``ncclprep_concerns | map(attribute='name')``),
    one ``intent`` key each. Raises AnsibleFilterError naming the argument and value when a
    list is not a list of names or a host has no variables.
    """
    hosts = _names(all_hosts, "all_hosts")
    alive = set(_names(alive_hosts, "alive_hosts"))
    concerns = _names(concern_names, "concern_names")
    out = {}
    for host in hosts:
        if host not in hostvars:
            known = sorted(hostvars)
            raise AnsibleFilterError(f"ncclprep_host_records: host {host!r} of all_hosts is not in hostvars "
                                     f"(hosts there: {', '.join(known[:10]) or 'none'}"
                                     f"{' ...' if len(known) > 10 else ''})")
        out[host] = build_record(hostvars[host], host in alive, concerns)
    return out


class FilterModule:
    """ncclprep record filters."""

    def filters(self) -> dict:
        return {"ncclprep_host_records": host_records}
