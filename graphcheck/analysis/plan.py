"""Stage plans: cuts, stages and which stage a position lands on.

``--cuts 4,8`` puts stage boundaries before layer 4 and before layer 8 (three
stages). A cut ranges over 0..L: cut 0 leaves an embedding-only first stage,
cut L a norm+head-only last stage; an empty middle stage is not allowed.

>>> plan = plan_from_cuts([4, 8], 12)
>>> [s.layers for s in plan.stages], plan.stage_of(7), plan.stage_of(-1), plan.stage_of(12)
([(0, 3), (4, 7), (8, 11)], 1, 0, 2)
>>> plan_from_stages(3, 8).cuts
(3, 5)
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from dataclasses import dataclass

from graphcheck.errors import UsageError

__all__ = ["Stage", "StagePlan", "parse_cuts", "plan_from_cuts", "plan_from_stages"]

PLAN_CODE = "GC101 stage-plan-invalid"


@dataclass(frozen=True)
class Stage:
    index: int
    layers: tuple[int, int] | None  # first and last global layer, inclusive
    modules: tuple[str, ...]

    def as_dict(self) -> dict:
        layers = list(self.layers) if self.layers else []
        return {"index": self.index, "layers": layers, "modules": list(self.modules)}


@dataclass(frozen=True)
class StagePlan:
    cuts: tuple[int, ...]
    num_layers: int

    @property
    def num_stages(self) -> int:
        return len(self.cuts) + 1

    def stage_of(self, position: int) -> int:
        """Stage that runs layer ``position`` (-1: input modules, L: output modules)."""
        return bisect_right(self.cuts, position)

    @property
    def stages(self) -> list[Stage]:
        bounds = (0, *self.cuts, self.num_layers)
        return [
            Stage(i, (lo, hi - 1) if hi > lo else None, ())
            for i, (lo, hi) in enumerate(itertools.pairwise(bounds))
        ]

    def with_modules(self, inputs: tuple[str, ...], outputs: tuple[str, ...]) -> list[Stage]:
        last = self.num_stages - 1
        return [
            Stage(
                s.index,
                s.layers,
                (inputs if s.index == 0 else ()) + (outputs if s.index == last else ()),
            )
            for s in self.stages
        ]


def parse_cuts(text: str) -> list[int]:
    """``"4,8"`` -> ``[4, 8]``; raises :class:`UsageError` on anything else."""
    try:
        return [int(part) for part in text.split(",") if part.strip()] or _empty()
    except ValueError:
        raise UsageError(
            f"{PLAN_CODE}: --cuts {text!r} is not a comma-separated list of layer indices"
        ) from None


def _empty() -> list[int]:
    raise ValueError


def plan_from_cuts(cuts: list[int], num_layers: int) -> StagePlan:
    """Validate ``cuts`` against ``num_layers``; raises :class:`UsageError` (GC101)."""
    for cut in cuts:
        if not 0 <= cut <= num_layers:
            raise UsageError(f"{PLAN_CODE}: cut {cut} is out of range 0..{num_layers}")
    for a, b in itertools.pairwise(cuts):
        if b <= a:
            raise UsageError(
                f"{PLAN_CODE}: cuts must strictly increase "
                f"({a} then {b} leaves an empty middle stage)"
            )
    return StagePlan(tuple(cuts), num_layers)


def plan_from_stages(stages: int, num_layers: int) -> StagePlan:
    """An even split of ``num_layers`` into ``stages`` stages."""
    if not 1 <= stages <= num_layers:
        raise UsageError(f"{PLAN_CODE}: --stages {stages} must be between 1 and {num_layers}")
    return StagePlan(tuple(round(i * num_layers / stages) for i in range(1, stages)), num_layers)
