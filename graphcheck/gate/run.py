"""The byte gate: run the uncut model and its stages on CPU and compare the bytes.

A static proof is only trusted if it never says "pass" where the split program
computes different bytes. ``graphcheck gate`` carries that ground truth by
running what ranks run:

1. it proves the plan (the same :class:`graphcheck.api.Explorer` export and
   rules as ``graphcheck verify``), in this process;
2. it runs the exported uncut program once on real weights (the preflight): an
   op without a CPU implementation stops the gate there with a
   :class:`GateError` naming it (exit 2);
3. the **uncut model runs in one fresh process** (:mod:`graphcheck.stages.fresh`):
   built from its spec with small real random bf16 weights (the factory called
   with bf16 as the default dtype after ``torch.manual_seed(seed)``, then the
   model's own init method, :mod:`graphcheck.gate.tensors`), it saves its
   parameters and buffers by name (no ``state_dict`` hooks) as the checkpoint,
   runs the packed varlen batch and checks
   **document isolation** exactly, with no tolerance (:mod:`graphcheck.gate.exact`):
   *perturb* (every other document's tokens redrawn, lengths kept) and *shift* (every
   document moved by one whole row tile, so each starts at another offset) must not
   change one bit of a document's outputs; the first layer that shows a change is
   named. Each document run alone against its packed outputs is information only;
4. **each stage runs in its own fresh process**
   (:mod:`graphcheck.gate.runner`): it builds the model, applies the stage
   builder (``keep-index`` by default, ``hf-slice`` for ``hf:`` models), loads
   its weights from the checkpoint through the stage's own layout
   (:func:`graphcheck.stages.build.stage_layout`: a stage module that wraps or
   unwraps the model, renumbered layers mapped back to their global index) and
   receives only the previous stage's output as bf16 bytes.
   So class-level counters, first-caller caches and flags set by an earlier
   layer show up as differing bytes, as they do on ranks. The last stage's
   logits are compared with ``torch.equal``;
5. with ``train``, both take one forward+backward+SGD step on a fixed loss (the
   staged backward hands the wire's gradient back as bf16 bytes, each stage
   recomputing its forward), then every parameter (by global name) and the
   logits of a second forward are compared: storage shared across stages shows
   here. Before the step the gradient of each document's loss (the fixed loss on its
   tokens) w.r.t. the first layer's input and every parameter must not change under
   perturb, nor the per-token input gradients under shift.

Every process runs the model in the proof's program mode (``program_mode``, ``--mode``:
``train`` by default, the program pipeline-parallel training runs, or ``eval``). A
program with a random op (GC304: dropout with p > 0, ``rand``, ``bernoulli``) is
refused before anything runs (a :class:`GateError`, exit 2): the staged run draws
its random numbers in another order than the uncut run, so their bytes would differ
by the random stream alone.

What is compared is the tensor the forward returns (logits, or the hidden states of a
framework model whose loss applies the head), ``head`` applied to the returned hidden
states (``--head lm_head``: logits, also what the training step's loss reads), or the
output of the module ``output_fqn`` (``--output-fqn model.norm``); the last stage
reads the same from its own module (:mod:`graphcheck.gate.output`). The report names
it. With ``dtype="float32"`` (``--dtype``) every process builds the model in fp32 and
casts it as the proof's fake build did (:mod:`graphcheck.model.dtype`).

A stage that raises is a finding (``bytes: blocked`` with the stage's one-line
error), never a traceback. ``mode="graph"`` (``--in-process``) is the secondary
mode: the uncut exported graph partitioned by the proof, run in this process
(:mod:`graphcheck.gate.graph_run`), which names the value a stage would
need that the wire does not carry.

Attention runs on the exact per-document CPU reference of
:mod:`graphcheck.kernels.cpu_reference`; graphcheck's own stand-in ops use their eager
per-document implementations. Torch runs on one thread. When the exported
uncut program does not reproduce the model's bytes at the batch's length (an
export that specialised on the length, GC403) the report says so
(``export_faithful``).

This module orchestrates; the parts live beside it: :mod:`graphcheck.gate.weights`
(the model on real weights in this process), :mod:`graphcheck.gate.tensors` (its
tensors by name, its init method), :mod:`graphcheck.gate.chain` (the
stage processes, chained by bf16 bytes), :mod:`graphcheck.gate.runner` (what each
process runs), :mod:`graphcheck.gate.checks` (the comparisons) and
:mod:`graphcheck.gate.messages` (one-line failures).

>>> report = gate("fixtures/reference.py:reference", cuts=[4], docs=(9, 5))
>>> report.static_verdict, report.bytes.status, report.isolation.holds, report.exit_code
(<Verdict.PASS: 'pass'>, <ByteStatus.EQUAL: 'equal'>, True, 0)
"""

