"""The Python API, mirroring the command line.

>>> report = verify("fixtures/reference.py:reference", cuts=[4])
>>> str(report.verdict), report.codes, [str(c.role) for c in report.cut(4).crossing][:2]
('pass', set(), ['activation', 'replicated'])

Model options, shared by :func:`verify` and :func:`cut_map` (the command-line
flags of the same names):

* ``layers``, ``inputs``, ``outputs`` - the layout, overriding
  ``get_pp_module_config()`` and auto-detection;
* ``strict`` - export with ``strict=True``;
* ``allow_fp32`` - globs of parameters allowed to stay fp32, added to the default
  allowlist (``*.A_log``, ``*.dt_bias``);
* ``settings`` - config overrides for ``hf:`` models (``--set``);
* ``kernels`` - a kernels file of stand-ins (``--kernels``);
* ``stand_ins`` - ``False`` turns the built-in kernel stand-ins off (``--no-stand-ins``);
* ``docs``, ``tokens``, ``token_multiple`` - the example batch the export traces
  (``--docs``, ``--tokens``, ``--token-multiple``): ``docs`` a count of documents or
  their lengths, ``tokens`` T, and T exported as a multiple of ``token_multiple``;
* ``inputs_from`` - the input convention the model's forward follows
  (``"transformers"``, ``"torchtitan"``, or one registered with
  :func:`graphcheck.model.conventions.register`; default: detected from its
  signature) (``--inputs-from``);
* ``program_mode`` - ``"train"`` (the default: the program pipeline-parallel training
  runs, ``model.train()``) or ``"eval"`` (``model.eval()``) (``--mode``); the report
  names it (``report.program_mode``);
* ``dtype`` - ``"bfloat16"`` (the default: the factory runs with bf16 as the default
  dtype) or ``"float32"`` (the model's own dtype, then cast to bf16 but for its fp32
  carve-outs, which GC501 allows: :mod:`graphcheck.model.dtype`) (``--dtype``);
* ``select``, ``ignore`` - codes or prefixes (``"GC5"``) of the findings to report or
  to keep out of the verdict, ruff style (``--select``, ``--ignore``); ignored findings
  and the model's ``# graphcheck: ignore[CODE]`` comments are listed in
  ``report.ignored`` (:mod:`graphcheck.rules.suppress`);
* ``selectors_from`` - where ``select`` and ``ignore`` come from, for the report to say
  what ignored a finding: ``None`` (the default: the flags, ``by --ignore``) or the
  configuration table's name (``"[tool.graphcheck]"``: ``by [tool.graphcheck] ignore``).

:func:`verify` and :func:`plan` also prove each stage's own program, built the way a
rank builds it, against its slice of the uncut program (``report.stage_proof`` says
whether they were proven, by which builder, and why not).  ``stage_builder``
(``--stage-builder``) names the builder: a builtin name (``keep-index``,
``moduledict``, ``rebuild``, ``hf-slice``, ``hf-rebuild``), ``file.py:function`` or a
callable; ``None`` (the default) is ``hf-slice`` for ``hf:`` models and ``keep-index``
for the rest, and a model whose keep-index stages do not export (not pipeline-aware)
gets its cuts proven and its stage programs reported not proven; ``"none"`` proves no
stage program. ``require_stage_programs=True`` (``--require-stage-programs``) fails the
verdict when they are not proven.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import time
from collections.abc import Sequence

from graphcheck import phases as progress
from graphcheck.analysis.agreement import first_difference
from graphcheck.analysis.backward import BackwardProof, prove_backward
from graphcheck.analysis.cost import DOC_LENGTH, Costs
from graphcheck.analysis.cost import costs as layer_costs
from graphcheck.analysis.dataflow import CutAnalysis, analyse_cuts
from graphcheck.analysis.export import autograd_functions, export_model
from graphcheck.analysis.kinds import LayerKind, layer_kinds
from graphcheck.analysis.lengths import (
    MAX_PROGRAMS,
    MAX_TRACED,
    Coverage,
    example_tokens,
    first_gap,
)
from graphcheck.analysis.program import Program, analyse, tokens_of
from graphcheck.checker import DEFAULT_ALLOW_FP32, Context, check
from graphcheck.diagnostics import Diagnostic, Verdict
from graphcheck.errors import AnalysisError, GraphcheckError, UsageError, one_line
from graphcheck.kernels import patched
from graphcheck.kernels.attention import attention_record
from graphcheck.kernels.functions import validate_function
from graphcheck.model.boundary import WireShape
from graphcheck.model.dtype import BuildDtype
from graphcheck.model.hf import is_hf_spec, is_transformers_model
from graphcheck.model.modes import ProgramMode
from graphcheck.model.session import ModelArg, Session
from graphcheck.planning.balance import balance
from graphcheck.planning.plan import StagePlan
from graphcheck.planning.syntax import (
    cuts_from_fqns,
    parse_layout,
    plan_from_cuts,
    plan_from_stages,
)
from graphcheck.report import PlanReport, Report, StageProof
from graphcheck.rules.suppress import Suppression, model_files
from graphcheck.stages import fresh
from graphcheck.stages.builders import (
    NONE,
    StageBuilder,
    builder_name,
    check_builder,
    default_builder,
)
from graphcheck.stages.programs import stage_programs
from graphcheck.varlen import example_batch

__all__ = ["Explorer", "ModelArg", "cut_map", "explore", "plan", "verify"]


def verify(
    model: ModelArg,
    cuts: Sequence[int] | None = None,
    stages: int | None = None,
    *,
    allow_fp32: Sequence[str] = (),
    stage_builder: str | StageBuilder | None = None,
    require_stage_programs: bool = False,
    pipeline_layout: str | None = None,
    fqns_per_stage: Sequence[Sequence[str]] | None = None,
    **options,
) -> Report:
    """Prove every cut of a stage plan (``cuts`` or an even split into ``stages``) and
    that each stage's own program equals its slice of the uncut program.

    ``stage_builder`` (a builtin name, ``file.py:function`` or a callable) builds the
    stages; ``None``: the default builder when one can be had (see the module doc),
    ``"none"``: no stage programs. ``require_stage_programs`` fails the verdict when
    they are not proven.
    ``allow_fp32`` adds globs to the default allowlist (``*.A_log``, ``*.dt_bias``),
    as ``--allow-fp32`` does. Raises :class:`graphcheck.errors.GraphcheckError` when
    it cannot verify. ``pipeline_layout`` (a Megatron-style layout string, ``"E|t*4|t*4|L"``)
    or ``fqns_per_stage`` (torchtitan-style module FQNs per stage) give the plan instead
    (``--layout``, ``--fqns-per-stage``).
    """
    check_builder(stage_builder)  # a name that does not resolve: before the model is built
    explorer = Explorer(model, allow_fp32=allow_fp32, **options)
    cuts = explorer.written_cuts(cuts, stages, pipeline_layout, fqns_per_stage)
    return explorer.verify(
        cuts, stages, stage_builder=stage_builder, require_stage_programs=require_stage_programs
    )


def cut_map(
    model: ModelArg, *, allow_fp32: Sequence[str] = (), doc_length: int = DOC_LENGTH, **options
) -> Report:
    """Judge every boundary 0..L as the only cut, from one export and one sweep; the
    report's ``costs`` is the cost model (attention at documents of ``doc_length``)."""
    return Explorer(model, allow_fp32=allow_fp32, **options).map(doc_length)


