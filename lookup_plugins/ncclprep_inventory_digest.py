# Copyright: ncclprep contributors
# Apache-2.0
"""Lookup ``ncclprep_inventory_digest``: one digest of the inventory the run was given.

site.yml records it in each node's intent document (roles/preflight/vars/main.yml, key
``inventory``); validate.yml hands the digest of its own inventory to the preflight engine
(``ncclprep node preflight --inventory-digest``), which reports drift.files WARN on a node whose
recorded digest differs: the inventory changed since site.yml last wrote that node's files, so
they may hold settings the inventory no longer asks for (module_utils/ncclprep/drift.py
``inventory_row``).

The digest covers every regular file of each inventory source (``ansible_inventory_sources``: a
file, or a folder with its ``group_vars/`` and ``host_vars/``), by its path inside the source and
its bytes, in sorted order; a source that is no path (``-i node1,node2,``) by its text. Hidden
files and folders (``.git``) are left out, and so is where the inventory lives: two checkouts of
one inventory give one digest. Extra variables (``-e``) are not the inventory's and are not in it.
"""

from __future__ import annotations

import hashlib
import os

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: ncclprep_inventory_digest
short_description: One digest of the inventory files the run was given
description:
  - "Returns 16 hex characters of SHA-256 over every regular file of each inventory source
    (its path inside the source and its bytes, sorted; hidden files left out). See the plugin's
    docstring."
"""

#: The most bytes read from the inventory: a larger one is no inventory (the lookup fails).
MAX_BYTES = 64 << 20


def inventory_digest(sources: list[str]) -> str:
    """16 hex characters of SHA-256 over the inventory ``sources`` (module docstring). Raises
    AnsibleLookupError naming the source when a file cannot be read or all of them pass MAX_BYTES."""
    h = hashlib.sha256()
    total = 0
    for source in sorted(sources):
        if not os.path.exists(source):
            h.update(b"source\0" + source.encode() + b"\0")
            continue
        if os.path.isfile(source):
            files = [(os.path.basename(source), source)]
        else:
            files = []
            for root, dirs, names in os.walk(source):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                files += [(os.path.relpath(os.path.join(root, n), source), os.path.join(root, n))
                          for n in names if not n.startswith(".")]
        for rel, path in sorted(files):
            if not os.path.isfile(path):
                continue
            try:
                with open(path, "rb") as fh:
                    data = fh.read(MAX_BYTES + 1)
            except OSError as exc:
                raise AnsibleLookupError(f"ncclprep_inventory_digest: {path}: {exc}") from None
            total += len(data)
            if total > MAX_BYTES:
                raise AnsibleLookupError(f"ncclprep_inventory_digest: {source} holds over {MAX_BYTES} bytes")
            h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        sources = (variables or {}).get("ansible_inventory_sources") or []
        if isinstance(sources, str):
            sources = [sources]
        return [inventory_digest([str(s) for s in sources])]
