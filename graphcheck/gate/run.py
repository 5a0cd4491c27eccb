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
   with bf16 as the default dtype after ``torch.manual_seed(seed)``), it saves
   its ``state_dict`` as the checkpoint, runs the packed varlen batch and checks
   **document isolation** (each document alone against its packed logits,
   bitwise where the CPU kernels allow, otherwise within
   :data:`~graphcheck.gate.report.ISOLATION_TOLERANCE`);
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
   here.

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

>>> report = gate("fixtures/reference.py:reference", cuts=[4], docs=(9, 5))
>>> report.static_verdict, report.bytes.status, report.isolation.holds, report.exit_code
('pass', 'equal', True, 0)
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor
from torch.export.graph_signature import InputKind, OutputKind

from graphcheck.analysis.dataflow import analyse_cuts
from graphcheck.analysis.export import accepted_inputs
from graphcheck.analysis.fx import op_name
from graphcheck.analysis.plan import StagePlan
from graphcheck.analysis.program import Program
from graphcheck.api import Explorer, ModelArg
from graphcheck.checker import Context
from graphcheck.errors import GateError, GraphcheckError, ModelLoadError, UsageError
from graphcheck.gate.batch import DEFAULT_DOCS, PackedBatch
from graphcheck.gate.graph_run import Blocked, Handover, NodeFailure, RunStagesPass
from graphcheck.gate.report import (
    ISOLATION_TOLERANCE,
    ByteCheck,
    GateReport,
    IsolationCheck,
    TrainCheck,
)
from graphcheck.gate.runner import Recipe, logits_of, pack, run_stage, run_uncut, unpack
from graphcheck.kernels import patched
from graphcheck.kernels.cpu_reference import cpu_kernels
from graphcheck.model.hf import hf_factory, is_hf_spec
from graphcheck.model.load import default_dtype, parse_spec, resolve_factory
from graphcheck.stages.builders import StageBuilder
from graphcheck.stages.fresh import run_fresh

__all__ = ["Gate", "GateError", "gate"]


