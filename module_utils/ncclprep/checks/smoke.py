"""torchrun.smoke (preflight's own check): the torchrun DDP job through the rendered launcher."""

from __future__ import annotations

import statistics

from ansible.module_utils.ncclprep.checks.explain import explain
from ansible.module_utils.ncclprep.model import Check, Context, HostRecord, make_check


def check_smoke(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """torchrun.smoke: the torchrun DDP job finished on every node with identical parameters everywhere.

    ``records``: every host's record, also those without facts; record ``smoke``: the
    training job's result (probes/smoke.py run_job) {status (PASS, FAIL, HANG, SKIP), error,
    log_tail (lines), workers [{rank, world_size, params_identical}]}. Hosts that never took part
    (``alive`` false) are host.reachable's and left out. SKIP when it ran nowhere (disabled,
    --limit, a host gone); HANG/FAIL naming the hosts without a result, else those that failed or hung,
    explained from log_tail when it is a known torch.distributed failure (else quoting the last
    line the first of them printed); FAIL when the workers
    do not add up to one world size; else PASS measuring workers and world size.
    """
    # a host that never took part is host.reachable's, not the job's: the job ran without it
    smokes = {h: (records.get(h) or {}).get("smoke") for h in ctx.all_hosts
              if (records.get(h) or {}).get("alive", True)}
    smokes = {h: (None if s and s.get("status") == "SKIP" else s) for h, s in smokes.items()}
    if not any(smokes.values()):
        return [make_check("torchrun.smoke", "SKIP",
                           message="the smoke job did not run (disabled, or only part of the cluster was in the "
                                   "run: --limit, or a host gone)")]
    hung = sorted(h for h, s in smokes.items() if s and s.get("status") == "HANG")
    failed = sorted(h for h, s in smokes.items() if s and s.get("status") == "FAIL")
    absent = sorted(h for h, s in smokes.items() if not s)
    status_of = {h: (s or {}).get("status", "no result") for h, s in smokes.items()}
    if hung or failed or absent:
        status = "HANG" if hung and not failed else "FAIL"
        blame = absent or failed or hung
        detail = "; ".join(f"{h}: {(smokes[h] or {}).get('error') or 'no result'}" for h in (failed + hung + absent))
        known = [(h, explain("\n".join((smokes[h] or {}).get("log_tail") or []), h)) for h in failed + hung]
        known = [(h, f) for h, f in known if f]
        if known:
            detail = "; ".join(f"{h}: {f['message']}" for h, f in known[:3]) + f" ({detail})"
        else:  # the last thing the first bad node's job printed: its own words for what went wrong
            tail = [ln.strip() for ln in (smokes[blame[0]] or {}).get("log_tail") or [] if ln.strip()]
            if tail:
                detail = f"{detail}; last line on {blame[0]}: {tail[-1][:200]}"
        return [make_check("torchrun.smoke", status, blame, measured=status_of, expected="PASS on every node",
                           message=detail[:500],
                           remediation=(known[0][1]["remediation"] if known else
                                        "read log_tail in the host reports; a hang with 'gai error' warnings "
                                        "means the rank-0 host name does not resolve (role host_names)"))]
    workers = [w for s in smokes.values() for w in s.get("workers", [])]
    world = {w.get("world_size") for w in workers}
    if not workers or world != {len(workers)}:
        return [make_check("torchrun.smoke", "FAIL", sorted(smokes), measured={"workers": len(workers),
                           "world_size": sorted(world)}, expected="one result per worker, same world size",
                           message=f"torchrun job reported {len(workers)} workers for world size(s) {sorted(world)}",
                           remediation="read log_tail in the host reports")]
    training = training_figures(workers)
    return [make_check("torchrun.smoke", "PASS", measured={"workers": len(workers), "world_size": sorted(world),
                                                          **training},
                       expected="identical parameters on every rank",
                       message=f"torchrun c10d DDP job: {len(workers)} workers, parameters identical"
                               + (f"; {training_summary(training)}" if training else ""))]


def training_figures(workers: list[dict]) -> dict:
    """The template job's figures over its workers: {global_batch, step_ms, comm_share,
    allreduce_bytes_per_step, slowest_rank, slowest_step_ms}.

    step_ms and comm_share are medians over the workers (each worker's own figure is already a
    median over its measured steps); all-reduce bytes per step are rank 0's (every rank hands
    the same payload to all_reduce). Empty when the workers printed no step time (an older job).
    """
    timed = [w for w in workers if isinstance(w.get("step_s"), (int, float))]
    if not timed:
        return {}
    shares = [w["comm_share"] for w in timed if isinstance(w.get("comm_share"), (int, float))]
    slowest = max(timed, key=lambda w: w["step_s"])
    rank0 = min(timed, key=lambda w: w.get("rank", 0))
    return {"global_batch": rank0.get("global_batch"),
            "step_ms": round(statistics.median(w["step_s"] for w in timed) * 1e3, 3),
            "comm_share": round(statistics.median(shares), 4) if shares else None,
            "allreduce_bytes_per_step": rank0.get("allreduce_bytes_per_step"),
            "slowest_rank": slowest.get("rank"), "slowest_step_ms": round(slowest["step_s"] * 1e3, 3)}


def training_summary(figures: dict) -> str:
    """One line: global batch, median step time, communication share, all-reduce bytes per step."""
    share = figures.get("comm_share")
    return (f"global batch {figures.get('global_batch')}, step {figures['step_ms']:.1f} ms"
            + (f" ({share * 100:.0f}% communication)" if share is not None else "")
            + f", all-reduce {figures.get('allreduce_bytes_per_step')} B/step")
