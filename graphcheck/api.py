"""The Python API, mirroring the command line.

>>> report = verify("fixtures/reference.py:reference", cuts=[4])
>>> report.verdict, report.codes, [c.role for c in report.cut(4).crossing][:2]
('pass', set(), ['activation', 'replicated'])

Model options, shared by :func:`verify` and :func:`cut_map` (the command-line
flags of the same names):

* ``layers``, ``inputs``, ``outputs`` - the layout, overriding
  ``get_pp_module_config()`` and auto-detection;
* ``strict`` - export with ``strict=True``;
* ``allow_fp32`` - globs of parameters allowed to stay fp32;
* ``settings`` - config overrides for ``hf:`` models (``--set``);
* ``kernels`` - a kernels file of stand-ins (``--kernels``);
* ``stand_ins`` - ``False`` turns the built-in kernel stand-ins off (``--no-stand-ins``).

:func:`verify` also takes ``stage_builder`` (``--stage-builder``): a builtin name
(``keep-index``, ``moduledict``, ``rebuild``), ``file.py:function`` or a callable.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from torch import nn

from graphcheck import fresh
from graphcheck.checker import DEFAULT_ALLOW_FP32, Context, check
from graphcheck.dataflow import analyse_cuts
from graphcheck.equivalence import StageRequest, build_stage, build_stage_fresh, compare_stage
from graphcheck.errors import AnalysisError, ExportError, UsageError
from graphcheck.export import export_model
from graphcheck.fingerprint import glue_labels
from graphcheck.fresh import run_fresh_many
from graphcheck.hf import hf_factory, is_hf_spec
from graphcheck.kernels import BUILTIN, load_kernels, patched
from graphcheck.layout import detect_layout
from graphcheck.load import build_fake, fake_mode, resolve_factory
from graphcheck.partition import StagePlan, plan_from_cuts, plan_from_stages
from graphcheck.program import Program, analyse
from graphcheck.report import CutReport, Report
from graphcheck.stages import BUILTINS, StageBuilder, resolve_builder

__all__ = ["verify", "cut_map", "Explorer", "ModelArg"]

ModelArg = str | Callable[[], nn.Module] | nn.Module


def verify(
    model: ModelArg,
    cuts: Sequence[int] | None = None,
    stages: int | None = None,
    *,
    allow_fp32: Sequence[str] = DEFAULT_ALLOW_FP32,
    stage_builder: str | StageBuilder | None = None,
    **options,
) -> Report:
    """Prove every cut of a stage plan (``cuts`` or an even split into ``stages``).

    With ``stage_builder`` (a builtin name, ``file.py:function`` or a callable) also
    prove that each stage's own program equals its slice of the uncut program.
    Raises :class:`graphcheck.errors.GraphcheckError` when it cannot verify.
    """
    explorer = Explorer(model, allow_fp32=allow_fp32, **options)
    return explorer.verify(cuts, stages, stage_builder=stage_builder)


def cut_map(
    model: ModelArg, *, allow_fp32: Sequence[str] = DEFAULT_ALLOW_FP32, **options
) -> Report:
    """Judge every boundary 0..L as the only cut, from one export and one sweep."""
    return Explorer(model, allow_fp32=allow_fp32, **options).map()


class Explorer:
    """Export once, then judge as many stage plans as you like.

    The entry point of a cut-explorer notebook: the model is built and exported on
    first use; each :meth:`verify` or :meth:`map` reuses that export.

    >>> explorer = Explorer("fixtures/reference.py:reference")
    >>> [explorer.verify([k]).verdict for k in (2, 4)], explorer.map().legal_cuts()[:3]
    (['pass', 'pass'], [0, 1, 2])
    """

    def __init__(
        self, model: ModelArg, *, allow_fp32: Sequence[str] = DEFAULT_ALLOW_FP32, **options
    ) -> None:
        start = time.perf_counter()
        self.session = Session(model, **options)
        self.allow_fp32 = tuple(allow_fp32)
        self._program: Program | None = None
        self._setup = time.perf_counter() - start

    @property
    def num_layers(self) -> int:
        return self.session.layout.num_layers

    @property
    def program(self) -> Program:
        """The analysed uncut program (exported on first use)."""
        if self._program is None:
            self._program = self.session.export()
        return self._program

    def verify(
        self,
        cuts: Sequence[int] | None = None,
        stages: int | None = None,
        *,
        stage_builder: str | StageBuilder | None = None,
    ) -> Report:
        """Prove one stage plan; see :func:`verify`."""
        start = time.perf_counter() - self._take_setup()
        plan = _plan(cuts, stages, self.num_layers)
        if isinstance(stage_builder, str) and self.session.spec is not None:
            fresh.start()  # stage processes: preload while the uncut model exports
        program = self.program
        ctx = Context(
            program, analyse_cuts(program, list(plan.cuts), plan=True), plan, self.allow_fp32
        )
        if stage_builder is not None:
            ctx.stages, ctx.mismatches = self.session.stage_programs(stage_builder, program, ctx)
        report = _report(self.session.name, program, ctx, "verify", start)
        report.stage_programs = [_stage_summary(s) for s in ctx.stages or ()]
        report.stages = plan.with_modules(program.layout.input_fqns, program.layout.output_fqns)
        return report

    def map(self) -> Report:
        """Judge every boundary 0..L as the only cut; see :func:`cut_map`."""
        start = time.perf_counter() - self._take_setup()
        program = self.program
        positions = list(range(program.num_layers + 1))
        ctx = Context(program, analyse_cuts(program, positions), None, self.allow_fp32)
        return _report(self.session.name, program, ctx, "map", start)

    def _take_setup(self) -> float:
        """Model build time not yet charged to a report (charged to the first one)."""
        setup, self._setup = self._setup, 0.0
        return setup


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
        settings: Mapping[str, object] | None = None,
        kernels: str | None = None,
        stand_ins: bool = True,
    ) -> None:
        self.mode = fake_mode()
        self.strict = strict
        self.settings = dict(settings or {})
        self.spec = model if isinstance(model, str) else None  # rebuildable in a fresh process
        self.kernels, self.use_stand_ins = kernels, stand_ins
        self.stand_ins = (
            *(BUILTIN if stand_ins else ()),
            *(load_kernels(kernels) if kernels else ()),
        )
        self.name, self.module = self._build(model)
        self.layout = detect_layout(
            self.module,
            layers,
            tuple(inputs) if inputs else None,
            tuple(outputs) if outputs else None,
        )

    def _build(self, model: ModelArg) -> tuple[str, nn.Module]:
        if is_hf_spec(model):
            return model, build_fake(hf_factory(model, self.settings), self.mode)
        if self.settings:
            raise UsageError("--set applies to hf: models only")
        if isinstance(model, str):
            return model, build_fake(resolve_factory(model), self.mode)
        if isinstance(model, nn.Module):
            return type(model).__name__, model.eval()
        return getattr(model, "__qualname__", repr(model)), build_fake(model, self.mode)

    def export(self) -> Program:
        with patched(self.module, self.stand_ins):
            exported = export_model(self.module, self.mode, self.strict)
        return analyse(exported, self.layout)

    def stage_programs(self, builder, program: Program, ctx: Context):
        """Build, export and compare every stage of ``ctx.plan``.

        A model given by its spec and a builder given by name are built as ranks build
        them: each stage in a fresh process (:func:`graphcheck.equivalence.build_stage_fresh`).
        Otherwise the stages are built in this process (``isolated`` is false)."""
        plan = ctx.plan
        widths = [0, *(_hidden_size(ctx, cut) for cut in plan.cuts), 0]
        bounds = (0, *plan.cuts, plan.num_layers)
        spans = [list(range(lo, hi)) for lo, hi in itertools.pairwise(bounds)]
        name = builder if isinstance(builder, str) else None
        if name is not None and name not in BUILTINS and ":" not in name:
            resolve_builder(name, self.layout)  # the one-line error for an unknown name
        with _builtin_hint(name):
            if name is not None and self.spec is not None:
                stages = self._fresh_stages(name, spans, widths)
            else:
                stages = self._local_stages(builder, name, spans, widths)
        mismatches = []
        for stage in stages:
            last = stage.index == plan.num_stages - 1
            nodes = [n for n in program.interval if ctx.stage_of(n) == stage.index]
            glue = glue_labels(program, nodes)
            mismatches += compare_stage(program, stage, last, widths[stage.index + 1], glue)
        return stages, mismatches

    def _fresh_stages(self, builder: str, spans: list[list[int]], widths: list[int]):
        """Each stage built and exported in its own fresh process."""
        requests = [
            StageRequest(
                _portable(self.spec),
                _portable(builder),
                self.layout,
                index,
                tuple(layers),
                len(spans),
                widths[index],
                self.strict,
                tuple(self.settings.items()),
                str(Path(self.kernels).resolve()) if self.kernels else None,
                self.use_stand_ins,
            )
            for index, layers in enumerate(spans)
        ]
        return run_fresh_many(build_stage_fresh, [(r,) for r in requests])

    def _local_stages(self, builder, name: str | None, spans, widths):
        """Each stage built in this process, after the uncut model (not isolated)."""
        if isinstance(builder, str):
            builder = resolve_builder(builder, self.layout)
        stages = []
        for index, layers in enumerate(spans):
            with patched(self.module, self.stand_ins):
                stages.append(
                    build_stage(
                        self.module,
                        self.layout,
                        builder,
                        self.mode,
                        index,
                        layers,
                        len(spans),
                        widths[index],
                        self.strict,
                        name,
                    )
                )
        return stages


def _portable(spec: str) -> str:
    """``spec`` with a file path made absolute, so another process finds it."""
    if is_hf_spec(spec):
        rest = spec[len("hf:") :]
        return f"hf:{Path(rest).resolve()}" if Path(rest).exists() else spec
    target, sep, name = spec.rpartition(":")
    if sep and target.endswith(".py") and Path(target).is_file():
        return f"{Path(target).resolve()}:{name}"
    return spec


@contextlib.contextmanager
def _builtin_hint(name: str | None):
    """Say what the builtin stage builders expect when a stage fails to export."""
    try:
        yield
    except ExportError as err:
        if name not in BUILTINS:
            raise
        raise ExportError(
            f"{err}; the builtin stage builders ({name}) need a pipeline-aware "
            "model (a stage sets the modules it does not own to None and takes hidden states "
            "as input_ids): pass --stage-builder file.py:function"
        ) from err


def _stage_summary(stage) -> dict:
    return {
        "index": stage.index,
        "layers": stage.layers,
        "renumbered": stage.renumbered,
        "export_seconds": round(stage.seconds, 3),
        "nodes": stage.nodes,
        "isolated": stage.isolated,
    }


def _hidden_size(ctx: Context, position: int) -> int:
    """Width of the residual crossing ``position`` in the uncut program."""
    cut = next(c for c in ctx.cuts if c.position == position)
    wire = ctx.wire(cut)
    node = wire.boundary or (cut.activations[0] if cut.activations else None)
    val = node.meta.get("val") if node is not None else None
    if val is None or not isinstance(val.shape[-1], int):
        raise AnalysisError(f"cannot tell the width of the residual at cut {position}")
    return val.shape[-1]


def _report(name: str, program: Program, ctx: Context, mode: str, start: float) -> Report:
    diagnostics = check(ctx)
    cuts = []
    for cut in ctx.cuts:
        codes = [d.code for d in diagnostics if d.cut == cut.position and d.severity == "error"]
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
