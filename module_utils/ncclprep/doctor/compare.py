"""Several inputs from several nodes set against each other (``compare``): sysctl values,
versions, interfaces, and the NCCL watchdog's census across ranks. Pure."""

from __future__ import annotations

import re

from ansible.module_utils.ncclprep.parsers import finding
from ansible.module_utils.ncclprep.parsers.nccl_log import (
    _ranges,
    diagnose_nccl_ranks,
)

#: sysctl keys compared between hosts: prefixes of the network keys NCCL/Gloo traffic depends on.
COMPARED_SYSCTL_PREFIXES = ("net.core.", "net.ipv4.tcp_", "net.ipv4.ip_local_port_range", "net.ipv4.conf.all.",
                            "net.ipv4.conf.default.", "net.ipv6.conf.all.", "net.ipv6.conf.default.")
#: Keys the kernel sizes from the host's memory or CPU count: different values are expected.
AUTOSIZED_SYSCTL = frozenset({"net.ipv4.tcp_mem", "net.ipv4.tcp_max_orphans", "net.ipv4.tcp_max_tw_buckets",
                              "net.ipv4.tcp_max_syn_backlog", "net.core.flow_limit_cpu_bitmap",
                              "net.ipv4.tcp_child_ehash_entries", "net.core.rps_default_mask"})


def compare(results: list[dict]) -> list[dict]:
    """Findings from setting several inputs (several nodes) against each other.

    ``results`` are ``diagnose_text`` results; inputs with an ``error`` are left out. Each finding
    (``parsers.finding``, subject the thing compared, ``host`` None) has ``evidence``: lines
    ``host (source): value``.

    - FAIL ``compare.nccl_version`` when hosts' NCCL logs print different NCCL versions. Every rank
      of a communicator must run the same NCCL; NVIDIA's maintainers ask about it first when ranks
      hang or disagree (NVIDIA/nccl#354, #1328: "a version or configuration mismatch between two
      ranks").
    - WARN ``compare.nccl_env`` per NCCL_* variable that NCCL printed as set (``set by environment
      to``) with different values on different hosts, or on some hosts and not on others whose logs
      print other NCCL_* settings (so the variable was unset there). Source: NVIDIA/nccl#394 and
      #1328, where the maintainer's advice is to check the log for variables set on one rank but
      not another; NCCL's env docs (NCCL_SOCKET_IFNAME, NCCL_IB_GID_INDEX...) describe settings
      each rank reads on its own.
    - WARN ``compare.sysctl`` per network key (COMPARED_SYSCTL_PREFIXES, not AUTOSIZED_SYSCTL) whose
      ``sysctl -a`` value differs between hosts: validate.yml's ``sysctl.<key>`` checks hold every
      node to one intent (roles/sysctl_tuning), so a difference is drift on one of them.
    - Ranks that never arrived: ``parsers.nccl_log.diagnose_nccl_ranks`` over the init lines of
      every NCCL log together (nranks says N, some rank indices never printed); ranks that torch
      output names as missing (monitoredBarrier) are added to its evidence.
    - FAIL ``compare.collective_timeout`` when the NCCL watchdog's lines of two or more inputs (a
      job's per-rank logs) read together name the collective the ranks wait in and the ranks behind
      it or silent (``torch_watchdog.watchdog_census``; evidence: the file of each rank).
    Never raises.
    """
    try:
        return _compare(results)
    except Exception as exc:
        return [finding("compare.error", "WARN", "inputs", f"the inputs could not be compared ({type(exc).__name__}: "
                        f"{exc})", "this is a bug in ncclprep, please report it", evidence=[])]


