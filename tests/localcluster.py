"""Helpers the slow tiers share (tests/integration, tests/faults): commands on the 3-node
local podman cluster, run from the repository with the CLI's playbook environment, each
command's duration recorded for scripts/test.sh's closing table ($NCCLPREP_TIMINGS).

The cluster itself is the session fixture ``cluster`` in tests/conftest.py: brought up once
(scripts/local_cluster.sh up 3), shared by both tiers, torn down at the end unless
NCCLPREP_KEEP_CLUSTER=1.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import ncclprep
from ncclprep.runner import playbook_env

REPO = ncclprep.REPO_ROOT
BIN = os.path.dirname(sys.executable)
NODES = ["node1", "node2", "node3"]
# A training dataset of two shards on every node (check dataset.path).
DATASET = "/srv/ncclprep-dataset"
DATASET_MAKE = (f"mkdir -p {DATASET} && head -c 4096 /dev/zero > {DATASET}/shard-0 && "
                f"cp {DATASET}/shard-0 {DATASET}/shard-1")
#: Extra arguments of a validate run without the torchrun job (the fault runs leave it out
#: unless a fault is about it; the healthy runs prove the job).
NO_SMOKE = ("-e", "preflight_smoke_enabled=false")
#: What the session has done to the cluster: "provisioned" (site.yml ran and passed) and
#: "healthy" (the first healthy validate run's report folder, for the tests after it).
STATE: dict[str, object] = {}


def env() -> dict:
    """The CLI's playbook environment (repository ansible.cfg, this venv first, podman settings), no colour."""
    return dict(os.environ, ANSIBLE_FORCE_COLOR="0", **playbook_env())


def record(name: str, seconds: float, phase: str = "integration") -> None:
    """Append one command's duration to $NCCLPREP_TIMINGS (scripts/test.sh prints them)."""
    path = os.environ.get("NCCLPREP_TIMINGS")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{phase}\t{name}\t{seconds:.1f}\n")


def run(cmd: list[str], timeout: int, input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``cmd`` from the repository (its output echoed for pytest's report); playbook and
    cluster commands have their duration recorded."""
    start = time.monotonic()
    out = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=timeout, input=input)
    sys.stdout.write(f"$ {' '.join(cmd)} -> {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-2000:]}\n")
    if cmd[0].endswith(("ansible-playbook", "local_cluster.sh", "ncclprep")):
        record(" ".join(os.path.basename(c) if os.path.isabs(c) else c for c in cmd)[:58], time.monotonic() - start)
    return out


def on(node: str, script: str, timeout: int = 60, input: str | None = None) -> subprocess.CompletedProcess:
    """``sh -c script`` as root on one node (podman exec)."""
    return run(["podman", "exec", "-i", f"ncclprep-{node}", "sh", "-c", script], timeout=timeout, input=input)


def slurm_nodes() -> dict[str, str]:
    """``{node: state}`` as ``sinfo`` on node1 lists them (slurmctld's view of the cluster)."""
    out = on("node1", "sinfo --noheader --Node --format '%N %T'")
    assert out.returncode == 0, out.stderr
    return dict(line.split() for line in out.stdout.splitlines())


def playbook(name: str, report_dir: str | None = None, timeout: int = 900,
             extra: tuple[str, ...] = (), cli: bool = False) -> subprocess.CompletedProcess:
    """ansible-playbook NAME.yml, or with ``cli`` the same run through ``ncclprep provision|validate``."""
    cmd = ([os.path.join(BIN, "ncclprep"), {"site": "provision"}.get(name, name), "-i", "inventory/local"] if cli
           else [os.path.join(BIN, "ansible-playbook"), f"{name}.yml", "-i", "inventory/local"])
    if report_dir:
        cmd += ["-e", f"preflight_report_dir={report_dir}"]
    return run(cmd + list(extra), timeout)


def validate(reports: str, extra: tuple[str, ...]) -> tuple[subprocess.CompletedProcess, float]:
    """``ncclprep validate`` writing its report under ``reports``; returns the run and its seconds."""
    start = time.monotonic()
    val = playbook("validate", reports, timeout=600, extra=extra, cli=True)
    return val, time.monotonic() - start


def close_control_connections() -> None:
    """Close Ansible's persistent SSH connections to the nodes (ansible.cfg: ControlPersist; the
    masters under ~/.ansible/cp), so that the next playbook opens new ones. On the local cluster
    Ansible's connection crosses the data-plane bridge: one opened before a node's MTU went down
    keeps its larger MSS, and its segments are dropped by the node's veth without an ICMP
    (a black hole): the next run's module transfers to that node stall for tens of seconds."""
    folder = os.path.expanduser("~/.ansible/cp")
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        subprocess.run(["ssh", "-o", f"ControlPath={os.path.join(folder, name)}", "-O", "exit", "node"],
                       capture_output=True, timeout=30)


def recap(stdout: str) -> dict:
    """PLAY RECAP counters per host: {host: {"ok": n, "changed": n, ...}}."""
    out = {}
    for host, counters in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", stdout, re.M):
        out[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counters)}
    return out


def load(report_dir: str) -> dict:
    """The cluster report (cluster.json) of the newest run under ``report_dir``."""
    with open(os.path.join(report_dir, "latest", "cluster.json"), encoding="utf-8") as fh:
        return json.load(fh)


def bad_checks(report: dict) -> dict:
    """The report's checks that FAILed or HANGed: {check id: check}."""
    return {c["id"]: c for c in report["checks"] if c["status"] in ("FAIL", "HANG")}


def provision() -> None:
    """site.yml once per session (a no-op once it passed here): the tiers after the
    integration tier's own site.yml runs need a provisioned cluster."""
    if not STATE.get("provisioned"):
        site = playbook("site")
        assert site.returncode == 0, "site.yml failed on the local cluster"
        STATE["provisioned"] = True
