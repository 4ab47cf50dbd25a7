"""node_facts' torch versions: where the NVIDIA driver is loaded torch is imported (its GPUs,
NCCL and cuDNN); elsewhere torch/version.py is read without importing torch. Against a fake
torch package on disk run by a real python (its __init__ cannot be imported)."""

from __future__ import annotations

import stat
import subprocess
import sys

import pytest
from ansible.module_utils.ncclprep.node import read as node_facts

VERSION_PY = """from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']
__version__ = '2.12.1+cu128'
debug = False
cuda: Optional[str] = '12.8'
git_version = 'abc'
hip: Optional[str] = None
"""


def run(argv, timeout):
    """The real runner's shape (hostinfo.subprocess_runner): (rc, stdout, stderr)."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout, done.stderr


def fake_python(tmp_path, version_py: str | None = VERSION_PY):
    """A python whose sys.path has a torch package that raises on import, with version_py as its
    torch/version.py (none when None)."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("raise ImportError('libtorch_cpu.so: cannot open shared object')\n")
    if version_py is not None:
        (site / "torch" / "version.py").write_text(version_py)
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return str(python)


def test_without_the_gpu_driver_the_version_file_is_read_and_torch_is_not_imported(tmp_path):
    got = node_facts.torch_versions(run, fake_python(tmp_path), 30, gpu_driver=False)
    assert got == {"torch": "2.12.1+cu128", "torch_cuda": "12.8", "torch_nccl": None, "cudnn": None, "gpus": 0,
                   "torch_error": None}


def test_with_the_gpu_driver_torch_is_imported_and_its_error_reported(tmp_path):
    got = node_facts.torch_versions(run, fake_python(tmp_path), 30, gpu_driver=True)
    assert got["torch"] is None
    assert got["torch_error"] == "ImportError: libtorch_cpu.so: cannot open shared object"


@pytest.mark.parametrize("version_py,error", [
    (None, "version.py"),
    ("debug = False\n", "no __version__ in"),
])
def test_a_torch_without_a_readable_version_is_an_error(tmp_path, version_py, error):
    got = node_facts.torch_versions(run, fake_python(tmp_path, version_py), 30, gpu_driver=False)
    assert got["torch"] is None and error in got["torch_error"]


def test_no_torch_at_all_is_named(tmp_path):
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH= exec {sys.executable} -S \"$@\"\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    got = node_facts.torch_versions(run, str(python), 30, gpu_driver=False)
    assert got["torch"] is None and got["torch_error"] == "ModuleNotFoundError: No module named 'torch'"
