"""The boot_unit role as rps_rfs, numa_pinning and roce_qos import it: the unit files are
byte-identical to those the roles wrote before they shared the role, check mode passes on a
fresh node, and a second run changes nothing.

The callers' ``vars`` are read from their task files and the ``__<role>_boot_unit`` dict of their
vars/main.yml those vars name (the same dict validate.yml's drift check renders the unit with),
so a change there is tested here; the role runs through ``ansible-playbook`` on localhost with
``boot_unit_systemd_dir`` under tmp_path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

import ncclprep

REPO = ncclprep.REPO_ROOT
HEADER = "#\n# Ansible managed\n#\n"

#: Unit files as the roles' own templates rendered them (commit c86a701), for the values in INTENT.
EXPECTED = {
    "rps_rfs": HEADER + (
        "[Unit]\n"
        "Description=ncclprep: RPS/RFS on eth-0\n"
        "After=network-online.target sys-subsystem-net-devices-eth\\x2d0.device\n"
        "Wants=network-online.target\n\n"
        "[Service]\nType=oneshot\nExecStart=/usr/local/sbin/ncclprep-rps-rfs\nRemainAfterExit=yes\n\n"
        "[Install]\nWantedBy=multi-user.target\n"),
    "numa_pinning": HEADER + (
        "[Unit]\n"
        "Description=ncclprep: pin ens1f0np0's IRQs to CPUs 0-15,32-47\n"
        "After=network-pre.target irqbalance.service\n"
        "Wants=network-pre.target\n\n"
        "[Service]\nType=oneshot\n"
        "ExecStart=/usr/local/sbin/ncclprep-irq-affinity ens1f0np0 0-15,32-47\n\n"
        "[Install]\nWantedBy=multi-user.target\n"),
    "roce_qos": HEADER + (
        "[Unit]\n"
        "Description=ncclprep: PFC priority 3, trust dscp, ECN on the RoCE ports\n"
        "After=network-pre.target\n"
        "Wants=network-pre.target\n\n"
        "[Service]\nType=oneshot\nExecStart=/usr/local/sbin/ncclprep-roce-qos\n\n"
        "[Install]\nWantedBy=multi-user.target\n"),
}
UNITS = {"rps_rfs": "ncclprep-rps-rfs.service", "numa_pinning": "ncclprep-irq-affinity.service",
         "roce_qos": "ncclprep-roce-qos.service"}
CALLERS = {"rps_rfs": "apply.yml", "numa_pinning": "irq.yml", "roce_qos": "apply.yml"}
INTENT = {
    "rps_rfs_intent": {"interface": "eth-0"}, "rps_rfs_script": "/usr/local/sbin/ncclprep-rps-rfs",
    "rps_rfs_unit": UNITS["rps_rfs"],
    "numa_pinning_intent": {"irq": {"interface": "ens1f0np0", "cpus": "0-15,32-47"}},
    "numa_pinning_irq_script": "/usr/local/sbin/ncclprep-irq-affinity", "numa_pinning_irq_unit": UNITS["numa_pinning"],
    "roce_qos_pfc_priority": 3, "roce_qos_trust": "dscp", "roce_qos_script": "/usr/local/sbin/ncclprep-roce-qos",
    "roce_qos_unit": UNITS["roce_qos"],
}


def _tasks(tasks: list):
    for task in tasks:
        yield task
        yield from _tasks(task.get("block", []))


def caller_vars(role: str) -> dict:
    """The ``vars`` of the one task of roles/<role>/tasks/<file> that imports boot_unit."""
    with open(os.path.join(REPO, "roles", role, "tasks", CALLERS[role]), encoding="utf-8") as fh:
        found = [t for t in _tasks(yaml.safe_load(fh))
                 if (t.get("ansible.builtin.import_role") or {}).get("name") == "boot_unit"]
    assert len(found) == 1, f"{role}: expected one import_role of boot_unit, found {len(found)}"
    return found[0]["vars"]


def unit_vars() -> dict:
    """Each caller's ``__<role>_boot_unit`` (roles/<role>/vars/main.yml), the dict its import names."""
    out = {}
    for role in CALLERS:
        with open(os.path.join(REPO, "roles", role, "vars", "main.yml"), encoding="utf-8") as fh:
            out[f"__{role}_boot_unit"] = yaml.safe_load(fh)[f"__{role}_boot_unit"]
    return out


def playbook(tmp_path, *args: str) -> dict:
    """Import boot_unit once per caller (with the caller's vars) on localhost; returns the recap stats."""
    plays = [{"name": "Boot units", "hosts": "localhost", "connection": "local", "gather_facts": False,
              "vars": dict(INTENT, **unit_vars(), ansible_python_interpreter=sys.executable),
              "tasks": [{"name": f"Import boot_unit as {role}", "ansible.builtin.import_role": {"name": "boot_unit"},
                         "vars": dict(caller_vars(role), boot_unit_systemd_dir=str(tmp_path / "systemd"))}
                        for role in CALLERS]}]
    book = tmp_path / "play.yml"
    book.write_text(yaml.safe_dump(plays))
    env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"), "ANSIBLE_STDOUT_CALLBACK": "json",
           "ANSIBLE_ROLES_PATH": os.path.join(REPO, "roles")}
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), str(book), *args],
                          env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads(proc.stdout)["stats"]["localhost"]


@pytest.fixture
def systemd_dir(tmp_path):
    (tmp_path / "systemd" / "multi-user.target.wants").mkdir(parents=True)
    return tmp_path / "systemd"


def test_check_mode_on_a_fresh_node_passes_and_writes_nothing(tmp_path, systemd_dir):
    stats = playbook(tmp_path, "--check")
    assert stats["failures"] == 0 and stats["changed"] >= 3
    assert sorted(os.listdir(systemd_dir)) == ["multi-user.target.wants"]
    assert os.listdir(systemd_dir / "multi-user.target.wants") == []


def test_units_are_byte_identical_to_the_roles_own_templates_enabled_and_idempotent(tmp_path, systemd_dir):
    playbook(tmp_path)
    for role, unit in UNITS.items():
        assert (systemd_dir / unit).read_text() == EXPECTED[role], role
        assert oct((systemd_dir / unit).stat().st_mode & 0o777) == "0o644"
        link = systemd_dir / "multi-user.target.wants" / unit
        assert link.is_symlink() and os.readlink(link) == str(systemd_dir / unit)
    assert playbook(tmp_path)["changed"] == 0
