"""Shared test setup: makes ``ansible.module_utils.ncclprep`` importable on the controller.

Importing the ``ncclprep`` package is the one arrangement the CLI and the filter
plugins use too (see src/ncclprep/__init__.py and the README's developer section).
"""

from __future__ import annotations

import os

import pytest

import ncclprep  # noqa: F401  (extends ansible.module_utils.__path__)

REPO = ncclprep.REPO_ROOT
CASES = os.environ.get("NCCLPREP_CASES", os.path.join(os.path.dirname(REPO), "shared", "cases"))


@pytest.fixture
def case():
    """Return a function that reads ../shared/cases/<relpath> (skips when shared/ is absent)."""

    def read(relpath: str) -> str:
        path = os.path.join(CASES, relpath)
        if not os.path.exists(path):
            pytest.skip(f"case file {path} not present")
        with open(path, encoding="utf-8") as fh:
            return fh.read()

    return read


@pytest.fixture(scope="session")
def timings():
    """Return a function that records how long one step took: ``timings(phase, name, seconds)``.

    Appends ``phase<TAB>name<TAB>seconds`` to the file named by $NCCLPREP_TIMINGS (scripts/test.sh
    prints them in its closing summary); does nothing when that variable is unset.
    """
    path = os.environ.get("NCCLPREP_TIMINGS")

    def record(phase: str, name: str, seconds: float) -> None:
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(f"{phase}\t{name}\t{seconds:.1f}\n")

    return record
