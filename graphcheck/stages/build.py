"""Build, export and summarise one stage program, the way a rank builds it.

For every stage of a plan the stage builder makes the stage module; graphcheck
exports it with the same symbolic inputs and summarises it as plain data (a
:class:`StageProgram`) that :mod:`graphcheck.stages.compare` compares with the
uncut program.

Stages are built as ranks build them. :func:`build_stage_fresh` runs in a fresh
process (:func:`graphcheck.stages.fresh.run_fresh`): it imports the model code, builds
the model as its factory does (the model the builder takes), applies the kernel
stand-ins and the builder, exports the stage and analyses it. No state left by
building or exporting the uncut model or another stage reaches it: class-level
counters, caches filled by a first caller and module-level flags set at trace
time start as a rank finds them. The builder takes a model built in that same
process, as on a rank that builds the model and then takes its stage: a builder
that constructs fresh layers finds a class counter where building the model left
it. A model given as a Python object cannot be
rebuilt elsewhere; its stages are built in this process and the report says so
(``isolated: false``).

What comes back from the fresh process is a :class:`StageProgram`: the stage's
parts (:class:`graphcheck.stages.fingerprint.Part`, plain data) and what the checks
read, not the exported program. Shipping the exported program instead
(``torch.export.save``/``load``) keeps ``nn_module_stack``, ``stack_trace`` and
the symbol names, but loading costs about 7 ms a node in this process, more
than exporting the stage; fingerprints cost nothing to load and the child
analyses its own program with the same passes.

The stage's layer container is found by module identity with the model's
(builders that keep the layer objects), else by the stage's own
``get_pp_module_config()``, the model's prefix, a path that ends the same way
(``inner.model.layers`` for ``model.layers``) or the usual names; edge modules
and model-level FQNs are mapped through the same change of root."""

from __future__ import annotations

import functools
import logging
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.fx
from torch import nn

from graphcheck.analysis.export import export_model
from graphcheck.analysis.program import Program, analyse
from graphcheck.analysis.regions import GLUE, INPUT, OUTPUT, Region, RegionKind
from graphcheck.errors import AnalysisError, GraphcheckError, LayoutError, one_line, reworded
from graphcheck.model.boundary import WireShape
from graphcheck.model.layout import _LAYER_CANDIDATES, Layout, _layer_keys
from graphcheck.model.load import default_dtype
from graphcheck.model.values import shadow_values
from graphcheck.options import ModelOptions
from graphcheck.stages.builders import call_builder
from graphcheck.stages.fingerprint import (
    NodeRecord,
    Part,
    Provenance,
    glue_labels,
    is_identity_view,
    is_size,
    op_label,
    part_of,
    record,
)
from graphcheck.varlen import ExampleBatch

__all__ = [
    "StageProgram",
    "StageRequest",
    "build_stage",
    "build_stage_fresh",
    "stage_layout",
]


@dataclass
class StageProgram:
    """One stage module, exported and analysed, as plain data: how its layers map to
    global ones and the parts :func:`compare_stage` compares."""

    index: int
    layers: list[int]
    keys: dict[str, int]  # container key -> global layer index
    renumbered: bool
    layer_ids: dict[int, int] = field(default_factory=dict)  # global -> layer_idx attribute
    seconds: float = 0.0
    nodes: int = 0
    parts: dict[Region, Part] = field(default_factory=dict)
    glue: Counter = field(default_factory=Counter)  # model-level op labels
    glue_nodes: dict[str, NodeRecord] = field(default_factory=dict)  # first node per label
    outputs: list[tuple[str | None, list[str] | None, NodeRecord]] = field(default_factory=list)
    isolated: bool = False  # built and exported in a fresh process


@dataclass(frozen=True)
class StageRequest:
    """What a fresh process needs to build one stage, as plain data."""

    model: str  # a MODEL spec: file.py:factory, pkg.mod:factory or hf:...
    builder: str  # a builtin name or file.py:function
    layout: Layout  # the uncut model's
    index: int
    layers: tuple[int, ...]
    num_stages: int
    # the wire the stage takes, [1, T, H] or [T, H] (None or 0 on the first stage; a
    # width or suffix: the batched [1, T, ...])
    hidden: WireShape | int | tuple[int, ...] | None
    options: ModelOptions = field(default_factory=ModelOptions)  # Session.rebuild_options
    batch: ExampleBatch = field(default_factory=ExampleBatch)  # the uncut export's example


def _mapping(container: nn.Module, prefix: str, layers: list[int]) -> tuple[dict, bool]:
    keys, _ = _layer_keys(container, prefix)
    present = sorted(keys, key=keys.__getitem__)
    if sorted(keys.values()) == sorted(layers):
        return keys, False
    if len(present) == len(layers):
        return dict(zip(present, layers, strict=True)), True
    return {}, True


