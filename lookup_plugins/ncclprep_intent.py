# Copyright: ncclprep contributors
# Apache-2.0
"""Lookup ``ncclprep_intent``: a concern's intent, computed in Python from its declared inputs.

``query('ncclprep_intent', '<concern>') | first`` (the role's tasks/intent.yml) calls
``concerns.intent`` (module_utils/ncclprep/concerns/__init__.py) with the host's variables named in
the concern's ``INTENT_VARS`` (templated; undefined ones None) and its facts
``ansible_facts.ncclprep.<concern>`` cut to ``INTENT_FACTS``: nothing else reaches the intent, so it
cannot depend on what the concern sets. A bad value fails the task naming the host and concern.
"""

from __future__ import annotations

import os
import sys

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: ncclprep_intent
short_description: A concern's intent from its declared variables and node facts
description:
  - "Returns [the intent] of the concern named by the one term; see module_utils/ncclprep/concerns/__init__.py
    (intent, intent_inputs) and the concern's module (INTENT_VARS, INTENT_FACTS, intent)."
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
        variables = variables or {}
        host = variables.get("inventory_hostname", "?")
        if len(terms) != 1 or terms[0] not in concerns.BY_NAME or not hasattr(concerns.BY_NAME[terms[0]], "intent"):
            raise AnsibleLookupError(f"{host}: ncclprep_intent takes one concern with an intent, got {terms!r}")
        concern = concerns.BY_NAME[terms[0]]
        given = {name: self._templar.template(variables[name]) for name in concern.INTENT_VARS if name in variables}
        facts = None
        if concern.INTENT_FACTS:
            ncclprep_facts = self._templar.template((variables.get("ansible_facts") or {}).get("ncclprep") or {})
            facts = ncclprep_facts.get(terms[0])
            if facts is None:
                raise AnsibleLookupError(f"{host}: {terms[0]}: no ansible_facts.ncclprep.{terms[0]} to compute the "
                                         f"intent from (its tasks/facts.yml reads them first)")
        try:
            return [concerns.intent(terms[0], given, facts)]
        except (ValueError, TypeError) as exc:
            raise AnsibleLookupError(f"{host}: {terms[0]}: {exc}") from None
