"""Boot-time scripts rendered from role templates by Ansible's own template module: the
commands they run, and that sh parses them."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time

import pytest
from conftest import free_port, load_source

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
    """Rank 0 on the first CPU this process may use, rank 1 on the last, rank 5 not in the map;
    OMP_NUM_THREADS the number of the rank's CPUs (torchrun's 1 replaced), or what the launch gave."""
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
    threads = subprocess.run([str(wrapper), "sh", "-c", "echo $OMP_NUM_THREADS"], capture_output=True, text=True,
                             env={**os.environ, "LOCAL_RANK": rank, "OMP_NUM_THREADS": "3"}).stdout.strip()
    assert threads == ("3" if rank == "5" else "1")  # one CPU in each line of this map; unbound: as it was
    given = subprocess.run([str(wrapper), "sh", "-c", "echo $OMP_NUM_THREADS"], capture_output=True, text=True,
                           env={**os.environ, "LOCAL_RANK": rank, "NCCLPREP_OMP_NUM_THREADS": "7"}).stdout.strip()
    assert given == ("" if rank == "5" else "7")


def test_irqbalance_policy_bans_every_irq_of_the_nics_device_whatever_its_number(tmp_path):
    """Review (low findings): IRQBALANCE_ARGS held --banirq=<the IRQ numbers of the day>; a boot that
    renumbers them let irqbalance move the NIC's IRQs and ban others. irqbalance now asks the policy
    script per IRQ with the owning device's sysfs path: the NIC's device is banned by path."""
    policy = tmp_path / "ncclprep-irqbalance-policy"
    policy.write_text(render("numa_pinning", "ncclprep-irqbalance-policy.sh.j2", tmp_path,
                             numa_pinning_irqbalance_defaults="/etc/default/irqbalance",
                             numa_pinning_intent={"irq": {"interface": "eth-0;x"}}))
    policy.chmod(0o755)
    sysfs = tmp_path / "sys"
    nic, other = sysfs / "devices" / "pci0000:00" / "0000:01:00.0", sysfs / "devices" / "pci0000:00" / "0000:02:00.0"
    for dev in (nic, other):
        dev.mkdir(parents=True)
    (sysfs / "class" / "net" / "eth-0;x").mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:01:00.0", sysfs / "class" / "net" / "eth-0;x" / "device")

    def ask(devpath, irq):
        out = subprocess.run([str(policy), str(devpath), irq], env={**os.environ, "SYSFS": str(sysfs)},
                             capture_output=True, text=True, timeout=10)
        return out.returncode, out.stdout

    assert ask(nic, "77") == (0, "ban=true\n")  # any number: the device decides
    assert ask(sysfs / "devices" / "pci0000:00" / ".." / "pci0000:00" / "0000:01:00.0", "140") == (0, "ban=true\n")
    assert ask(other, "78") == (0, "")  # another device's IRQ is balanced as before
    os.unlink(sysfs / "class" / "net" / "eth-0;x" / "device")  # the NIC gone: nothing banned, still exit 0
    assert ask(nic, "77") == (0, "")


def test_numa_bind_wrapper_counts_the_cpus_of_a_list_with_ranges(tmp_path):
    wrapper = tmp_path / "ncclprep-numa-bind"
    wrapper.write_text(render("numa_pinning", "ncclprep-numa-bind.sh.j2", tmp_path,
                              numa_pinning_map_file=str(tmp_path / "map")))
    wrapper.chmod(0o755)
    (tmp_path / "map").write_text("0 0 0-3,8-11,16 0\n1 1 4-7 1\n")
    # taskset would refuse CPUs this machine lacks: read the variable through a wrapper that stops first
    script = wrapper.read_text().replace('if [ "$node" != "-" ]', 'echo "$OMP_NUM_THREADS $cpus"; exit 0\nif true')
    (tmp_path / "counting").write_text(script)
    for rank, expected in (("0", "9 0-3,8-11,16"), ("1", "4 4-7")):
        out = subprocess.run(["sh", str(tmp_path / "counting")], env={**os.environ, "LOCAL_RANK": rank},
                             capture_output=True, text=True)
        assert out.stdout.strip() == expected, out.stderr


GUARD = os.path.join(ROLES, "nccl_env", "files", "ncclprep_rdzv_guard.py")


def launcher(tmp_path, env_lines: str, me="node2", members=None, debug_lines="NCCL_DEBUG=INFO\n",
             torchrun_text='#!/bin/sh\necho "ran: $* NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME"\n'):
    """The ncclprep-torchrun launcher rendered for ``me`` of a 3-node cluster whose rendezvous host
    is the first member, with its env files, the rendezvous guard, a torchrun that prints its
    arguments (or runs ``torchrun_text``) and no NUMA wrapper installed."""
    env_file = tmp_path / "nccl.env"
    env_file.write_text(env_lines)
    debug_file = tmp_path / "nccl-debug.env"
    debug_file.write_text(debug_lines)
    torchrun = tmp_path / "torchrun"
    torchrun.write_text(torchrun_text)
    torchrun.chmod(0o755)
    members = members or {"node1": {"address": "10.0.0.11"}, "node2": {"address": "10.0.0.12"},
                          "node3": {"address": "10.0.0.13"}}
    script = tmp_path / "ncclprep-torchrun"
    script.write_text(render("nccl_env", "ncclprep-torchrun.j2", tmp_path, nccl_env_file=str(env_file),
                             nccl_env_debug_file=str(debug_file), nccl_env_train_template="/x/ncclprep_train.py",
                             nccl_env_rdzv_guard=GUARD,
                             nccl_env_numa_bind=str(tmp_path / "absent"), nccl_env_python=sys.executable,
                             nccl_env_torchrun=str(torchrun), nccl_env_nnodes=3, nccl_env_nproc=2,
                             nccl_env_rendezvous_name=next(iter(members)), nccl_env_rendezvous_port=29400,
                             nccl_env_rendezvous_port_span=99, data_plane_members=members, inventory_hostname=me))
    script.chmod(0o755)
    return script, torchrun


def test_the_launcher_reads_its_env_files_literally_and_runs_no_part_of_a_value(tmp_path):
    """Review F2: the launcher sourced nccl.env, so a value with ";", "$( )" or a backtick ran as a
    shell command at every launch (as root in validate's smoke job), and one with a space broke
    every launch. Now a read loop takes each value as it is, the same way nccl_probe reads it."""
    pwned = tmp_path / "pwned"
    script, _ = launcher(tmp_path, f"NCCL_IB_HCA=mlx5_0;touch {pwned}\nNCCL_DEBUG_FILE=/x$(touch {pwned})\n"
                                   f"NCCL_TOPO_FILE=`touch {pwned}`\nNCCL_X=a b\n",
                         debug_lines=f"NCCL_DEBUG=INFO;touch {pwned}\nNCCL_DEBUG_FILE={{dir}}/n.%h.log\n")
    env = {**os.environ, "NCCLPREP_DEBUG_DIR": str(tmp_path / "dbg")}
    dry = subprocess.run([str(script), "--dry-run", "--debug", "train.py"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert not pwned.exists()
    # the dry run prints each variable as bash's printf %q quotes it
    shown = {key: shlex.split(value)[0] for key, value in (line.split("=", 1) for line in dry.stdout.splitlines()
                                                           if re.match(r"[A-Z_]+=", line))}
    assert shown["NCCL_IB_HCA"] == f"mlx5_0;touch {pwned}"
    assert shown["NCCL_TOPO_FILE"] == f"`touch {pwned}`"
    assert shown["NCCL_X"] == "a b"
    assert shown["NCCL_DEBUG"] == f"INFO;touch {pwned}"
    assert shown["NCCL_DEBUG_FILE"] == f"{tmp_path}/dbg/n.%h.log"
    bad, _ = launcher(tmp_path, "not a line\n")
    refused = subprocess.run([str(bad), "--dry-run", "train.py"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and f"{tmp_path}/nccl.env: not KEY=VALUE: not a line" in refused.stderr


def derived_port(rdzv_id: str) -> int:
    """What the launcher's comment promises: 29400 + 1 + (POSIX cksum of the id mod 99)."""
    crc = subprocess.run(["cksum"], input=rdzv_id, capture_output=True, text=True, check=True).stdout.split()[0]
    return 29400 + 1 + int(crc) % 99


def test_the_launcher_dry_run_prints_the_environment_and_the_exact_command_and_starts_nothing(tmp_path):
    script, torchrun = launcher(tmp_path, "# Ansible managed\nNCCL_SOCKET_IFNAME==eth0\nGLOO_SOCKET_IFNAME=eth0\n"
                                          "NCCL_DEBUG=WARN\n")
    env = {**os.environ, "NCCLPREP_RDZV_ID": "job 42"}
    port = derived_port("job 42")
    assert 29401 <= port <= 29499
    dry = subprocess.run([str(script), "--dry-run", "train.py", "--lr", "0.1"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert lines[0] == f"# ncclprep-torchrun --dry-run on node2: the environment from {tmp_path / 'nccl.env'}"
    assert lines[1:4] == ["GLOO_SOCKET_IFNAME=eth0", "NCCL_DEBUG=WARN", "NCCL_SOCKET_IFNAME==eth0"]
    assert lines[4] == "# the command"
    assert lines[5].split() == [str(torchrun), "--nnodes=3", "--nproc-per-node=2", "--rdzv-backend=c10d",
                                f"--rdzv-endpoint=node1:{port}", "--rdzv-id=job\\", "42", "--rdzv-conf=is_host=false",
                                "--max-restarts=0",
                                "train.py", "--lr", "0.1"]
    assert "ran:" not in dry.stdout and len(lines) == 6  # the fake torchrun never ran
    # without --dry-run the same command runs, with the env file's variables exported
    real = subprocess.run([str(script), "train.py"], env=env, capture_output=True, text=True, timeout=60)
    assert real.returncode == 0, real.stderr
    assert real.stdout.strip() == ("ran: --nnodes=3 --nproc-per-node=2 --rdzv-backend=c10d "
                                   f"--rdzv-endpoint=node1:{port} --rdzv-id=job 42 --rdzv-conf=is_host=false "
                                   "--max-restarts=0 train.py "
                                   "NCCL_SOCKET_IFNAME==eth0")
    # the default id keeps the inventory's port; NCCLPREP_RDZV_PORT sets one; a bad one is refused
    plain = subprocess.run([str(script), "--dry-run", "t.py"], capture_output=True, text=True, timeout=60,
                           env={k: v for k, v in os.environ.items() if not k.startswith("NCCLPREP_")})
    assert "--rdzv-endpoint=node1:29400 --rdzv-id=ncclprep " in plain.stdout
    fixed = subprocess.run([str(script), "--dry-run", "t.py"], capture_output=True, text=True, timeout=60,
                           env={**env, "NCCLPREP_RDZV_PORT": "29777"})
    assert "--rdzv-endpoint=node1:29777 " in fixed.stdout
    bad = subprocess.run([str(script), "t.py"], capture_output=True, text=True, timeout=60,
                         env={**env, "NCCLPREP_RDZV_PORT": "29x"})
    assert bad.returncode == 2 and "NCCLPREP_RDZV_PORT=29x is not a port number" in bad.stderr


def test_the_rendezvous_host_refuses_a_port_another_job_holds(tmp_path):
    script, _ = launcher(tmp_path, "NCCL_DEBUG=WARN\n", me="node1")
    with socket.socket() as held:  # another job's store, as torch binds it
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1]
        out = subprocess.run([str(script), "train.py"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "NCCLPREP_RDZV_PORT": str(port)})
    assert out.returncode == 2 and "ran:" not in out.stdout
    assert out.stderr.startswith(f"ncclprep-torchrun: refused on node1: rendezvous port {port} is taken (")
    assert "NCCLPREP_RDZV_ID=<new id>" in out.stderr
    # free again: the launch goes ahead; the other nodes never test the port
    free = subprocess.run([str(script), "train.py"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "NCCLPREP_RDZV_PORT": str(port)})
    assert free.returncode == 0 and free.stdout.startswith("ran: ")


def test_the_port_test_works_where_ipv6_is_off(tmp_path):
    """A kernel booted with ipv6.disable=1 refuses AF_INET6 sockets (EAFNOSUPPORT): the port test
    falls back to IPv4 instead of refusing every launch as if the port were taken."""
    site = tmp_path / "noipv6"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import errno, socket\n"
        "_real = socket.socket\n"
        "class NoIPv6(_real):\n"
        "    def __init__(self, family=-1, *args, **kwargs):\n"
        "        if family == socket.AF_INET6:\n"
        "            raise OSError(errno.EAFNOSUPPORT, 'Address family not supported by protocol')\n"
        "        super().__init__(family, *args, **kwargs)\n"
        "socket.socket = NoIPv6\n")
    script, _ = launcher(tmp_path, "NCCL_DEBUG=WARN\n", me="node1")
    env = {**os.environ, "PYTHONPATH": str(site)}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    free = subprocess.run([str(script), "train.py"], capture_output=True, text=True, timeout=60,
                          env={**env, "NCCLPREP_RDZV_PORT": str(port)})
    assert free.returncode == 0 and free.stdout.startswith("ran: "), free.stderr
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("0.0.0.0", 0))
        held.listen()
        taken = subprocess.run([str(script), "train.py"], capture_output=True, text=True, timeout=60,
                               env={**env, "NCCLPREP_RDZV_PORT": str(held.getsockname()[1])})
    assert taken.returncode == 2 and "Address already in use" in taken.stderr


