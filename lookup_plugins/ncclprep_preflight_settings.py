# Copyright: ncclprep contributors
# Apache-2.0
"""Lookup ``ncclprep_preflight_settings``: the preflight engine's settings of this host.

``query('ncclprep_preflight_settings') | first`` gives ``{section: {key: value}}`` for every
preflight_* variable of module_utils/ncclprep/node/settings.py SETTINGS: the host's value, templated,
where it is set (the role's defaults set them all), the table's default where not, converted to the
setting's kind (a string "5" from ``-e`` is 5). A value that does not convert is kept as it is, for
``ncclprep_preflight_problems`` (filter_plugins/ncclprep.py) to name with its host and variable.
roles/preflight/vars/main.yml ``__preflight_run_settings`` is this lookup: site.yml records it in a
node's intent, validate.yml hands it to the engine with ``--settings``.
"""

from __future__ import annotations

import os
import sys

from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: ncclprep_preflight_settings
short_description: The preflight engine's settings from the host's preflight_* variables
description:
  - "Returns [{section: {key: value}}]: every setting of module_utils/ncclprep/node/settings.py,
    from the host's variables, converted to its kind. Takes no terms."
options: {}
"""

_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

# ncclprep must be imported before ansible.module_utils.ncclprep: keep this order.
# isort: off
import ncclprep  # noqa: E402,F401  (extends ansible.module_utils.__path__)
from ansible.module_utils.ncclprep.node import settings  # noqa: E402
# isort: on


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        variables = variables or {}

        def get(var):
            return self._templar.template(variables[var])

        return [settings.values(get)]
