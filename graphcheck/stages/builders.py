"""Stage builders: the modules each pipeline stage actually runs.

A builder is ``build(model, stage_index, layer_indices, num_stages) -> nn.Module``.
The stage module's ``forward(x, position_ids, cu_seq_lens_q, cu_seq_lens_k,
max_length_q, max_length_k)`` takes ``input_ids`` as ``x`` on the first stage and
the bf16 hidden states on the others (``[1, T, H]``, or ``[T, H]`` for a model whose
residual is flat: :class:`graphcheck.model.boundary.WireShape`), and returns hidden states
(logits on the last stage).

Builtins, for models written pipeline-aware (modules a stage does not own set to
``None``; a stage without the embedding takes hidden states as ``input_ids``):

* ``keep-index`` - deep copy, layers outside the stage set to ``None``, global
  indices kept;
* ``moduledict`` - layers held in a ``ModuleDict`` keyed by the original index;
* ``rebuild`` - a fresh model from the config with ``num_hidden_layers`` = the
  stage's layer count, the way many users and inference engines build stages. It
  renumbers layers: graphcheck shows where that flips a kernel.

For transformers causal LMs, which are not pipeline-aware
(:mod:`graphcheck.stages.hf_builders`):

* ``hf-slice`` - slice ``model.layers``, keep the layer objects (renumbers the
  container: GC302 warns);
* ``hf-rebuild`` - a fresh model with the stage's layer count, as inference
  engines build stages.

For torchtitan decoders (:mod:`graphcheck.stages.torchtitan_builder`):

* ``torchtitan`` - torchtitan's own pipeline split (``_split_module``: unkept
  ``layers`` keys deleted, unkept edge modules set to ``None``), on a model built for
  the stage; the default for models that follow the ``torchtitan`` input convention.

Anything else is ``path/to/file.py:function`` or ``package.module:function``;
``none`` (:data:`NONE`) proves no stage program. With no builder named, graphcheck
proves them with :func:`default_builder`'s: ``hf-slice`` for ``hf:`` models,
``keep-index`` for the rest (a model that declares ``get_pp_module_config()`` says how
a stage prunes it: its layers and edge modules; keep-index is that pruning, with the
global indices kept). A model whose stages do not export once pruned is not
pipeline-aware: no builder can be had for it without the user.
Every builder runs through :func:`call_builder`; :func:`check_builder` resolves a
name before anything is built or exported, so a typo is one line, not a wasted export.

With a model given by its spec, each stage is built the way a rank builds it: in a
fresh process that imports the model code, builds the model with its factory and
applies the builder (:func:`graphcheck.stages.build.build_stage_fresh`). An
exception a builder raises is a one-line :class:`~graphcheck.errors.ModelLoadError`
naming the builder and the stage.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
from collections.abc import Callable

from torch import nn

from graphcheck.errors import GraphcheckError, ModelLoadError, UsageError, one_line
from graphcheck.model.layout import Layout
from graphcheck.model.load import copy_fake, resolve_factory
from graphcheck.stages.hf_builders import hf_rebuild, hf_slice
from graphcheck.stages.torchtitan_builder import torchtitan_split

__all__ = [
    "BUILTINS",
    "NONE",
    "PIPELINE_AWARE",
    "StageBuilder",
    "builder_name",
    "call_builder",
    "check_builder",
    "default_builder",
    "prune_edges",
    "resolve_builder",
]

StageBuilder = Callable[[nn.Module, int, list[int], int], nn.Module]


def _set(model: nn.Module, fqn: str, value: nn.Module | None) -> None:
    parent, _, name = fqn.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, name, value)


def prune_edges(stage: nn.Module, layout: Layout, index: int, num_stages: int) -> nn.Module:
    """Drop the edge modules stage ``index`` does not own."""
    if index > 0:
        for fqn in layout.input_fqns:
            _set(stage, fqn, None)
    if index < num_stages - 1:
        for fqn in layout.output_fqns:
            _set(stage, fqn, None)
    return stage


def keep_index(model, layout: Layout, index: int, layers: list[int], num_stages: int):
    stage = copy_fake(model)
    container = stage.get_submodule(layout.layer_prefix)
    keep = set(layers)
    for key, layer in list(layout.layer_keys.items()):
        if layer not in keep:
            if isinstance(container, nn.ModuleDict):
                del container[key]
            else:
                container[int(key)] = None
    return prune_edges(stage, layout, index, num_stages)


def moduledict(model, layout: Layout, index: int, layers: list[int], num_stages: int):
    stage = copy_fake(model)
    container = stage.get_submodule(layout.layer_prefix)
    by_index = {
        g: container[int(k)] if isinstance(container, nn.ModuleList) else container[k]
        for k, g in layout.layer_keys.items()
    }
    _set(stage, layout.layer_prefix, nn.ModuleDict({str(g): by_index[g] for g in layers}))
    return prune_edges(stage, layout, index, num_stages)


def rebuild(model, layout: Layout, index: int, layers: list[int], num_stages: int):
    config = getattr(model, "config", None)
    if config is None:
        raise ModelLoadError("the rebuild stage builder needs model.config")
    if dataclasses.is_dataclass(config):
        config = dataclasses.replace(config, num_hidden_layers=len(layers))
    else:
        config = copy.deepcopy(config)
        config.num_hidden_layers = len(layers)
    try:
        stage = type(model)(config)
    except Exception as err:
        raise ModelLoadError(f"rebuilding {type(model).__name__} raised {err}") from err
    return prune_edges(stage, layout, index, num_stages)


def _with_outputs(builder):
    """A transformers builder given the layout's output modules (the final norm it must
    drop from every stage but the last, whatever the decoder calls it)."""
    return lambda model, layout, index, layers, num_stages: builder(
        model, index, layers, num_stages, outputs=layout.output_fqns,
        container=layout.layer_prefix,
    )  # fmt: skip


BUILTINS = {
    "keep-index": keep_index,
    "moduledict": moduledict,
    "rebuild": rebuild,
    "hf-slice": _with_outputs(hf_slice),
    "hf-rebuild": _with_outputs(hf_rebuild),
    "torchtitan": torchtitan_split,
}
# The builtins that need a pipeline-aware model (a stage sets what it does not own to None).
PIPELINE_AWARE = frozenset({"keep-index", "moduledict", "rebuild"})
NONE = "none"  # --stage-builder none: prove no stage program


def default_builder(hf_spec: bool, convention: str | None = None) -> str:
    """The builder stage programs are proven with when the user names none: ``hf-slice``
    for an ``hf:`` model (transformers decoders are not pipeline-aware), the builder of
    the model's input ``convention`` when it names one (``torchtitan``), else
    ``keep-index`` (the pruning ``get_pp_module_config()`` describes: layers and edge
    modules a stage does not own set to ``None``, global indices kept).

    >>> default_builder(True), default_builder(False), default_builder(False, "torchtitan")
    ('hf-slice', 'keep-index', 'torchtitan')
    """
    if hf_spec:
        return "hf-slice"
    from graphcheck.model.conventions import CONVENTIONS

    row = CONVENTIONS.get(convention) if convention is not None else None
    return row.stage_builder if row is not None and row.stage_builder else "keep-index"


def builder_name(builder: str | StageBuilder) -> str:
    """How a report names ``builder``: its name, or a callable's qualified name."""
    if isinstance(builder, str):
        return builder
    return getattr(builder, "__qualname__", None) or type(builder).__name__