def gate(
    model: ModelArg,
    cuts: Sequence[int] | None = None,
    stages: int | None = None,
    *,
    stage_builder: str | StageBuilder | None = None,
    seed: int = 0,
    docs: Sequence[int] = DEFAULT_DOCS,
    tolerance: float = ISOLATION_TOLERANCE,
    allow_fp32: Sequence[str] = (),
    train: bool = False,
    mode: str = "processes",
    **options,
) -> GateReport:
    """Prove a stage plan, then run it on real weights and compare the bytes.

    ``model``, ``cuts``, ``stages``, ``stage_builder`` and the model options are those
    of :func:`graphcheck.verify`; ``docs`` are the document lengths packed into the
    batch; ``train`` also takes one optimizer step on both; ``mode`` is ``processes``
    (a fresh process per stage, the default) or ``graph`` (the partitioned exported
    graph, in this process). Raises :class:`graphcheck.errors.GraphcheckError` when
    it cannot run."""
    runner = Gate(model, seed=seed, allow_fp32=allow_fp32, **options)
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
        **options,
    ) -> None:
        """``explorer``: an existing :class:`Explorer` of the same ``model`` and options,
        whose export (and proof) the gate reuses."""
        self.explorer = explorer or Explorer(model, allow_fp32=allow_fp32, **options)
        self.seed = seed
        self.spec = model if isinstance(model, str) else None
        self.options = options
        self._factory = _real_factory(model, self.explorer.session)
        self._model = model if isinstance(model, nn.Module) else None
        self._workdir = tempfile.TemporaryDirectory(prefix="graphcheck-gate-")

    @property
    def model(self) -> nn.Module:
        """The model on real random bf16 weights (built on first use)."""
        if self._model is None:
            self._model = _build_real(self._factory, self.seed)
        return self._model

    def run(
        self,
        cuts: Sequence[int] | None = None,
        stages: int | None = None,
        *,
        stage_builder: str | StageBuilder | None = None,
        docs: Sequence[int] = DEFAULT_DOCS,
        tolerance: float = ISOLATION_TOLERANCE,
        train: bool = False,
        mode: str = "processes",
    ) -> GateReport:
        """Gate one plan; see :func:`gate`."""
        _check_mode(mode, stage_builder, train)
        clock = _Clock()
        with clock("proof"):
            static = self.explorer.verify(cuts, stages, stage_builder=stage_builder)
        plan = StagePlan(tuple(c.position for c in static.cuts), static.num_layers)
        with clock("build"):
            batch = PackedBatch.random(docs, _vocab_size(self.model, self.explorer), self.seed)
        with self._running(), clock("preflight"):
            exported = self._preflight(batch)
        if mode == "graph":
            outcome = self._graph_outcome(plan, batch, tolerance, clock)
        else:
            builder = _default_builder(self.spec, stage_builder)
            outcome = self._process_outcome(builder, plan, batch, tolerance, train, clock)
            if stage_builder is None and outcome.bytes.status == "blocked":
                raise GateError(_not_pipeline_aware(builder, outcome.bytes.message))
            stage_builder = builder
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
            stage_builder=_builder_name(stage_builder),
            handovers=outcome.handovers,
            export_faithful=_same(exported, outcome.uncut),
            seconds=clock.seconds(),
            mode=mode,
            train=outcome.train,
        )

    @contextlib.contextmanager
    def _running(self):
        stand_ins = self.explorer.session.stand_ins
        with cpu_kernels(), patched(self.model, stand_ins), torch.no_grad(), _single_thread():
            yield

    def _preflight(self, batch: PackedBatch) -> torch.Tensor:
        """Run the exported uncut program once: every op must run on CPU."""
        program = self.explorer.program
        runner = RunStagesPass(program, _feeds(program, self.model, batch), [], lambda n: 0)
        try:
            return _graph_logits(program, runner.run().outputs)
        except NodeFailure as failure:
            raise GateError(_failure_message(failure, "the uncut program")) from None

    def _graph_outcome(self, plan: StagePlan, batch: PackedBatch, tolerance: float, clock):
        """Secondary mode: the uncut model and the partitioned exported graph, in here."""
        state = {k: v.clone() for k, v in self.model.state_dict().items()}
        with self._running():
            with clock("uncut"):
                uncut = _call(self.model, batch)
            with clock("staged"):
                self.model.load_state_dict(state)
                staged, handovers, blocked = self._graph_run(plan, batch)
            with clock("isolation"):
                isolation = self._isolation(batch, uncut, tolerance, state)
        self.model.load_state_dict(state)
        check = _bytes_check(staged, uncut, batch, blocked)
        return _Outcome(uncut, check, isolation, handovers)

    def _process_outcome(self, builder, plan, batch, tolerance: float, train: bool, clock):
        """Default mode: the uncut model and every stage each in a fresh process."""
        recipe = self._recipe(builder)
        with clock("uncut"):
            uncut = _fresh(run_uncut, recipe, batch, self._workdir.name, train)
        if "isolation" not in uncut:  # the model itself raised on real weights
            raise GateError(f"the uncut model {uncut.get('raised', 'did not run')}")
        isolation = _isolation_check(uncut["isolation"], tolerance)
        chain = _StageChain(recipe, plan, batch, self._workdir.name)
        with clock("staged"):
            first = chain.forward([uncut["checkpoint"]] * plan.num_stages, train)
        check = _bytes_check(first.logits, uncut["logits"], batch, first.blocked)
        outcome = _Outcome(uncut["logits"], check, isolation, first.handovers)
        if train:
            with clock("train"):
                outcome.train = chain.train_check(first, uncut)
        return outcome

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
            settings=dict(session.settings),
            stand_ins=self.options.get("stand_ins", True),
            kernels=self.options.get("kernels"),
            module_file=module_file,
            builder=builder,
        )

    def _graph_run(self, plan: StagePlan, batch: PackedBatch):
        """The uncut exported graph partitioned by the proof."""
        program = self.explorer.program
        ctx = Context(program, analyse_cuts(program, list(plan.cuts), plan=True), plan)
        cuts = [(cut.position, ctx.wire(cut).boundary) for cut in ctx.cuts]
        runner = RunStagesPass(program, _feeds(program, self.model, batch), cuts, ctx.stage_of)
        try:
            result = runner.run()
        except NodeFailure as failure:
            if isinstance(failure.__cause__, NotImplementedError):
                raise GateError(_failure_message(failure, "the staged program")) from None
            return None, [], _raised("the staged program", failure)
        logits = _graph_logits(program, result.outputs) if result.blocked is None else None
        return logits, result.handovers, result.blocked

    def _isolation(self, batch: PackedBatch, packed: torch.Tensor, tolerance: float, state):
        """Each document alone, from the state the packed run started from."""
        found = []
        for index, (start, end) in enumerate(batch.spans):
            self.model.load_state_dict(state)
            alone = _call(self.model, batch.document(index))
            mine = packed[:, start:end]
            found.append(None if _same(mine, alone) else _relative(mine, alone))
        return _isolation_check(found, tolerance)


