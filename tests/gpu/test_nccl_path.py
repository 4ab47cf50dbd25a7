"""The NCCL path on a machine with an NVIDIA GPU: what CI (no GPU) cannot run.

Skipped without CUDA. Run on a GPU machine with ``python -m pytest tests/gpu`` (docs/testing.md,
Iterating); set NCCLPREP_GPU_OUT to a folder to keep the tool output read there (a
real ``nvidia-smi topo -m`` for the parser tests).

- the engine's collectives (probes/job.py host_collectives, as ``ncclprep node preflight`` runs
  them, in a process of their own), backend auto, world size 1, under the run token: it picks
  nccl, its forked rank runs every op correctly on the GPU, NCCL's version reported.
- The sealed store (netutil.signed_store, review F9) under ProcessGroupNCCL: every key torch
  writes through it is sealed with the run token and refused under another.
- node_facts' GPU readings (hostinfo.gpu_topology): ``nvidia-smi topo -m`` read and parsed
  without an error, every GPU of torch's count in the matrix.
- The template training job (the smoke job validate.yml runs) under torchrun on the GPU: DDP
  with a checkpoint and its resume, the PowerSGD hook, FSDP; NCCL chosen, ranks identical.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

# A spawned child does not run conftest: import ncclprep first so module_utils is importable.
# isort: off
import ncclprep  # noqa: F401
from ansible.module_utils.ncclprep.probes import smoke as ddp_smoke
from ansible.module_utils.ncclprep.node import hostinfo
from ansible.module_utils.ncclprep.netutil import StoreTampered, bound_tcp_store, signed_store, unseal
# isort: on
from conftest import REPO, free_port

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not (shutil.which("nvidia-smi") and torch.cuda.is_available()),
                                reason="needs an NVIDIA GPU with its driver (CI has none)")
OPS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]
TOKEN = "a" * 64


def keep(name: str, text: str) -> None:
    """Write ``text`` to $NCCLPREP_GPU_OUT/name when that folder is set."""
    folder = os.environ.get("NCCLPREP_GPU_OUT")
    if folder:
        with open(os.path.join(folder, name), "w", encoding="utf-8") as fh:
            fh.write(text)


def test_the_engines_collectives_pick_nccl_and_every_op_is_correct_on_the_gpu(tmp_path):
    """The engine's collectives (node/preflight.py options, then probes/job.py host_collectives) in a
    fresh process, as ``ncclprep node preflight`` runs them (no CUDA before its ranks fork), world
    size 1, under a run token."""
    net = {"store_port": 29520, "listen_port": 29521, "ports": [], "ephemeral_sample": 0, "mtu": None,
           "latency_samples": 10, "bandwidth_seconds": 0.25, "matchings": 1, "every_pair": False, "repair": 0,
           "max_latency_us": None, "slow_z": -3.5, "slow_ratio": 0.5, "min_gbps": None, "join_timeout": 30,
           "step_timeout": 2.0, "connect_timeout": 1.0, "timeout": 60}
    settings = {"net": net, "report": {"min_busbw_gbps": None},
                "probe": {"port": free_port(), "ops": OPS, "sizes": [4096, 1 << 20, 64 << 20], "warmup": 1,
                          "iters": 5, "timeout": 120, "join_timeout": 30, "blame": False, "blame_timeout": 30}}
    args = tmp_path / "settings.json"
    args.write_text(json.dumps(settings))
    boot = ("import json, sys, ncclprep\n"
            "from ansible.module_utils.ncclprep.node.preflight import options\n"
            "from ansible.module_utils.ncclprep.probes.collectives import rank_layout\n"
            "from ansible.module_utils.ncclprep.probes.job import host_collectives\n"
            f"o = options(json.load(open(sys.argv[1])), ['gpu1'], ['127.0.0.1'], 0, '{TOKEN}', 'gpu-test', [1])\n"
            "print(json.dumps({'probe': host_collectives(o['probe'], 'gpu1', rank_layout([1], 1), None)}))\n")
    out = subprocess.run([sys.executable, "-c", boot, str(args)], capture_output=True, text=True, timeout=240)
    keep("collectives.json", out.stdout + "\n" + out.stderr[-5000:])
    assert out.stdout.strip(), out.stderr[-3000:]
    result = json.loads(out.stdout[out.stdout.index("{"):])
    probe = result.get("probe") or {}
    assert not result.get("failed") and probe.get("backend") == "nccl", result
    assert probe["status"] == "PASS", probe
    assert probe["nccl_version"] == ".".join(str(x) for x in torch.cuda.nccl.version())
    rows = [r for r in probe["results"] if "skipped" not in r]
    assert {r["op"] for r in rows} == set(OPS), probe["results"]
    assert all(r["wrong"] == 0 and r["algbw_gbps"] > 0 for r in rows), rows


def _sealed_keys(port: int, queue) -> None:
    """In a child: the group over a recording sealed store, one all_reduce on the GPU; put the
    keys torch wrote and their raw values on ``queue``."""
    import torch.distributed as dist

    store, _sock = bound_tcp_store(dist, 0, 1, "127.0.0.1", port, 30)
    written = []

    class Recording:
        def __getattr__(self, name):
            return getattr(store, name)

        def set(self, key, value):
            written.append(key)
            return store.set(key, value)

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=signed_store(dist, Recording(), TOKEN), rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    t = torch.ones(1024, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    queue.put({"ok": bool((t == 1).all()), "raw": {k: store.get(k) for k in written}})
    dist.destroy_process_group()


def test_every_key_torch_writes_under_nccl_is_sealed_with_the_run_token():
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_sealed_keys, args=(free_port(), queue))
    proc.start()
    got = queue.get(timeout=120)
    proc.join(30)
    assert got["ok"] and got["raw"], got
    for key, raw in got["raw"].items():
        assert unseal(TOKEN, key, raw) is not None
        with pytest.raises(StoreTampered):
            unseal("b" * 64, key, raw)
    keep("sealed_keys.txt", "\n".join(sorted(got["raw"])) + "\n")


def test_gpu_topology_is_read_and_every_gpu_is_in_the_matrix():
    outputs = {}

    def runner(argv, timeout):  # the module's runner, keeping what nvidia-smi printed
        rc, out, err = hostinfo.subprocess_runner(argv, timeout)
        outputs[" ".join(argv[1:])] = out
        return rc, out, err

    reading = hostinfo.gpu_topology(runner, shutil.which, 30)
    keep("nvidia-smi-topo-m.txt", outputs.get("topo -m", ""))
    assert reading is not None and reading["error"] is None, reading
    data = reading["data"]
    assert len(data["gpus"]) == data["announced_gpus"] == torch.cuda.device_count(), data
    assert not data["truncated"], data
    # every GPU row has the CPUs it is close to (the NUMA map's source, numa.py)
    assert all(row["cpus"] for row in data["gpus"].values()), data["gpus"]


@pytest.mark.parametrize("args", [
    pytest.param(("--checkpoint-dir", "{ckpt}"), id="ddp-checkpoint"),
    pytest.param(("--powersgd-rank", "1"), id="powersgd"),
    pytest.param(("--fsdp",), id="fsdp"),
])
def test_the_template_job_trains_on_the_gpu_over_nccl(tmp_path, args):
    script = os.path.join(REPO, "roles", "nccl_env", "files", "ncclprep_train.py")
    argv = [a.format(ckpt=tmp_path / "ckpt") for a in args]
    runs = []
    for _ in range(2 if "--checkpoint-dir" in args else 1):  # the second run resumes from the checkpoint
        out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
                              script, "--steps", "3", *argv], capture_output=True, text=True, timeout=240,
                             cwd=tmp_path, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        result = ddp_smoke.read_result(out.stdout, out.returncode, 240, 1.0, "gpu1")
        keep(f"train-{args[0].strip('-')}-{len(runs)}.txt", out.stdout[-4000:] + out.stderr[-4000:])
        assert result["status"] == "PASS", (result, out.stderr[-3000:])
        runs.append(result["workers"][0])
    assert all(w["backend"] == "nccl" and w["params_identical"] is True for w in runs), runs
    if len(runs) == 2:  # 3 steps saved, then resumed there
        assert (runs[0]["resumed_from_step"], runs[1]["resumed_from_step"]) == (0, 3), runs