from __future__ import annotations

import contextlib
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from graphcheck import phases as progress
from graphcheck.analysis.residual import residual_layout
from graphcheck.api import Explorer, ModelArg
from graphcheck.errors import GateError, UsageError
from graphcheck.gate.batch import DEFAULT_DOCS, PackedBatch
from graphcheck.gate.chain import StageChain, in_fresh_process
from graphcheck.gate.checks import bytes_check, same
from graphcheck.gate.exact import Probe, isolation_check
from graphcheck.gate.graph_run import NodeFailure, RunStagesPass
from graphcheck.gate.messages import failure_message, not_pipeline_aware, raised, random_ops
from graphcheck.gate.output import Compared, OutputKind
from graphcheck.gate.runner import Recipe, run_uncut
from graphcheck.gate.tensors import (
    NO_INIT,
    check_initialised,
    init_method,
    initialise,
    restore,
    tensors_of,
)
from graphcheck.gate.weights import (
    build_real,
    call_model,
    feeds,
    graph_output,
    graph_tensors,
    real_factory,
    seeded,
    vocab_size,
)
from graphcheck.kernels import patched
from graphcheck.kernels.cpu_reference import cpu_kernels
from graphcheck.model.boundary import WireShape
from graphcheck.model.hf import is_hf_spec, is_transformers_model
from graphcheck.planning.plan import StagePlan
from graphcheck.results.gate import (
    ByteCheck,
    ByteStatus,
    GateReport,
    Handover,
    IsolationCheck,
    RunMode,
    TrainCheck,
)
from graphcheck.rules.gc304_random_op_in_program import CODE as GC304
from graphcheck.stages.builders import StageBuilder, default_builder

__all__ = ["Gate", "gate"]


def gate(
    model: ModelArg,
    cuts: Sequence[int] | None = None,
    stages: int | None = None,
    *,
    stage_builder: str | StageBuilder | None = None,
    seed: int = 0,
    docs: Sequence[int] = DEFAULT_DOCS,
    tolerance: float | None = None,
    allow_fp32: Sequence[str] = (),
    train: bool = False,
    mode: RunMode | str = RunMode.PROCESSES,
    head: str | None = None,
    output_fqn: str | None = None,
    init: str | None = None,
    **options,
) -> GateReport:
    """Prove a stage plan, then run it on real weights and compare the bytes.

    ``model``, ``cuts``, ``stages``, ``stage_builder`` and the model options are those
    of :func:`graphcheck.verify`; ``docs`` are the document lengths packed into the
    batch; ``train`` also takes one optimizer step on both; ``mode`` is ``processes``
    (a fresh process per stage, the default) or ``graph`` (the partitioned exported
    graph, in this process); ``head`` (``--head``) or ``output_fqn``
    (``--output-fqn``) names what is compared instead of the returned tensor; ``init``
    (``--init``) the model's init method (:mod:`graphcheck.gate.tensors`).
    ``tolerance`` is deprecated and ignored: document isolation is exact. Raises
    :class:`graphcheck.errors.GraphcheckError` when it cannot run. With ``train`` the
    static proof covers the backward program too (``backward``)."""
    if train and str(options.get("program_mode", "train")) == "train":
        options.setdefault("backward", True)
    runner = Gate(
        model, seed=seed, allow_fp32=allow_fp32, head=head, output_fqn=output_fqn, init=init,
        **options,
    )  # fmt: skip
    return runner.run(
        cuts, stages, stage_builder=stage_builder, docs=docs, tolerance=tolerance,
        train=train, mode=mode,
    )  # fmt: skip


