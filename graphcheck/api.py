"""The Python API, mirroring the command line.

>>> report = verify("fixtures/reference.py:reference", cuts=[4])
>>> report.verdict, report.codes, [c.role for c in report.cut(4).crossing][:2]
('pass', set(), ['activation', 'replicated'])

Model options, shared by :func:`verify` and :func:`cut_map` (the command-line
flags of the same names):

* ``layers``, ``inputs``, ``outputs`` - the layout, overriding
  ``get_pp_module_config()`` and auto-detection;
* ``strict`` - export with ``strict=True``;
* ``allow_fp32`` - globs of parameters allowed to stay fp32.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from torch import nn

from graphcheck.checker import DEFAULT_ALLOW_FP32, Context, check
from graphcheck.dataflow import analyse_cuts
from graphcheck.errors import UsageError
from graphcheck.export import export_model
from graphcheck.layout import detect_layout
from graphcheck.load import build_fake, fake_mode, resolve_factory
from graphcheck.partition import StagePlan, plan_from_cuts, plan_from_stages
from graphcheck.program import Program, analyse
from graphcheck.report import CutReport, Report

__all__ = ["verify", "cut_map", "ModelArg"]

ModelArg = str | Callable[[], nn.Module] | nn.Module


def verify(
    model: ModelArg,
    cuts: Sequence[int] | None = None,
    stages: int | None = None,
    *,
    allow_fp32: Sequence[str] = DEFAULT_ALLOW_FP32,
    **options,
) -> Report:
    """Prove every cut of a stage plan (``cuts`` or an even split into ``stages``).

    Raises :class:`graphcheck.errors.GraphcheckError` when it cannot verify.
    """
    start = time.perf_counter()
    session = Session(model, **options)
    plan = _plan(cuts, stages, session.layout.num_layers)
    program = session.export()
    ctx = Context(program, analyse_cuts(program, list(plan.cuts)), plan, tuple(allow_fp32))
    report = _report(session.name, program, ctx, "verify", start)
    report.stages = plan.with_modules(program.layout.input_fqns, program.layout.output_fqns)
    return report


def cut_map(
    model: ModelArg, *, allow_fp32: Sequence[str] = DEFAULT_ALLOW_FP32, **options
) -> Report:
    """Judge every boundary 0..L as the only cut, from one export and one sweep."""
    start = time.perf_counter()
    session = Session(model, **options)
    program = session.export()
    positions = list(range(program.num_layers + 1))
    ctx = Context(program, analyse_cuts(program, positions), None, tuple(allow_fp32))
    return _report(session.name, program, ctx, "map", start)


def _plan(cuts, stages, num_layers: int) -> StagePlan:
    if (cuts is None) == (stages is None):
        raise UsageError("give either cuts or stages")
    if cuts is not None:
        return plan_from_cuts(list(cuts), num_layers)
    return plan_from_stages(stages, num_layers)


class Session:
    """A model built on fake weights with its layout, ready to export."""

    def __init__(
        self,
        model: ModelArg,
        *,
        layers: str | None = None,
        inputs: Sequence[str] | None = None,
        outputs: Sequence[str] | None = None,
        strict: bool = False,
    ) -> None:
        self.mode = fake_mode()
        self.strict = strict
        self.name, self.module = self._build(model)
        self.layout = detect_layout(
            self.module,
            layers,
            tuple(inputs) if inputs else None,
            tuple(outputs) if outputs else None,
        )

    def _build(self, model: ModelArg) -> tuple[str, nn.Module]:
        if isinstance(model, str):
            return model, build_fake(resolve_factory(model), self.mode)
        if isinstance(model, nn.Module):
            return type(model).__name__, model.eval()
        return getattr(model, "__qualname__", repr(model)), build_fake(model, self.mode)

    def export(self) -> Program:
        return analyse(export_model(self.module, self.mode, self.strict), self.layout)


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
