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
