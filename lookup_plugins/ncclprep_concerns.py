# Copyright: ncclprep contributors
# Apache-2.0
"""Lookup ``ncclprep_concerns``: the registry of concerns as the playbooks loop over it.

The one list of concerns is ``CONCERNS`` in module_utils/ncclprep/concerns/__init__.py; this
lookup hands its rows (``concerns.rows()``: ``{name, switch, data_plane, facts, reader}`` each,
in the order site.yml applies them) to playbooks/vars/concerns.yml, so no YAML file lists them.
"""

from __future__ import annotations

import os
import sys

from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: ncclprep_concerns
short_description: The registry of concerns (module_utils/ncclprep/concerns) as a list of rows
description:
  - "Returns one dict per concern, in registry order: name, switch (the variable that turns it off, or
    null), data_plane, facts, reader; see module_utils/ncclprep/concerns/__init__.py."
options: {}
"""

_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

# ncclprep must be imported before ansible.module_utils.ncclprep: keep this order.
# isort: off
import ncclprep  # noqa: E402,F401  (extends ansible.module_utils.__path__)
from ansible.module_utils.ncclprep import concerns  # noqa: E402
# isort: on


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        return concerns.rows()
