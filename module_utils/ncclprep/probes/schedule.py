"""Pair schedules for probes between nodes: rounds of disjoint pairs.

A round is a list of pairs ``(i, j)`` with ``i < j`` (node indices 0 .. n-1) in which no
node appears twice, so every pair of a round can be measured at the same moment without
two measurements sharing a node. Pure functions, no I/O: the network probe's workers on every
node compute the same schedule from the same arguments (the seed is the run id), so no
node has to hand it to the others.

- ``ring_rounds``: the ring neighbours (i, i+1 mod n): 2 rounds for even n, 3 for odd n.
- ``circle_rounds``: every pair once, n-1 rounds for even n (n for odd n, one node resting
  per round): the circle method of round-robin tournaments (Kirkman; see e.g. Harary,
  Graph Theory, ch. 9, 1-factorization of K_2m).
- ``random_matchings``: k matchings of a seeded random permutation (a perfect matching for
  even n; for odd n one node rests).
- ``pair_schedule``: the default, ring plus k random matchings with pairs already measured
  dropped; or every pair on request.
- ``repair_rounds``: each suspect node against nodes that passed (the blame's second pass).
"""

from __future__ import annotations

import random
from collections.abc import Iterable

Pair = tuple[int, int]
Rounds = list[list[Pair]]


def _pair(i: int, j: int) -> Pair:
    return (i, j) if i < j else (j, i)


def _check_n(n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"node count n={n!r}: must be an integer >= 1")


def ring_rounds(n: int) -> Rounds:
    """The ring neighbour pairs {i, i+1 mod n} in rounds of disjoint pairs.

    n = 1: no rounds; n = 2: one round [(0, 1)]; even n: edges from even i, then odd i;
    odd n >= 3: the same two rounds without the closing edge, which gets a round of its own.
    Raises ValueError for n < 1.
    """
    _check_n(n)
    if n < 2:
        return []
    if n == 2:
        return [[(0, 1)]]
    edges = [_pair(i, (i + 1) % n) for i in range(n)]
    if n % 2 == 0:
        return [edges[0::2], edges[1::2]]
    return [edges[0:n - 1:2], edges[1:n - 1:2], [edges[n - 1]]]


def circle_rounds(n: int) -> Rounds:
    """Every pair exactly once: n-1 rounds of n/2 pairs (even n), n rounds of (n-1)/2 (odd n).

    Circle method: node n-1 (a dummy for odd n) stays put, the others turn one place per
    round. Raises ValueError for n < 1.
    """
    _check_n(n)
    m = n if n % 2 == 0 else n + 1  # odd n: a dummy node m-1; its partner rests
    rounds: Rounds = []
    ring = list(range(m - 1))
    for r in range(m - 1):
        order = ring[r:] + ring[:r]
        pairs = [(order[0], m - 1)] + [(order[k], order[m - 2 - k + 1]) for k in range(1, m // 2)]
        rounds.append(sorted(_pair(a, b) for a, b in pairs if a < n and b < n))
    return [r for r in rounds if r]


def random_matchings(n: int, k: int, seed: str = "") -> Rounds:
    """``k`` matchings of a permutation drawn from ``random.Random(f"{seed}:{n}:{i}")``.

    Each matching pairs consecutive nodes of its permutation; for odd n the last one rests.
    The same arguments give the same rounds on every node. Raises ValueError for n < 1 or k < 0.
    """
    _check_n(n)
    if not isinstance(k, int) or k < 0:
        raise ValueError(f"matchings k={k!r}: must be an integer >= 0")
    rounds: Rounds = []
    for i in range(k):
        perm = list(range(n))
        random.Random(f"{seed}:{n}:{i}").shuffle(perm)
        rounds.append(sorted(_pair(perm[a], perm[a + 1]) for a in range(0, n - 1, 2)))
    return [r for r in rounds if r]


def pair_schedule(n: int, k: int = 2, seed: str = "", every_pair: bool = False) -> Rounds:
    """The rounds the network probe runs: every pair (``every_pair``) or the ring plus ``k`` matchings.

    Default: ``ring_rounds(n)`` then ``random_matchings(n, k, seed)``, each pair measured once
    (a pair a matching repeats is dropped from it, an emptied round is dropped). Every node is
    in at least 2 pairs for n >= 3 (its ring neighbours), so a node bad in every pairing can
    be told from a bad link. Rounds: 2-3 + k, whatever n. ``every_pair``: ``circle_rounds(n)``.
    Raises ValueError for n < 1 or k < 0.
    """
    if every_pair:
        return circle_rounds(n)
    seen: set[Pair] = set()
    out: Rounds = []
    for rnd in ring_rounds(n) + random_matchings(n, k, seed):
        fresh = [p for p in rnd if p not in seen]
        seen.update(fresh)
        if fresh:
            out.append(fresh)
    return out


def repair_rounds(suspects: Iterable[int], good: Iterable[int], met: Iterable[Pair], per_suspect: int = 2,
                  seed: str = "") -> Rounds:
    """Pair every suspect with up to ``per_suspect`` good nodes it has not been measured with.

    ``met``: the pairs already measured (either order). Good partners are taken in a seeded
    order that spreads suspects over them; rounds are built greedily so that no node is in
    two pairs of a round. A suspect with no unmet good node left gets fewer pairs (none when
    ``good`` is empty). Raises ValueError for ``per_suspect`` < 1 or a node both suspect and good.
    """
    if not isinstance(per_suspect, int) or per_suspect < 1:
        raise ValueError(f"per_suspect={per_suspect!r}: must be an integer >= 1")
    suspects = sorted(set(suspects))
    good = sorted(set(good))
    both = set(suspects) & set(good)
    if both:
        raise ValueError(f"nodes {sorted(both)} are both suspect and good")
    met_set = {_pair(a, b) for a, b in met}
    rng = random.Random(f"{seed}:repair")
    wanted: list[Pair] = []
    for s in suspects:
        partners = [g for g in good if _pair(s, g) not in met_set]
        rng.shuffle(partners)
        wanted.extend(_pair(s, g) for g in partners[:per_suspect])
    rounds: Rounds = []
    for pair in wanted:
        for rnd in rounds:
            if not any(set(pair) & set(p) for p in rnd):
                rnd.append(pair)
                break
        else:
            rounds.append([pair])
    return [sorted(r) for r in rounds]


def partner(rnd: list[Pair], node: int) -> int | None:
    """``node``'s partner in round ``rnd``, or None when it rests."""
    for a, b in rnd:
        if a == node:
            return b
        if b == node:
            return a
    return None
