"""limits.memlock and limits.shm (preflight's own checks): what a rank may lock and share.

- memlock: RDMA (IB and RoCE) registers the buffers it sends from, under RLIMIT_MEMLOCK; a
  limited memlock makes NCCL's IB transport fail to register memory ("ibv_reg_mr failed")
  or fall back. NVIDIA's and Mellanox's setup guides set it unlimited (limits.conf
  ``* - memlock unlimited``). Checked where the host has an RDMA device.
- /dev/shm: NCCL's SHM transport between the GPUs of one host and PyTorch's DataLoader
  workers allocate there; a container's default of 64 MiB gives "NCCL WARN Error: failed to
  extend /dev/shm/nccl-..." (NCCL's troubleshooting guide: give containers --shm-size=1g or
  more). Checked where the host has GPUs, against MIN_SHM_BYTES.

Facts: ``limits`` {memlock (bytes, None: unlimited), shm_bytes, rdma_devices} and
``versions.gpus`` (library/node_facts.py).
"""

from __future__ import annotations

from ansible.module_utils.ncclprep.model import Check, Context, HostRecord, facts_of, make_check, verdict

#: Smallest /dev/shm for a GPU host: 1 GiB, the --shm-size NCCL's troubleshooting guide gives.
MIN_SHM_BYTES = 1 << 30


def check_limits(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """limits.memlock: FAIL naming RDMA hosts whose memlock is limited (measured: bytes);
    SKIP when no host has an RDMA device. limits.shm: FAIL naming GPU hosts with /dev/shm below
    MIN_SHM_BYTES or without one; SKIP when no host has a GPU. No checks without facts."""
    lim = {h: facts_of(r).get("limits") for h, r in records.items()}
    lim = {h: v for h, v in lim.items() if v is not None}
    if not lim:
        return []
    out = []
    rdma = {h: v for h, v in lim.items() if v.get("rdma_devices")}
    if rdma:
        limited = {h: v["memlock"] for h, v in rdma.items() if v.get("memlock") is not None}
        out.append(verdict("limits.memlock", limited, expected="unlimited",
                           message="memlock limited on RDMA hosts: "
                                   + ", ".join(f"{h} {b} B" for h, b in sorted(limited.items())),
                           remediation="set memlock unlimited for the job's user (limits.conf '* - memlock "
                                       "unlimited', systemd LimitMEMLOCK=infinity) and log in again",
                           passed=f"memlock unlimited on the {len(rdma)} hosts with RDMA devices",
                           passed_measured="unlimited"))
    else:
        out.append(make_check("limits.memlock", "SKIP", message="no host has an RDMA device (sockets need no memlock)"))
    gpus = {h: v for h, v in lim.items() if ((facts_of(records[h]).get("versions") or {}).get("gpus") or 0) > 0}
    if gpus:
        small = {h: v.get("shm_bytes") for h, v in gpus.items() if (v.get("shm_bytes") or 0) < MIN_SHM_BYTES}
        out.append(verdict("limits.shm", small, expected=f">= {MIN_SHM_BYTES} B",
                           message="/dev/shm too small for NCCL's SHM transport on "
                                   + ", ".join(f"{h} ({b} B)" for h, b in sorted(small.items())),
                           remediation="give /dev/shm 1 GiB or more (a container: --shm-size=1g; a host: "
                                       "mount -o remount,size=... /dev/shm)",
                           passed=f"/dev/shm >= 1 GiB on the {len(gpus)} GPU hosts",
                           passed_measured=min(v.get("shm_bytes") for v in gpus.values())))
    else:
        out.append(make_check("limits.shm", "SKIP", message="no host has a GPU (gloo does not use /dev/shm)"))
    return out
