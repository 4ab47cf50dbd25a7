"""Versions of the software stack a training job depends on, read from the files and names
each package leaves on a node. Pure parsers; library/node_facts.py reads the files.

- NVIDIA driver: /proc/driver/nvidia/version, ``NVRM version: NVIDIA UNIX x86_64 Kernel
  Module  535.104.05  Sat Aug 19 ...`` (the open kernel modules print ``Open Kernel Module``).
- CUDA toolkit: /usr/local/cuda/version.json (CUDA >= 11.1: ``{"cuda": {"version": "12.2.140"}}``)
  or version.txt (older: ``CUDA Version 10.2.89``).
- System libnccl: the real file behind ``libnccl.so.2`` is named ``libnccl.so.<major>.<minor>.<patch>``.
"""

from __future__ import annotations

import json
import re

_DRIVER = re.compile(r"NVRM version:.*?Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)")
_CUDA_TXT = re.compile(r"CUDA Version\s+(\d+(?:\.\d+)+)")
_LIBNCCL = re.compile(r"libnccl\.so\.(\d+\.\d+\.\d+)$")


def parse_nvidia_driver(text: str | None) -> str | None:
    """Driver version from /proc/driver/nvidia/version text, or None."""
    m = _DRIVER.search(text or "")
    return m.group(1) if m else None


def parse_cuda_version(text: str | None) -> str | None:
    """CUDA toolkit version from version.json or version.txt text, or None."""
    text = text or ""
    if text.lstrip().startswith("{"):
        try:
            return str(json.loads(text)["cuda"]["version"])
        except (ValueError, KeyError, TypeError):
            return None
    m = _CUDA_TXT.search(text)
    return m.group(1) if m else None


def libnccl_version(filename: str | None) -> str | None:
    """``libnccl.so.2.18.3`` -> ``2.18.3``; None for any other name."""
    m = _LIBNCCL.search(filename or "")
    return m.group(1) if m else None