def plan(
    model: ModelArg,
    stages: int,
    *,
    virtual: int = 1,
    cost: str = "flops",
    doc_length: int = DOC_LENGTH,
    allow_fp32: Sequence[str] = (),
    stage_builder: str | StageBuilder | None = None,
    require_stage_programs: bool = False,
    **options,
) -> PlanReport:
    """The cuts that minimise the most expensive of ``stages`` stages (``stages·virtual``
    chunks for an interleaved schedule), cutting only where the map proves a boundary
    legal, and their proof (a :func:`verify` of those cuts, on the same export, with
    ``stage_builder`` and ``require_stage_programs``).

    ``cost`` is ``"flops"`` (matmul and attention FLOPs per token, attention at
    documents of ``doc_length`` tokens) or ``"params"`` (parameter bytes); the search is
    :func:`graphcheck.planning.balance.balance`. ``report.plan`` is ``None`` (exit status
    1) when no legal plan exists; ``report.blocking`` names the illegal boundaries.
    """
    check_builder(stage_builder)  # a name that does not resolve: before the model is built
    explorer = Explorer(model, allow_fp32=allow_fp32, **options)
    return explorer.balanced(
        stages, virtual=virtual, cost=cost, doc_length=doc_length, stage_builder=stage_builder,
        require_stage_programs=require_stage_programs,
    )  # fmt: skip


