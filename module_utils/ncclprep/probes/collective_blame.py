"""The collective blame, run by the probe job itself after the collectives (probes/job.py) (issue 24, review R3).

When the collectives went wrong on the whole cluster (``collectives.collective_trigger``:
a FAIL, a HANG with every rank present, a busbw below the floor), the blame pairs the nodes and
then bisects (``blame.collective_plan``) until it names the node, the link or the smallest
failing group. Each round runs the one op that went wrong at the largest size on every group of
the round at once. The rounds used to be driven by Ansible, a start and a wait per round on
every node (roles/preflight/tasks/blame.yml); here the nodes that ran the collectives stay
together in one job and meet at a store of their own, hosted by the first node (node rank 0)
at its data-plane address, port ``port``; a group of a round hosts its collectives' store at
``port + 1 + <group index>``.

    every node   sets  probe/<node rank>   its collectives' result (status, stage, error,
                                           missing_hosts, results)
    node rank 0  sets  trigger             collective_trigger over every node's result
                 sets  plan/<i>            round i's groups, or the verdict (stage done) or, once
                                           ``max_rounds`` ran, the last plan with ``last`` set
    a group's    sets  round/<i>/<g>       its first node's result of round i
    first node
    every node   adds  acked               once it read the trigger or the last plan; node rank
                                           0 closes the store when every node has, or after
                                           ACK_WAIT_S

Every wait has a deadline: the nodes end their collectives at different moments (a rank that
fails at once, another that waits out its deadline), so each waits ``gather_timeout_s`` (the
collectives' deadline left, and their join) for the others: a follower for the first node's
store and node rank 0 for the others' results (a node that never reports counts as not run,
None); node rank 0 waits ``round_timeout_s + ROUND_SLACK_S`` for a round's result (a group whose
result never comes counts as HANG, ``blame.blame_round``), and the others as long for the next
plan. Values are sealed with the run's key (netutil.run_token, netutil.signed_store) like the
collectives' own store; a node keeps what it posted until it is read (netutil.Keeper), so a key
a host outside the run deletes delays its reader and does not make a result look missing
(review N4), and a store found tampered with before the verdict gives an error, no verdict.
"""

from __future__ import annotations

import json
import math
import socket
import time
from collections.abc import Callable, Mapping

from ansible.module_utils.ncclprep.netutil import (
    Keeper,
    StoreTampered,
    await_values,
    bound_tcp_store,
    run_token,
    signed_store,
    wait_read,
)
from ansible.module_utils.ncclprep.probes.blame import blame_round, collective_plan
from ansible.module_utils.ncclprep.probes.collectives import collective_trigger

#: Seconds past a round's deadline that node rank 0 waits for a group's result, and the others
#: for the next plan (starting the round's processes, reading the result back).
ROUND_SLACK_S = 15
#: Seconds node rank 0 keeps the store open for the others to read the last value.
ACK_WAIT_S = 10
#: The keys of a probe result the trigger and the rounds read (the rest stays on its node).
PROBE_KEYS = ("status", "stage", "error", "missing_hosts", "results")


def max_rounds(n_hosts: int) -> int:
    """The most rounds the blame runs on ``n_hosts`` nodes: the ring pairs (3 at most), the
    confirm rounds (blame.MAX_CONFIRM_ROUNDS, 2) folded into 3 + ceil(log2 n) with the bisection,
    which halves down to groups of 2-3 nodes (the bound the Ansible-driven rounds had)."""
    return 3 + math.ceil(math.log2(max(n_hosts, 2)))


def deadline_s(n_hosts: int, round_timeout_s: float, gather_timeout_s: float) -> float:
    """Seconds the blame can take at most after the collectives on ``n_hosts`` nodes: the
    gathering of the results (``gather_timeout_s``, at most the collectives' deadline and their
    join), every round with its slack, and the closing acknowledgements."""
    return gather_timeout_s + ROUND_SLACK_S + max_rounds(n_hosts) * (round_timeout_s + ROUND_SLACK_S) + ACK_WAIT_S


def _wait_listening(address: str, port: int, deadline: float, clock: Callable[[], float]) -> None:
    """Wait until ``address:port`` accepts a connection (node rank 0's store is up: its own
    collectives may end seconds after this node's), trying every 0.1 s until ``deadline``; then
    the store's client connects at once (torch's client, refused, backs off for seconds: +2 s
    in the collectives' stage of a healthy 4-node run). Raises OSError naming the address when
    the deadline passes."""
    while True:
        try:
            with socket.create_connection((address, port), timeout=1.0):
                return
        except OSError as exc:
            if clock() >= deadline:
                raise OSError(f"{address}:{port} did not accept a connection in time ({exc})") from None
        time.sleep(0.1)


