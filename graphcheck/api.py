"""The Python API, mirroring the command line.

>>> report = verify("fixtures/reference.py:reference", cuts=[4])
>>> report.verdict, report.codes, [c.role for c in report.cut(4).crossing][:2]
('pass', set(), ['activation', 'replicated'])
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from torch import nn

from graphcheck.checker import DEFAULT_ALLOW_FP32, Context, check
from graphcheck.dataflow import analyse_cuts
from graphcheck.export import export_model
from graphcheck.layout import detect_layout
from graphcheck.load import build_fake, fake_mode, resolve_factory
from graphcheck.partition import StagePlan, plan_from_cuts, plan_from_stages
from graphcheck.program import Program, analyse
from graphcheck.report import CutReport, Report

__all__ = ["ModelArg", "cut_map", "verify"]

ModelArg = str | Callable[[], nn.Module] | nn.Module


def verify(
    model: ModelArg,
    cuts: Sequence[int] | None = None,
    stages: int | None = None,
    *,
    layers: str | None = None,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    strict: bool = False,
    allow_fp32: Sequence[str] = DEFAULT_ALLOW_FP32,
) -> Report:
    """Prove every cut of a stage plan (``cuts`` or an even split into ``stages``).

    Raises :class:`graphcheck.errors.GraphcheckError` when it cannot verify.
    """
    start = time.perf_counter()
    session = _Session(model, layers, inputs, outputs)

    def plan_for(num_layers: int) -> StagePlan:
        if (cuts is None) == (stages is None):
            from graphcheck.errors import UsageError

            raise UsageError("give either cuts or stages")
        if cuts is not None:
            return plan_from_cuts(list(cuts), num_layers)
        return plan_from_stages(stages, num_layers)

    plan = plan_for(session.layout.num_layers)
    program = session.export(strict)
    analysed = analyse_cuts(program, list(plan.cuts))
    ctx = Context(program, analysed, plan, tuple(allow_fp32))
    report = _report(session.name, program, ctx, "verify", start)
    report.stages = plan.with_modules(program.layout.input_fqns, program.layout.output_fqns)
    return report


def cut_map(
    model: ModelArg,
    *,
    layers: str | None = None,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    strict: bool = False,
    allow_fp32: Sequence[str] = DEFAULT_ALLOW_FP32,
) -> Report:
    """Judge every boundary 0..L as the only cut, from one export and one sweep."""
    start = time.perf_counter()
    session = _Session(model, layers, inputs, outputs)
    program = session.export(strict)
    analysed = analyse_cuts(program, list(range(program.num_layers + 1)))
    ctx = Context(program, analysed, None, tuple(allow_fp32))
    return _report(session.name, program, ctx, "map", start)


class _Session:
    """A model built on fake weights with its layout, ready to export."""

    def __init__(self, model: ModelArg, layers, inputs, outputs) -> None:
        self.mode = fake_mode()
        if isinstance(model, str):
            self.name = model
            self.module = build_fake(resolve_factory(model), self.mode)
        elif isinstance(model, nn.Module):
            self.name = type(model).__name__
            self.module = model.eval()
        else:
            self.name = getattr(model, "__qualname__", repr(model))
            self.module = build_fake(model, self.mode)
        self.layout = detect_layout(
            self.module,
            layers,
            tuple(inputs) if inputs else None,
            tuple(outputs) if outputs else None,
        )

    def export(self, strict: bool) -> Program:
        return analyse(export_model(self.module, self.mode, strict), self.layout)


def _report(name: str, program: Program, ctx: Context, mode: str, start: float) -> Report:
    diagnostics = check(ctx)
    cuts = []
    for cut in ctx.cuts:
        codes = [d.code for d in diagnostics if d.cut == cut.position]
        cuts.append(CutReport(cut.position, cut.crossing, codes))
    return Report(
        model=name,
        num_layers=program.num_layers,
        mode=mode,
        cuts=cuts,
        diagnostics=diagnostics,
        export_seconds=program.exported.seconds,
        seconds=time.perf_counter() - start,
        nodes=len(program.graph.nodes),
    )