def explore(
    model: ModelArg | Explorer,
    stages: int = 4,
    *,
    cost: str = "flops",
    doc_length: int = DOC_LENGTH,
    allow_fp32: Sequence[str] = (),
    **options,
):
    """The cut explorer as a Jupyter widget (anywidget: ``pip install 'graphcheck[notebook]'``):
    every boundary legal or not with its rule codes, each layer's kind and cost, the
    crossing set of a clicked boundary, and the best balanced legal plan of ``stages``
    stages, which clicks edit. ``model`` may be an :class:`Explorer` (its export is
    reused); ``widget.data`` is the view document, the same one ``map --html`` inlines.
    """
    from graphcheck.reporters.view import document
    from graphcheck.reporters.view.widget import widget_class

    widget_class()  # anywidget missing: say so before any export
    if isinstance(model, Explorer):
        explorer = model
    else:
        explorer = Explorer(model, allow_fp32=allow_fp32, **options)
    _chunks(stages, 1, cost, doc_length, explorer.num_layers)
    return widget_class()(data=document(explorer, stages, metric=cost, doc_length=doc_length))


def _chunks(stages: int, virtual: int, cost: str, doc_length: int, num_layers: int) -> int:
    """``stages·virtual``, checked before any export (a usage error otherwise)."""
    if cost not in ("flops", "params"):
        raise UsageError(f"--cost {cost!r}: use flops or params")
    if doc_length < 1:
        raise UsageError(f"--doc-length {doc_length} must be at least 1")
    chunks = stages * virtual
    if stages < 1 or virtual < 1 or chunks > num_layers + 2:
        raise UsageError(
            f"GC101 stage-plan-invalid: --stages {stages} --virtual {virtual} asks for "
            f"{chunks} stages; a {num_layers}-layer model has 1 to {num_layers + 2} (the "
            "embedding and the head may stand alone)"
        )
    return chunks


