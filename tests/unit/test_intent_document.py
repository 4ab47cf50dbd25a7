"""The intent document's templates (roles/preflight/vars/main.yml) with a concern that is off:
ansible-core 2.19's vars lookup takes ``default=none`` as no default, so a concern whose intent
was never set failed site.yml's last step on every node (README's first command, slurm_health off)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml
from conftest import REPO


def test_an_off_concern_is_null_in_the_intent_and_has_no_reader(tmp_path):
    with open(os.path.join(REPO, "roles", "preflight", "vars", "main.yml"), encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)["__preflight_node_document"]
    play = [{"hosts": "localhost", "gather_facts": False, "vars": {
        "ncclprep_concerns": [{"name": "rps_rfs", "reader": True}, {"name": "slurm_health", "reader": True}],
        "rps_rfs_intent": {"cpus": "0-1"}, "rps_rfs_reader": {"interface": "eth0"},
        "__readers": doc["readers"], "__intent": doc["intent"]},
        "tasks": [{"ansible.builtin.copy": {"dest": str(tmp_path / "out.json"), "mode": "0644",
                                            "content": "{{ {'readers': __readers, 'intent': __intent} | to_json }}"}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg")}
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-c", "local",
                          "-i", "localhost,", "-e", f"ansible_python_interpreter={sys.executable}",
                          str(tmp_path / "play.yml")], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:]
    got = json.loads((tmp_path / "out.json").read_text())
    assert got == {"readers": {"rps_rfs": {"interface": "eth0"}},
                   "intent": {"rps_rfs": {"cpus": "0-1"}, "slurm_health": None}}
