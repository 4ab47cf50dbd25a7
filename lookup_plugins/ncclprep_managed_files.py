"""Lookup ``ncclprep_managed_files``: a concern's managed files rendered on the controller, as one list.

Every role lists what it writes in ``<role>_managed_files`` (roles/<role>/vars/main.yml; entries:
module_utils/ncclprep/drift.py ``managed_entries``). This lookup is the one place they are
rendered: a ``file`` entry from ``roles/<role>/templates/<src>`` with ansible.builtin.template's
lookup (an entry with ``role``, boot_unit's unit, renders that role's template with its defaults,
the host's variables and the entry's ``vars``, as import_role would), a ``copy`` entry from
``roles/<role>/files/<src>`` or its ``content``. Both sides take the result as it is:

- the role itself, ``query('ncclprep_managed_files', '<role>', write=true)``: the ``file`` and
  ``copy`` entries it writes with its own task (not those another role writes), for
  library/managed_files.py ``state: present``: one module run writes every file that differs,
  where a template or copy task per file cost two module runs each (stat, then file);
- site.yml's record of what it wrote (roles/preflight/tasks/managed.yml),
  ``query('ncclprep_managed_files', 'a', 'b', ...)``: every entry of every concern named (blocks and
  lines too), which the preflight engine's drift.files holds the node's files against.

Each returned row: ``{concern, kind, path, mode, content, marker, lines}``; content is the whole
text (file, copy), the text between the markers (block) or None (lines).
"""

from __future__ import annotations

import os
import sys

import yaml
from ansible.errors import AnsibleLookupError
from ansible.plugins.loader import lookup_loader
from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: ncclprep_managed_files
short_description: The files a concern's role writes, rendered on the controller
description:
  - "Returns one row per managed file of each concern named ({concern, kind, path, mode, content,
    marker, lines}), rendered from C(<concern>_managed_files); see the plugin's docstring."
options:
  write:
    description: Only the file and copy entries the concern's role writes with its own task.
    type: bool
    default: false
"""

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SRC = os.path.join(_ROOT, "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

# ncclprep must be imported before ansible.module_utils.ncclprep: keep this order.
# isort: off
import ncclprep  # noqa: E402,F401  (extends ansible.module_utils.__path__)
from ansible.module_utils.ncclprep.drift import managed_entries  # noqa: E402
# isort: on

#: The roles' folder: this project's roles/, next to lookup_plugins/.
ROLES = os.path.join(_ROOT, "roles")


class LookupModule(LookupBase):
    def _template(self, path: str, variables: dict, template_vars: dict) -> str:
        """ansible.builtin.template's lookup of ``path`` (its own search, includes and options)."""
        lookup = lookup_loader.get("ansible.builtin.template", loader=self._loader, templar=self._templar)
        return lookup.run([path], variables, template_vars=template_vars)[0]

    def _role_defaults(self, role: str, variables: dict) -> dict:
        """import_role's precedence for a role the host did not import: its defaults, then the host's variables."""
        path = os.path.join(ROLES, role, "defaults", "main.yml")
        with open(path, encoding="utf-8") as fh:
            defaults = yaml.safe_load(fh) or {}
        return {k: variables[k] if k in variables else v for k, v in defaults.items()}

    def _render(self, entry: dict, variables: dict) -> str | None:
        folder = os.path.join(ROLES, entry["role"] or entry["concern"])
        if entry["kind"] == "file":
            tvars = self._role_defaults(entry["role"], variables) if entry["role"] else {}
            return self._template(os.path.join(folder, "templates", entry["src"]), variables,
                                  dict(tvars, **entry["vars"]))
        if entry["kind"] == "copy":
            if entry["content"] is not None:
                return str(entry["content"])
            with open(os.path.join(folder, "files", entry["src"]), encoding="utf-8") as fh:
                return fh.read()
        return entry["block"]

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        variables = variables or {}
        write = self.get_option("write")
        host = variables.get("inventory_hostname", "?")
        out = []
        for concern in terms:
            name = f"{concern}_managed_files"
            if name not in variables:
                raise AnsibleLookupError(f"{host}: ncclprep_managed_files: no {name} (roles/{concern}/vars/main.yml)")
            try:
                entries = managed_entries(self._templar.template(variables[name]), None, concern)
            except ValueError as exc:
                raise AnsibleLookupError(f"{host}: {name}: {exc}") from None
            for entry in entries:
                if write and (entry["kind"] not in ("file", "copy") or entry["role"]):
                    continue
                try:
                    content = self._render(entry, variables)
                except OSError as exc:
                    raise AnsibleLookupError(f"{host}: {name}: {entry['dest']}: {exc}") from None
                out.append({"concern": concern, "kind": entry["kind"], "path": entry["dest"], "mode": entry["mode"],
                            "content": content, "marker": entry["marker"], "lines": entry["lines"]})
        return out