class Explorer:
    """Export once, then judge as many stage plans as you like.

    The entry point of a cut-explorer notebook: the model is built and exported on
    first use; each :meth:`verify` or :meth:`map` reuses that export, and
    :meth:`context` hands the proof's placement to whoever runs the plan (the gate).

    >>> explorer = Explorer("fixtures/reference.py:reference")
    >>> [str(explorer.verify([k]).verdict) for k in (2, 4)], explorer.map().legal_cuts()[:3]
    (['pass', 'pass'], [0, 1, 2])
    """

    def __init__(
        self,
        model: ModelArg,
        *,
        allow_fp32: Sequence[str] = (),
        select: Sequence[str] | None = None,
        ignore: Sequence[str] | None = None,
        selectors_from: str | None = None,
        **options,
    ) -> None:
        start = time.perf_counter()
        # checked before the model builds
        self.suppression = Suppression.of(select, ignore, selectors_from)
        with progress.phase(progress.Phase.BUILD):
            self.session = Session(model, allow_fp32=allow_fp32, **options)
        self.hf_spec = isinstance(model, str) and is_hf_spec(model)
        declared = self.session.dtype_plan.declared  # the model's carve-outs (--dtype float32)
        self.allow_fp32 = tuple(dict.fromkeys((*DEFAULT_ALLOW_FP32, *allow_fp32, *declared)))
        self._program: Program | None = None
        self.stand_ins: set[str] = set()  # the stand-ins the export called
        self._contexts: dict[tuple[int, ...], Context] = {}
        self._setup = time.perf_counter() - start
        self._parent: Explorer | None = None  # a length case: the explorer it covers for
        self._uncovered: str | None = None  # why the length cases stop short of every T
        self._differs: str | None = None  # where two length cases' programs differ

    @property
    def attention(self) -> dict | None:
        """The attention the proof runs through, for a transformers model (its config's
        attention implementation and the attention nodes of the export), else None."""
        config = getattr(self.session.module, "config", None)
        implementation = getattr(config, "_attn_implementation", None)
        return attention_record(implementation, self.program.graph)

    @property
    def num_layers(self) -> int:
        return self.session.layout.num_layers

    @property
    def program(self) -> Program:
        """The analysed uncut program (exported on first use)."""
        if self._program is None:
            session = self.session
            called = patched(session.module, session.stand_ins, self.stand_ins)
            with progress.phase(progress.Phase.EXPORT), called:
                exported = export_model(
                    session.module,
                    session.mode,
                    session.strict,
                    batch=session.batch,
                    program_mode=session.program_mode,
                    convention=session.convention,
                )
            with progress.phase(progress.Phase.ANALYSE):
                self._program = analyse(exported, session.layout, session.token_local)
            if session.backward:
                self._program.gradients = self._backward(exported)
        return self._program

    def _backward(self, exported) -> BackwardProof:
        """The backward program of ``exported``, proven (``--backward``)."""
        session = self.session
        with progress.phase(progress.Phase.ANALYSE), patched(session.module, session.stand_ins):
            try:
                calls = autograd_functions(
                    session.module, session.mode, session.batch, session.convention
                )
            except GraphcheckError:
                raise
            except Exception as err:
                message = f"the backward program cannot be built: {_first_line(err)}"
                raise AnalysisError(message) from None
            executed = {call.name: validate_function(call) for call in calls}
            return prove_backward(exported, tokens_of(exported), session.token_local, executed)

    def plan(self, cuts: Sequence[int] | None = None, stages: int | None = None) -> StagePlan:
        """The stage plan of ``cuts``, of an even split into ``stages`` or, with neither,
        of the ``pipeline_layer_ranges`` the model declares."""
        ranges = self.session.layout.layer_ranges
        if cuts is None and stages is None and ranges is not None:
            cuts = [start for start, _ in ranges[1:]]
        if (cuts is None) == (stages is None):
            raise UsageError(
                "give either cuts or stages (--cuts or --stages); the model declares no "
                "pipeline_layer_ranges to take the plan from"
            )
        if cuts is not None:
            return plan_from_cuts(list(cuts), self.num_layers)
        return plan_from_stages(stages, self.num_layers)

    def context(self, plan: StagePlan) -> Context:
        """The proof's view of ``plan``: its cuts analysed and every node placed (kept,
        so the gate runs the very placement :meth:`verify` judged)."""
        if plan.cuts not in self._contexts:
            program = self.program
            with progress.phase(progress.Phase.CUTS, len(plan.cuts)) as tick:
                cuts = analyse_cuts(program, list(plan.cuts), plan=True, progress=tick)
            self._contexts[plan.cuts] = Context(
                program, cuts, plan, self.allow_fp32, hf_spec=self.hf_spec,
                lengths=self.coverage,
            )  # fmt: skip
        return self._contexts[plan.cuts]

    @functools.cached_property
    def cases(self) -> list[Explorer]:
        """The programs for the lengths the first one does not hold for, one explorer each
        (:mod:`graphcheck.analysis.lengths`): empty when the first program holds for every
        T, or when T is not one plain symbol of it (a constant, a declared multiple)."""
        span = self.program.exported.span
        if self._parent is not None or span is None or self.session.batch.multiple > 1:
            return []
        spans, found = [span], []
        while len(spans) < MAX_PROGRAMS and (gap := first_gap(spans)) is not None:
            tokens = example_tokens(gap, len(self.session.batch.docs))
            if tokens > MAX_TRACED:
                self._uncovered = f"past the {MAX_TRACED} tokens graphcheck traces a batch of"
                break
            try:  # too few tokens for as many documents, or the model does not run there
                case = self._case(tokens)
                covered = case.program.exported.span
            except Exception as err:  # whatever stops the trace, the gap stays GC403
                self._uncovered = f"traced on T = {tokens}, {_first_line(err)}"
                break
            if covered is None or not covered.contains(tokens):
                self._uncovered = f"traced on T = {tokens}, T is not symbolic"
                break  # the case does not hold where it was traced: the gap stays GC403
            spans.append(covered)
            found.append(case)
            if (difference := self._disagrees(case, covered)) is not None:
                self._differs = difference
                break
        else:
            if len(spans) == MAX_PROGRAMS and first_gap(spans) is not None:
                self._uncovered = f"the code branches on T more than {MAX_PROGRAMS} ways"
        return found

    @property
    def coverage(self) -> Coverage | None:
        """The ranges of T this model's programs hold for, the first program's first."""
        if self._parent is not None:
            return self._parent.coverage
        span = self.program.exported.span
        if span is None:
            return None
        spans = (span, *(c.program.exported.span for c in self.cases))
        examples = tuple(e.session.batch.docs for e in (self, *self.cases))
        return Coverage(spans, uncovered=self._uncovered, examples=examples, differs=self._differs)

    def _disagrees(self, case: Explorer, covered) -> str | None:
        """Where ``case``'s program computes differently from the first program: a
        document's values would then depend on the packed length."""
        difference = first_difference(self.program.graph, case.program.graph)
        if difference is None:
            return None
        first = self.program.exported.span
        return f"the programs for T {first} and T {covered} differ at {difference}"

    def _case(self, tokens: int) -> Explorer:
        """This model traced on ``tokens`` tokens in as many documents: another length
        case, sharing the built model and its options."""
        case = copy.copy(self)
        case.session = copy.copy(self.session)
        case.session.batch = example_batch(len(self.session.batch.docs), tokens)
        case._program, case._contexts, case._setup, case._parent = None, {}, 0.0, self
        for cached in ("boundaries", "cases"):
            case.__dict__.pop(cached, None)
        return case

    def verify(
        self,
        cuts: Sequence[int] | None = None,
        stages: int | None = None,
        *,
        stage_builder: str | StageBuilder | None = None,
        require_stage_programs: bool = False,
    ) -> Report:
        """Prove one stage plan and its stage programs; see :func:`verify`."""
        start = time.perf_counter() - self._take_setup()
        plan = self.plan(cuts, stages)
        check_builder(stage_builder)
        builder, unproven = self._stage_builder(stage_builder)
        if isinstance(builder, str) and self.session.spec is not None:
            fresh.start()  # stage processes: preload while the uncut model exports
        ctx = self.context(plan)
        proof = unproven
        if builder is not None:
            ctx, proof = self._stage_proof(ctx, plan, builder, default=stage_builder is None)
        cases = []
        for case in self.cases:  # the programs for the other lengths, proven alike
            case_ctx = case.context(plan)
            if builder is not None:
                default = stage_builder is None
                case_ctx, case_proof = case._stage_proof(case_ctx, plan, builder, default)
                proof = _joined(proof, case_proof, case.program.exported.span)
            cases.append(case_ctx)
        report = _report(self.session.name, ctx, "verify", start, self.suppression, cases)
        report.attention = self.attention
        report.stand_ins = sorted(self.stand_ins)
        report.kernels = _kernels(ctx, cases)
        report.backward = _backward(ctx, cases)
        report.stage_programs = [_stage_summary(s) for s in ctx.stages or ()]
        report.stage_proof = dataclasses.replace(proof, required=require_stage_programs)
        layout = ctx.program.layout
        report.stages = plan.with_modules(layout.input_fqns, layout.output_fqns)
        return report

    def _stage_builder(
        self, stage_builder: str | StageBuilder | None
    ) -> tuple[str | StageBuilder | None, StageProof | None]:
        """The builder the stage programs are proven with (the user's, else the default
        one), or ``None`` and the :class:`StageProof` saying why none is."""
        bf16 = self.session.dtype is BuildDtype.BFLOAT16
        if stage_builder == NONE:
            turned_off = "turned off by --stage-builder none"
            return None, StageProof(False, reason=turned_off, hint="--stage-builder none")
        if stage_builder is not None and not bf16:
            raise UsageError(
                "--stage-builder builds the stage programs in bfloat16: drop --dtype "
                f"{self.session.dtype} or --stage-builder"
            )
        if stage_builder is not None:
            return stage_builder, None
        if not bf16:
            dtype = self.session.dtype
            reason = f"stage programs are built in bfloat16, this model with --dtype {dtype}"
            return None, StageProof(False, reason=reason, hint=f"drop --dtype {dtype}")
        hf = self.hf_spec or is_transformers_model(self.session.module)
        return default_builder(hf, self.session.convention.name), None

    def _stage_proof(
        self, ctx: Context, plan: StagePlan, builder: str | StageBuilder, default: bool
    ) -> tuple[Context, StageProof]:
        """Every stage of ``plan`` built by ``builder``, exported and compared with the
        uncut program. A ``default`` builder (graphcheck's choice, not the user's) that
        cannot build or export a stage leaves the stage programs not proven, saying why;
        the user's is an error (exit 2)."""
        name = builder_name(builder)
        try:
            widths = [None, *(_wire_at(ctx, cut) for cut in plan.cuts), None]
            with progress.phase(progress.Phase.STAGES, plan.num_stages) as tick:
                stages, mismatches = stage_programs(
                    self.session, builder, ctx.program, plan, ctx.stage_of, widths, tick
                )
        except fresh.FreshProcessError:
            raise  # a stage process died (a crash, out of memory): not the model's pruning
        except GraphcheckError as err:
            if not default:
                raise
            reason = f"the default stage builder {name} cannot build them: {err}"
            return ctx, StageProof(False, name, default=True, reason=reason)
        ctx = dataclasses.replace(ctx, stages=stages, mismatches=mismatches)
        return ctx, StageProof(True, name, default=default)

    def map(self, doc_length: int = DOC_LENGTH) -> Report:
        """Judge every boundary 0..L as the only cut; see :func:`cut_map`."""
        start = time.perf_counter() - self._take_setup()
        ctx, cases = self._whole(), [case._whole() for case in self.cases]
        report = _report(self.session.name, ctx, "map", start, self.suppression, cases)
        report.attention = self.attention
        report.stand_ins = sorted(self.stand_ins)
        report.kernels = _kernels(ctx, cases)
        report.backward = _backward(ctx, cases)
        report.costs = self.costs(doc_length).as_dict()
        return report

    def _whole(self) -> Context:
        """Every boundary judged as the only cut (no plan)."""
        return Context(
            self.program, self.boundaries, None, self.allow_fp32, hf_spec=self.hf_spec,
            lengths=self.coverage,
        )  # fmt: skip

    @functools.cached_property
    def boundaries(self) -> list[CutAnalysis]:
        """Every boundary 0..L analysed as the only cut (one sweep, kept)."""
        program = self.program
        with progress.phase(progress.Phase.CUTS, program.num_layers + 1) as tick:
            return analyse_cuts(program, list(range(program.num_layers + 1)), progress=tick)

    def costs(self, doc_length: int = DOC_LENGTH) -> Costs:
        """Per-layer costs read from the export: parameter bytes, FLOPs per token
        (attention at documents of ``doc_length`` tokens) and the bytes per token
        crossing each boundary (:mod:`graphcheck.analysis.cost`)."""
        return layer_costs(self.program, self.boundaries, doc_length)

    def layer_kinds(self) -> list[LayerKind]:
        """Each decoder layer's kind label, read from its ops
        (:mod:`graphcheck.analysis.kinds`)."""
        return layer_kinds(self.program)

    def written_cuts(
        self,
        cuts: Sequence[int] | None = None,
        stages: int | None = None,
        pipeline_layout: str | None = None,
        fqns_per_stage: Sequence[Sequence[str]] | None = None,
    ) -> Sequence[int] | None:
        """``cuts``, or the cuts of a plan as users write it: a Megatron-style layout
        string (``"E|t*4|t*4|L"``) or a torchtitan-style list of module FQNs per stage;
        at most one of the four (checked before any export)."""
        if pipeline_layout is None and fqns_per_stage is None:
            return cuts
        given = (cuts, stages, pipeline_layout, fqns_per_stage)
        if sum(x is not None for x in given) > 1:
            raise UsageError("give one stage plan: --cuts, --stages, --layout or --fqns-per-stage")
        if pipeline_layout is not None:
            return parse_layout(pipeline_layout, self.num_layers)
        return cuts_from_fqns([list(s) for s in fqns_per_stage], self.session.layout)

    def balanced(
        self,
        stages: int,
        *,
        virtual: int = 1,
        cost: str = "flops",
        doc_length: int = DOC_LENGTH,
        stage_builder: str | StageBuilder | None = None,
        require_stage_programs: bool = False,
    ) -> PlanReport:
        """The legal plan of ``stages`` stages (``stages·virtual`` chunks) whose most
        expensive stage is least, and its proof; see :func:`plan`."""
        start = time.perf_counter() - self._take_setup()
        chunks = _chunks(stages, virtual, cost, doc_length, self.num_layers)
        cut_map = self.map(doc_length)
        model_costs = self.costs(doc_length)
        first, layers, last = model_costs.values(cost)
        legal = cut_map.legal_cuts()
        found = balance(layers, chunks, legal, first, last)
        proof = None
        if found is not None:
            proof = self.verify(
                list(found.cuts), stage_builder=stage_builder,
                require_stage_programs=require_stage_programs,
            )  # fmt: skip
        return PlanReport(
            self.session.name, self.num_layers, stages, virtual, cost, model_costs, found,
            balance(layers, chunks, None, first, last), legal,
            [{"position": c.position, "codes": sorted(set(c.codes))} for c in cut_map.cuts
             if c.verdict == Verdict.FAIL],
            sorted({d.code for d in cut_map.errors if d.cut is None}), proof,
            seconds=time.perf_counter() - start,
            legal_by_ignore=[{"position": c.position, "codes": c.ignored} for c in cut_map.cuts
                             if c.ignored and c.position in legal],
            ignored=cut_map.ignored,
        )  # fmt: skip

    def _take_setup(self) -> float:
        """Model build time not yet charged to a report (charged to the first one)."""
        setup, self._setup = self._setup, 0.0
        return setup


