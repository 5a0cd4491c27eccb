"""What each process of the gate runs: the uncut model, or one stage, as a rank would.

The gate (:mod:`graphcheck.gate.run`, :mod:`graphcheck.gate.chain`) runs every
function here in a fresh process (:func:`graphcheck.stages.fresh.run_fresh`): a
child that has imported torch and graphcheck and nothing else, so no state of
building, tracing or running the uncut model or another stage reaches a stage
(class-level counters, caches filled by a first caller, module-level flags set by
an earlier layer).

* :func:`run_uncut` builds the model from its :class:`Recipe` (real random
  bf16 weights, seeded, then the model's own init method), saves its parameters and
  persistent buffers by name (:func:`~graphcheck.gate.tensors.tensors_of`, no
  ``state_dict`` hooks) as the checkpoint every stage loads, runs the packed batch
  and the exact document-isolation tests (:mod:`graphcheck.gate.exact`: perturb and
  shift; with ``train`` on the gradients too), and with ``train`` takes one
  forward+backward+SGD step and runs again.
  What it compares is the recipe's :class:`~graphcheck.gate.output.Compared`
  (the returned tensor, a head applied to the returned hidden states, or a named
  module's output); the last stage reads the same from its own module.
* :func:`run_stage` builds the model, applies the stage builder, loads the
  stage's weights from the checkpoint through the stage's own layout (its layer
  container wherever the stage module holds it, renumbered layers mapped back
  to their global index, slots the model leaves ``None`` skipped) and runs the
  stage on the bf16 wire it received. With a
  gradient it recomputes its forward, back-propagates the wire's gradient,
  takes the SGD step and saves its parameters under their global names.

Nothing here raises into the parent: every function returns a dict, with
``"error"`` (could not run: exit 2) or ``"raised"`` (the stage itself raised: a
finding) when it failed, so the gate reports one line, never a traceback.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.utils._pytree as pytree
from torch import nn

from graphcheck import varlen
from graphcheck.analysis.export import accepted_inputs
from graphcheck.errors import GraphcheckError, UsageError
from graphcheck.gate.batch import PackedBatch
from graphcheck.gate.exact import Probe, gradient_check, isolation_check
from graphcheck.gate.messages import one_line
from graphcheck.gate.output import Compared, returned_tensor, wire_tensor
from graphcheck.gate.tensors import check_initialised, initialise, restore, tensors_of
from graphcheck.kernels import patched
from graphcheck.kernels.cpu_reference import cpu_kernels
from graphcheck.model.conventions import call, detect
from graphcheck.model.dtype import DtypePlan
from graphcheck.model.layout import Layout
from graphcheck.model.load import default_dtype, in_program_mode
from graphcheck.model.session import factory_of, stand_ins_of
from graphcheck.options import ModelOptions
from graphcheck.results.gate import IsolationCheck
from graphcheck.stages.build import stage_layout
from graphcheck.stages.builders import call_builder, resolve_builder

__all__ = [
    "LEARNING_RATE",
    "VARLEN_REST",
    "Recipe",
    "build_model",
    "build_stage",
    "global_names",
    "load_weights",
    "logits_of",
    "loss_of",
    "pack",
    "run_stage",
    "run_uncut",
    "stage_inputs",
    "tensor_leaves",
    "unpack",
]

LEARNING_RATE = 0.05  # SGD step of --train: large enough to move bf16 weights
# the inputs a stage module takes after ``x``, in order (graphcheck.varlen.INPUTS)
VARLEN_REST = varlen.stage_inputs("hidden")[1:]


@dataclass(frozen=True)
class Recipe:
    """How a fresh process builds the model and its stages (everything pickles)."""

    spec: str | None  # file.py:fn, pkg.mod:fn or hf:...; None: ``module_file``
    layout: Layout
    seed: int = 0
    options: ModelOptions = field(default_factory=ModelOptions)  # Session.rebuild_options
    module_file: str | None = None  # a model given as an object, saved whole
    builder: str | Callable | None = None  # builtin name, file.py:fn or a function
    compared: Compared = field(default_factory=Compared)  # returned, --head or --output-fqn
    dtype_plan: DtypePlan = field(default_factory=DtypePlan)  # --dtype: build dtype, fp32 kept
    init: str | None = None  # the init method called after the factory (gate.tensors)
    batched: bool = True  # the residual is [1, T, H] (False: [T, H]): where the token axis is


class _Failed(Exception):
    """A failure to report: ``kind`` is ``error`` (exit 2) or ``raised`` (a finding)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def pack(value) -> bytes:
    """``value`` as bytes: tensors cross a fresh process's pipe as plain bytes (torch's
    own reducer hands them over in shared memory, which dies with the child)."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def unpack(data: bytes):
    """The value :func:`pack` turned into bytes."""
    return torch.load(io.BytesIO(data), weights_only=False)


def _reported(fn):
    """``fn`` taking and returning :func:`pack` bytes, single-threaded, every exception
    turned into a returned status (``error`` or ``raised``)."""

    def wrapper(payload: bytes) -> bytes:
        torch.set_num_threads(1)
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                result = fn(*unpack(payload))
        except _Failed as failed:
            result = {failed.kind: str(failed)}
        except GraphcheckError as err:
            result = {"error": str(err)}
        except Exception as err:  # reported, never a traceback
            result = {"error": f"{type(err).__name__}: {one_line(err)}"}
        return pack(result)

    wrapper.__name__ = wrapper.__qualname__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def build_model(recipe: Recipe) -> nn.Module:
    """The model on real random bf16 weights (seeded), as every process builds it: the
    factory, then the model's own init method (``recipe.init``) in the same generator
    state, every parameter initialised (:mod:`graphcheck.gate.tensors`), in the proof's
    program mode."""
    if recipe.module_file is not None:
        model = torch.load(recipe.module_file, weights_only=False)
        check_initialised(model, recipe.init)
        return in_program_mode(model, recipe.options.program_mode)
    factory = factory_of(recipe.spec, recipe.options)
    with torch.random.fork_rng(devices=[]), default_dtype(recipe.dtype_plan.dtype.torch):
        torch.manual_seed(recipe.seed)
        model = _built(factory)
        initialise(model, recipe.init)
    check_initialised(model, recipe.init)
    return in_program_mode(recipe.dtype_plan.apply(model), recipe.options.program_mode)


def _built(factory: Callable[[], nn.Module]) -> nn.Module:
    try:
        return factory()
    except Exception as err:
        name = getattr(factory, "__name__", "factory")
        raise _Failed("error", f"factory {name}() raised {type(err).__name__}: {err}") from err


def _call(fn, what: str):
    """``fn()``; an op without a CPU kernel or graphcheck's own error (an output it cannot
    read) is an error, anything else a finding."""
    try:
        return fn()
    except NotImplementedError as err:
        raise _Failed("error", f"{what} has an op without a CPU implementation: "
                      f"{one_line(err)}") from err  # fmt: skip
    except (_Failed, GraphcheckError):
        raise
    except Exception as err:
        raise _Failed("raised", f"{what} raised {type(err).__name__}: {one_line(err)}") from err


def logits_of(out) -> torch.Tensor:
    """The logits (or hidden states) tensor of a model's or stage's output
    (:func:`graphcheck.gate.output.returned_tensor`)."""
    return returned_tensor(out)


def tensor_leaves(out) -> list[torch.Tensor]:
    """Every tensor of a forward's output, in the order ``torch.export`` flattens it."""
    return [v for v in pytree.tree_leaves(out) if isinstance(v, torch.Tensor)]