def resolve_builder(name: str, layout: Layout) -> StageBuilder:
    """A builtin name or ``file.py:function``, as ``build(model, index, layers, num_stages)``."""
    if name == NONE:
        raise UsageError(
            "--stage-builder none builds no stage: give a builtin name or file.py:function"
        )
    if name in BUILTINS:
        builtin = BUILTINS[name]
        return lambda model, index, layers, num: builtin(model, layout, index, layers, num)
    if ":" not in name:
        raise _unknown(name)
    return resolve_factory(name)


def check_builder(builder: object) -> None:
    """Fail now, with one line, if ``builder`` (``--stage-builder``) does not resolve: a
    builtin name, ``file.py:function`` or ``package.module:function`` whose module imports
    and holds a callable of that name, or a callable.

    >>> check_builder("keep-index"), check_builder(None), check_builder("none")
    (None, None, None)
    >>> check_builder("keep_index")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    graphcheck.errors.UsageError: unknown stage builder 'keep_index' (did you mean keep-index?): ...
    """
    if builder is None or callable(builder) or builder in BUILTINS or builder == NONE:
        return
    if not isinstance(builder, str):
        raise UsageError(
            f"stage_builder is a {type(builder).__name__}: give a builtin name, "
            "'file.py:function' or a callable"
        )
    if ":" not in builder:
        raise _unknown(builder)
    try:
        resolve_factory(builder)
    except GraphcheckError as err:
        raise type(err)(f"stage builder {builder!r}: {err}") from None


def _unknown(name: str) -> UsageError:
    close = difflib.get_close_matches(name, [*BUILTINS, NONE], n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    known = ", ".join(BUILTINS)
    return UsageError(
        f"unknown stage builder {name!r}{hint}: use {known}, file.py:function or "
        f"{NONE} (no stage programs)"
    )


def call_builder(
    builder: StageBuilder,
    model: nn.Module,
    index: int,
    layers: list[int],
    num_stages: int,
    name: str | None = None,
) -> nn.Module:
    """``builder(model, index, layers, num_stages)``, the one call every path makes: a
    raise or a non-module becomes a one-line :class:`ModelLoadError` (exit 2) naming the
    builder and the stage."""
    what = name or getattr(builder, "__qualname__", "the stage builder")
    span = f"layers {layers[0]}-{layers[-1]}" if layers else "no layers"
    try:
        module = builder(model, index, list(layers), num_stages)
    except GraphcheckError as err:
        raise type(err)(f"stage {index}: {err}") from None
    except Exception as err:
        raise ModelLoadError(
            f"stage builder {what} raised {one_line(err)} for stage {index} ({span}); "
            "fix the builder"
        ) from None
    if not isinstance(module, nn.Module):
        raise ModelLoadError(
            f"stage builder {what} returned {type(module).__name__} for stage {index}; "
            "return an nn.Module"
        )
    return module
