# Copyright: ncclprep contributors
# Apache-2.0
"""Lookup ``ncclprep_intent``: a concern's intent, computed in Python from its declared inputs.

``query('ncclprep_intent', '<concern>') | first`` (the role's tasks/intent.yml) calls
``concerns.intent`` (module_utils/ncclprep/concerns/__init__.py) with the host's variables named in
the concern's ``INTENT_VARS`` (templated; undefined ones None) and its facts
``ansible_facts.ncclprep.<concern>`` cut to ``INTENT_FACTS``: nothing else reaches the intent, so it
cannot depend on what the concern sets. A bad value fails the task naming the host and concern.
``query('ncclprep_intent', 'a', 'b', ...)`` returns the intents of several concerns, in the order
named (validate.yml computes every intent of a node in one task: roles/preflight/tasks/concerns.yml).
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
  - "Returns [the intent] of the concern named by each term, in the order named; see
    module_utils/ncclprep/concerns/__init__.py (intent, intent_inputs) and the concern's module
    (INTENT_VARS, INTENT_FACTS, intent)."
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
        bad = [t for t in terms if t not in concerns.BY_NAME or not hasattr(concerns.BY_NAME[t], "intent")]
        if not terms or bad:
            raise AnsibleLookupError(f"{host}: ncclprep_intent takes concerns with an intent, got {terms!r}"
                                     + (f" ({bad!r} not among them)" if bad else ""))
        ncclprep_facts = None
        out = []
        computed = {}  # an earlier term's intent is a later one's input (``<name>_intent`` in INTENT_VARS)
        for name in terms:
            concern = concerns.BY_NAME[name]
            given = {v: computed[v] if v in computed else self._templar.template(variables[v])
                     for v in concern.INTENT_VARS if v in computed or v in variables}
            facts = None
            if concern.INTENT_FACTS:
                if ncclprep_facts is None:
                    read = (variables.get("ansible_facts") or {}).get("ncclprep") or {}
                    ncclprep_facts = self._templar.template(read)
                facts = ncclprep_facts.get(name)
                if facts is None:
                    raise AnsibleLookupError(f"{host}: {name}: no ansible_facts.ncclprep.{name} to compute the "
                                             f"intent from (its tasks/facts.yml reads them first)")
            try:
                out.append(concerns.intent(name, given, facts))
                computed[f"{name}_intent"] = out[-1]
            except (ValueError, TypeError) as exc:
                raise AnsibleLookupError(f"{host}: {name}: {exc}") from None
        return out