def loss_of(logits: torch.Tensor, seed: int) -> torch.Tensor:
    """The fixed loss of ``--train``: ``(logits.float() * R).sum()``, R seeded."""
    generator = torch.Generator().manual_seed(seed + 1)
    weights = torch.randn(logits.shape, generator=generator) / logits.shape[-2]
    return (logits.float() * weights).sum()


def _outputs(model: nn.Module, batch: PackedBatch, compared: Compared, inputs_from=None):
    """The tensors ``model`` returns on ``batch`` and the one ``compared`` reads."""
    convention = detect(model, inputs_from)
    names, _ = accepted_inputs(model, convention, batch.docs)
    with compared.reading(model) as read:
        out = call(model, convention, batch.inputs(names))
        return tensor_leaves(out), read(out)


def _forward(
    model: nn.Module, batch: PackedBatch, compared: Compared, inputs_from: str | None = None
) -> torch.Tensor:
    return _outputs(model, batch, compared, inputs_from)[1]


def _exact_isolation(model: nn.Module, batch: PackedBatch, state: dict, recipe: Recipe,
                     train: bool) -> IsolationCheck:  # fmt: skip
    """The exact isolation tests (:mod:`graphcheck.gate.exact`) from ``state``, the
    weights and buffers the packed run started from (a model that writes its buffers in
    place must not see its own earlier runs); with ``train`` the gradient tests too."""
    forward = lambda b: _forward(model, b, recipe.compared, recipe.options.inputs_from)  # noqa: E731
    probe = Probe(model, forward, recipe.layout, state, recipe.seed, recipe.batched)
    with torch.no_grad():
        check = _call(lambda: isolation_check(probe, batch), "the model")
    if train:
        check.gradients = _call(lambda: gradient_check(probe, batch), "the model's backward")
    restore(model, state)
    return check


