"""Boot-time scripts rendered from role templates by Ansible's own template module: the
commands they run, and that sh parses them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import ncclprep

REPO = ncclprep.REPO_ROOT
ROLES = os.path.join(REPO, "roles")


def render(role: str, name: str, tmp_path, **variables) -> str:
    """Render roles/<role>/templates/<name> with ``variables`` through `ansible localhost -m template`."""
    out = tmp_path / f"{name}.out"
    extra = tmp_path / f"{name}.vars.json"
    extra.write_text(json.dumps(variables))
    env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg")}
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"@{extra}",
         "-m", "ansible.builtin.template", "-a",
         f"src={os.path.join(ROLES, role, 'templates', name)} dest={out}"],
        env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out.read_text()


def roce_vars(tool: str, unsupported=None, interfaces=()):
    return dict(
        roce_qos_pfc_priority=3, roce_qos_trust="dscp", roce_qos_ecn=True, roce_qos_interfaces=list(interfaces),
        ansible_facts={"ncclprep": {"roce_qos": {
            "tool": tool, "unsupported": unsupported or {},
            "ports": [{"device": "mlx5_0", "port": 1, "netdev": "ens1f0np0"},
                      {"device": "mlx5_1", "port": 1, "netdev": "ens1f1np1"}]}}})


def commands(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.startswith(("dcb ", "mlnx_qos "))]


def test_roce_boot_script_with_dcb_sets_pfc_on_priority_3_only_and_trust_dscp(tmp_path):
    script = render("roce_qos", "ncclprep-roce-qos.sh.j2", tmp_path, **roce_vars("dcb"))
    assert commands(script) == [
        "dcb pfc set dev ens1f0np0 prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off || rc=1",
        "dcb apptrust set dev ens1f0np0 order dscp || rc=1",
        "dcb pfc set dev ens1f1np1 prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off || rc=1",
        "dcb apptrust set dev ens1f1np1 order dscp || rc=1",
    ]
    assert "f=/sys/class/net/ens1f0np0/ecn/roce_np/enable/3" in script
    assert "f=/sys/class/net/ens1f1np1/ecn/roce_rp/enable/3" in script
    subprocess.run(["sh", "-n"], input=script, text=True, check=True)


def test_roce_boot_script_with_mlnx_qos_and_only_the_named_interface(tmp_path):
    script = render("roce_qos", "ncclprep-roce-qos.sh.j2", tmp_path,
                    **roce_vars("mlnx_qos", interfaces=["ens1f1np1"]))
    assert commands(script) == ["mlnx_qos -i ens1f1np1 --trust dscp --pfc 0,0,0,1,0,0,0,0 || rc=1"]
    subprocess.run(["sh", "-n"], input=script, text=True, check=True)


def test_roce_boot_script_leaves_trust_alone_where_the_driver_cannot_show_it(tmp_path):
    unsupported = {"ens1f0np0": [{"what": "trust", "reason": "mlx5 does not implement DCB apptrust"}]}
    script = render("roce_qos", "ncclprep-roce-qos.sh.j2", tmp_path, **roce_vars("dcb", unsupported=unsupported))
    assert "dcb apptrust set dev ens1f0np0" not in script
    assert "dcb apptrust set dev ens1f1np1 order dscp || rc=1" in script


@pytest.mark.parametrize("rank", ["0", "1", "5"])
def test_numa_bind_wrapper_runs_each_local_rank_on_its_cpus(tmp_path, rank):
    """Rank 0 on the first CPU this process may use, rank 1 on the last, rank 5 not in the map."""
    cpus = sorted(os.sched_getaffinity(0))
    wrapper = tmp_path / "ncclprep-numa-bind"
    wrapper.write_text(render("numa_pinning", "ncclprep-numa-bind.sh.j2", tmp_path,
                              numa_pinning_map_file=str(tmp_path / "map")))
    wrapper.chmod(0o755)
    (tmp_path / "map").write_text(f"# Ansible managed\n# local_rank numa_node cpus gpu\n"
                                  f"0 - {cpus[0]} -\n1 - {cpus[-1]} -\n")
    proc = subprocess.run([str(wrapper), "grep", "Cpus_allowed_list", "/proc/self/status"],
                          env={**os.environ, "LOCAL_RANK": rank}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    allowed = proc.stdout.split()[-1]
    if rank == "5":
        assert "no line for local rank 5" in proc.stderr
        assert allowed != ""  # ran, unbound
    else:
        assert allowed == str(cpus[0] if rank == "0" else cpus[-1])


def launcher(tmp_path, env_lines: str):
    """The ncclprep-torchrun launcher rendered for a 3-node cluster, with its env file, a torchrun
    that prints its arguments and no NUMA wrapper installed."""
    env_file = tmp_path / "nccl.env"
    env_file.write_text(env_lines)
    torchrun = tmp_path / "torchrun"
    torchrun.write_text('#!/bin/sh\necho "ran: $* NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME"\n')
    torchrun.chmod(0o755)
    script = tmp_path / "ncclprep-torchrun"
    script.write_text(render("nccl_env", "ncclprep-torchrun.j2", tmp_path, nccl_env_file=str(env_file),
                             nccl_env_numa_bind=str(tmp_path / "absent"), nccl_env_python="/usr/bin/python3",
                             nccl_env_torchrun=str(torchrun), nccl_env_nnodes=3, nccl_env_nproc=2,
                             nccl_env_rendezvous="10.0.0.11:29400"))
    script.chmod(0o755)
    return script, torchrun


def test_the_launcher_dry_run_prints_the_environment_and_the_exact_command_and_starts_nothing(tmp_path):
    script, torchrun = launcher(tmp_path, "# Ansible managed\nNCCL_SOCKET_IFNAME==eth0\nGLOO_SOCKET_IFNAME=eth0\n"
                                          "NCCL_DEBUG=WARN\n")
    env = {**os.environ, "NCCLPREP_RDZV_ID": "job 42"}
    dry = subprocess.run([str(script), "--dry-run", "train.py", "--lr", "0.1"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert lines[0].startswith("# ncclprep-torchrun --dry-run on ") and str(tmp_path / "nccl.env") in lines[0]
    assert lines[1:4] == ["GLOO_SOCKET_IFNAME=eth0", "NCCL_DEBUG=WARN", "NCCL_SOCKET_IFNAME==eth0"]
    assert lines[4] == "# the command"
    assert lines[5].split() == [str(torchrun), "--nnodes=3", "--nproc-per-node=2", "--rdzv-backend=c10d",
                                "--rdzv-endpoint=10.0.0.11:29400", "--rdzv-id=job\\", "42", "--max-restarts=0",
                                "train.py", "--lr", "0.1"]
    assert "ran:" not in dry.stdout and len(lines) == 6  # the fake torchrun never ran
    # without --dry-run the same command runs, with the env file's variables exported
    real = subprocess.run([str(script), "train.py"], env=env, capture_output=True, text=True, timeout=60)
    assert real.returncode == 0, real.stderr
    assert real.stdout.strip() == ("ran: --nnodes=3 --nproc-per-node=2 --rdzv-backend=c10d "
                                   "--rdzv-endpoint=10.0.0.11:29400 --rdzv-id=job 42 --max-restarts=0 train.py "
                                   "NCCL_SOCKET_IFNAME==eth0")