class Gate:
    """One model, exported once and built once on real weights; gate many plans.

    >>> g = Gate("fixtures/reference.py:reference")
    >>> [g.run([k], docs=(6, 4)).verdict for k in (2, 6)]
    ['pass', 'pass']
    """

    def __init__(
        self,
        model: ModelArg,
        *,
        seed: int = 0,
        explorer: Explorer | None = None,
        allow_fp32: Sequence[str] = (),
        head: str | None = None,
        output_fqn: str | None = None,
        init: str | None = None,
        **options,
    ) -> None:
        """``explorer``: an existing :class:`Explorer` of the same ``model`` and options,
        whose export (and proof) the gate reuses; ``head``, ``output_fqn``: what is
        compared (:class:`~graphcheck.gate.output.Compared`); ``init``: the init method
        called after the factory (``None``: the first of
        :data:`~graphcheck.gate.tensors.INIT_METHODS` the model has, ``"none"``: none;
        a model given as a module is called only a named one); both checked before
        any export."""
        self.compared = Compared(head, output_fqn)
        self.explorer = explorer or Explorer(model, allow_fp32=allow_fp32, **options)
        self.compared.check(self.explorer.session.module)
        given = isinstance(model, nn.Module)
        auto = NO_INIT if given else None  # a module holds its own weights: a named init only
        self.init = init_method(self.explorer.session.module, auto if init is None else init)
        self.seed = seed
        self.spec = model if isinstance(model, str) else None
        self.options = options
        self._factory = real_factory(model, self.explorer.session)
        self._given = model if given else None
        self._model: nn.Module | None = None
        self._uncut_runs: dict[tuple, dict] = {}  # (docs, tokens, train) -> run_uncut's result
        self._workdir = tempfile.TemporaryDirectory(prefix="graphcheck-gate-")
        self._inputs_from = self.explorer.session.convention.name  # as the proof took it

    @property
    def model(self) -> nn.Module:
        """The model on real random bf16 weights (built on first use), initialised by
        its init method; a model given as a module, as given (its init method called in
        place when one is named)."""
        if self._model is None:
            self._model = self._built()
        return self._model

    def _built(self) -> nn.Module:
        session = self.explorer.session
        if self._given is None:
            return build_real(
                self._factory, self.seed, session.program_mode, session.dtype_plan, self.init
            )
        with seeded(self.seed):
            initialise(self._given, self.init)
        check_initialised(self._given, self.init)
        return self._given

    def run(
        self,
        cuts: Sequence[int] | None = None,
        stages: int | None = None,
        *,
        stage_builder: str | StageBuilder | None = None,
        docs: Sequence[int] = DEFAULT_DOCS,
        tolerance: float | None = None,
        train: bool = False,
        mode: RunMode | str = RunMode.PROCESSES,
    ) -> GateReport:
        """Gate one plan; see :func:`gate` (``tolerance``: deprecated, ignored)."""
        _deprecated_tolerance(tolerance)
        mode = _check_mode(mode, stage_builder, train, self.compared)
        clock = _Clock()
        with clock("build"):  # first: weights nobody initialised stop the gate before the export
            batch = PackedBatch.random(docs, vocab_size(self.model, self.explorer), self.seed)
        with clock("proof"):
            static = self.explorer.verify(cuts, stages, stage_builder=stage_builder)
        if random := [d for d in static.diagnostics if d.code == GC304]:
            raise GateError(random_ops(random, static.program_mode))
        plan = self.explorer.plan(cuts, stages)
        with self._running(), clock("preflight"):
            exported = self._preflight(batch)
        if mode is RunMode.GRAPH:
            outcome = self._graph_outcome(plan, batch, clock)
        else:
            convention = self.explorer.session.convention.name
            hf = is_transformers_model(self.explorer.session.module)
            builder = _default_builder(self.spec, stage_builder, convention, hf)
            outcome = self._process_outcome(builder, plan, batch, train, clock, static)
            if stage_builder is None and outcome.bytes.status is ByteStatus.BLOCKED:
                raise GateError(not_pipeline_aware(builder, outcome.bytes.message))
            stage_builder = builder
        outcome.exported = exported
        return self._report(static, plan, batch, outcome, stage_builder, mode, clock)

    def _report(self, static, plan, batch, outcome, builder, mode, clock) -> GateReport:
        """The report of one gated plan."""
        return GateReport(
            model=self.explorer.session.name,
            num_layers=static.num_layers,
            cuts=list(plan.cuts),
            docs=batch.docs,
            seed=self.seed,
            static_verdict=static.verdict,
            static_codes=sorted({d.code for d in static.errors}),
            bytes=outcome.bytes,
            isolation=outcome.isolation,
            stages=static.stages,
            stage_builder=_builder_name(builder),
            handovers=outcome.handovers,
            export_faithful=_same_all(outcome.exported, outcome.returned),
            seconds=clock.seconds(),
            mode=mode,
            train=outcome.train,
            program_mode=static.program_mode,
            compared={**self.compared.as_dict(), "shape": outcome.shape},
        )

    @contextlib.contextmanager
    def _running(self):
        stand_ins = self.explorer.session.stand_ins
        with cpu_kernels(), patched(self.model, stand_ins), torch.no_grad(), _single_thread():
            yield

    def _preflight(self, batch: PackedBatch) -> list[torch.Tensor]:
        """Run the exported uncut program once: every op must run on CPU, and what it
        returns must hold the compared value (an output the gate cannot read stops here,
        before any process); the tensors it returns."""
        program = self.explorer.program
        runner = RunStagesPass(program, feeds(program, self.model, batch), [], lambda n: 0)
        try:
            outputs = runner.run().outputs
        except NodeFailure as failure:
            raise GateError(failure_message(failure, "the uncut program")) from None
        if self.compared.kind is not OutputKind.MODULE:  # a module's output is not returned
            with self.compared.reading(self.model) as read:
                read(graph_output(program, outputs))
        return graph_tensors(program, outputs)

    def _graph_outcome(self, plan: StagePlan, batch: PackedBatch, clock):
        """Secondary mode: the uncut model and the partitioned exported graph, in here."""
        state = tensors_of(self.model)
        with self._running():
            with clock("uncut"):
                returned, uncut = call_model(self.model, batch, self.compared, self._inputs_from)
            with clock("staged"):
                restore(self.model, state)
                staged, handovers, blocked = self._graph_run(plan, batch)
            with clock("isolation"):
                isolation = self._isolation(batch, state)
        restore(self.model, state)
        check = bytes_check(staged, uncut, batch, blocked, self._batched)
        return _Outcome(returned, check, isolation, handovers, list(uncut.shape))

    def _process_outcome(self, builder, plan, batch, train: bool, clock, static):
        """Default mode: the uncut model and every stage each in a fresh process, each
        stage handing on the wire the proof ``static`` has at its cut."""
        recipe = self._recipe(builder)
        with clock("uncut"):
            uncut = self._uncut(recipe, batch, train)
        if "isolation" not in uncut:  # the model itself raised on real weights
            raise GateError(f"the uncut model {uncut.get('raised', 'did not run')}")
        isolation = uncut["isolation"]
        chain = StageChain(recipe, plan, batch, self._workdir.name, self._wires(static))
        with clock("staged"):
            first = chain.forward([uncut["checkpoint"]] * plan.num_stages, train)
        check = bytes_check(first.logits, uncut["logits"], batch, first.blocked, self._batched)
        shape = list(uncut["logits"].shape)
        outcome = _Outcome(uncut["returned"], check, isolation, first.handovers, shape)
        if train:
            with clock("train"):
                outcome.train = chain.train_check(first, uncut)
        return outcome

    def _uncut(self, recipe: Recipe, batch: PackedBatch, train: bool) -> dict:
        """The uncut model's fresh-process run (:func:`run_uncut`), once per batch and
        ``train``: it does not depend on the plan or the stage builder, so every plan
        gated on this model reuses it (checkpoint, outputs, the exact isolation tests)."""
        key = (batch.docs, tuple(batch.input_ids.flatten().tolist()), train)
        if key not in self._uncut_runs:
            run = in_fresh_process(run_uncut, recipe, batch, self._workdir.name, train)
            self._uncut_runs[key] = run
        return self._uncut_runs[key]

    def _recipe(self, builder) -> Recipe:
        """What a fresh process needs to build the model and its stages."""
        session = self.explorer.session
        module_file = None
        if self.spec is None:
            module_file = str(Path(self._workdir.name) / "model.pt")
            torch.save(self.model, module_file)
        return Recipe(
            spec=self.spec,
            layout=session.layout,
            seed=self.seed,
            options=session.rebuild_options(),
            module_file=module_file,
            builder=builder,
            compared=self.compared,
            dtype_plan=session.dtype_plan,
            init=None if self._given is not None else self.init,  # a module: saved initialised
            batched=self._batched,
        )

    def _graph_run(self, plan: StagePlan, batch: PackedBatch):
        """The uncut exported graph partitioned by the proof's own placement
        (:meth:`graphcheck.api.Explorer.context`)."""
        ctx = self.explorer.context(plan)
        program = ctx.program
        cuts = [(cut.position, ctx.wire(cut).boundary) for cut in ctx.cuts]
        runner = RunStagesPass(program, feeds(program, self.model, batch), cuts, ctx.stage_of)
        try:
            result = runner.run()
        except NodeFailure as failure:
            if isinstance(failure.__cause__, NotImplementedError):
                raise GateError(failure_message(failure, "the staged program")) from None
            return None, [], raised("the staged program", failure)
        if result.blocked is not None:
            return None, result.handovers, result.blocked
        with self.compared.reading(self.model) as read:  # --head: applied here, in-process
            return read(graph_output(program, result.outputs)), result.handovers, None

    def _isolation(self, batch: PackedBatch, state: dict) -> IsolationCheck:
        """The exact isolation tests (:mod:`graphcheck.gate.exact`) on the model in this
        process, every run from the state the packed run started from."""
        forward = lambda b: call_model(self.model, b, self.compared, self._inputs_from)[1]  # noqa: E731
        layout = self.explorer.session.layout
        probe = Probe(self.model, forward, layout, state, self.seed, self._batched)
        return isolation_check(probe, batch)

    @staticmethod
    def _wires(static) -> dict:
        """Cut -> the wire the proof ``static`` has there (the residual or declared state
        crossing it); a cut without one is left unchecked."""
        states = {cut.position: cut.state for cut in static.cuts}
        wires = {k: WireShape.of(s["shape"]) for k, s in states.items() if s is not None}
        return {k: w for k, w in wires.items() if w is not None}

    @property
    def _batched(self) -> bool:
        """Whether the model's residual is ``[1, T, H]`` (``False``: the flat ``[T, H]``),
        as the proof reads it: it places the token axis of the values compared."""
        layout = residual_layout(self.explorer.program)
        return layout is None or layout.batched


