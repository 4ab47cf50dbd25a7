"""Every role task that waits on something outside the node's control carries a deadline
(STYLE.md 13; review, "Missing timeouts elsewhere"): NetworkManager over D-Bus (nmcli), the
xtables lock (the ufw module), a package index (pip). Without one a stuck daemon or index
holds site.yml forever; with Ansible's task keyword ``timeout`` the task fails naming itself."""

from __future__ import annotations

import glob
import os

import yaml
from conftest import REPO

#: What blocks on another party: a module name, or a command's first argument.
BLOCKING_MODULES = ("community.general.ufw", "ansible.builtin.pip")
BLOCKING_COMMANDS = ("nmcli",)


def tasks(items):
    for task in items or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from tasks(task.get(key))


def blocking(task: dict) -> bool:
    if any(m in task for m in BLOCKING_MODULES):
        return True
    argv = (task.get("ansible.builtin.command") or {}).get("argv") if isinstance(
        task.get("ansible.builtin.command"), dict) else None
    return bool(argv) and argv[0] in BLOCKING_COMMANDS


def test_every_task_that_waits_on_another_party_has_a_deadline():
    found, bare = [], []
    for path in sorted(glob.glob(os.path.join(REPO, "roles", "*", "tasks", "*.yml"))):
        with open(path, encoding="utf-8") as fh:
            for task in tasks(yaml.safe_load(fh)):
                if blocking(task):
                    where = f"{os.path.relpath(path, REPO)}: {task.get('name')}"
                    found.append(where)
                    if "timeout" not in task:
                        bare.append(where)
    assert len(found) >= 7  # four ufw tasks, two nmcli, one pip: the walk finds them
    assert bare == []
