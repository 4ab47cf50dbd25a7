"""Pair schedules (module_utils/ncclprep/probes/schedule.py): rounds of disjoint pairs, up to 4096 nodes."""

from __future__ import annotations

import pytest
from ansible.module_utils.ncclprep.probes.schedule import (
    circle_rounds,
    pair_schedule,
    partner,
    random_matchings,
    repair_rounds,
    ring_rounds,
)


def assert_rounds(rounds, n):
    """Every round: pairs (i, j), 0 <= i < j < n, no node twice."""
    for rnd in rounds:
        assert rnd, "empty round"
        nodes = [x for pair in rnd for x in pair]
        assert len(nodes) == len(set(nodes)), rnd
        assert all(0 <= i < j < n for i, j in rnd), rnd


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 64, 101, 1024, 1025])
def test_circle_method_meets_every_pair_exactly_once(n):
    rounds = circle_rounds(n)
    assert_rounds(rounds, n)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    pairs = [p for rnd in rounds for p in rnd]
    assert len(pairs) == len(set(pairs)) == n * (n - 1) // 2
    # every round is a perfect matching (even n) or leaves exactly one node resting (odd n)
    assert {len(rnd) for rnd in rounds} == {n // 2}


@pytest.mark.parametrize("n,expected", [(1, []), (2, [[(0, 1)]]), (3, [[(0, 1)], [(1, 2)], [(0, 2)]]),
                                        (4, [[(0, 1), (2, 3)], [(1, 2), (0, 3)]]),
                                        (5, [[(0, 1), (2, 3)], [(1, 2), (3, 4)], [(0, 4)]])])
def test_ring_rounds_small(n, expected):
    assert ring_rounds(n) == expected


@pytest.mark.parametrize("n", [3, 4, 7, 8, 1000, 4095, 4096])
def test_default_schedule_ring_plus_two_matchings_at_scale(n):
    rounds = pair_schedule(n, k=2, seed="run-1")
    assert_rounds(rounds, n)
    pairs = [p for rnd in rounds for p in rnd]
    assert len(pairs) == len(set(pairs))  # no pair measured twice
    ring = {tuple(sorted((i, (i + 1) % n))) for i in range(n)}
    assert ring <= set(pairs)
    # ring + k matchings: at most 3 + 2 rounds, whatever n; about n + 2 * n/2 pairs
    assert len(rounds) <= 5
    assert n <= len(pairs) <= n + 2 * (n // 2)
    # every node is in at least two pairs (its ring neighbours), so node and link can be told apart
    degree = [0] * n
    for i, j in pairs:
        degree[i] += 1
        degree[j] += 1
    assert min(degree) >= 2


def test_schedule_is_the_same_for_the_same_seed_and_differs_with_another():
    assert pair_schedule(64, 2, "a") == pair_schedule(64, 2, "a")
    assert pair_schedule(64, 2, "a") != pair_schedule(64, 2, "b")
    assert random_matchings(10, 3, "s") == random_matchings(10, 3, "s")


def test_every_pair_on_request_is_the_circle_method():
    assert pair_schedule(6, every_pair=True) == circle_rounds(6)


def test_repair_pairs_each_suspect_with_good_nodes_it_has_not_met():
    met = [(0, 1), (1, 2), (2, 3), (0, 3)]
    rounds = repair_rounds([1], [0, 2, 3, 4, 5], met, per_suspect=2, seed="x")
    assert_rounds(rounds, 6)
    pairs = [p for rnd in rounds for p in rnd]
    assert len(pairs) == 2 and all(1 in p for p in pairs)
    assert not set(pairs) & {(0, 1), (1, 2)}  # not the partners it already had
    # two suspects that need the same good node go into different rounds
    rounds = repair_rounds([0, 1], [2], [], per_suspect=1)
    assert rounds == [[(0, 2)], [(1, 2)]]
    assert repair_rounds([0], [], []) == []


def test_bad_arguments_are_refused_naming_the_value():
    with pytest.raises(ValueError, match="n=0"):
        pair_schedule(0)
    with pytest.raises(ValueError, match="k=-1"):
        random_matchings(4, -1)
    with pytest.raises(ValueError, match="both suspect and good"):
        repair_rounds([1], [1, 2], [])
    with pytest.raises(ValueError, match="per_suspect=0"):
        repair_rounds([1], [2], [], per_suspect=0)


def test_partner():
    assert partner([(0, 3), (1, 2)], 2) == 1 and partner([(0, 3)], 3) == 0 and partner([(0, 3)], 1) is None