def _stage_summary(stage) -> dict:
    return {
        "index": stage.index,
        "layers": stage.layers,
        "renumbered": stage.renumbered,
        "export_seconds": round(stage.seconds, 3),
        "nodes": stage.nodes,
        "isolated": stage.isolated,
    }


def _wire_at(ctx: Context, position: int) -> WireShape:
    """The wire a stage starting at ``position`` takes: the shape of the residual (or of
    the declared boundary state) crossing that cut in the uncut program, ``[1, T, H]``
    or the flat ``[T, H]``."""
    cut = next(c for c in ctx.cuts if c.position == position)
    node = ctx.wire(cut).boundary or (cut.activations[0] if cut.activations else None)
    shape = ctx.program.shape(node) if node is not None else None
    wire = WireShape.of(shape) or _pinned_wire(ctx, shape)
    if wire is None:
        what = f"{node.name} is [{', '.join(shape)}]" if shape else "no value crosses it"
        raise AnalysisError(
            f"cannot tell the shape of the residual at cut {position} ({what}, not [T, ...] "
            "or [1, T, ...] of fixed trailing dims)"
        )
    return wire


def _pinned_wire(ctx: Context, shape: list[str] | None) -> WireShape | None:
    """The wire of a program whose export fixed T to the example's length (GC401 says
    documents cannot be tracked there): that length read as ``T``, so the stage programs
    are still built and compared; ``None`` when T is symbolic or not in ``shape``."""
    tokens = str(sum(ctx.program.exported.batch.docs))
    if shape is None or not ctx.program.untracked or tokens not in shape[:2]:
        return None
    at = shape.index(tokens)
    return WireShape.of([*shape[:at], "T", *shape[at + 1 :]])