def _sgd_step(module: nn.Module, loss: torch.Tensor | None, out=None, grad=None) -> None:
    """Back-propagate (``loss`` or ``out`` with ``grad``), one SGD step."""
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    if loss is not None:
        loss.backward()
    else:
        out.backward(grad.to(out.dtype))
    torch.optim.SGD(params, lr=LEARNING_RATE).step()


@_reported
def run_uncut(recipe: Recipe, batch: PackedBatch, workdir: str, train: bool = False) -> dict:
    """The uncut model: checkpoint, the compared tensor (``logits``) and every returned
    tensor (``returned``), the exact isolation tests (an :class:`IsolationCheck`,
    gradients included with ``train``); with ``train`` one step after."""
    model = build_model(recipe)
    checkpoint = str(Path(workdir) / "uncut.pt")
    torch.save(tensors_of(model, persistent=True), checkpoint)
    state = tensors_of(model)
    compared = recipe.compared
    with cpu_kernels(), patched(model, stand_ins_of(recipe.options)):
        with torch.no_grad():
            returned, logits = _call(
                lambda: _outputs(model, batch, compared, recipe.options.inputs_from), "the model"
            )
        isolation = _exact_isolation(model, batch, state, recipe, train)
        result = {"logits": logits, "returned": returned, "isolation": isolation}
        result["checkpoint"] = checkpoint
        if train:
            out = _call(
                lambda: _forward(model, batch, compared, recipe.options.inputs_from), "the model"
            )
            _call(lambda: _sgd_step(model, loss_of(out, recipe.seed)), "the model's backward")
            with torch.no_grad():
                result["after"] = _call(
                    lambda: _forward(model, batch, compared, recipe.options.inputs_from),
                    "the model",
                )
            result["params"] = _named_params(model)
    return result


def _named_params(module: nn.Module, names: dict[str, str] | None = None) -> dict:
    """Parameters by (global) name, detached copies."""
    found = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        key = name if names is None else names.get(name)
        if key is not None:
            found[key] = p.detach().clone()
    return found


def stage_inputs(batch: PackedBatch) -> tuple:
    """The varlen side inputs every stage module takes after ``x``."""
    return tuple(batch.inputs(VARLEN_REST).values())


def _builder(recipe: Recipe):
    builder = recipe.builder
    if isinstance(builder, str):
        return resolve_builder(builder, recipe.layout)
    if builder is None:
        raise UsageError("no stage builder: pass --stage-builder NAME or FILE.py:FN")
    return builder


def _name(builder) -> str | None:
    return builder if isinstance(builder, str) else None


def build_stage(recipe: Recipe, index: int, layers: list[int], num_stages: int):
    """Stage ``index`` built from the model by the builder; (module, stage -> global names)."""
    model = build_model(recipe)
    build = _builder(recipe)
    plan = recipe.dtype_plan
    with torch.random.fork_rng(devices=[]), default_dtype(plan.dtype.torch):
        torch.manual_seed(recipe.seed)
        module = call_builder(build, model, index, layers, num_stages, _name(recipe.builder))
    try:
        names = global_names(module, recipe.layout, layers, model)
    except GraphcheckError as err:
        raise _Failed("error", f"stage {index}: {err}") from err
    plan.apply(module, lambda name: names.get(name, name))  # what a builder made, cast the same
    return in_program_mode(module, recipe.options.program_mode), names


def _own_layout(
    module: nn.Module, layout: Layout, layers: list[int], model: nn.Module | None
) -> tuple[Layout, Callable[[str], str]]:
    """The stage's own layout (:func:`graphcheck.stages.build.stage_layout`), its container
    keys mapped to the stage's global layers the uncut model has (a pruned model holds
    ``None`` in some slots); all the stage's layers when that maps nothing (a builder
    that constructs the missing layers)."""
    known = set(layout.layer_keys.values())
    present = [g for g in layers if g in known]
    own, rename = stage_layout(module, layout, present, model)
    if not own.layer_keys and present != list(layers):
        own, rename = stage_layout(module, layout, list(layers), model)
    return own, rename


