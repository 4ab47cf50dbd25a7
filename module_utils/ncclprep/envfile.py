"""KEY=VALUE environment files (the launch env that nccl_env renders).

Format: one ``KEY=VALUE`` per line, ``#`` comments and blank lines ignored, an
optional ``export`` prefix, values optionally in single or double quotes. This
is the subset that both ``source`` in bash and systemd's EnvironmentFile read.
"""

from __future__ import annotations

import re

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_env(text: str, source: str = "<text>") -> dict[str, str]:
    """Parse env-file ``text`` into a dict. Raises ValueError naming ``source`` and line."""
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].strip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not _NAME_RE.match(key):
            raise ValueError(f"{source}:{number}: not KEY=VALUE: {raw!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key] = value
    return env


def read_env_file(path: str) -> dict[str, str]:
    """Read and parse the env file at ``path``. Raises OSError or ValueError."""
    with open(path, encoding="utf-8") as fh:
        return parse_env(fh.read(), path)