def rendezvous_store(nonce=None, rdzv_id="ncclprep", host="localhost"):
    """A store listening on a free port of this machine as the rendezvous host's agent's would,
    holding that agent's proof for ``nonce`` (none without one): (store, port)."""
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, multi_tenant=True)
    if nonce:
        store.set(guard.KEY_PREFIX + rdzv_id, guard.proof(nonce, rdzv_id, host, store.port))
    return store, store.port


guard = load_source("ncclprep_rdzv_guard", "roles/nccl_env/files/ncclprep_rdzv_guard.py")


def test_the_launcher_check_refuses_with_the_reason(tmp_path):
    store, port = rendezvous_store("s3cret")  # the host's agent, with its proof
    env = {**os.environ, "NCCLPREP_RDZV_PORT": str(port), "NCCLPREP_RDZV_NONCE": "s3cret"}
    members = {"localhost": {"address": "127.0.0.1"}}
    cases = {
        "no-nonce": ("NCCL_SOCKET_IFNAME==lo\n", members,
                     "refused on node2: --check verifies the rendezvous with a secret of the job: "
                     "set NCCLPREP_RDZV_NONCE"),
        "eth-missing": ("NCCL_SOCKET_IFNAME==ncclprep9\n", members,
                        "refused on node2: NCCL_SOCKET_IFNAME==ncclprep9 selects no interface here"),
        "name-wrong": ("NCCL_SOCKET_IFNAME==lo\n", {**members, "ncclprep-nosuch.invalid": {"address": "10.9.9.9"}},
                       "1 node name(s) resolve wrong: ncclprep-nosuch.invalid -> nothing (expected 10.9.9.9)"),
        "passes": ("NCCL_SOCKET_IFNAME==lo\nGLOO_SOCKET_IFNAME=l\n", members, None),
    }
    for name, (env_lines, nodes, refusal) in cases.items():
        (tmp_path / name).mkdir()
        script, _ = launcher(tmp_path / name, env_lines, members=nodes)
        out = subprocess.run([str(script), "--check", "train.py"], capture_output=True, text=True, timeout=60,
                             env={k: v for k, v in env.items() if name != "no-nonce" or k != "NCCLPREP_RDZV_NONCE"})
        if refusal:
            assert out.returncode == 2 and refusal in out.stderr and "ran:" not in out.stdout, (name, out.stderr)
        else:
            assert out.returncode == 0, out.stderr
            assert out.stdout.splitlines()[0] == (f"ncclprep-torchrun: checks passed on node2 (interfaces up, 1 names "
                                                  f"resolve, rendezvous localhost:{port})")
            assert out.stdout.splitlines()[1].startswith("ran: ")