def _state(ctx: Context, cut) -> dict | None:
    """The state ``cut`` hands over: the residual (or the state the model declares), its
    dtype, shape and value; ``None`` when no crossing value is that state."""
    node = ctx.wire(cut).residual
    if node is None:
        return None
    program = ctx.program
    dtype, shape = program.dtype(node), program.shape(node)
    declared = program.layout.boundary_state
    matches = declared is not None and declared.matches(dtype, shape)
    name = declared.state if matches else "residual"
    return {"name": name, "declared": matches, "node": node.name, "dtype": dtype, "shape": shape}


def _joined(proof: StageProof | None, case: StageProof, span) -> StageProof | None:
    """The stage proof of every length case: the first one's, unless a case's stage
    programs were not proven (then that one's, saying for which lengths)."""
    if proof is None or not proof.proven or case.proven:
        return proof
    return dataclasses.replace(case, reason=f"for T {span}: {case.reason}")


def _findings(ctx: Context, cases: Sequence[Context]) -> list[Diagnostic]:
    """The checker's findings over ``ctx``, then those of each length case's program
    that no earlier program had, each saying which lengths its program holds for."""
    found = check(ctx)
    seen = {(d.code, d.cut, d.layer, d.message) for d in found}
    for case in cases:
        span = case.program.exported.span
        for d in check(case):
            if (d.code, d.cut, d.layer, d.message) not in seen:
                seen.add((d.code, d.cut, d.layer, d.message))
                found.append(
                    dataclasses.replace(d, message=f"{d.message} (in the program for T {span})")
                )
    return sorted(found, key=lambda d: (d.cut if d.cut is not None else -2, d.code))  # as check


