"""Reading small text files of sysfs and procfs without raising: the one home for the
helpers the facts readers (concern_facts, hostinfo, roce) share."""

from __future__ import annotations

import os


def read_text(path: str) -> str | None:
    """The file's text without surrounding white space; None when it is missing, unreadable
    or not UTF-8 (a sysfs attribute the driver does not implement raises on read)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def list_dir(path: str) -> list[str]:
    """The folder's entries, sorted; [] when it is missing or unreadable."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []
