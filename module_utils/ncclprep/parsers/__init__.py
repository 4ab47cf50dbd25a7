"""Pure parsers of the text that cluster tools print, one module per tool, with small diagnosis rules.

Each ``parse_*`` function takes the tool's text output and returns a dict of what
it could read plus ``unparsed``, the lines it did not understand (a shell prompt
line or a garbled line lands there); it never raises on real output and never
invents a value: a field the text does not show is None. Each ``diagnose_*``
function takes a parsed dict and returns a list of findings built by ``finding``:
dicts with ``id`` (stable, dotted), ``severity`` (FAIL, WARN or INFO), ``subject``
(the device, interface, address or host the finding is about; for a host-wide
finding the ``host`` argument, or ``"host"`` when the caller named none), ``host``,
``message`` and ``remediation`` (one line each), plus finding-specific details.
The readings and diagnoses are pinned by the real outputs in ``shared/cases``
(see its INDEX.md). Standard library only: these modules also run on the nodes.
"""

from __future__ import annotations

SEVERITIES = ("FAIL", "WARN", "INFO")


def finding(fid: str, severity: str, subject: str, message: str, remediation: str = "",
            host: str | None = None, **details) -> dict:
    """Build one finding dict (keys described in the package docstring; ``details`` are added as is).

    Raises ValueError for a severity not in SEVERITIES.
    """
    if severity not in SEVERITIES:
        raise ValueError(f"finding {fid}: severity {severity!r} not in {SEVERITIES}")
    out = {"id": fid, "severity": severity, "subject": subject, "host": host, "message": message,
           "remediation": remediation}
    out.update(details)
    return out
