"""versions.<name> (preflight's own checks): one software stack on every node.

A job's ranks must agree on more than torch (whose pin versions.torch holds, concern
torch_runtime): a rank on another kernel, driver, CUDA, cuDNN or NCCL can fail or slow the job
in ways no single node shows. Each version node_facts reads (facts ``versions``) is held
against the majority of the hosts; the outliers are named with their values.
"""

from __future__ import annotations

from ansible.module_utils.ncclprep.model import Check, Context, HostRecord, facts_of, majority, verdict

#: versions key -> what it is (the check is versions.<key>); torch itself is versions.torch.
KEYS = {
    "kernel": "Linux kernel",
    "python": "Python",
    "driver": "NVIDIA driver",
    "cuda": "CUDA toolkit",
    "libnccl": "system libnccl",
    "torch_cuda": "torch's CUDA",
    "torch_nccl": "torch's NCCL",
    "cudnn": "torch's cuDNN",
}


def check_versions(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """versions.<key> for every key of KEYS that at least one host reports.

    ``records``: the hosts that gave facts; facts ``versions[<key>]``: a version string, or
    None where the host lacks it (no GPU driver on a CPU node). A key no host has gives no
    check; otherwise FAIL names every host whose value differs from the majority (a host
    lacking what the others have included), measured host -> value, expected the majority.
    """
    out: list[Check] = []
    for key, what in KEYS.items():
        seen = {h: (facts_of(r).get("versions") or {}).get(key) for h, r in records.items()}
        present = {h: v for h, v in seen.items() if v is not None}
        if not present:
            continue
        expected = majority(seen)
        odd = sorted(h for h, v in seen.items() if v != expected)
        out.append(verdict(
            f"versions.{key}", odd, measured={h: seen[h] for h in odd}, expected=expected,
            message=f"{what} differs from the majority ({expected}) on "
                    + ", ".join(f"{h} ({seen[h] or 'absent'})" for h in odd),
            remediation=f"install the same {what} on every node (the majority runs {expected})",
            passed=f"{what} {expected} on all {len(seen)} hosts", passed_measured=expected))
    return out + check_gpus(records)


def check_gpus(records: dict[str, HostRecord]) -> list[Check]:
    """versions.gpus: every node has as many GPUs as the majority, and torch sees every GPU the
    driver lists (a GPU fallen off the bus, in a bad state, or hidden by CUDA_VISIBLE_DEVICES).

    facts ``versions.gpus``: torch.cuda.device_count() in torch_runtime's venv; facts
    ``nccl_env.gpus``: the GPUs the NVIDIA driver lists under /proc/driver/nvidia/gpus. No
    check when no host has a GPU (a CPU cluster). FAIL measures host -> {torch, driver}.
    """
    torch = {h: (facts_of(r).get("versions") or {}).get("gpus") for h, r in records.items()}
    driver = {h: (facts_of(r).get("nccl_env") or {}).get("gpus") for h, r in records.items()}
    counts = {h: torch[h] or 0 for h in records}
    if not any(counts.values()) and not any(driver.values()):
        return []
    expected = majority(counts)
    odd = {h: {"torch": torch[h], "driver": driver[h]} for h in records
           if counts[h] != expected or (driver[h] or 0) > counts[h]}
    why = [f"{h} ({v['torch'] or 0} seen by torch" + (f", {v['driver']} listed by the driver)" if v["driver"]
                                                      is not None else ")") for h, v in sorted(odd.items())]
    return [verdict("versions.gpus", odd, expected=expected,
                    message=f"GPUs differ from the majority ({expected} per node) on " + ", ".join(why),
                    remediation="nvidia-smi -L and dmesg (Xid, fallen off the bus) on the named hosts; "
                                "CUDA_VISIBLE_DEVICES unset; reseat or replace the GPU",
                    passed=f"{expected} GPUs on each of {len(records)} hosts, all seen by torch",
                    passed_measured=expected)]
