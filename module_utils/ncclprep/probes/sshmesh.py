"""Node-to-node SSH as users and tools (mpirun, pdsh) do it: the system ssh client,
no prompt, host keys checked. The logins of one node to its peers (``targets``, ``run_in_rounds``)
for ``ncclprep node preflight`` (check ssh.trust; validate.yml starts it on every node)."""

from __future__ import annotations

import concurrent.futures
import random
import re
import subprocess
import time

# OpenSSH's own messages (ssh(1), sshconnect.c, ssh.c), most specific first.
_CAUSES = (
    (re.compile(r"REMOTE HOST IDENTIFICATION HAS CHANGED"), "host_key_changed",
     "the peer's host key differs from the one in known_hosts"),
    (re.compile(r"Host key verification failed|No (?:ED25519|ECDSA|RSA)? ?host key is known"), "host_key_unknown",
     "the peer's host key is not in known_hosts"),
    (re.compile(r"Permission denied"), "auth_denied",
     "the cluster key is not accepted (authorized_keys, from= restriction or key file)"),
    (re.compile(r"Could not resolve hostname"), "unresolved", "the peer's name does not resolve"),
    (re.compile(r"Connection timed out|Operation timed out|timed out"), "timeout",
     "no answer: the peer is down or a firewall drops SSH"),
    (re.compile(r"Connection refused"), "refused", "nothing listens on the SSH port, or a firewall rejects it"),
    (re.compile(r"No route to host|Network is unreachable"), "unreachable", "no route to the peer"),
)

#: Causes that may pass on a second try (a dropped SYN, sshd restarting, a route that flapped);
#: the others (a refused key, a changed or unknown host key, a name that does not resolve)
#: would fail the same way again.
TRANSIENT = ("timeout", "refused", "unreachable", "error")


def classify(rc: int | None, stderr: str) -> dict:
    """``{"ok": bool, "cause": str | None, "explanation": str | None}`` for one ssh attempt.

    ``rc`` None means the attempt ran past its deadline (cause "deadline"). rc 0 is ok. Otherwise
    the first of OpenSSH's known messages in ``stderr`` names the cause; unknown text gives
    cause "error" with the last stderr line as the explanation.
    """
    if rc is None:
        return {"ok": False, "cause": "deadline", "explanation": "ssh did not finish before its deadline"}
    if rc == 0:
        return {"ok": True, "cause": None, "explanation": None}
    for pattern, cause, explanation in _CAUSES:
        if pattern.search(stderr or ""):
            return {"ok": False, "cause": cause, "explanation": explanation}
    lines = [line for line in (stderr or "").splitlines() if line.strip()]
    return {"ok": False, "cause": "error", "explanation": lines[-1] if lines else f"ssh exited with {rc}"}


def ssh_argv(target: str, user: str | None = None, identity: str | None = None, port: int = 22,
             connect_timeout: int = 5, known_hosts: str | None = None) -> list[str]:
    """argv for one check: ``ssh -o BatchMode=yes -o StrictHostKeyChecking=yes ... target true``.

    BatchMode: never prompt (a prompt would be a hang); StrictHostKeyChecking=yes: an unknown or
    changed host key fails instead of being accepted. ``--`` ends the options, so a target that
    starts with ``-`` (``-oProxyCommand=...``) is a host name to ssh, never an option (review,
    low findings).
    """
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", f"ConnectTimeout={int(connect_timeout)}", "-p", str(int(port))]
    if known_hosts:
        argv += ["-o", f"GlobalKnownHostsFile={known_hosts}"]
    if identity:
        argv += ["-i", identity, "-o", "IdentitiesOnly=yes"]
    if user:
        argv += ["-l", user]
    return argv + ["--", target, "true"]


# sshd drops unauthenticated connections beyond MaxStartups (default 10:30:100: from 10
# pending, 30 % are dropped) with a reset before the key exchange; ssh then prints one of these.
_RESET = re.compile(r"Connection reset by peer|kex_exchange_identification|Connection closed by remote host")


def is_reset(stderr: str) -> bool:
    """True when ssh's error is the peer closing before the key exchange (sshd's MaxStartups
    limit under a burst of logins), which a retry after a short pause clears."""
    return bool(_RESET.search(stderr or ""))


