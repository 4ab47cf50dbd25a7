"""The launch path on the provisioned local cluster: ncclprep-torchrun (nccl_env's launcher) run by
hand on every node, as a user starts a job: --dry-run per node, two jobs at once on their own ids
(one with --check, one with --debug), and a port squatter refused on every node."""

from __future__ import annotations

import io
import json
import os
import secrets
import shutil
import subprocess
import time

import pytest
from localcluster import NODES, on, record

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman not installed"),
]

LAUNCHER = "/usr/local/bin/ncclprep-torchrun"
TEMPLATE = "/usr/local/share/ncclprep/ncclprep_train.py"
MARKER = "NCCLPREP_RESULT "


def port_of(rdzv_id: str) -> int:
    """The launcher's per-job port: 29400 + 1 + (POSIX cksum of the id mod 99)."""
    crc = subprocess.run(["cksum"], input=rdzv_id, capture_output=True, text=True, check=True).stdout.split()[0]
    return 29401 + int(crc) % 99


def results(output: str) -> list[dict]:
    return [json.loads(line.split(MARKER, 1)[1]) for line in output.splitlines() if MARKER in line]


def test_dry_run_shows_each_nodes_command(provisioned):
    port = port_of("itest-dry")
    for node in NODES:
        out = on(node, f"NCCLPREP_RDZV_ID=itest-dry {LAUNCHER} --dry-run {TEMPLATE} --steps 3")
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0] == f"# ncclprep-torchrun --dry-run on {node}: the environment from /etc/ncclprep/nccl.env"
        assert "NCCL_SOCKET_IFNAME==eth0" in lines and "GLOO_SOCKET_IFNAME=eth0" in lines
        command = lines[-1].split()
        assert command[:8] == ["/opt/ncclprep/venv/bin/torchrun", "--nnodes=3", "--nproc-per-node=1",
                               "--rdzv-backend=c10d", f"--rdzv-endpoint=node1:{port}", "--rdzv-id=itest-dry",
                               f"--rdzv-conf=is_host={'true' if node == 'node1' else 'false'}", "--max-restarts=0"]
        # every worker through the NUMA binding wrapper, then the template and its arguments
        assert command[8:] == ["--no-python", "/usr/local/bin/ncclprep-numa-bind", "/opt/ncclprep/venv/bin/python",
                               TEMPLATE, "--steps", "3"]


