"""roles/ssh_trust writes the trust account's ~/.ssh as that account (review N11). The account owns
~/.ssh and can swap authorized_keys for a link to /etc/shadow after validate.yml looked; a task that
runs as root there follows it (ansible.posix.authorized_key chowns and chmods the target, lineinfile
writes to its realpath). The role's Molecule scenario plants that link between the check and the
write (molecule/default/verify.yml); this reads the task files, so a new task that forgets is caught
without a node."""

from __future__ import annotations

import glob
import os

import yaml
from conftest import REPO

TASKS = os.path.join(REPO, "roles", "ssh_trust", "tasks")
#: What marks a task as one that reads or writes the account's ~/.ssh.
HOME_PATHS = ("ssh_trust_intent.home", "ssh_trust_intent.key")
HOME_MODULES = ("ansible.posix.authorized_key", "community.crypto.openssh_keypair")
#: Actions that run on the controller: they name the paths but open nothing on the node.
CONTROLLER = ("ansible.builtin.assert", "ansible.builtin.set_fact", "ansible.builtin.fail", "ansible.builtin.debug",
              "ansible.builtin.import_tasks", "ansible.builtin.include_tasks")
AS_ACCOUNT = "{{ ssh_trust_user }}"


def walk(items, inherited: dict, path: str):
    """(task, the variables in force for it: its blocks' and its own, inner last) for every task."""
    for task in items or []:
        scope = {**inherited, **(task.get("vars") or {})}
        yield task, scope, path
        for key in ("block", "rescue", "always"):
            yield from walk(task.get(key), scope, path)


def role_tasks():
    for path in sorted(glob.glob(os.path.join(TASKS, "*.yml"))):
        with open(path, encoding="utf-8") as fh:
            yield from walk(yaml.safe_load(fh), {}, os.path.basename(path))


def touches_home(task: dict) -> bool:
    if any(k in task for k in ("block", "rescue", "always", *CONTROLLER)):
        return False
    if any(m in task for m in HOME_MODULES):
        return True
    action = {k: v for k, v in task.items() if k not in ("name", "when", "vars", "loop_control")}
    return any(p in str(action) for p in HOME_PATHS)


def test_every_task_on_the_accounts_ssh_folder_runs_as_the_account_so_a_planted_link_gets_root_nothing():
    found, as_root = [], []
    for task, scope, path in role_tasks():
        if not touches_home(task):
            continue
        found.append(f"{path}: {task['name']}")
        # the connection variables, not the become keywords: an inventory's ansible_become_user beats a
        # keyword and would put root back without a word; a task-level keyword or variable may not undo it
        runs_as = scope.get("ansible_become_user") if scope.get("ansible_become") is True else None
        if runs_as != AS_ACCOUNT or task.get("become") is False or "become_user" in task:
            as_root.append(f"{path}: {task['name']} (runs as {runs_as or 'the play user'})")
    # the stats, the folder, the pair, its read, both halves, authorized_keys and the clean-up: the walk finds them
    assert len(found) >= 9, found
    assert as_root == []


def test_the_key_files_are_written_without_a_file_the_account_must_be_let_read():
    """ansible.builtin.copy stages its content in a temporary file the account must be let read
    (setfacl, else Ansible refuses to become an unprivileged user): the pair goes through stdin."""
    staged = [t["name"] for t, _, _ in role_tasks()
              if ("ansible.builtin.copy" in t or "ansible.builtin.template" in t) and touches_home(t)]
    assert staged == []