def build_stage_fresh(request: StageRequest) -> StageProgram:
    """Build, export and summarise one stage from nothing but the model code (run in a
    fresh process). Anything unexpected becomes a one-line :class:`GraphcheckError`;
    torch's warnings and logs stay in the child (findings come back as data)."""
    logging.getLogger("torch").setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stage = _build_fresh(request)
    except GraphcheckError:
        raise
    except Exception as err:
        raise AnalysisError(
            f"stage {request.index}: building it raised {one_line(err)}; cannot verify"
        ) from None
    stage.isolated = True
    return stage


def _build_fresh(request: StageRequest) -> StageProgram:
    from graphcheck.kernels import patched
    from graphcheck.model.load import build_fake, fake_mode
    from graphcheck.model.session import factory_of, stand_ins_of
    from graphcheck.stages.builders import resolve_builder

    mode, options = fake_mode(), request.options
    model = build_fake(factory_of(request.model, options), mode, options.program_mode)
    builder = resolve_builder(request.builder, request.layout)
    _KEPT.append((model, mode))  # freed only when the process ends (see _KEPT)
    with patched(model, stand_ins_of(options)):
        return build_stage(
            model, request.layout, builder, mode, request.index, list(request.layers),
            request.num_stages, request.hidden, options.strict, request.builder, request.batch,
            options.program_mode,
        )  # fmt: skip


# The fake models a stage process built, kept alive until the process ends: freeing one
# in the middle of the process (its fake tensors' weak-keyed tables) has crashed the
# child in torch's weakref callbacks (torch/utils/weak.py, a segfault; hf:jetmoe's stage
# 1 after the builder was given the layer container). A stage process is thrown away.
_KEPT: list = []


def build_stage(
    model: nn.Module,
    layout: Layout,
    builder,
    mode,
    index: int,
    layers: list[int],
    num_stages: int,
    hidden: WireShape | int | tuple[int, ...] | None,
    strict: bool = False,
    name: str | None = None,
    batch: ExampleBatch | None = None,
    program_mode: str | None = None,
) -> StageProgram:
    """Build stage ``index`` with ``builder``, export it on the uncut export's example
    ``batch`` in the uncut model's ``program_mode`` (a builder that constructs new
    modules gets them in train mode), analyse it and summarise it. A later stage takes
    ``hidden``, the wire crossing its first cut (:class:`WireShape`), as ``x``."""
    module = _call_builder(builder, model, mode, index, layers, num_stages, name)
    own = _present(module, layout, layers, model)
    stage_lay, rename = stage_layout(module, layout, own, model)
    kind = "input_ids" if index == 0 else "hidden"
    try:
        exported = export_model(
            module, mode, strict, stage_input=kind, hidden_size=hidden or 0, batch=batch,
            program_mode=program_mode,
        )  # fmt: skip
        program = analyse(exported, stage_lay)
    except GraphcheckError as err:
        raise reworded(err, f"stage {index}: {err}") from None
    container = module.get_submodule(stage_lay.layer_prefix)
    keys, renumbered = _mapping(container, stage_lay.layer_prefix, own)
    stage = StageProgram(
        index, list(layers), keys, renumbered, _layer_ids(container, keys), exported.seconds,
        len(program.graph.nodes),
    )  # fmt: skip
    _summarise(stage, program, rename)
    return stage


def _present(module: nn.Module, layout: Layout, layers: list[int], model) -> list[int]:
    """The stage's layers the uncut model has (a pruned model holds ``None`` in some
    slots, and so does its stage); all of them when that maps none of the stage's
    container (a builder that constructs the missing layers)."""
    known = set(layout.layer_keys.values())
    present = [g for g in layers if g in known]
    if present == list(layers):
        return present
    prefix = stage_layout(module, layout, present, model)[0].layer_prefix
    keys, _ = _mapping(module.get_submodule(prefix), prefix, present)
    return present if keys else list(layers)


def _call_builder(builder, model, mode, index, layers, num_stages, name) -> nn.Module:
    with mode, default_dtype(torch.bfloat16), shadow_values():  # buffers' values too
        return call_builder(builder, model, index, layers, num_stages, name)


def stage_layout(
    module: nn.Module, layout: Layout, layers: list[int], model: nn.Module | None = None
) -> tuple[Layout, Callable[[str], str]]:
    """The layout of stage ``module`` (its own layer prefix, the edge modules it holds,
    container keys mapped to global layers) and the map from its FQNs to the uncut
    model's (``inner.model.norm.weight`` -> ``model.norm.weight``)."""
    prefix = _find_layers(module, layout, model)
    uroot, sroot = _roots(layout.layer_prefix, prefix)
    moved = {prefix: layout.layer_prefix}  # stage FQN -> uncut FQN
    edges: tuple[list[str], list[str]] = ([], [])
    for fqns, found in zip((layout.input_fqns, layout.output_fqns), edges, strict=True):
        for fqn in fqns:
            at = next((c for c in (_moved(fqn, uroot, sroot), fqn) if _has(module, c)), None)
            if at is not None:
                found.append(at)
                moved[at] = fqn
    keys, _ = _mapping(module.get_submodule(prefix), prefix, layers)
    stage = Layout(prefix, tuple(edges[0]), tuple(edges[1]), layout.num_layers, keys)
    return stage, functools.partial(_rename, moved, sroot, uroot)