def _report(
    name: str,
    ctx: Context,
    mode: str,
    start: float,
    suppression: Suppression,
    cases: Sequence[Context] = (),
) -> Report:
    """The checker's diagnostics over ``ctx`` and the length ``cases``, as a report; the
    findings ``suppression`` (and the model's ignore comments) keep out are listed as
    ignored, not dropped."""
    program = ctx.program
    states = {cut.position: _state(ctx, cut) for cut in ctx.cuts}
    outcome = suppression.apply(_findings(ctx, cases), model_files(program.graph))
    crossings = {cut.position: [c.snapshot() for c in cut.crossing] for cut in ctx.cuts}
    report = Report.of(
        name, mode, program.num_layers, crossings, outcome.kept, states, outcome.ignored,
        export_seconds=sum(c.program.exported.seconds for c in (ctx, *cases)),
        seconds=time.perf_counter() - start,
        nodes=len(program.graph.nodes),
        tokens=_tokens(ctx),
        program_mode=program.exported.program_mode,
    )  # fmt: skip
    report.unused_ignores = outcome.unused
    return report


def _tokens(ctx: Context) -> dict:
    """For which T the proof holds; with length cases, the range of each program."""
    tokens = ctx.program.exported.tokens()
    if ctx.lengths is not None and ctx.lengths.split:
        tokens["programs"] = ctx.lengths.as_dicts()
        tokens["complete"] = ctx.lengths.complete
    return tokens