def global_names(
    module: nn.Module, layout: Layout, layers: list[int], model: nn.Module | None = None
) -> dict[str, str]:
    """Stage parameter/buffer name -> its name in the uncut model, through the stage's
    own layout: its layer container (found by identity with ``model``'s, its own
    ``get_pp_module_config()``, the model's prefix or a path ending the same way) with
    renumbered layers mapped back to their global index, other modules moved to the
    uncut model's root. Names of layers it cannot map are left out. Raises
    :class:`graphcheck.errors.LayoutError` when the stage has no layer container."""
    own, rename = _own_layout(module, layout, layers, model)
    prefix = own.layer_prefix + "."
    uncut = {g: k for k, g in layout.layer_keys.items()}
    names = {}
    tensors = [n for n, _ in module.named_parameters(remove_duplicate=False)]
    tensors += [n for n, _ in module.named_buffers(remove_duplicate=False)]
    for name in tensors:
        if not name.startswith(prefix):
            names[name] = rename(name)
            continue
        key, _, rest = name[len(prefix) :].partition(".")
        if own.layer_keys.get(key) in uncut:
            names[name] = f"{layout.layer_prefix}.{uncut[own.layer_keys[key]]}.{rest}"
    return names


def load_weights(module: nn.Module, names: dict[str, str], state: dict, index: int) -> list[str]:
    """Copy ``state`` (global names) into the stage by its tensors' names; every
    parameter must be found. The stage names it loaded."""
    params = dict(module.named_parameters(remove_duplicate=False))
    tensors = params | dict(module.named_buffers(remove_duplicate=False))
    loaded = []
    for name, tensor in tensors.items():
        source = state.get(names.get(name, ""))
        if source is None or source.shape != tensor.shape:
            if name in params:
                raise _Failed("error", f"stage {index} parameter {name} has no entry of shape "
                              f"{list(tensor.shape)} in the uncut checkpoint; build the stage "
                              "so its layers map back to global indices")  # fmt: skip
            continue
        with torch.no_grad():
            tensor.copy_(source)
        loaded.append(name)
    return loaded


@_reported
def run_stage(recipe: Recipe, batch: PackedBatch, job: dict) -> dict:
    """One stage on its wire. ``job``: ``index``, ``layers``, ``num_stages``,
    ``checkpoint`` (global names), ``wire`` (``None`` on stage 0), ``grad`` (the wire
    gradient from the next stage; ``"loss"`` on the last stage) or ``None``."""
    index, layers = job["index"], job["layers"]
    module, names = build_stage(recipe, index, layers, job["num_stages"])
    load_weights(module, names, torch.load(job["checkpoint"], weights_only=True), index)
    x = batch.input_ids if job["wire"] is None else job["wire"]
    what = f"stage {index}"
    with cpu_kernels(), patched(module, stand_ins_of(recipe.options)):
        if job["grad"] is None:
            with torch.no_grad():
                out = _call(lambda: _stage_forward(module, x, batch, recipe, job), what)
            return {"out": out}
        return _train_stage(module, names, batch, job, x, recipe)


def _stage_forward(module: nn.Module, x, batch: PackedBatch, recipe: Recipe, job: dict):
    """The stage's output tensor: the wire it hands on or, on the last stage, what the
    gate compares (read from the stage's own module)."""
    if job["index"] < job["num_stages"] - 1:
        return wire_tensor(module(x, *stage_inputs(batch)))
    with recipe.compared.reading(module, f"stage {job['index']}") as read:
        return read(module(x, *stage_inputs(batch)))


def _train_stage(module, names, batch, job, x, recipe: Recipe) -> dict:
    """Recompute the forward with grad, back-propagate, step; params by global name."""
    what = f"stage {job['index']}"
    if x.is_floating_point():
        x = x.detach().requires_grad_(True)
    out = _call(lambda: _stage_forward(module, x, batch, recipe, job), what)
    if isinstance(job["grad"], str):
        _call(lambda: _sgd_step(module, loss_of(out, recipe.seed)), f"{what} backward")
    else:
        _call(lambda: _sgd_step(module, None, out, job["grad"]), f"{what} backward")
    result = {"out": out.detach(), "params": _named_params(module, names)}
    named = module.named_parameters(remove_duplicate=False)
    result["trained"] = sorted({names[n] for n, p in named if p.grad is not None and n in names})
    if x.is_floating_point():
        if x.grad is None:
            raise _Failed("raised", f"{what}: no gradient reaches its input wire")
        result["grad"] = x.grad.detach().to(torch.bfloat16, copy=True).contiguous()
    return result