@dataclass
class _Outcome:
    """What one way of running the plan found."""

    uncut: torch.Tensor
    bytes: ByteCheck
    isolation: IsolationCheck
    handovers: list[Handover]
    train: TrainCheck | None = None


@dataclass
class _Pass:
    """One pass through the stage processes: the logits or why not, and each result."""

    logits: torch.Tensor | None = None
    blocked: Blocked | None = None
    handovers: list[Handover] = field(default_factory=list)
    wires: list[torch.Tensor | None] = field(default_factory=list)
    results: dict[int, dict] = field(default_factory=dict)


class _StageChain:
    """The stages of a plan, each run in its own fresh process, chained by bf16 bytes."""

    def __init__(self, recipe: Recipe, plan: StagePlan, batch: PackedBatch, workdir: str):
        self.recipe, self.plan, self.batch, self.workdir = recipe, plan, batch, workdir
        self.bounds = (0, *plan.cuts, plan.num_layers)
        self.last = plan.num_stages - 1

    def _job(self, index: int, checkpoint: str, wire, grad) -> dict:
        lo, hi = self.bounds[index], self.bounds[index + 1]
        return {
            "index": index,
            "layers": list(range(lo, hi)),
            "num_stages": self.plan.num_stages,
            "checkpoint": checkpoint,
            "wire": wire,
            "grad": grad,
        }

    def forward(self, checkpoints: list[str], train: bool = False) -> _Pass:
        """Stage 0 to the last, each receiving only the previous stage's bf16 output;
        with ``train`` the last stage also takes its backward and SGD step."""
        run = _Pass(wires=[None])
        for index in range(self.last + 1):
            grad = "loss" if train and index == self.last else None
            job = self._job(index, checkpoints[index], run.wires[-1], grad)
            result = _fresh(run_stage, self.recipe, self.batch, job)
            if "raised" in result:
                run.blocked = Blocked(index, "", "", None, result["raised"])
                return run
            run.results[index] = result
            if index == self.last:
                run.logits = result["out"]
                return run
            wire, handover = _stage_handover(result["out"], self.bounds[index + 1])
            run.wires.append(wire)
            run.handovers.append(handover)
        return run

    def backward(self, first: _Pass, checkpoint: str) -> str | None:
        """From the last stage back to stage 0: each recomputes its forward on the wire
        it received, back-propagates the wire's bf16 gradient and steps; ``None`` or why
        a stage could not."""
        grad = first.results[self.last].get("grad")
        for index in reversed(range(self.last)):
            if grad is None:
                return f"stage {index + 1} returned no gradient for its input wire"
            job = self._job(index, checkpoint, first.wires[index], grad)
            result = _fresh(run_stage, self.recipe, self.batch, job)
            if "raised" in result:
                return result["raised"]
            first.results[index] = result
            grad = result.get("grad")
        return None

    def train_check(self, first: _Pass, uncut: dict) -> TrainCheck:
        """One step on the staged pipeline against the uncut model's step."""
        if first.blocked is not None:
            return TrainCheck("blocked", message=first.blocked.message)
        why = self.backward(first, uncut["checkpoint"])
        if why is not None:
            return TrainCheck("blocked", message=why)
        after = self.forward(self._stepped(first, uncut["checkpoint"]))
        if after.blocked is not None:
            return TrainCheck("blocked", message=after.blocked.message)
        return _train_check(uncut, first.results, after.logits)

    def _stepped(self, first: _Pass, checkpoint: str) -> list[str]:
        """Per stage: the uncut checkpoint with that stage's stepped parameters."""
        base = torch.load(checkpoint, weights_only=True)
        paths = []
        for index in range(self.last + 1):
            path = str(Path(self.workdir) / f"stepped-{index}.pt")
            torch.save(base | first.results[index]["params"], path)
            paths.append(path)
        return paths


def _train_check(uncut: dict, results: dict[int, dict], after: torch.Tensor) -> TrainCheck:
    """Every parameter (global name) after one step, and the logits of a second forward."""
    staged: dict[str, list[torch.Tensor]] = {}
    for result in results.values():
        trained = set(result["trained"])
        for name, value in result["params"].items():
            if name in trained:
                staged.setdefault(name, []).append(value)
    for result in results.values():
        for name, value in result["params"].items():
            staged.setdefault(name, [value])
    differing, worst = [], 0.0
    for name, value in uncut["params"].items():
        copies = staged.get(name, [])
        bad = [c for c in copies if not _same(c, value)]
        if not copies or bad:
            differing.append(name)
            worst = max([worst, *(_abs_diff(c, value) for c in bad)], default=worst)
    logits = "equal" if _same(after, uncut["after"]) else "differ"
    status = "equal" if not differing and logits == "equal" else "differ"
    return TrainCheck(status, len(uncut["params"]), differing, worst, logits)


