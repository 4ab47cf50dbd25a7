"""Pure parsers of the text that cluster tools print, one module per tool, with small diagnosis rules.

Each ``parse_*`` function takes the tool's text output and returns a dict of what
it could read plus ``unparsed``, the lines it did not understand (a shell prompt
line or a garbled line lands there); it never raises on real output and never
invents a value: a field the text does not show is None (``dcb`` returns the
priority maps and trust order the roce_qos rules use, see its docstrings). Each ``diagnose_*``
function takes a parsed dict and returns a list of findings built by ``finding``:
dicts with ``id`` (stable, dotted), ``severity`` (FAIL, WARN or INFO), ``subject``
(the device, interface, address or host the finding is about; for a host-wide
finding the ``host`` argument, or ``"host"`` when the caller named none), ``host``,
``message`` and ``remediation`` (one line each), plus finding-specific details.
The readings and diagnoses are pinned by the real outputs in ``shared/cases``
(see its INDEX.md). Standard library only: these modules also run on the nodes.

Where each parser reads live nodes or logs:

- ``ibstat``, ``ibv_devinfo``, ``ip_link``, ``ifconfig``, ``numa_lscpu``, ``topo``, ``netplan``,
  ``ethtool``: node_facts' ``hostinfo`` (``module_utils/ncclprep/node/hostinfo.py`` runs the tools under
  deadlines). Where a node has an older or a different tool the parser of that tool gives the same
  shape: ``ifconfig -a`` (net-tools 1.60 and 2.x) that of ``ip_link`` (and its diagnosis), plain
  ``lscpu`` that of ``numactl -H`` (``numa_lscpu``); ``topo`` reads ``nvidia-smi topo -m`` and
  ``-p2p``; ``ethtool`` reads ``ethtool <dev>`` and ``ethtool -i <dev>``.
- ``dcb``, ``mlnx_qos``: the roce_qos module (rules in ``module_utils/ncclprep/concerns/roce_qos.py``).
- ``ufw``, ``torch_dist``: the checks (``firewall.rules``; the probe's error explained).
- ``nccl_log``, ``nccl_tests``: logs a job writes, not a node's state: read by the offline doctor
  (``module_utils/ncclprep/doctor/``, ``ncclprep doctor``), which runs every parser here (and
  ``sysctl.parse_sysctl_a``) on pasted text; ``nccl_log`` also by the collectives probe.
"""

from __future__ import annotations

import re

SEVERITIES = ("FAIL", "WARN", "INFO")
#: The eight 802.1p priorities of a priority map (PFC, ECN): ``{prio (int 0..7): bool | None}``.
PRIORITIES = tuple(range(8))
#: An ANSI/ECMA-48 control sequence (CSI: ESC ``[`` parameters, one final letter), such as the
#: underline (``ESC[4m`` .. ``ESC[0m``) that nvidia-smi 580 prints around ``topo``'s header row
#: even into a pipe.
_CSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    """``text`` without ANSI control sequences (colour, underline); the rest unchanged."""
    return _CSI_RE.sub("", text)


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


def number_ranges(numbers) -> str:
    """``[0, 1, 2, 5, 8, 9]`` -> ``"0-2, 5, 8-9"`` (each number once, sorted)."""
    nums = sorted(set(numbers))
    parts: list[str] = []
    start = prev = None
    for n in nums + [None]:
        if start is not None and (n is None or n != prev + 1):
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if n is not None and start is None:
            start = n
        prev = n
    return ", ".join(parts)


def rank_list(ranks) -> str:
    """``[3]`` -> ``"rank 3"``, ``[0, 1, 5]`` -> ``"ranks 0-1, 5"``."""
    return f"rank{'s' if len(set(ranks)) > 1 else ''} {number_ranges(ranks)}"


def unknown_priority_map() -> dict:
    """``{0: None, ..., 7: None}``: a priority map of which nothing could be read."""
    return {p: None for p in PRIORITIES}


def on_off(value) -> bool | None:
    """``True``/``False`` for a bool, 0/1, or the words on/off, true/false, 1/0 (any case); None otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("on", "off", "true", "false", "1", "0"):
        return value.strip().lower() in ("on", "true", "1")
    return None