def test_two_jobs_at_once_on_their_own_ids_both_complete(provisioned):
    ids = {"itest-a": "--check", "itest-b": "--debug"}
    nonces = {"itest-a": secrets.token_hex(16), "itest-b": ""}  # --check verifies its rendezvous with one
    assert port_of("itest-a") != port_of("itest-b")
    for node in NODES:  # the debug launch's log folder, as a first launch finds it
        on(node, "rm -rf /var/log/ncclprep/itest-b")
    start = time.monotonic()
    procs = {(rid, node): subprocess.Popen(
        ["podman", "exec", "-e", "NCCLPREP_RDZV_NONCE", f"ncclprep-{node}", "sh", "-c",
         f"NCCLPREP_RDZV_ID={rid} {LAUNCHER} {flag} {TEMPLATE} --steps 3 --accumulation 2 --timeout 60"],
        env={**os.environ, "NCCLPREP_RDZV_NONCE": nonces[rid]},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for rid, flag in ids.items() for node in NODES}
    outputs = {}
    for key, proc in procs.items():
        try:
            outputs[key] = (proc.communicate(timeout=240)[0], proc.returncode)
        except subprocess.TimeoutExpired as exc:
            for p in procs.values():
                p.kill()
            raise AssertionError(f"{key} did not finish within 240 s") from exc
    record("two launcher jobs at once, 3 nodes", time.monotonic() - start)
    for (rid, node), (output, rc) in outputs.items():
        assert rc == 0, f"{rid} on {node}: {output[-3000:]}"
        got = results(output)
        assert len(got) == 1 and got[0]["world_size"] == 3 and got[0]["params_identical"] is True, output[-2000:]
        assert got[0]["global_batch"] == 32 * 3 * 2 and got[0]["allreduce_bytes_per_step"] > 0
        if rid == "itest-a":
            assert f"ncclprep-torchrun: checks passed on {node} (interfaces up, 3 names resolve, rendezvous " \
                   f"node1:{port_of('itest-a')})" in output
    # rank 0's progress lines (node1 holds rank 0: its agent hosts the rendezvous)
    ranks = {node: results(out)[0]["rank"] for (rid, node), (out, _) in outputs.items() if rid == "itest-a"}
    assert sorted(ranks.values()) == [0, 1, 2]
    rank0 = next(n for n, r in ranks.items() if r == 0)
    assert "ncclprep-train: world size 3 (gloo); global batch 192" in outputs[("itest-a", rank0)][0]
    # the debug launch: torchrun's per-rank logs and the debug variables in the workers' environment
    # the debug launch: each rank's output in torchrun's log folder, and the debug variables reached
    # the workers (TORCH_DISTRIBUTED_DEBUG: DDP logs its construction data)
    logs = on("node2", "cd /var/log/ncclprep/itest-b/torchrun && cat */attempt_0/0/stdout.log && "
                       "grep -c 'DDP Initialized with' */attempt_0/0/stderr.log")
    assert logs.returncode == 0 and MARKER in logs.stdout, logs.stdout[-2000:]
    assert logs.stdout.splitlines()[-1] == "1"
    assert "DDP Initialized with" not in outputs[("itest-a", "node2")][0]


def test_a_port_squatter_is_refused_on_the_rendezvous_host_and_on_the_others(provisioned):
    """Review F1 (a local port squat): an unprivileged user's store on node1's job port, serving a
    state that is not a pickle. node1's launcher refuses the taken port; node2's, with the job's
    nonce, gets no proof from it and refuses instead of joining (it used to unpickle the state)."""
    port = port_of("itest-taken")
    squat = (f"setpriv --reuid=nobody --regid=nogroup --clear-groups /opt/ncclprep/venv/bin/python -c "
             f"'import time, torch.distributed as d; s = d.TCPStore(\"0.0.0.0\", {port}, is_master=True, "
             f"multi_tenant=True, wait_for_workers=False); s.set(\"torch.rendezvous.itest-taken\", \"not a pickle\"); "
             f"time.sleep(120)' >/dev/null 2>&1 & echo $! > /tmp/squatter.pid")
    assert on("node1", squat).returncode == 0
    try:
        for _ in range(100):
            if on("node1", f"ss -Hltn 'sport = :{port}' | grep -q LISTEN").returncode == 0:
                break
            time.sleep(0.2)
        out = on("node1", f"NCCLPREP_RDZV_ID=itest-taken {LAUNCHER} {TEMPLATE} --steps 1")
        assert out.returncode == 2 and MARKER not in out.stdout
        assert out.stderr.startswith(f"ncclprep-torchrun: refused on node1: rendezvous port {port} is taken ("), \
            out.stderr
        assert 'users:(("python' in out.stderr and "NCCLPREP_RDZV_ID=<new id>" in out.stderr
        joined = on("node2", f"NCCLPREP_RDZV_NONCE={secrets.token_hex(16)} NCCLPREP_RDZV_VERIFY_TIMEOUT=5 "
                             f"NCCLPREP_RDZV_ID=itest-taken {LAUNCHER} {TEMPLATE} --steps 1")
        assert joined.returncode == 2 and MARKER not in joined.stdout
        assert joined.stderr.strip().splitlines()[-1].startswith(
            f"ncclprep-torchrun: refused on node2: rendezvous node1:{port} gave no proof that it is this job's "
            "agent within 5 s ("), joined.stderr
    finally:
        on("node1", "kill $(cat /tmp/squatter.pid) 2>/dev/null; rm -f /tmp/squatter.pid")


def test_a_job_hung_by_a_stopped_rank_is_read_from_its_debug_folders_and_the_rank_is_named(provisioned, tmp_path):
    """Issue 27's done-when: a 3-node job under ncclprep-torchrun --debug; the worker on node3 is
    stopped (SIGSTOP) while it trains, so the others wait in DDP's all_reduce until the Gloo timeout
    (10 s), write their flight recorder into the debug folder and fail. The three nodes' debug
    folders, copied here, read by `ncclprep doctor DIR`: it names node3's rank and the collective."""
    import re
    import signal

    from ncclprep.doctor_cmd import doctor_main

    rid = "itest-hang"
    for node in NODES:
        on(node, f"rm -rf /var/log/ncclprep/{rid}")
    start = time.monotonic()
    procs = {node: subprocess.Popen(
        ["podman", "exec", f"ncclprep-{node}", "sh", "-c",
         f"NCCLPREP_RDZV_ID={rid} {LAUNCHER} --debug {TEMPLATE} --steps 100000 --timeout 10 --width 64"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True) for node in NODES}
    stopped_rank = None
    try:
        for line in procs["node1"].stdout:  # rank 0 is on node1 (its agent hosts the rendezvous)
            if "ncclprep-train: step 3/" in line:
                break
        found = on("node3", "for p in $(pgrep -f ncclprep_train.py); do tr '\\0' '\\n' < /proc/$p/environ | "
                            "grep -q '^RANK=' && echo $p $(tr '\\0' '\\n' < /proc/$p/environ | sed -n 's/^RANK=//p');"
                            " done")
        pid, stopped_rank = (int(x) for x in found.stdout.split()[:2])
        assert on("node3", f"kill -STOP {pid}").returncode == 0
        # the others time out in their collective, dump and fail
        outputs = {n: procs[n].communicate(timeout=120)[0] for n in ("node1", "node2")}
        on("node3", f"kill -KILL {pid}")  # its agent then ends too
        outputs["node3"] = procs["node3"].communicate(timeout=120)[0]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        on("node3", "pkill -KILL -f ncclprep_train.py")
    record("a job hung by a stopped rank, 3 nodes, until every node ended", time.monotonic() - start)
    assert all(procs[n].returncode != 0 for n in NODES), {n: o[-1500:] for n, o in outputs.items()}
    folder = tmp_path / "debug"
    folder.mkdir()
    for node in NODES:
        assert subprocess.run(["podman", "cp", f"ncclprep-{node}:/var/log/ncclprep/{rid}", str(folder / node)],
                              capture_output=True, timeout=60).returncode == 0
    dumps = sorted(p.name for p in folder.rglob("nccl_trace_rank_*"))
    assert len(dumps) == 2 and f"nccl_trace_rank_{stopped_rank}" not in dumps, dumps
    out = io.StringIO()
    code = doctor_main([str(folder)], stdin=io.StringIO(""), stdout=out)
    text = out.getvalue()
    assert code == 1, text[-4000:]
    assert re.search(rf"FAIL rank {stopped_rank}: collective #\d+ \(all_?reduce, input sizes \[\[\d+\]\]\) of process "
                     rf"group 0 \(default_pg\): [^\n]*rank {stopped_rank} left no dump", text), text[-4000:]
