"""Balanced plans: the cuts that minimise the most expensive stage.

Pure functions over a cost list and a set of legal boundaries (no export). A plan of
K stages (``S·V`` chunks for an interleaved schedule) is K-1 strictly increasing
cuts in 0..L, each a boundary the map proves legal; stage i holds layers
``[cut_i, cut_{i+1})``, the first stage also the input modules (``first``) and the
last the output modules (``last``). Its cost is the sum over what it holds.

The search is exact: the linear-partition dynamic programme over boundaries,
``best[k][c]`` = the least bottleneck of the first k stages with the k-th cut at c,
``best[k][c] = min over legal c' < c of max(best[k-1][c'], cost(c'..c))`` with prefix
sums; O(K·L²) time and O(K·L) space for K stages and L layers (94 layers, 64 chunks:
about 0.6 M steps). Ties are broken deterministically: the smallest last cut, then
for each cut the cut before it that gives the least bottleneck so far (the smallest
of those).

>>> plan = balance([1, 1, 1, 1], 2, legal={0, 1, 3, 4})
>>> plan.cuts, plan.stage_costs, plan.bottleneck
((1,), [1, 3], 3)
>>> balance([1, 1, 1, 1], 2).cuts  # every boundary legal
(2,)
>>> balance([1, 1], 4, legal={0, 1, 2}) is None  # 3 cuts, only 3 boundaries: 0, 1, 2 ok
False
>>> balance([1, 1], 4, legal={0, 2}) is None
True
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence
from dataclasses import dataclass

__all__ = ["Balance", "balance", "imbalance", "stage_costs"]


@dataclass(frozen=True)
class Balance:
    """A plan found by :func:`balance`: its cuts, each stage's cost, the bottleneck."""

    cuts: tuple[int, ...]
    stage_costs: list[float]

    @property
    def bottleneck(self) -> float:
        return max(self.stage_costs)

    @property
    def imbalance(self) -> float:
        """The most expensive stage over the mean stage (1.0: perfectly balanced)."""
        return imbalance(self.stage_costs)

    def per_rank(self, ranks: int) -> list[float]:
        """Each pipeline rank's cost when chunk j runs on rank ``j % ranks``."""
        totals = [0.0] * ranks
        for j, cost in enumerate(self.stage_costs):
            totals[j % ranks] += cost
        return totals

    def as_dict(self) -> dict:
        return {
            "cuts": list(self.cuts),
            "stage_costs": self.stage_costs,
            "bottleneck": self.bottleneck,
            "imbalance": round(self.imbalance, 4),
        }


def imbalance(costs: Sequence[float]) -> float:
    """``max / mean`` of ``costs`` (1.0 when all are zero).

    >>> imbalance([1, 3])
    1.5
    """
    mean = sum(costs) / len(costs)
    return max(costs) / mean if mean else 1.0


def stage_costs(
    layers: Sequence[float], cuts: Sequence[int], first: float = 0, last: float = 0
) -> list[float]:
    """The cost of each stage of ``cuts``.

    >>> stage_costs([1, 2, 3], [1], first=10, last=20)
    [11, 25]
    """
    bounds = (0, *cuts, len(layers))
    found = [sum(layers[lo:hi]) for lo, hi in itertools.pairwise(bounds)]
    found[0] += first
    found[-1] += last
    return found


def balance(
    layers: Sequence[float],
    stages: int,
    legal: Collection[int] | None = None,
    first: float = 0,
    last: float = 0,
) -> Balance | None:
    """The plan of ``stages`` stages with the least bottleneck, cutting only at
    ``legal`` boundaries (``None``: all of 0..L); ``None`` when no such plan exists."""
    n = len(layers)
    if stages < 1:
        raise ValueError(f"a plan needs at least one stage, not {stages}")
    allowed = sorted(set(range(n + 1)) if legal is None else {c for c in legal if 0 <= c <= n})
    prefix = [0, *itertools.accumulate(layers)]
    if stages == 1:
        return Balance((), stage_costs(layers, (), first, last))
    best = {c: first + prefix[c] for c in allowed}  # one stage, its end at cut c
    parents: list[dict[int, int]] = []
    for _ in range(stages - 2):
        best, parent = _extend(best, allowed, prefix)
        parents.append(parent)
    ends = {c: max(b, prefix[n] - prefix[c] + last) for c, b in best.items()}
    if not ends:
        return None
    cut = min(ends, key=lambda c: (ends[c], c))
    cuts = [cut]
    for parent in reversed(parents):
        cuts.append(parent[cuts[-1]])
    cuts.reverse()
    return Balance(tuple(cuts), stage_costs(layers, cuts, first, last))


def _extend(
    best: dict[int, float], allowed: list[int], prefix: list[float]
) -> tuple[dict[int, float], dict[int, int]]:
    """One more stage: for each legal cut c the least bottleneck with the last cut at
    c, and the cut before it (the smallest among the ties)."""
    found: dict[int, float] = {}
    parent: dict[int, int] = {}
    for c in allowed:
        for prev in allowed:
            if prev >= c:
                break
            if prev not in best:
                continue
            value = max(best[prev], prefix[c] - prefix[prev])
            if c not in found or value < found[c]:
                found[c], parent[c] = value, prev
    return found, parent
