"""The model on real weights, in the gate's own process: its factory, the seeded bf16
build, the real values the exported program is fed, and the model called on a batch.

The factory is called with bf16 as the default dtype after ``torch.manual_seed(seed)``,
inside a forked generator state, so the same seed always gives the same weights and the
caller's random state is left alone; the model's own init method runs after it in the
same state, and a parameter left uninitialised stops the gate
(:mod:`graphcheck.gate.tensors`). With ``--dtype float32`` it is called with fp32 as
the default dtype and cast as the fake build was (:class:`~graphcheck.model.dtype.DtypePlan`).

The exported program is fed the real model's parameters and buffers, and for a lifted
constant the real model's attribute of that path: a plain tensor attribute
(``self._inv_freq_fp32 = ...``, neither buffer nor parameter) gets its real value the
way a buffer does. A constant with no real value (a tensor made during tracing, or an
attribute whose shape or dtype differs from the traced one) is a one-line
:class:`~graphcheck.errors.GateError`.

>>> model = build_real(lambda: nn.Linear(2, 2), seed=0)
>>> model.weight.dtype, torch.equal(model.weight, build_real(lambda: nn.Linear(2, 2), 0).weight)
(torch.bfloat16, True)
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.utils._pytree as pytree
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor
from torch.export.graph_signature import InputKind, OutputKind

from graphcheck.analysis.export import accepted_inputs
from graphcheck.analysis.program import Program
from graphcheck.api import Explorer, ModelArg
from graphcheck.errors import GateError, ModelLoadError
from graphcheck.gate.batch import PackedBatch
from graphcheck.gate.messages import kernel_message
from graphcheck.gate.output import Compared
from graphcheck.gate.runner import logits_of, tensor_leaves
from graphcheck.gate.tensors import check_initialised, initialise
from graphcheck.model.conventions import call, detect
from graphcheck.model.dtype import DtypePlan
from graphcheck.model.hf import hf_factory, is_hf_spec
from graphcheck.model.load import (
    ProgramMode,
    default_dtype,
    in_program_mode,
    parse_spec,
    resolve_factory,
)

__all__ = [
    "build_real",
    "call_model",
    "feeds",
    "graph_output",
    "graph_tensors",
    "model_logits",
    "real_factory",
    "seeded",
    "vocab_size",
]


def real_factory(model: ModelArg, session) -> Callable[[], nn.Module] | None:
    """The factory that builds ``model`` on real weights; ``None`` for a module."""
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
def seeded(seed: int):
    """Seed torch's generator inside the block and restore the caller's state after."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def build_real(
    factory: Callable[[], nn.Module],
    seed: int,
    program_mode: ProgramMode | str = ProgramMode.TRAIN,
    plan: DtypePlan | None = None,
    init: str | None = None,
) -> nn.Module:
    """``factory()`` on seeded real weights, then its init method ``init``
    (:func:`~graphcheck.gate.tensors.init_method`; ``None``: none) in the same generator
    state, every parameter initialised, in bf16 but for the carve-outs of ``plan`` (the
    fake build's), in ``program_mode`` (train or eval)."""
    plan = plan or DtypePlan()
    with seeded(seed), default_dtype(plan.dtype.torch):
        try:
            model = factory()
        except Exception as err:
            name = getattr(factory, "__name__", "factory")
            raise ModelLoadError(f"factory {name}() raised {type(err).__name__}: {err}") from err
        initialise(model, init)
    check_initialised(model, init)
    return in_program_mode(plan.apply(model), program_mode)


def vocab_size(model: nn.Module, explorer: Explorer) -> int:
    """The vocabulary of the input embedding (or of the model's config)."""
    for fqn in explorer.session.layout.input_fqns:
        module = model.get_submodule(fqn)
        if isinstance(module, nn.Embedding):
            return module.num_embeddings
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    if not isinstance(size, int):
        raise GateError("cannot tell the vocabulary size: no nn.Embedding input module")
    return size


def feeds(program: Program, model: nn.Module, batch: PackedBatch) -> dict[str, object]:
    """Real values for every placeholder of the exported program."""
    exported = program.exported.program
    state = dict(model.named_parameters(remove_duplicate=False))
    state |= dict(model.named_buffers(remove_duplicate=False))
    user = batch.inputs(program.exported.inputs)
    names = dict(zip(exported.graph_signature.user_inputs, program.exported.inputs, strict=False))
    found: dict[str, object] = {}
    for spec in exported.graph_signature.input_specs:
        name = spec.arg.name
        if spec.kind == InputKind.USER_INPUT:
            found[name] = user[names[name]]
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            found[name] = state.get(spec.target)
        else:
            found[name] = _constant(model, spec.target, exported.constants.get(spec.target))
        if found[name] is None or isinstance(found[name], FakeTensor):
            raise GateError(f"no real value for {spec.target or name} in the model")
    return found


def _constant(model: nn.Module, target: str | None, traced):
    """The real value of a lifted constant: the real model's attribute at ``target`` (a
    plain tensor attribute), else the exported value when it is real."""
    value = _attribute(model, target) if target else None
    if not isinstance(value, torch.Tensor) or isinstance(value, FakeTensor):
        return traced
    if isinstance(traced, torch.Tensor) and (
        value.shape != traced.shape or value.dtype != traced.dtype
    ):
        raise GateError(
            f"no real value for {target}: the real model's attribute is {value.dtype}"
            f"{list(value.shape)}, the traced one {traced.dtype}{list(traced.shape)}; build "
            "it the same way whatever the weights (or register it as a buffer)"
        )
    return value


def _attribute(model: nn.Module, path: str):
    value = model
    for part in path.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


def graph_output(program: Program, outputs):
    """What the exported program's forward returns, rebuilt from its flat outputs (a
    tensor, a tuple, a dict or a ``ModelOutput``, as the model returns it)."""
    exported = program.exported.program
    specs = exported.graph_signature.output_specs
    pairs = zip(specs, outputs, strict=False)
    user = [value for spec, value in pairs if spec.kind == OutputKind.USER_OUTPUT]
    try:
        return pytree.tree_unflatten(user, exported.call_spec.out_spec)
    except Exception:  # no out_spec to rebuild with: the flat outputs
        return tuple(user)


def graph_tensors(program: Program, outputs) -> list[torch.Tensor]:
    """The tensors the exported program's forward returns, in order."""
    tensors = tensor_leaves(graph_output(program, outputs))
    if not tensors:
        raise GateError("the exported program returns no tensor")
    return tensors


def call_model(
    model: nn.Module,
    batch: PackedBatch,
    compared: Compared | None = None,
    inputs_from: str | None = None,
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The tensors the model returns on ``batch`` (handed over as its input convention
    says, ``inputs_from`` or detected) and the one ``compared`` reads (the returned
    tensor by default); a raise is a one-line :class:`GateError`."""
    convention = detect(model, inputs_from)
    names, _ = accepted_inputs(model, convention, batch.docs)
    with (compared or Compared()).reading(model) as read:
        try:
            out = call(model, convention, batch.inputs(names))
        except NotImplementedError as err:
            raise GateError(kernel_message("the model", err)) from None
        except Exception as err:
            message = f"the model raised {type(err).__name__} on real weights: {err}"
            raise GateError(message) from err
        return tensor_leaves(out), read(out)


def model_logits(out) -> torch.Tensor:
    """The tensor a model's or stage's output holds, or a :class:`GateError`
    (:func:`graphcheck.gate.output.returned_tensor`)."""
    return logits_of(out)