def peer_order(hosts: list[str], me: str, limit: int | None = None, seed: str = "") -> list[str]:
    """The peers ``me`` logs in to, in rounds that spread the logins over the targets.

    ``hosts``: every member, in one order all nodes share (data_plane_members). Round r sends
    every node to the node r places after it (circle offsets), so within one round every node
    is the target of exactly one other: with nodes in step, a target sees about as many
    logins at once as each node runs in parallel, far below sshd's MaxStartups. ``limit``:
    at most that many peers (a sample at scale): the ring neighbours (offsets 1 and n-1) first,
    then offsets drawn from a generator seeded with ``seed`` (the same on every node, so every
    round stays a permutation). None or >= n-1: every peer. Raises ValueError when ``me`` is
    not in ``hosts`` or ``limit`` < 1.
    """
    if me not in hosts:
        raise ValueError(f"{me!r} is not one of the {len(hosts)} members")
    if limit is not None and limit < 1:
        raise ValueError(f"limit={limit}: valid: null (every peer) or >= 1")
    n = len(hosts)
    if limit is None or limit >= n - 1:
        offsets = list(range(1, n))
    else:
        ring = [1] if n == 2 else [1, n - 1]
        extra = max(0, limit - len(ring))
        offsets = (ring + random.Random(f"{seed}:{n}").sample(range(2, n - 1), min(extra, max(0, n - 3))))[:limit]
    i = hosts.index(me)
    return [hosts[(i + o) % n] for o in offsets]


def targets(members: dict, me: str, alive: list, limit: int | None = None, seed: str = "") -> list[dict]:
    """The logins of ``me``: ``[{host, name}]``, each peer by its member name then its data-plane
    address, for the peers peer_order gives (rounds over ``members``, name -> ``{address}``, in the
    order every node shares; at most ``limit`` peers), left out the peers not in ``alive``. Raises
    ValueError as peer_order does."""
    out = []
    for host in peer_order(list(members), me, limit, seed):
        if host not in alive:
            continue
        out.append({"host": host, "name": host})
        address = (members.get(host) or {}).get("address")
        if address:
            out.append({"host": host, "name": address})
    return out


def attempt(target: dict, p: dict) -> dict:
    """One login, inside one deadline (``p``: the logins' options: user, identity, port, known_hosts,
    timeout in seconds, retries). A reset before the key exchange (sshd's MaxStartups) is
    retried up to p["retries"] times after a short random pause; any other failure that may
    pass (TRANSIENT causes) once. Each failed try before the last is kept in ``retried``
    ("<cause>: <ssh's last line>"), the evidence of a login that passed only on a retry."""
    argv = ssh_argv(target["name"], p["user"], p["identity"], p["port"], max(1, int(p["timeout"] / 3)),
                    p["known_hosts"])
    start = time.monotonic()
    tries = resets = others = 0
    retried = []
    while True:
        tries += 1
        left = p["timeout"] - (time.monotonic() - start)
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=max(1.0, left))
            rc, stderr = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, stderr = None, (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        verdict = classify(rc, stderr)
        if verdict["ok"] or rc is None or time.monotonic() - start > p["timeout"] / 2:
            break
        if is_reset(stderr) and resets < p["retries"]:
            resets += 1
        elif verdict["cause"] in TRANSIENT and not others and p["retries"] > 0:
            others += 1
        else:
            break
        retried.append(f"{'reset' if is_reset(stderr) else verdict['cause']}: "
                       f"{(stderr.strip().splitlines() or [''])[-1][:200]}")
        time.sleep(random.uniform(0.2, 1.0) * tries)
    return dict(host=target.get("host"), name=target["name"], stderr=stderr.strip()[-2000:], attempts=tries,
                retried=retried, seconds=round(time.monotonic() - start, 3), **verdict)


def run_in_rounds(targets: list, p: dict) -> list:
    """Log in to the targets' hosts in the order given (peer_order's rounds), at most
    p["parallel"] hosts at once, the names of one host one after the other; results in
    the targets' order."""
    by_host: dict = {}
    for i, t in enumerate(targets):
        by_host.setdefault(t.get("host") or t["name"], []).append((i, t))
    results: list = [None] * len(targets)

    def one_host(items):
        for i, t in items:
            results[i] = attempt(t, p)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(p["parallel"], len(by_host) or 1))) as pool:
        list(pool.map(one_host, by_host.values()))
    return results