def _put(store, key: str, value) -> None:
    store.set(key, json.dumps(value))


def _get(store, key: str, deadline: float, clock: Callable[[], float], keeper: Keeper | None = None):
    """The JSON value under ``key``, waiting until ``deadline`` (``clock`` time); None when it
    never came. The first node (``keeper`` None) waits on the key and reads it as it comes
    (netutil.wait_read); the others look every POLL_S and meanwhile post again what was deleted of
    their own values (``keeper``), so a deleted key delays its reader and does not make a result
    look missing (review N4). Raises StoreTampered (a value not this run's), RuntimeError (the
    store stopped answering)."""
    if keeper is None:
        value = wait_read(store, key, deadline, clock)
    else:
        value = await_values(store, [key], max(deadline - clock(), 0.0), keeper, clock).get(key)
    return None if value is None else json.loads(value)


def run_blame(dist, node_rank: int, hosts: list[str], addresses: list[str], port: int, probe: Mapping,
              run_group: Callable[[list[str], str, int, list[str]], Mapping], *, token: str | None = None,
              floor: float | None = None, z: float = -3.5, ratio: float = 0.5, round_timeout_s: float = 60,
              gather_timeout_s: float = 30, clock: Callable[[], float] = time.monotonic) -> dict | None:
    """The collective blame on the nodes ``hosts`` (node rank order) after their collectives.

    ``dist``: torch.distributed (its TCPStore); ``addresses``: each host's data-plane address, in
    ``hosts`` order (a group's first node hosts its store there); ``probe``: this node's result of
    the collectives (the collectives' result); ``run_group(group, master_addr, master_port, ops)``:
    runs this node's ranks in a round's group (hosts in group order) and returns that result;
    ``floor``, ``z``, ``ratio``: as ``collective_plan`` takes them (busbw floor in GB/s, GB = 1e9
    bytes); ``token``: the run's secret that seals every value (None: unsealed);
    ``round_timeout_s``: one round's deadline, as ``run_group`` keeps it; ``gather_timeout_s``: how
    long node rank 0 waits for the others' results, and they for its store (the probe job: what is
    left of the collectives' deadline, plus their join).

    Returns, on node rank 0, None when the collectives need no blame, else
    ``{"trigger": collective_trigger, "verdict": the last plan (stage done: the verdict),
    "rounds": the history collective_plan read, "error": None or what stopped it}``; on the other
    nodes None, or ``{"error": str}`` when the first node's store could not be reached or went
    away. Raises nothing a node's failure could cause; ValueError for ``addresses`` not matching
    ``hosts``.
    """
    n = len(hosts)
    if len(addresses) != n:
        raise ValueError(f"addresses has {len(addresses)} entries for {n} hosts ({addresses})")
    me = hosts[node_rank]

    def failed(error: str) -> dict:
        return {"trigger": None, "verdict": None, "rounds": [], "error": error} if node_rank == 0 else {"error": error}

    try:
        if node_rank != 0:
            _wait_listening(addresses[0], port, clock() + gather_timeout_s, clock)
        store, listener = bound_tcp_store(dist, node_rank, n, addresses[0], port, gather_timeout_s)
    except (RuntimeError, OSError) as exc:
        return failed(f"{me}: the blame's store at {addresses[0]}:{port}: {exc}")
    try:
        store = signed_store(dist, store, run_token(store, node_rank, token, gather_timeout_s) if token else None)
        keeper = Keeper(store)
        keeper.post(f"probe/{node_rank}", json.dumps({k: probe.get(k) for k in PROBE_KEYS}))
        if node_rank == 0:
            return _lead(store, hosts, addresses, port, probe, run_group, floor, z, ratio, round_timeout_s,
                         gather_timeout_s, clock)
        return _follow(store, keeper, node_rank, hosts, addresses, port, run_group, round_timeout_s,
                       gather_timeout_s, clock)
    except StoreTampered as exc:  # before any verdict: the verdict is not made from what a stranger wrote
        return failed(f"{me}: the blame's store on {hosts[0]} was tampered with: {exc}: no verdict")
    except (RuntimeError, OSError, ValueError) as exc:  # the store failed under us (a node went away)
        return failed(f"{me}: the blame's store on {hosts[0]}: {exc}")
    finally:
        if listener is not None:
            # node rank 0: the store owns the listening socket's descriptor from here; closing it
            # from Python too would close whatever the descriptor's number is by then
            listener.detach()


