"""The ``torchtitan`` stage builder: each stage the way torchtitan's pipeline makes it.

torchtitan's ``pipeline_llm`` names the modules of each stage (``tok_embeddings``
on the first, ``layers.<i>`` for its layers, ``norm`` and ``lm_head`` on the last:
``_generate_llm_fqn_per_model_part``) and ``_split_module`` makes the stage from the
whole model: it deletes the ``layers`` keys the stage does not keep (an empty
``ModuleDict`` when it keeps none) and sets every other top-level module it does
not keep to ``None``; ``Decoder.forward`` passes the hidden state through a missing
embedding, norm or head. This builder calls that same ``_split_module`` with the
stage's module names, on the model it is given and in place: torchtitan deep-copies
the whole model for each stage, graphcheck builds the model afresh for each stage
(a fresh process per stage), and a deep copy of a model on fake weights is not a
copy graphcheck can trust.

The stage module takes ``(x, position_ids, cu_seq_lens_q, cu_seq_lens_k,
max_length_q, max_length_k)`` like every stage module: ``x`` goes to the
``tokens`` argument (token ids on the first stage, the hidden state on the
others), the positions and the masks to every stage, as torchtitan's schedule
hands them on (:mod:`graphcheck.model.conventions`: varlen metadata from the
boundaries, a flex mask from the positions by the model's own
``get_attention_masks``).
"""

from __future__ import annotations

import contextlib
import inspect
import types

from torch import nn

from graphcheck.errors import ModelLoadError
from graphcheck.model.conventions import CONVENTIONS, call, roles
from graphcheck.model.layout import Layout
from graphcheck.varlen import EXAMPLE_DOCS, stage_inputs

__all__ = ["module_names", "torchtitan_split"]


def module_names(layout: Layout, index: int, layers: list[int], num_stages: int) -> list[str]:
    """The FQNs stage ``index`` keeps, as ``_generate_llm_fqn_per_model_part`` names
    them: the input modules on the first stage, its layers, the output modules on the
    last.

    >>> lay = Layout("layers", ("tok_embeddings",), ("norm", "lm_head"), 4,
    ...              {str(i): i for i in range(4)})
    >>> module_names(lay, 0, [0, 1], 2), module_names(lay, 1, [2, 3], 2)
    (['tok_embeddings', 'layers.0', 'layers.1'], ['layers.2', 'layers.3', 'norm', 'lm_head'])
    """
    keys = {g: k for k, g in layout.layer_keys.items()}
    names = [f"{layout.layer_prefix}.{keys[g]}" for g in layers]
    first = list(layout.input_fqns) if index == 0 else []
    last = list(layout.output_fqns) if index == num_stages - 1 else []
    return [*first, *names, *last]


def torchtitan_split(model, layout: Layout, index: int, layers: list[int], num_stages: int):
    """Stage ``index`` of ``model``: torchtitan's ``_split_module`` in place, with the
    stage-module forward."""
    split = _split_function()
    if "." in layout.layer_prefix:
        raise ModelLoadError(
            f"the torchtitan stage builder splits top-level modules; the layers are at "
            f"{layout.layer_prefix!r}: pass --stage-builder FILE.py:FN"
        )
    with _no_copy(split):
        stage = split(model, module_names(layout, index, layers, num_stages))
    if stage is not model:
        raise ModelLoadError("torchtitan's _split_module returned a copy; cannot build in place")
    return _stage_forward(stage)


torchtitan_split.splits_in_place = True  # it needs a model built for the stage


def _split_function():
    try:
        from torchtitan.distributed import pipeline_parallel
    except ImportError as err:
        raise ModelLoadError(
            f"the torchtitan stage builder needs torchtitan ({err}): pip install torchtitan"
        ) from None
    split = getattr(pipeline_parallel, "_split_module", None)
    if not callable(split) or not hasattr(pipeline_parallel, "copy"):
        raise ModelLoadError(
            "this torchtitan has no pipeline_parallel._split_module: the torchtitan stage "
            "builder follows torchtitan 0.3's split; pass --stage-builder FILE.py:FN"
        )
    return split


@contextlib.contextmanager
def _no_copy(split):
    """``_split_module``'s ``copy.deepcopy`` as the identity: it splits the model given."""
    module = inspect.getmodule(split)
    original = module.copy
    module.copy = types.SimpleNamespace(deepcopy=lambda value, memo=None: value)
    try:
        yield
    finally:
        module.copy = original


def _stage_forward(stage: nn.Module) -> nn.Module:
    """``stage.forward(x, position_ids, cu_seq_lens_q, ...)``: the convention's call of
    torchtitan's own ``Decoder.forward`` with ``x`` as ``tokens``."""
    convention = CONVENTIONS["torchtitan"]
    original = stage.forward
    names = stage_inputs("input_ids")
    taken = set(roles(stage, convention, EXAMPLE_DOCS)[0])  # metadata given, or masks made

    def forward(*args):
        values = {n: v for n, v in zip(names, args, strict=True) if n in taken}
        return call(stage, convention, values, original, traced=True)

    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    forward.__signature__ = inspect.Signature(params)
    stage.forward = forward
    return stage
