# Copyright: ncclprep contributors
# Apache-2.0
"""Lookup ``ncclprep_core``: the node-side core as one zip file on the controller; returns its path.

site.yml copies the zip to every node (roles/preflight/tasks/install.yml), where
``/usr/local/sbin/ncclprep`` puts it first on sys.path and runs ``ncclprep node check``
(module_utils/ncclprep/node/check.py) without Ansible. The zip holds module_utils/ncclprep/ under
``ansible/module_utils/ncclprep/`` with empty ``ansible/__init__.py`` and
``ansible/module_utils/__init__.py``: the layout AnsiballZ ships a module's module_utils in, so
the package's absolute imports (``ansible.module_utils.ncclprep...``) hold on the node as they do
in a module run.

The zip is built the same byte for byte from the same files (sorted names, a fixed time stamp,
fixed modes), so the copy changes nothing on a re-run; it is written (atomically) only when its
bytes differ, to ``~/.cache/ncclprep/ncclprep-core.zip`` on the controller.
"""

from __future__ import annotations

import io
import os
import sys
import zipfile

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

# ncclprep must be imported before ansible.module_utils.ncclprep: keep this order.
# isort: off
import ncclprep  # noqa: E402,F401  (extends ansible.module_utils.__path__)
from ansible.module_utils.ncclprep.atomic import write_atomic  # noqa: E402
# isort: on

DOCUMENTATION = r"""
name: ncclprep_core
short_description: Build the node-side core zip (module_utils/ncclprep) on the controller
description:
  - Returns the path of a zip of module_utils/ncclprep laid out as ansible/module_utils/ncclprep,
    built deterministically under ~/.cache/ncclprep; see the plugin's docstring.
options: {}
"""

#: The package shipped, relative to this file; its .py files only (no __pycache__).
PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils", "ncclprep")
#: The zip's time stamp for every entry (the earliest a zip can hold): the same bytes every build.
STAMP = (1980, 1, 1, 0, 0, 0)


def build(package: str = PACKAGE) -> bytes:
    """The zip's bytes. Raises OSError when the package cannot be read."""
    files = []
    for folder, dirs, names in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        files += [os.path.join(folder, n) for n in names if n.endswith(".py")]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        entries = [("ansible/__init__.py", b""), ("ansible/module_utils/__init__.py", b"")]
        for path in sorted(files):
            rel = os.path.relpath(path, package).replace(os.sep, "/")
            with open(path, "rb") as fh:
                entries.append((f"ansible/module_utils/ncclprep/{rel}", fh.read()))
        for name, data in entries:
            info = zipfile.ZipInfo(name, STAMP)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data, compresslevel=9)
    return buf.getvalue()


def write(dest: str, data: bytes) -> None:
    """``data`` at ``dest`` unless it holds them already; atomic (temp file, rename)."""
    try:
        with open(dest, "rb") as fh:
            if fh.read() == data:
                return
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    write_atomic(dest, data)


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        dest = os.path.join(os.path.expanduser("~"), ".cache", "ncclprep", "ncclprep-core.zip")
        try:
            write(dest, build())
        except OSError as exc:
            raise AnsibleLookupError(f"ncclprep_core: cannot build {dest} from {PACKAGE}: {exc}") from exc
        return [dest]