def _abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return (a.float() - b.float()).abs().nan_to_num(float("inf")).max().item()


def _fresh(fn, *args) -> dict:
    """``fn(*args)`` in a fresh process; an ``error`` it reports is a :class:`GateError`."""
    try:
        result = unpack(run_fresh(fn, pack(args)))
    except GraphcheckError as err:
        raise GateError(str(err)) from None
    except Exception as err:  # pickling a model, builder or result
        raise GateError(f"cannot run in a fresh process: {type(err).__name__}: "
                        f"{_one_line(err)}; pass the model and the stage builder as "
                        "file.py:function specs") from None  # fmt: skip
    if "error" in result:
        raise GateError(result["error"])
    return result


def _isolation_check(found: list, tolerance: float) -> IsolationCheck:
    """Per document ``None`` (bitwise) or its relative diff, as an :class:`IsolationCheck`."""
    worst, at = 0.0, None
    for index, rel in enumerate(found):
        if rel is not None and (at is None or rel > worst):
            worst, at = rel, index
    bitwise = at is None
    status = "bitwise" if bitwise else "tolerance" if worst <= tolerance else "fail"
    return IsolationCheck(status, worst, at, tolerance, len(found))


def _default_builder(spec: str | None, builder):
    """The user's stage builder; else ``hf-slice`` for ``hf:`` models, ``keep-index``
    for the rest (pipeline-aware models)."""
    if builder is not None:
        return builder
    return "hf-slice" if spec is not None and is_hf_spec(spec) else "keep-index"


def _not_pipeline_aware(builder: str, message: str) -> str:
    """A stage raised under the builder the user did not choose: could not run."""
    name = builder.rpartition(":")[2] if ":" in builder else builder
    return (
        f"{message}, built by the default stage builder {name}; if the model is not "
        "pipeline-aware pass --stage-builder FILE.py:FN (or --in-process for the "
        "partitioned exported graph)"
    )


_MODES = ("processes", "graph")


def _check_mode(mode: str, builder, train: bool) -> None:
    if mode not in _MODES:
        raise UsageError(f"unknown gate mode {mode!r}: use {' or '.join(_MODES)}")
    if mode == "graph" and (builder is not None or train):
        raise UsageError(
            "the in-process graph mode runs the exported forward graph only: drop "
            "--stage-builder and --train, or drop --in-process"
        )


class _Clock:
    """Seconds spent per phase of a run."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.phases: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, phase: str):
        begin = time.perf_counter()
        try:
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


def _real_factory(model: ModelArg, session) -> Callable[[], nn.Module] | None:
    if is_hf_spec(model):
        return hf_factory(model, session.settings)
    if isinstance(model, str):
        return _imported_factory(model) or resolve_factory(model)
    return None if isinstance(model, nn.Module) else model


def _imported_factory(spec: str) -> Callable[[], nn.Module] | None:
    """The factory of a ``file.py:factory`` spec from the module the fake build already
    imported (:func:`graphcheck.model.load.resolve_factory` names it after the file), so a
    model file that registers custom ops at import is not imported twice."""
    target, name = parse_spec(spec)
    if not target.endswith(".py"):
        return None
    stem = "_".join(Path(target).resolve().with_suffix("").parts[-3:])
    module = sys.modules.get(f"graphcheck_model_{stem}")
    factory = getattr(module, name, None)
    return factory if callable(factory) else None


@contextlib.contextmanager
def _seeded(seed: int):
    """Seed torch's generator inside the block and restore the caller's state after."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _build_real(factory: Callable[[], nn.Module], seed: int) -> nn.Module:
    try:
        with _seeded(seed), default_dtype(torch.bfloat16):
            model = factory()
    except Exception as err:
        name = getattr(factory, "__name__", "factory")
        raise ModelLoadError(f"factory {name}() raised {type(err).__name__}: {err}") from err
    return model.eval()


def _vocab_size(model: nn.Module, explorer: Explorer) -> int:
    for fqn in explorer.session.layout.input_fqns:
        module = model.get_submodule(fqn)
        if isinstance(module, nn.Embedding):
            return module.num_embeddings
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    if not isinstance(size, int):
        raise GateError("cannot tell the vocabulary size: no nn.Embedding input module")
    return size


