"""The model on real weights, in the gate's own process: its factory, the seeded bf16
build, the real values the exported program is fed, and the model called on a batch.

The factory is called with bf16 as the default dtype after ``torch.manual_seed(seed)``,
inside a forked generator state, so the same seed always gives the same weights and the
caller's random state is left alone.

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
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor
from torch.export.graph_signature import InputKind, OutputKind

from graphcheck.analysis.export import accepted_inputs
from graphcheck.analysis.program import Program
from graphcheck.api import Explorer, ModelArg
from graphcheck.errors import GateError, ModelLoadError
from graphcheck.gate.batch import PackedBatch
from graphcheck.gate.messages import kernel_message
from graphcheck.gate.runner import logits_of
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
    "graph_logits",
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
) -> nn.Module:
    """``factory()`` on seeded real bf16 weights, in ``program_mode`` (train or eval)."""
    try:
        with seeded(seed), default_dtype(torch.bfloat16):
            model = factory()
    except Exception as err:
        name = getattr(factory, "__name__", "factory")
        raise ModelLoadError(f"factory {name}() raised {type(err).__name__}: {err}") from err
    return in_program_mode(model, program_mode)


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
            found[name] = exported.constants.get(spec.target)
        if found[name] is None or isinstance(found[name], FakeTensor):
            raise GateError(f"no real value for {spec.target or name} in the model")
    return found


def graph_logits(program: Program, outputs) -> torch.Tensor:
    """The first user tensor output of the exported program."""
    specs = program.exported.program.graph_signature.output_specs
    for spec, value in zip(specs, outputs, strict=False):
        if spec.kind == OutputKind.USER_OUTPUT and isinstance(value, torch.Tensor):
            return value
    raise GateError("the exported program returns no tensor")


def call_model(model: nn.Module, batch: PackedBatch) -> torch.Tensor:
    """The model's logits on ``batch``; a raise is a one-line :class:`GateError`."""
    names, _ = accepted_inputs(model)
    try:
        out = model(**batch.inputs(names))
    except NotImplementedError as err:
        raise GateError(kernel_message("the model", err)) from None
    except Exception as err:
        raise GateError(f"the model raised {type(err).__name__} on real weights: {err}") from err
    return model_logits(out)


def model_logits(out) -> torch.Tensor:
    """The logits tensor of a model's output, or a :class:`GateError`."""
    try:
        return logits_of(out)
    except Exception as err:
        raise GateError(f"the model returned {type(out).__name__}, not logits") from err
