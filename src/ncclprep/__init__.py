"""ncclprep: provision and preflight GPU clusters for PyTorch distributed training.

The shared pure-Python code lives in the repository's ``module_utils/ncclprep``
so that Ansible can ship it to the nodes inside each module, where it is
imported as ``ansible.module_utils.ncclprep.<name>``. On the controller (this
CLI, the filter plugins, the tests) the same import path works once the
repository's ``module_utils`` folder is on ``ansible.module_utils.__path__``,
which importing this package arranges. The CLI drives the playbooks of the
repository it was installed from (``pip install -e .``).
"""

from __future__ import annotations

import os

import ansible.module_utils

__version__ = "0.1.0"

#: Root of the ncclprep repository (holds ansible.cfg, site.yml, validate.yml).
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_MODULE_UTILS = os.path.join(REPO_ROOT, "module_utils")

if not os.path.isdir(os.path.join(_MODULE_UTILS, "ncclprep")):
    raise ImportError(
        f"ncclprep: {_MODULE_UTILS}/ncclprep not found; install ncclprep editable "
        "from its repository (pip install -e .)"
    )
if _MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MODULE_UTILS)
