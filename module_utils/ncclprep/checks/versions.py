"""versions.<name> (preflight's own checks): one software stack on every node.

A job's ranks must agree on more than torch (whose pin versions.torch holds, concern
torch_runtime): a rank on another kernel, driver, CUDA, cuDNN or NCCL can fail or slow the job
in ways no single node shows. Each version node_facts reads (facts ``versions``) is held
against the majority of the hosts; the outliers are named with their values.
"""

from __future__ import annotations

from ansible.module_utils.ncclprep.checks.model import Check, Context, HostRecord, facts_of, majority, verdict

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
    return out
