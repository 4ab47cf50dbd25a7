"""The doctor's reading of a failed job's text, for the checks that quote one (collective.run,
torchrun.smoke): the checks ask the doctor, never the other way."""

from __future__ import annotations

from ansible.module_utils.ncclprep.doctor import diagnose_text
from ansible.module_utils.ncclprep.parsers.torch_dist import diagnose_torch_dist, parse_torch_dist


def explain(text: str | None, host: str) -> dict | None:
    """The doctor's first FAIL finding (else WARN) in an error or a job's log text, as
    ``{message, remediation, evidence, ...}``: the same reading as ``ncclprep doctor`` (a torch
    error, the NCCL watchdog, an NCCL error with a known cause, ...); a torch.distributed reading
    (parsers/torch_dist.py) when the text is of no kind the doctor knows; None when nothing is found."""
    if not text or not text.strip():
        return None
    result = diagnose_text(text, "job output", host)
    findings = [f for sev in ("FAIL", "WARN") for f in result["findings"] if f["severity"] == sev]
    if not findings and result["kind"] is None:
        findings = diagnose_torch_dist(parse_torch_dist(text), host=host)
    return findings[0] if findings else None