@dataclass
class _Outcome:
    """What one way of running the plan found."""

    returned: list[torch.Tensor]  # the tensors the uncut model returns
    bytes: ByteCheck
    isolation: IsolationCheck
    handovers: list[Handover]
    shape: list[int]  # of the compared value
    train: TrainCheck | None = None
    exported: list[torch.Tensor] | None = None  # those the exported uncut program returns


def _deprecated_tolerance(tolerance: float | None) -> None:
    if tolerance is not None:
        warnings.warn(
            "gate(tolerance=...) is ignored: document isolation is exact (perturb and shift)",
            DeprecationWarning,
            stacklevel=3,
        )


def _same_all(a: list[torch.Tensor] | None, b: list[torch.Tensor]) -> bool:
    """Every tensor of ``a`` bitwise equal to its place in ``b``."""
    return a is not None and len(a) == len(b) and all(map(same, a, b))


def _default_builder(spec: str | None, builder, convention: str | None = None, hf=False):
    """The user's stage builder; else ``hf-slice`` for transformers models (``hf:`` or
    built by a factory: ``hf``), the builder of the model's input convention
    (``torchtitan``), ``keep-index`` for the rest (pipeline-aware models)."""
    if builder is not None:
        return builder
    return default_builder(hf or (spec is not None and is_hf_spec(spec)), convention)


