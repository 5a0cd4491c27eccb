"""The byte gate: run the uncut and the split program on CPU and compare the bytes.

A static proof is only trusted if it never says "pass" where the split program
computes different bytes. ``graphcheck gate`` carries that ground truth:

1. it proves the plan (the same :class:`graphcheck.api.Explorer` export and
   rules as ``graphcheck verify``);
2. it builds the model again with small real random bf16 weights (the factory
   called with bf16 as the default dtype after ``torch.manual_seed(seed)``, not
   under the fake mode) and packs several documents into one varlen batch;
3. it runs the uncut model (eager), then the split program stage by stage,
   handing over only what the proof allows to cross
   (:mod:`graphcheck.passes.run_stages_pass`: the exported uncut graph
   partitioned by the proof, fed the real tensors), or, with a stage builder,
   the user's stage modules chained through a bf16 hand-off; it compares the
   logits with ``torch.equal``;
4. it checks **document isolation**: each document's packed logits against the
   document run alone, bitwise where the CPU kernels allow and otherwise within
   :data:`~graphcheck.gate_report.ISOLATION_TOLERANCE`.

Attention runs on the exact per-document CPU reference of
:mod:`graphcheck.cpu_reference`; graphcheck's own stand-in ops use their eager
per-document implementations. Before anything is compared the uncut exported
program runs once on the real batch: an op without a CPU implementation stops
the gate there with a :class:`GateError` naming it (exit 2).

The gate runs torch on one thread (tiny tensors; one thread fixes the
reduction order and keeps an oversubscribed machine from slowing tiny ops a
hundredfold) and leaves the caller's random state as it was. When the exported
uncut program itself does not reproduce the model's bytes at the batch's length
(an export that specialised on the length, GC403) the report says so
(``export_faithful``).

>>> report = gate("fixtures/reference.py:reference", cuts=[4], docs=(9, 5))
>>> report.static_verdict, report.bytes.status, report.isolation.holds, report.exit_code
('pass', 'equal', True, 0)
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor
from torch.export.graph_signature import InputKind, OutputKind

from graphcheck.api import Explorer, ModelArg
from graphcheck.checker import DEFAULT_ALLOW_FP32, Context
from graphcheck.cpu_reference import cpu_kernels
from graphcheck.dataflow import analyse_cuts
from graphcheck.equivalence import _mapping
from graphcheck.errors import GraphcheckError, ModelLoadError
from graphcheck.export import accepted_inputs
from graphcheck.gate_report import ISOLATION_TOLERANCE, ByteCheck, GateReport, IsolationCheck
from graphcheck.hf import hf_factory, is_hf_spec
from graphcheck.kernels import patched
from graphcheck.load import default_dtype, parse_spec, resolve_factory
from graphcheck.ops import op_name
from graphcheck.packed import DEFAULT_DOCS, PackedBatch
from graphcheck.partition import StagePlan
from graphcheck.passes.run_stages_pass import Blocked, Handover, NodeFailure, RunStagesPass
from graphcheck.program import Program
from graphcheck.stages import StageBuilder, resolve_builder

__all__ = ["Gate", "GateError", "gate"]


class GateError(GraphcheckError):
    """The gate could not run: an op without a CPU implementation, a model that
    raises on real weights. Exit status 2."""


def gate(
    model: ModelArg,
    cuts: Sequence[int] | None = None,
    stages: int | None = None,
    *,
    stage_builder: str | StageBuilder | None = None,
    seed: int = 0,
    docs: Sequence[int] = DEFAULT_DOCS,
    tolerance: float = ISOLATION_TOLERANCE,
    allow_fp32: Sequence[str] = DEFAULT_ALLOW_FP32,
    **options,
) -> GateReport:
    """Prove a stage plan, then run it on real weights and compare the bytes.

    ``model``, ``cuts``, ``stages``, ``stage_builder`` and the model options are those
    of :func:`graphcheck.verify`; ``docs`` are the document lengths packed into the
    batch. Raises :class:`graphcheck.errors.GraphcheckError` when it cannot run."""
    runner = Gate(model, seed=seed, allow_fp32=allow_fp32, **options)
    return runner.run(cuts, stages, stage_builder=stage_builder, docs=docs, tolerance=tolerance)


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
        allow_fp32: Sequence[str] = DEFAULT_ALLOW_FP32,
        **options,
    ) -> None:
        """``explorer``: an existing :class:`Explorer` of the same ``model`` and options,
        whose export (and proof) the gate reuses."""
        self.explorer = explorer or Explorer(model, allow_fp32=allow_fp32, **options)
        self.seed = seed
        self._factory = _real_factory(model, self.explorer.session)
        self._model = model if isinstance(model, nn.Module) else None

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
    ) -> GateReport:
        """Gate one plan; see :func:`gate`."""
        clock = _Clock()
        with clock("proof"):
            static = self.explorer.verify(cuts, stages, stage_builder=stage_builder)
        plan = StagePlan(tuple(c.position for c in static.cuts), static.num_layers)
        with clock("build"):
            batch = PackedBatch.random(docs, _vocab_size(self.model, self.explorer), self.seed)
        with self._running():
            with clock("preflight"):
                exported = self._preflight(batch)
            with clock("uncut"):
                uncut = _call(self.model, batch)
            with clock("staged"):
                staged, handovers, blocked = self._staged(stage_builder, plan, batch)
            with clock("isolation"):
                isolation = self._isolation(batch, uncut, tolerance)
        return GateReport(
            model=self.explorer.session.name,
            num_layers=static.num_layers,
            cuts=list(plan.cuts),
            docs=batch.docs,
            seed=self.seed,
            static_verdict=static.verdict,
            static_codes=sorted({d.code for d in static.errors}),
            bytes=_bytes_check(staged, uncut, batch, blocked),
            isolation=isolation,
            stages=static.stages,
            stage_builder=_builder_name(stage_builder),
            handovers=handovers,
            export_faithful=_same(exported, uncut),
            seconds=clock.seconds(),
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

    def _staged(self, builder, plan: StagePlan, batch: PackedBatch):
        if builder is not None:
            return self._builder_run(builder, plan, batch)
        return self._graph_run(plan, batch)

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

    def _builder_run(self, builder, plan: StagePlan, batch: PackedBatch):
        """The user's stage modules, chained through a bf16 hand-off."""
        layout = self.explorer.session.layout
        build = resolve_builder(builder, layout) if isinstance(builder, str) else builder
        bounds = (0, *plan.cuts, plan.num_layers)
        x, handovers = batch.input_ids, []
        for index, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            module = self._stage_module(build, index, list(range(lo, hi)), plan.num_stages)
            try:
                out = module(x, *batch.inputs(_VARLEN_REST).values())
            except NotImplementedError as err:
                raise GateError(_kernel_message(f"stage {index}", err)) from None
            except Exception as err:
                return None, handovers, _raised(f"stage {index}", err, index)
            if index == plan.num_stages - 1:
                return _logits(out), handovers, None
            x, handover = _stage_handover(out, bounds[index + 1])
            handovers.append(handover)
        return None, handovers, None

    def _stage_module(self, build, index: int, layers: list[int], num_stages: int) -> nn.Module:
        try:
            with _seeded(self.seed), default_dtype(torch.bfloat16):
                module = build(self.model, index, layers, num_stages)
        except GraphcheckError:
            raise
        except Exception as err:
            raise ModelLoadError(f"stage builder raised {type(err).__name__}: {err}") from err
        _load_stage_weights(module, self.model, self.explorer.session.layout, layers)
        return module.eval()

    def _isolation(self, batch: PackedBatch, packed: torch.Tensor, tolerance: float):
        worst, at, bitwise = 0.0, None, True
        for index, (start, end) in enumerate(batch.spans):
            alone = _call(self.model, batch.document(index))
            mine = packed[:, start:end]
            if _same(mine, alone):
                continue
            bitwise = False
            rel = _relative(mine, alone)
            if at is None or rel > worst:
                worst, at = rel, index
        status = "bitwise" if bitwise else "tolerance" if worst <= tolerance else "fail"
        return IsolationCheck(status, worst, at, tolerance, len(batch.docs))


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