def _compare(results: list[dict]) -> list[dict]:
    ok = [r for r in results if not r.get("error")]
    out: list[dict] = []
    versions: dict[str, dict[str, str]] = {}
    envs: dict[str, dict] = {}
    for r in ok:
        for h, facts in (r.get("facts") or {}).get("nccl_hosts", {}).items():
            for v in facts["versions"]:
                versions.setdefault(v, {}).setdefault(h, r["source"])
            if facts["env"]:
                envs.setdefault(h, {"source": r["source"], "env": {}})["env"].update(facts["env"])
    if len(versions) > 1:
        per = "; ".join(f"{v} on {', '.join(sorted(hosts))}" for v, hosts in sorted(versions.items()))
        out.append(finding("compare.nccl_version", "FAIL", "NCCL version",
                           f"hosts run different NCCL versions: {per}",
                           "install one NCCL version on every node (the same torch wheel or libnccl2 package), "
                           "then rerun", versions={v: sorted(h) for v, h in versions.items()},
                           evidence=[f"{h} ({src}): NCCL version {v}" for v, hosts in sorted(versions.items())
                                     for h, src in sorted(hosts.items())]))
    if len(envs) > 1:
        names = sorted({k for e in envs.values() for k in e["env"]})
        for name in names:
            values = {h: e["env"].get(name) for h, e in envs.items()}
            if len(set(values.values())) > 1:
                said = "; ".join(f"{h}: {v if v is not None else 'not set'}" for h, v in sorted(values.items()))
                out.append(finding("compare.nccl_env", "WARN", name,
                                   f"{name} differs between hosts ({said})",
                                   f"set {name} the same way on every node (or unset it everywhere)",
                                   values=values, evidence=[f"{h} ({envs[h]['source']}): {name} "
                                                            f"{'set to ' + v if v is not None else 'not set'}"
                                                            for h, v in sorted(values.items())]))
    sysctls = {}
    for r in ok:
        values = (r.get("facts") or {}).get("sysctl")
        if values:
            sysctls[r["host"] or r["source"]] = (r["source"], values)
    if len(sysctls) > 1:
        keys = sorted({k for _, v in sysctls.values() for k in v
                       if k.startswith(COMPARED_SYSCTL_PREFIXES) and k not in AUTOSIZED_SYSCTL})
        for key in keys:
            seen = {h: v.get(key) for h, (_, v) in sysctls.items() if key in v}
            if len(seen) > 1 and len(set(seen.values())) > 1:
                said = "; ".join(f"{h}: {v}" for h, v in sorted(seen.items()))
                out.append(finding("compare.sysctl", "WARN", key, f"{key} differs between hosts ({said})",
                                   f"hold every node to one value (site.yml's sysctl_tuning role, or sysctl -w "
                                   f"{key}=... in /etc/sysctl.d)", values=seen,
                                   evidence=[f"{h} ({sysctls[h][0]}): {key} = {v}" for h, v in sorted(seen.items())]))
    ranks = [dict(x, source=r["source"]) for r in ok for x in (r.get("facts") or {}).get("ranks", [])]
    torch_missing = {r["source"]: (r.get("facts") or {}).get("torch_missing") for r in ok
                     if (r.get("facts") or {}).get("torch_missing")}
    for f in diagnose_nccl_ranks(ranks):
        f["id"] = "compare." + f["id"].split(".", 1)[1]
        f["subject"] = "ranks"
        sources = sorted({x["source"] for x in ranks if x["nranks"] == f["nranks"]})
        f["evidence"] = [f"{len(f['seen'])} of {f['nranks']} ranks printed an init line in "
                         f"{', '.join(sources)}: ranks {_ranges(f['seen'])}"]
        f["evidence"] += [f"{src}: torch names rank(s) {', '.join(map(str, m))} as missing"
                          for src, m in torch_missing.items()]
        out.append(f)
    out += _compare_watchdog(ok, results)
    return out


#: A per-rank file's rank: ``rank3.log`` / ``rank_3.txt``, torchrun's ``<log-dir>/<run>/attempt_0/3/stderr.log``.
_RANK_FILE_RE = re.compile(r"rank[_-]?(\d+)[^/]*$|/(\d+)/std(?:out|err)\.log$")


def _compare_watchdog(ok: list[dict], everything: list[dict]) -> list[dict]:
    """The NCCL watchdog's lines of every input read together (a job's per-rank logs): who waits in
    which collective and who is behind, across the files (torch_watchdog.watchdog_census)."""
    from ansible.module_utils.ncclprep.parsers.torch_watchdog import diagnose_torch_watchdog

    per = [(r["source"], (r.get("facts") or {}).get("watchdog")) for r in ok]
    per = [(src, w) for src, w in per if w and (w.get("timeouts") or w.get("progress"))]
    if len(per) < 2 or not any(w.get("timeouts") for _src, w in per):
        return []
    # a rank's own file that holds no watchdog line (a rank stuck elsewhere prints none): its rank
    # from the file name (rank3.log, torchrun's <log-dir>/.../attempt_0/3/stderr.log)
    quiet = {}
    for r in everything:
        m = _RANK_FILE_RE.search(str(r["source"]).replace("\\", "/"))
        if m and r["source"] not in {src for src, _w in per}:
            quiet[int(m.group(1) or m.group(2))] = r["source"]
    merged: dict = {"timeouts": [], "progress": [], "stuck": [], "taken_down": [], "ranks_seen": sorted(quiet)}
    where: dict[int, str] = dict(quiet)
    for src, w in per:
        for key in ("timeouts", "progress"):
            merged[key] += w.get(key) or []
        merged["ranks_seen"] = sorted(set(merged["ranks_seen"]) | set(w.get("ranks_seen") or []))
        for t in (w.get("timeouts") or []) + (w.get("progress") or []):
            if t.get("rank") is not None:
                where.setdefault(t["rank"], src)
    out = []
    for f in diagnose_torch_watchdog(merged):
        if f["id"] != "torch.collective_timeout":
            continue
        f = dict(f, id="compare.collective_timeout", host=None)
        f["message"] = f"across {len(per)} inputs: " + f["message"]
        f["evidence"] = [f"rank {r} ({where[r]}): waits in work {f['seq']}" for r in f["waiting"] if r in where][:4]
        f["evidence"] += [f"rank {r} ({where.get(r, 'no input of its own')}): to look at first"
                          for r in f["suspects"][:2]]
        out.append(f)
    return out