def _group_of(me: str, groups: list[list[str]]) -> int | None:
    return next((i for i, g in enumerate(groups) if me in g), None)


def _run_round(store, i: int, me: str, plan: Mapping, hosts, addresses, port, run_group, ops,
               keeper: Keeper | None = None) -> None:
    """This node's part of round ``i``: its group's collectives, the result posted by the group's
    first node (and kept by ``keeper`` on a node other than the first, until the next plan)."""
    gi = _group_of(me, plan["groups"])
    if gi is None:
        return
    group = plan["groups"][gi]
    result = run_group(list(group), addresses[hosts.index(group[0])], port + 1 + gi, list(ops))
    if group[0] == me:
        value = json.dumps({k: result.get(k) for k in PROBE_KEYS})
        if keeper is None:
            store.set(f"round/{i}/{gi}", value)
        else:
            keeper.post(f"round/{i}/{gi}", value)


def _lead(store, hosts, addresses, port, probe, run_group, floor, z, ratio, round_timeout_s, gather_timeout_s,
          clock) -> dict | None:
    n = len(hosts)
    absent = set(probe.get("missing_hosts") or [])  # never arrived at the collectives: not waited for
    deadline = clock() + gather_timeout_s
    probes = {hosts[0]: dict(probe)}
    for r in range(1, n):
        probes[hosts[r]] = None if hosts[r] in absent else _get(store, f"probe/{r}", deadline, clock)
    trigger = collective_trigger(probes, floor)
    _put(store, "trigger", trigger)
    reported = sum(1 for r in range(1, n) if probes[hosts[r]] is not None)
    if not trigger["run"] or n < 2:
        _wait_acks(store, reported, clock)
        return None
    history: list[dict] = []
    error = None
    plan: dict = {}
    try:  # what ran before the store failed stands
        for i in range(max_rounds(n)):
            plan = collective_plan(hosts, history, z, ratio, floor)
            _put(store, f"plan/{i}", plan)
            if plan["stage"] == "done":
                break
            end = clock() + round_timeout_s + ROUND_SLACK_S
            _run_round(store, i, hosts[0], plan, hosts, addresses, port, run_group, trigger["ops"])
            results = {g[0]: _get(store, f"round/{i}/{gi}", end, clock) for gi, g in enumerate(plan["groups"])}
            history.append(blame_round(plan, results))
        else:
            plan = collective_plan(hosts, history, z, ratio, floor)
            _put(store, f"plan/{max_rounds(n)}", dict(plan, last=True))
    except (RuntimeError, OSError, ValueError) as exc:
        error = f"{hosts[0]}: the blame stopped after {len(history)} rounds: {exc}"
    _wait_acks(store, reported, clock)
    return {"trigger": trigger, "verdict": plan or None, "rounds": history, "error": error}


def _wait_acks(store, expected: int, clock) -> None:
    end = clock() + ACK_WAIT_S
    try:
        while store.add("acked", 0) < expected and clock() < end:
            time.sleep(0.1)
    except RuntimeError:
        pass


def _follow(store, keeper: Keeper, node_rank, hosts, addresses, port, run_group, round_timeout_s, gather_timeout_s,
            clock):
    me = hosts[node_rank]
    # node rank 0 waits at most gather_timeout_s for every node's result before it decides
    wait = gather_timeout_s + ROUND_SLACK_S
    trigger = _get(store, "trigger", clock() + wait, clock, keeper)
    if trigger is None:
        return {"error": f"{me}: no word from {hosts[0]} on the blame within {wait:g} s"}
    keeper.release(f"probe/{node_rank}")
    i = 0
    while trigger["run"]:
        plan = _get(store, f"plan/{i}", clock() + round_timeout_s + 2 * ROUND_SLACK_S, clock, keeper)
        if plan is None:
            return {"error": f"{me}: no plan for round {i + 1} of the blame from {hosts[0]}"}
        keeper.release(*list(keeper.kept))  # the first node has read this node's results of the rounds before
        if plan["stage"] == "done" or plan.get("last"):
            break
        _run_round(store, i, me, plan, hosts, addresses, port, run_group, trigger["ops"], keeper)
        i += 1
    store.add("acked", 1)
    return {"error": f"{me}: {keeper.tampered()} (the store was tampered with)"} if keeper.deleted else None