_VARLEN_REST = ("position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")


def _real_factory(model: ModelArg, session) -> Callable[[], nn.Module] | None:
    if is_hf_spec(model):
        return hf_factory(model, session.settings)
    if isinstance(model, str):
        return _imported_factory(model) or resolve_factory(model)
    return None if isinstance(model, nn.Module) else model


def _imported_factory(spec: str) -> Callable[[], nn.Module] | None:
    """The factory of a ``file.py:factory`` spec from the module the fake build already
    imported (:func:`graphcheck.load.resolve_factory` names it after the file), so a
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
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(out, (tuple, list)):
        for value in out:
            if isinstance(value, torch.Tensor):
                return value
    raise GateError(f"the model returned {type(out).__name__}, not logits")


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


def _load_stage_weights(module: nn.Module, model: nn.Module, layout, layers: list[int]) -> None:
    """Copy the full model's weights into a stage module, mapping renumbered layers
    back to their global index (a rebuilt stage starts from fresh weights)."""
    source = dict(model.named_parameters(remove_duplicate=False))
    source |= dict(model.named_buffers(remove_duplicate=False))
    prefix = layout.layer_prefix + "."
    try:
        keys, _ = _mapping(module.get_submodule(layout.layer_prefix), layout.layer_prefix, layers)
    except AttributeError:
        keys = {}
    uncut = {g: k for k, g in layout.layer_keys.items()}
    targets = dict(module.named_parameters(remove_duplicate=False))
    targets |= dict(module.named_buffers(remove_duplicate=False))
    for name, tensor in targets.items():
        if name.startswith(prefix):
            key, _, rest = name[len(prefix) :].partition(".")
            if keys.get(key) not in uncut:
                continue
            name = f"{prefix}{uncut[keys[key]]}.{rest}"
        src = source.get(name)
        if src is not None and src.shape == tensor.shape and src is not tensor:
            tensor.data.copy_(src.data)


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
