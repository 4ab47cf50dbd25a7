"""roles/preflight/tasks/wait_job.yml on localhost: the first node is polled (async_status, every
second) until its async job has ended, then every node is asked, once when the jobs end
together."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime

from conftest import ANSIBLE_JSON_ENV as ENV
from conftest import BIN, REPO


def run_play(tmp_path, command: str, deadline: int) -> list[dict]:
    play = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Start a job", "ansible.builtin.command": command, "async": deadline, "poll": 0,
         "register": "job"},
        {"name": "Wait for it",
         "ansible.builtin.import_tasks": os.path.join(REPO, "roles", "preflight", "tasks", "wait_job.yml"),
         "vars": {"__preflight_wait_job": "{{ job }}", "__preflight_wait_deadline": deadline,
                  "__preflight_wait_what": "the job"}}]}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    out = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
                          "-e", f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")],
                         cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120)
    tasks = json.loads(out.stdout[out.stdout.index("{"):])["plays"][0]["tasks"]
    return [dict(t["hosts"]["localhost"], name=t["task"]["name"], took=_seconds(t["task"]["duration"]))
            for t in tasks]


def _seconds(duration: dict) -> float:
    def ts(s):
        return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    return ts(duration["end"]) - ts(duration["start"])


def test_the_first_node_is_polled_until_the_job_ends_then_every_node_once(tmp_path):
    tasks = run_play(tmp_path, "sleep 3", 30)
    assert [t["name"] for t in tasks] == ["Start a job", "On the first node, wait for the job", "Wait for the job"]
    first, every = tasks[1], tasks[2]
    assert first["finished"] and first["attempts"] >= 3 and first["took"] >= 2.0, first
    assert every["finished"] and every["rc"] == 0 and every["attempts"] == 1, every


def test_a_failed_job_is_seen_by_the_first_wait_and_fails_the_wait_of_every_node(tmp_path):
    tasks = run_play(tmp_path, "false", 30)
    first, every = tasks[1], tasks[2]
    assert first["finished"] and first["rc"] == 1 and first["took"] < 10, first
    assert every["failed"] and every["rc"] == 1 and every["attempts"] == 1, every