def _feeds(program: Program, model: nn.Module, batch: PackedBatch) -> dict[str, object]:
    """Real values for every placeholder of the exported program."""
    exported = program.exported.program
    state = dict(model.named_parameters(remove_duplicate=False))
    state |= dict(model.named_buffers(remove_duplicate=False))
    user = batch.inputs(program.exported.inputs)
    names = dict(zip(exported.graph_signature.user_inputs, program.exported.inputs, strict=False))
    feeds: dict[str, object] = {}
    for spec in exported.graph_signature.input_specs:
        name = spec.arg.name
        if spec.kind == InputKind.USER_INPUT:
            feeds[name] = user[names[name]]
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            feeds[name] = state.get(spec.target)
        else:
            feeds[name] = exported.constants.get(spec.target)
        if feeds[name] is None or isinstance(feeds[name], FakeTensor):
            raise GateError(f"no real value for {spec.target or name} in the model")
    return feeds


def _graph_logits(program: Program, outputs) -> torch.Tensor:
    specs = program.exported.program.graph_signature.output_specs
    for spec, value in zip(specs, outputs, strict=False):
        if spec.kind == OutputKind.USER_OUTPUT and isinstance(value, torch.Tensor):
            return value
    raise GateError("the exported program returns no tensor")


def _call(model: nn.Module, batch: PackedBatch) -> torch.Tensor:
    names, _ = accepted_inputs(model)
    try:
        out = model(**batch.inputs(names))
    except NotImplementedError as err:
        raise GateError(_kernel_message("the model", err)) from None
    except Exception as err:
        raise GateError(f"the model raised {type(err).__name__} on real weights: {err}") from err
    return _logits(out)


def _logits(out) -> torch.Tensor:
    try:
        return logits_of(out)
    except Exception as err:
        raise GateError(f"the model returned {type(out).__name__}, not logits") from err


def _one_line(err: BaseException) -> str:
    """The first sentence of the first line of ``err``, shortened."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    text = lines[0].split(". ")[0] if lines else type(err).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _kernel_message(where: str, err: BaseException) -> str:
    return f"{where} has an op without a CPU implementation: {_one_line(err)}"


def _failure_message(failure: NodeFailure, what: str) -> str:
    cause = failure.__cause__
    op = op_name(failure.node.target)
    at = f"at {failure.node.name} in {failure.where}"
    if isinstance(cause, NotImplementedError):
        return f"no CPU implementation for `{op}` ({at}): {_one_line(cause)}"
    return f"{what} cannot run on CPU: `{op}` {at} raised {type(cause).__name__}: " + _one_line(
        cause
    )


def _raised(what: str, err: BaseException, stage: int = -1) -> Blocked:
    cause = err.__cause__ if isinstance(err, NodeFailure) else err
    where = f" ({err})" if isinstance(err, NodeFailure) else ""
    message = f"{what} raised {type(cause).__name__}{where}: {_one_line(cause)}"
    return Blocked(stage, "", "", None, message)


def _stage_handover(out, cut: int) -> tuple[torch.Tensor, Handover]:
    value = _logits(out)
    dtype = str(value.dtype).removeprefix("torch.")
    shape = [str(d) for d in value.shape]
    wire = value.detach().to(torch.bfloat16, copy=True).contiguous()
    return wire, Handover(cut, "stage output", dtype, shape, dtype != "bfloat16")


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    diff = (a.float() - b.float()).abs().max().item()
    scale = b.float().abs().max().item()
    value = diff / max(scale, 1e-30)
    return value if value == value else float("inf")


def _bytes_check(staged, uncut: torch.Tensor, batch: PackedBatch, blocked) -> ByteCheck:
    if blocked is not None:
        return ByteCheck("blocked", blocked=blocked, message=blocked.message)
    if staged is None:
        return ByteCheck("blocked", message="the last stage returned nothing")
    if staged.shape != uncut.shape or staged.dtype != uncut.dtype:
        message = (
            f"staged logits {staged.dtype}{list(staged.shape)}, "
            f"uncut {uncut.dtype}{list(uncut.shape)}"
        )
        return ByteCheck("differ", float("inf"), None, message=message)
    if torch.equal(staged, uncut):
        return ByteCheck("equal")
    diff = (staged.float() - uncut.float()).abs().nan_to_num(float("inf"))
    index = (staged != uncut).nonzero()[0].tolist()
    first = None
    if staged.dim() == 3 and staged.shape[1] == batch.tokens:
        document, position = batch.locate(index[1])
        first = {"token": index[1], "document": document, "position": position}
        first["column"] = index[2]
    return ByteCheck("differ", diff.max().item(), first, message=f"first at index {index}")


def _builder_name(builder) -> str | None:
    if builder is None or isinstance(builder, str):
        return builder
    return getattr(builder, "__qualname__", repr(builder))