def _rename(moved: dict[str, str], sroot: str, uroot: str, fqn: str) -> str:
    for at, fqn_uncut in sorted(moved.items(), key=lambda kv: -len(kv[0])):
        if fqn == at or fqn.startswith(at + "."):
            return fqn_uncut + fqn[len(at) :]
    return _moved(fqn, sroot, uroot)


def _find_layers(module: nn.Module, layout: Layout, model: nn.Module | None) -> str:
    """The path of ``module``'s layer container (see the module docstring for the order)."""
    found = _by_identity(module, model, layout) if model is not None else None
    declared = getattr(module, "get_pp_module_config", None)
    try:
        own = declared().get("layer_prefix") if callable(declared) else None
    except Exception:
        own = None
    names = [p for p, m in module.named_modules() if isinstance(m, nn.ModuleList | nn.ModuleDict)]
    ending = sorted(
        (p for p in names if p.endswith("." + layout.layer_prefix)
         or layout.layer_prefix.endswith("." + p)),
        key=len,
    )  # fmt: skip
    for candidate in (found, own, layout.layer_prefix, *ending, *_LAYER_CANDIDATES):
        if candidate and _is_container(module, candidate):
            return candidate
    raise LayoutError(
        f"cannot find the layer container of the {type(module).__name__} the stage builder "
        f"returned (not at {layout.layer_prefix!r}); give the stage module a "
        "get_pp_module_config() naming its layer_prefix"
    )


def _by_identity(module: nn.Module, model: nn.Module, layout: Layout) -> str | None:
    try:
        container = model.get_submodule(layout.layer_prefix)
    except AttributeError:
        return None
    layers = {id(m) for m in container.children()}
    for path, sub in module.named_modules():
        if sub is container:
            return path
        if isinstance(sub, nn.ModuleList | nn.ModuleDict) and any(
            id(m) in layers for m in sub.children()
        ):
            return path
    return None


def _is_container(module: nn.Module, fqn: str) -> bool:
    try:
        return isinstance(module.get_submodule(fqn), nn.ModuleList | nn.ModuleDict)
    except AttributeError:
        return False


def _roots(uncut: str, stage: str) -> tuple[str, str]:
    """The differing heads of two layer prefixes (``model.layers``, ``inner.model.layers``
    -> ``("", "inner")``)."""
    u, s = uncut.split("."), stage.split(".")
    while u and s and u[-1] == s[-1]:
        u, s = u[:-1], s[:-1]
    return ".".join(u), ".".join(s)


def _moved(fqn: str, old: str, new: str) -> str:
    """``fqn`` under root ``old`` moved to root ``new``; unchanged if not under ``old``."""
    if old and not fqn.startswith(old + "."):
        return fqn
    rest = fqn[len(old) + 1 :] if old else fqn
    return f"{new}.{rest}" if new else rest


def _has(module: nn.Module, fqn: str) -> bool:
    try:
        return module.get_submodule(fqn) is not None
    except AttributeError:
        return False


def _layer_ids(container: nn.Module, keys: dict[str, int]) -> dict[int, int]:
    ids = {}
    for key, g in keys.items():
        layer = container[key] if isinstance(container, nn.ModuleDict) else container[int(key)]
        for attr in ("layer_idx", "layer_id"):
            value = getattr(layer, attr, None)
            if isinstance(value, int):
                ids[g] = value
                break
    return ids


def _summarise(stage: StageProgram, program: Program, rename: Callable[[str], str]) -> None:
    """Fill ``stage`` with the parts and facts :func:`compare_stage` reads."""
    provenance = Provenance(program, rename)
    for region in (*(Region(RegionKind.LAYER, g) for g in stage.layers), INPUT, OUTPUT):
        stage.parts[region] = part_of(program, region, provenance)
    stage.glue = glue_labels(program, program.graph.nodes)
    for node in program.graph.nodes:
        if (
            program.region.get(node) == GLUE
            and node in program.interval
            and node.op == "call_function"
            and not is_size(node)
            and not is_identity_view(node)
        ):
            stage.glue_nodes.setdefault(op_label(program, node), record(program, node))
    output = next(n for n in program.graph.nodes if n.op == "output")
    values = [a for a in output.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]
    stage.outputs = [(program.dtype(v), program.shape(v), record(program, v)) for v in values]
    if not values:
        stage.outputs = [(None, None, record(program, output))]
