"""KEY=VALUE environment files (the launch env files that nccl_env renders).

Format: one ``KEY=VALUE`` per line; ``#`` comments and blank lines are ignored. The value is
everything after the first ``=``, taken literally: no quotes removed, nothing expanded. The
launcher (``ncclprep-torchrun``) reads the file the same way, with a ``read`` loop and never
through a shell, and nccl_env writes only values that need no quoting in any reader
(``concerns.nccl_env.entry_problem``), so bash, systemd's EnvironmentFile and this module all see the
same environment.
"""

from __future__ import annotations

import re

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_env(text: str, source: str = "<text>") -> dict[str, str]:
    """Parse env-file ``text`` into a dict. Raises ValueError naming ``source`` and line."""
    env: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not _NAME_RE.match(key):
            raise ValueError(f"{source}:{number}: not KEY=VALUE: {line!r}")
        env[key] = value
    return env


def read_env_file(path: str) -> dict[str, str]:
    """Read and parse the env file at ``path``. Raises OSError or ValueError."""
    with open(path, encoding="utf-8") as fh:
        return parse_env(fh.read(), path)