def _first_line(err: BaseException) -> str:
    """An error's first line, for a finding's message."""
    if not str(err).strip():
        return repr(err)
    improved = " (Could this error message be improved?"
    return one_line(err, typed=False, cut=improved, limit=0)


def _backward(ctx: Context, cases: list[Context]) -> dict | None:
    """Train mode: whether the backward program of every length's program was proven
    (``checked``: asked for with ``--backward``)."""
    if ctx.program.exported.program_mode != ProgramMode.TRAIN:
        return None
    proofs = [each.program.gradients for each in (ctx, *cases)]
    if any(proof is None for proof in proofs):
        return {"checked": False}
    return {
        "checked": True,
        "proven": all(proof.proven for proof in proofs),
        "ops": sum(proof.nodes for proof in proofs),
        "seconds": round(sum(proof.seconds for proof in proofs), 2),
        "functions": sorted({name for proof in proofs for name in proof.functions}),
        "validated": sorted(
            {name for proof in proofs for name, ran in proof.executed.items() if ran.isolated}
        ),
        **({"why": why} if (why := next((p.unproven for p in proofs if p.unproven), "")) else {}),
        **({"refused": r} if (r := next((p.refused for p in proofs if p.refused), "")) else {}),
    }


def _kernels(ctx: Context, cases: list[Context]) -> list[dict]:
    """The custom ops held to their trust by execution, one entry per op (the first
    program's verdict; a leak found in any program wins)."""
    found: dict[str, object] = {}
    for each in (ctx, *cases):
        for name, op in each.program.validated.items():
            if name not in found or op.status == "leaks":
                found[name] = op
    return [op.as_dict() for op in found.values()]
