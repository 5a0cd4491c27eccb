"""Run the rules over an analysed program and its cuts.

A :class:`Context` is what every rule reads: the program, the analysed cuts,
the stage plan (``None`` for ``graphcheck map``, where every boundary is judged
as the only cut) and the options. :func:`check` runs every rule and returns
the diagnostics, sorted by cut then code; a diagnostic's severity is its rule's
``SEVERITY`` and its ``layer`` the decoder layer its node runs in.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch.fx

from graphcheck.analysis.dataflow import CutAnalysis
from graphcheck.analysis.lengths import Coverage
from graphcheck.analysis.program import Program
from graphcheck.analysis.regions import RegionKind
from graphcheck.analysis.residual import Wire, classify_wire
from graphcheck.diagnostics import Diagnostic
from graphcheck.planning.plan import StagePlan
from graphcheck.rules import RULES

__all__ = ["DEFAULT_ALLOW_FP32", "Context", "check"]

DEFAULT_ALLOW_FP32 = ("*.A_log", "*.dt_bias")


@dataclass
class Context:
    program: Program
    cuts: list[CutAnalysis]
    plan: StagePlan | None = None
    allow_fp32: tuple[str, ...] = DEFAULT_ALLOW_FP32
    stages: list | None = None  # StagePrograms, with --stage-builder
    mismatches: list = field(default_factory=list)  # their differences from the uncut program
    wires: dict[int, Wire] = field(default_factory=dict)
    hf_spec: bool = False  # the model is an hf: spec: fixes may name --set KEY=VALUE
    lengths: Coverage | None = None  # the ranges of T the model's programs hold for

    def wire(self, cut: CutAnalysis) -> Wire:
        if cut.position not in self.wires:
            self.wires[cut.position] = classify_wire(self.program, cut)
        return self.wires[cut.position]

    def right_stage(self, cut: CutAnalysis) -> int | None:
        """The stage that receives what crosses ``cut``."""
        return self.plan.stage_of(cut.position) if self.plan else None

    def is_first(self, cut: CutAnalysis) -> bool:
        return self.plan is None or cut.position == self.plan.cuts[0]

    def is_last(self, cut: CutAnalysis) -> bool:
        return self.plan is None or cut.position == self.plan.cuts[-1]

    def stage_of(self, node: torch.fx.Node) -> int | None:
        """The stage a flow node runs on under the plan (free glue as the proof placed it):
        the number of plan cuts it runs to the right of."""
        if self.plan is None or node not in self.program.interval:
            return None
        return sum(not cut.on_left(self.program, node) for cut in self.cuts)


def check(ctx: Context) -> list[Diagnostic]:
    """Every rule's findings, each with its rule's ``SEVERITY`` and its node's layer."""
    layers = _layers(ctx.program)
    found: list[Diagnostic] = []
    for rule in RULES:
        for d in rule.check(ctx):
            layer = d.layer if d.layer is not None else layers.get(d.node)
            found.append(replace(d, severity=rule.SEVERITY, layer=layer))
    return sorted(found, key=lambda d: (d.cut if d.cut is not None else -2, d.code))


def _layers(program: Program) -> dict[str, int]:
    """The decoder layer each node of a layer runs in, by node name."""
    return {
        node.name: region.layer
        for node, region in program.region.items()
        if region.kind == RegionKind.LAYER and region.layer is not None
    }