def test_the_launcher_check_bounds_each_name_lookup(tmp_path):
    """Review (low findings): --check ran getent with no timeout for every member, so a name that
    the resolver cannot answer (DNS down, no /etc/hosts line) held the launch for its timeouts.
    A getent that never answers is cut at 5 s and the name is named as not resolving."""
    store, port = rendezvous_store("s3cret")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "getent").write_text("#!/bin/sh\nexec sleep 60\n")
    (fake / "getent").chmod(0o755)
    script, _ = launcher(tmp_path, "NCCL_SOCKET_IFNAME==lo\n", members={"localhost": {"address": "127.0.0.1"}})
    env = {**os.environ, "NCCLPREP_RDZV_PORT": str(port), "NCCLPREP_RDZV_NONCE": "s3cret",
           "PATH": f"{fake}:{os.environ['PATH']}"}
    start = time.monotonic()
    out = subprocess.run([str(script), "--check", "train.py"], capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode == 2 and "localhost -> nothing (expected 127.0.0.1)" in out.stderr, out.stderr
    assert time.monotonic() - start < 20


LOCAL = {"localhost": {"address": "127.0.0.1"}, "node2": {"address": "127.0.0.1"}}
# a torchrun for the rendezvous host: its agent's store on the endpoint's port, as torch's c10d
# backend starts it, waiting for the guard's proof
HOST_TORCHRUN = f"""#!{sys.executable}
import sys
from datetime import timedelta
from torch.distributed import TCPStore
args = dict(a.split("=", 1) for a in sys.argv[1:] if a.startswith("--rdzv"))
host, port = args["--rdzv-endpoint"].rsplit(":", 1)
store = TCPStore(host, int(port), is_master=True, wait_for_workers=False, multi_tenant=True)
key = "ncclprep.rdzv-proof." + args["--rdzv-id"]
store.wait([key], timedelta(seconds=60))
print("proof", store.get(key).decode(), args["--rdzv-conf"], flush=True)
"""


def test_with_a_nonce_the_nodes_join_only_the_rendezvous_hosts_own_store(tmp_path):
    """Review F1: torch's c10d rendezvous unpickles what its store holds, and a node joined
    whatever listened on the rendezvous port (a squatter's store). With NCCLPREP_RDZV_NONCE the
    host's launcher proves its agent's store and the others join only after checking the proof;
    the workers never see the nonce."""
    port = free_port()
    env = {**os.environ, "NCCLPREP_RDZV_PORT": str(port), "NCCLPREP_RDZV_NONCE": "s3cret", "NCCLPREP_RDZV_ID": "j1"}
    (tmp_path / "host").mkdir()
    (tmp_path / "node2").mkdir()
    host, _ = launcher(tmp_path / "host", "NCCL_DEBUG=WARN\n", me="localhost", members=LOCAL,
                       torchrun_text=HOST_TORCHRUN)
    other, _ = launcher(tmp_path / "node2", "NCCL_DEBUG=WARN\n", members=LOCAL,
                        torchrun_text='#!/bin/sh\necho "ran: $* nonce=${NCCLPREP_RDZV_NONCE:-none}"\n')
    agent = subprocess.Popen([str(host), "train.py"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    joined = subprocess.run([str(other), "train.py"], env=env, capture_output=True, text=True, timeout=90)
    out, err = agent.communicate(timeout=90)
    assert agent.returncode == 0, err
    assert out.split() == ["proof", guard.proof("s3cret", "j1", "localhost", port), "is_host=true"]
    assert joined.returncode == 0, joined.stderr
    assert joined.stdout.startswith("ran: ") and "--rdzv-conf=is_host=false" in joined.stdout
    assert joined.stdout.strip().endswith("nonce=none")  # the workers do not get it
    # another store on the port: one with a proof for another nonce, a squatter's with none
    # (review: a non-pickle state under torch.rendezvous.<id>) and a listener that never answers
    wrong, wrong_port = rendezvous_store("other", rdzv_id="j1")
    refused = subprocess.run([str(other), "train.py"], capture_output=True, text=True, timeout=60,
                             env={**env, "NCCLPREP_RDZV_PORT": str(wrong_port)})
    assert refused.returncode == 2 and "ran:" not in refused.stdout
    assert refused.stderr.strip().splitlines()[-1] == (
        f"ncclprep-torchrun: refused on node2: rendezvous localhost:{wrong_port} holds a wrong rendezvous proof: "
        "what listens there is not this job's agent (another job's, or a process squatting the port), "
        "or NCCLPREP_RDZV_NONCE differs between the nodes")
    squatter, squat_port = rendezvous_store()
    squatter.set("torch.rendezvous.j1", b"not a pickle")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        for target in (squat_port, silent.getsockname()[1]):
            started = time.monotonic()
            short = {**env, "NCCLPREP_RDZV_PORT": str(target), "NCCLPREP_RDZV_VERIFY_TIMEOUT": "3"}
            refused = subprocess.run([str(other), "train.py"], capture_output=True, text=True, timeout=60, env=short)
            took = time.monotonic() - started
            assert refused.returncode == 2 and "ran:" not in refused.stdout, refused.stderr
            last = refused.stderr.strip().splitlines()[-1]
            assert last.startswith(f"ncclprep-torchrun: refused on node2: rendezvous localhost:{target} gave no "
                                   "proof that it is this job's agent within 3 s (") or (
                   last.endswith("the rendezvous guard ended without an answer (killed at its deadline)")), last
            assert took < 3 + 5 + 20, took  # the deadline, SIGALRM's margin, torch's import on a loaded machine


def test_the_rendezvous_guard_proves_no_store_but_its_agents(tmp_path):
    """The host's guard sets the proof only in a store whose listening socket its agent holds: a
    store another process holds on the port (a squatter that bound first) gets none."""
    squatter, port = rendezvous_store()
    agent = subprocess.Popen(["sleep", "30"])
    try:
        out = subprocess.run([sys.executable, GUARD, "prove", "j2", "127.0.0.1", str(port), str(agent.pid)],
                             env={**os.environ, "NCCLPREP_RDZV_NONCE": "s3cret"}, capture_output=True, text=True,
                             timeout=60)
    finally:
        agent.kill()
        agent.wait()
    assert out.returncode == 3
    assert out.stderr.strip().splitlines()[-1] == (
        f"ncclprep-torchrun: port {port} is held by pid(s) [{os.getpid()}], not by this job's agent "
        f"(pid {agent.pid}): no rendezvous proof set, the other nodes will refuse")
    assert not squatter.check([guard.KEY_PREFIX + "j2"])
    # its own store (this process holds the socket): the proof is set
    mine = subprocess.run([sys.executable, GUARD, "prove", "j2", "127.0.0.1", str(port), str(os.getpid())],
                          env={**os.environ, "NCCLPREP_RDZV_NONCE": "s3cret"}, capture_output=True, text=True,
                          timeout=60)
    assert mine.returncode == 0, mine.stderr
    assert squatter.get(guard.KEY_PREFIX + "j2").decode() == guard.proof("s3cret", "j2", "127.0.0.1", port)
    usage = subprocess.run([sys.executable, GUARD, "verify", "j2", "127.0.0.1", str(port)], capture_output=True,
                           text=True, timeout=60,
                           env={k: v for k, v in os.environ.items() if k != "NCCLPREP_RDZV_NONCE"})
    assert usage.returncode == 64 and "NCCLPREP_RDZV_NONCE empty" in usage.stderr


def test_the_debug_launch_adds_the_debug_variables_with_its_log_folder(tmp_path):
    script, _ = launcher(tmp_path, "NCCL_DEBUG=WARN\n", debug_lines="# managed\nNCCL_DEBUG=INFO\n"
                         "NCCL_DEBUG_FILE={dir}/nccl.%h.%p.log\nTORCH_NCCL_DUMP_ON_TIMEOUT=1\n")
    logs = tmp_path / "logs"
    out = subprocess.run([str(script), "--debug", "--dry-run", "train.py"], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "NCCLPREP_DEBUG_DIR": str(logs), "NCCLPREP_RDZV_ID": "dbg"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[1:4] == ["NCCL_DEBUG=INFO", f"NCCL_DEBUG_FILE={logs}/nccl.%h.%p.log", "TORCH_NCCL_DUMP_ON_TIMEOUT=1"]
    assert f"--log-dir={logs}/torchrun --tee=3 train.py" in lines[-1]
    assert not logs.exists()  # a dry run creates nothing
    real = subprocess.run([str(script), "--debug", "train.py"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "NCCLPREP_DEBUG_DIR": str(logs), "NCCLPREP_RDZV_ID": "dbg"})
    assert real.returncode == 0 and (logs / "torchrun").is_dir()


def test_the_debug_settings_never_wait_on_addr2line_for_a_caught_exception(tmp_path):
    """CI (stop 31): a --debug launch printed "symbolizing C++ stack trace for exception; if this
    hangs, rerun with TORCH_DISABLE_ADDR2LINE=1" and did not finish in 240 s. With
    TORCH_SHOW_CPP_STACKTRACES=1 torch symbolizes every C++ exception when it is thrown, caught or
    not (pytorch PR 113207), and its default symbolizer runs addr2line, which spent ~150 s parsing
    the DWARF of some libraries (pytorch PR 195800). The role's debug settings must name a
    symbolizer that starts no process: here addr2line is one that never returns."""
    import yaml
    defaults = yaml.safe_load(open(os.path.join(ROLES, "nccl_env", "defaults", "main.yml")))
    debug = {k: str(v).replace("{dir}", str(tmp_path)) for k, v in defaults["nccl_env_debug_settings"].items()
             if v is not None}
    assert debug.get("TORCH_SHOW_CPP_STACKTRACES") == "1"  # what makes the symbolizer run at all
    hang = tmp_path / "addr2line"
    hang.write_text("#!/bin/sh\nexec sleep 600\n")
    hang.chmod(0o755)
    code = ("import torch\n"
            "try:\n    torch.zeros(2) + torch.zeros(3)\n"
            "except RuntimeError as e:\n    print('caught', 'size' in str(e))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **debug, "TORCH_ADDR2LINE_BINARY": str(hang)}, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=90)  # ~3 s here; an addr2line call never returns
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)  # torch and the addr2line it started
        proc.communicate()
        pytest.fail("a caught C++ exception waited on addr2line for 90 s under the debug settings")
    assert (proc.returncode, stdout) == (0, "caught True\n"), stderr


def test_the_launcher_runs_on_the_nodes_a_hostfile_or_nccl_prep_nodes_names(tmp_path):
    """A job's vetted nodes (``ncclprep node preflight --need K``'s hostfile, or its names in
    NCCLPREP_NODES): torchrun gets their count and the first one as the rendezvous host; a node
    not among them is refused, as are an empty list and an unreadable file."""
    script, _ = launcher(tmp_path, "NCCL_DEBUG=WARN\n", me="node3")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# vetted\nnode2 slots=1\n\nnode3\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("NCCLPREP_")}

    def dry(**env):
        return subprocess.run([str(script), "--dry-run", "t.py"], capture_output=True, text=True, timeout=60,
                              env={**base, **env})

    run = dry(NCCLPREP_HOSTFILE=str(hostfile))
    assert run.returncode == 0, run.stderr
    assert "--nnodes=2 " in run.stdout and "--node-rank=1 --master-addr=node2 --master-port=29400 " in run.stdout
    run = dry(NCCLPREP_NODES="node3,node1,node2")
    assert run.returncode == 0, run.stderr
    assert "--nnodes=3 " in run.stdout and "--node-rank=0 --master-addr=node3 --master-port=29400 " in run.stdout
    out = dry(NCCLPREP_NODES="node1,node2")
    assert out.returncode == 2 and "node3 is not one of NCCLPREP_NODES=node1,node2" in out.stderr
    empty = tmp_path / "empty"
    empty.write_text("# none\n")
    assert "names no node" in dry(NCCLPREP_HOSTFILE=str(empty)).stderr
    gone = dry(NCCLPREP_HOSTFILE=str(tmp_path / "absent"))
    assert gone.returncode == 2 and "is not a readable file" in gone.stderr
    twice = dry(NCCLPREP_NODES="node1,node3,node1")  # the second node1's rank would never join
    assert twice.returncode == 2 and "NCCLPREP_NODES=node1,node3,node1 names node1 twice" in twice.stderr


def torchrun_args(stdout: str) -> list[str]:
    """The torchrun options of a dry run's command line (its last line), up to the script."""
    words = shlex.split(stdout.splitlines()[-1])[1:]
    return words[:next(i for i, w in enumerate(words) if not w.startswith("--"))]


def test_under_slurm_the_launcher_uses_the_static_rendezvous_at_the_nodes_place(tmp_path):
    """Review N5: torch's c10d rendezvous unpickles the state its store holds, every user of a
    Slurm cluster has processes on the member nodes, the firewall lets the members in on every
    port, and a job's id and port are predictable: any user could run code in another's job.
    Where the node's place is known (a job's node list; under Slurm, else the members with the
    rendezvous host first) torchrun gets the static rendezvous: node rank, master address and
    port, no c10d endpoint. Outside Slurm without a list, c10d as before."""
    script, torchrun = launcher(tmp_path, "NCCL_DEBUG=WARN\n", me="node3")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NCCLPREP_", "SLURM_"))}

    def dry(**env):
        out = subprocess.run([str(script), "--dry-run", "t.py"], capture_output=True, text=True, timeout=60,
                             env={**base, "NCCLPREP_RDZV_ID": "train-77", **env})
        assert out.returncode == 0, out.stderr
        return torchrun_args(out.stdout)

    port = derived_port("train-77")
    static = ["--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=static", "--rdzv-id=train-77", "--node-rank=1",
              "--master-addr=node2", f"--master-port={port}", "--max-restarts=0"]
    assert dry(SLURM_JOB_ID="77", NCCLPREP_NODES="node2,node3") == static
    hostfile = tmp_path / "ncclprep-hosts.77"
    hostfile.write_text("node2\nnode3\n")
    assert dry(SLURM_JOB_ID="77", NCCLPREP_HOSTFILE=str(hostfile)) == static
    # a job on all the members: the rendezvous host first, then inventory order
    assert dry(SLURM_JOB_ID="77")[:7] == ["--nnodes=3", "--nproc-per-node=2", "--rdzv-backend=static",
                                           "--rdzv-id=train-77", "--node-rank=2", "--master-addr=node1",
                                           f"--master-port={port}"]
    for args in (dry(SLURM_JOB_ID="77"), dry(NCCLPREP_NODES="node2,node3")):
        assert not any(a.startswith(("--rdzv-endpoint", "--rdzv-conf")) or a.endswith("c10d") for a in args)
    assert "--rdzv-backend=c10d" in dry()  # no Slurm, no list: every member, as before


class _Bomb:
    """What a second user would plant: unpickling it creates ``path``."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {shlex.quote(str(self.path))}",))


# the job's workers: wait until the test planted its keys, then one Gloo all-reduce
PLANTED_WORKER = """
import os, sys, time, datetime
import torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
deadline = time.monotonic() + 120
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.1)
t = torch.ones(1)
dist.all_reduce(t)
print("worker", dist.get_rank(), dist.get_world_size(), int(t.item()), flush=True)
dist.destroy_process_group()
"""


def test_a_static_launch_reads_no_pickle_another_user_plants_in_its_store(tmp_path):
    """Review N5, run here with torch's own torchrun: two nodes of a job (this machine twice) launch
    with NCCLPREP_NODES and the job's nonce, so the static rendezvous and the guard. While the job
    runs, another process writes a pickle that runs a command under torch.rendezvous.<id>, the c10d
    rendezvous's state key (under c10d every agent ran it, as the job's user). The job ends well
    and nothing ran."""
    import base64
    import datetime
    import pickle

    from torch.distributed import TCPStore

    torchrun_text = f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m torch.distributed.run "$@"\n'
    (tmp_path / "host").mkdir()
    (tmp_path / "node2").mkdir()
    host, _ = launcher(tmp_path / "host", "GLOO_SOCKET_IFNAME=lo\n", me="localhost", members=LOCAL,
                       torchrun_text=torchrun_text)
    other, _ = launcher(tmp_path / "node2", "GLOO_SOCKET_IFNAME=lo\n", members=LOCAL, torchrun_text=torchrun_text)
    worker = tmp_path / "worker.py"
    worker.write_text(PLANTED_WORKER)
    planted, ran = tmp_path / "planted", tmp_path / "pickle-ran"
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("NCCLPREP_", "SLURM_"))},
           "NCCLPREP_NODES": "localhost,node2", "NCCLPREP_RDZV_ID": "train-7", "NCCLPREP_RDZV_PORT": str(port),
           "NCCLPREP_RDZV_NONCE": "s3cret", "NCCLPREP_NPROC_PER_NODE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1"}
    jobs = [subprocess.Popen([str(script), str(worker), str(planted)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
            for script in (host, other)]
    try:
        bomb = pickle.dumps(_Bomb(ran))
        store = TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False,
                         timeout=datetime.timedelta(seconds=120))
        # the c10d backend's state: base64 of the pickle (c10d_rendezvous_backend.py), read by every
        # agent at its rendezvous and at each keep-alive (5 s) while the job runs
        store.set("torch.rendezvous.train-7", base64.b64encode(bomb))
        store.set("train-7/torch.rendezvous.train-7", bomb)
        time.sleep(6)
        planted.touch()
        outs = [job.communicate(timeout=240)[0] for job in jobs]
    finally:
        for job in jobs:
            if job.poll() is None:
                os.killpg(job.pid, 9)
                job.wait()
    assert not ran.exists()
    for job, out in zip(jobs, outs, strict=True):
        assert job.returncode == 0, out[-3000:]
    assert sorted(line for out in outs for line in out.splitlines() if line.startswith("worker ")) == [
        "worker 0 2 2", "worker 1 2 2"]