def _check_mode(mode: RunMode | str, builder, train: bool, compared: Compared) -> RunMode:
    """``mode`` as a :class:`RunMode`; a usage error for an unknown one or for what the
    graph mode cannot run."""
    try:
        mode = RunMode(mode)
    except ValueError:
        raise UsageError(f"unknown gate mode {mode!r}: use {' or '.join(RunMode)}") from None
    if mode is RunMode.GRAPH and (builder is not None or train):
        raise UsageError(
            "the in-process graph mode runs the exported forward graph only: drop "
            "--stage-builder and --train, or drop --in-process"
        )
    if mode is RunMode.GRAPH and compared.kind is OutputKind.MODULE:
        raise UsageError(
            "the in-process graph mode compares what the exported program returns: drop "
            "--output-fqn (--head works), or drop --in-process"
        )
    return mode


class _Clock:
    """Seconds spent per phase of a run."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.phases: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, phase: str):
        begin = time.perf_counter()
        try:
            with progress.phase(f"{progress.Phase.GATE} {phase}"):
                yield
        finally:
            self.phases[phase] = time.perf_counter() - begin

    def seconds(self) -> dict[str, float]:
        return {**self.phases, "total": time.perf_counter() - self.start}


@contextlib.contextmanager
def _single_thread():
    """Run torch on one thread: the tensors are tiny, one thread fixes the reduction
    order, and an oversubscribed machine (2 cores, another job) slows a multi-threaded
    run of tiny ops by two orders of magnitude."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _builder_name(builder) -> str | None:
    if builder is None or isinstance(builder, str):
        return builder
    return getattr(builder, "__qualname__", repr(builder))
