"""Where a model keeps its decoder layers and its edge modules.

The layout comes from, in order: a ``get_pp_module_config()`` method on the
model (keys ``layer_prefix``, ``input_fqns``, ``output_fqns``, ``num_layers``, and
the declarations of :mod:`graphcheck.model.boundary`: ``pipeline_boundary_state``,
``pipeline_layer_ranges``);
auto-detection of the common transformers layout; explicit overrides
(``--layers``, ``--inputs``, ``--outputs``), which win over both.

Auto-detection tries the tables of known paths first (``model.layers``,
``model.embed_tokens``, ``model.norm`` + ``lm_head``...), then the top-level names
reference code uses (torchtitan's ``tok_embeddings``/``layers``/``norm``/``output``,
Llama's and GPT-2's ``embed``, ``wte``, ``ln_f``, ``lm_head``: :data:`TOP_INPUTS`,
:data:`TOP_NORMS`, :data:`TOP_HEADS`; two of one kind at the top are ambiguous and
ask for the flag), then, for each part these miss, these structural rules:

* layers: the longest ``ModuleList`` of two or more entries that is not inside
  another ``ModuleList`` nor inside the input or output embeddings; two longest
  lists of the same length are ambiguous (a :class:`LayoutError` asks for
  ``--layers``);
* input: ``model.get_input_embeddings()``, found by identity, widened to its
  outermost module outside the path to the layers (``bert.embeddings`` for
  ``bert.embeddings.word_embeddings``: the position embeddings and the embedding
  norm in it run before the layers too);
* outputs: the final norm, the one norm-like module (its class name says
  ``Norm``) beside the layer container whose name does not say ``emb`` (an
  embedding norm runs before the layers; two candidates are ambiguous), then
  ``model.get_output_embeddings()``, widened the same way (``cls`` for
  ``cls.predictions.decoder``).

An embedding found this way that is not ``config.hidden_size`` wide has a projection
beside it that these rules do not find: a :class:`LayoutError` asks for the flag.

Modules none of these name (position embeddings, rotary tables, an embedding norm
beside the layers) are model-level glue, which the analysis lets run on either side
of a cut.

>>> from torch import nn
>>> m = nn.Module(); m.embed_tokens = nn.Embedding(4, 2)
>>> m.layers = nn.ModuleList([nn.Linear(2, 2), None]); m.norm = nn.LayerNorm(2)
>>> m.lm_head = nn.Linear(2, 4)
>>> lay = detect_layout(m)
>>> lay.layer_prefix, lay.num_layers, lay.input_fqns, lay.output_fqns
('layers', 2, ('embed_tokens',), ('norm', 'lm_head'))
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from graphcheck.errors import LayoutError
from graphcheck.model.boundary import BoundaryState, boundary_state, layer_ranges

__all__ = ["TOP_HEADS", "TOP_INPUTS", "TOP_NORMS", "Layout", "detect_layout"]

_LAYER_CANDIDATES = ("model.layers", "layers", "model.decoder.layers", "transformer.h", "blocks")
_INPUT_CANDIDATES = ("model.embed_tokens", "transformer.wte")
_OUTPUT_CANDIDATES = (
    ("model.norm", "lm_head"),
    ("model.decoder.final_layer_norm", "lm_head"),
    ("transformer.ln_f", "lm_head"),
    ("model.norm",),  # a decoder that returns hidden states (the loss applies the head)
)
# Top-level names of reference code (a position embedding beside them, GPT-2's wpe, is glue)
TOP_INPUTS = ("embed_tokens", "tok_embeddings", "embed", "wte")
TOP_NORMS = ("norm", "ln_f")
TOP_HEADS = ("lm_head", "output")


@dataclass(frozen=True)
class Layout:
    """The pipeline-relevant structure of a model.

    ``layer_keys`` maps each key of the layer container (``"3"``) to its global
    layer index; ``None`` entries of a ``ModuleList`` have no key. ``boundary_state``
    and ``layer_ranges`` are what the model declares (:mod:`graphcheck.model.boundary`).
    """

    layer_prefix: str
    input_fqns: tuple[str, ...]
    output_fqns: tuple[str, ...]
    num_layers: int
    layer_keys: dict[str, int] = field(default_factory=dict)
    boundary_state: BoundaryState | None = None
    layer_ranges: tuple[tuple[int, int], ...] | None = None

    def layer_of(self, fqn: str) -> int | None:
        """Global layer index of module path ``fqn``, or ``None``.

        >>> Layout("model.layers", (), (), 2, {"0": 0, "1": 1}).layer_of("model.layers.1.mlp")
        1
        """
        prefix = self.layer_prefix + "."
        if not fqn.startswith(prefix):
            return None
        key = fqn[len(prefix) :].split(".", 1)[0]
        return self.layer_keys.get(key)

    def edge_of(self, fqn: str) -> str | None:
        """``"input"``, ``"output"`` or ``None`` for module path ``fqn``."""
        for kind, fqns in (("input", self.input_fqns), ("output", self.output_fqns)):
            if any(fqn == f or fqn.startswith(f + ".") for f in fqns):
                return kind
        return None


def detect_layout(
    model: nn.Module,
    layers: str | None = None,
    inputs: tuple[str, ...] | None = None,
    outputs: tuple[str, ...] | None = None,
    state: BoundaryState | None = None,
) -> Layout:
    """Find the layout of ``model``; explicit arguments override what is found."""
    declared = _declared_config(model)
    prefix = layers or declared.get("layer_prefix") or _first_present(model, _LAYER_CANDIDATES)
    prefix = prefix or _auto_layers(model)
    if prefix is None:
        raise LayoutError("no decoder-layer container found; pass --layers PREFIX")
    container = _submodule(model, prefix, "layer container")
    ins = inputs or _tuple(declared.get("input_fqns")) or _auto_inputs(model, prefix)
    outs = outputs or _tuple(declared.get("output_fqns")) or _auto_outputs(model, prefix)
    for fqn in (*ins, *outs):
        _submodule(model, fqn, "edge module")
    if not ins:
        raise LayoutError("no input (embedding) module found; pass --inputs FQN[,FQN]")
    if not outs:
        raise LayoutError("no output modules (final norm, head) found; pass --outputs FQN[,FQN]")
    keys, count = _layer_keys(container, prefix)
    num = int(declared.get("num_layers") or count)
    state = state or boundary_state(declared.get("pipeline_boundary_state"))
    ranges = layer_ranges(declared.get("pipeline_layer_ranges"), num)
    return Layout(prefix, tuple(ins), tuple(outs), num, keys, state, ranges)


def _declared_config(model: nn.Module) -> dict:
    method = getattr(model, "get_pp_module_config", None)
    if not callable(method):
        return {}
    config = method()
    if not isinstance(config, dict):
        raise LayoutError("get_pp_module_config() must return a dict")
    return config


def _tuple(value) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _first_present(model: nn.Module, candidates) -> str | None:
    for fqn in candidates:
        if _get(model, fqn) is not None:
            return fqn
    return None


def _auto_inputs(model: nn.Module, prefix: str) -> tuple[str, ...]:
    found = _first_present(model, _INPUT_CANDIDATES) or _top(model, TOP_INPUTS, "--inputs")
    if found:
        return (found,)
    found = _widen(_embedding_fqns(model)[0], prefix)
    if found:
        _check_width(model, "get_input_embeddings", "--inputs")
    return (found,) if found else ()


def _auto_outputs(model: nn.Module, prefix: str) -> tuple[str, ...]:
    for group in _OUTPUT_CANDIDATES:
        if all(_get(model, fqn) is not None for fqn in group):
            return group
    norm = _top(model, TOP_NORMS, "--outputs") or _final_norm(model, prefix)
    head = _widen(_embedding_fqns(model)[1], prefix)
    if head:
        _check_width(model, "get_output_embeddings", "--outputs")
    else:  # none, or a decoder that returns hidden states (the loss applies the head)
        head = _top(model, TOP_HEADS, "--outputs")
    return tuple(dict.fromkeys(f for f in (norm, head) if f))


def _check_width(model: nn.Module, method: str, flag: str) -> None:
    """Fail when the embedding is not as wide as ``config.hidden_size``: a projection
    between it and the layers changes the residual's width, and is not found."""
    hidden = getattr(getattr(model, "config", None), "hidden_size", None)
    weight = getattr(_call(model, method), "weight", None)
    if not isinstance(hidden, int) or not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        return
    if weight.shape[-1] != hidden:
        raise LayoutError(
            f"{method}() of {type(model).__name__} is {weight.shape[-1]} wide and its hidden "
            f"size {hidden}: the projection between them is not found; pass {flag} FQN[,FQN] "
            "naming it too"
        )


def _top(model: nn.Module, names: tuple[str, ...], flag: str) -> str | None:
    """The one top-level child of ``model`` named one of ``names``; two are ambiguous.

    >>> m = nn.Module(); m.tok_embeddings = nn.Embedding(4, 2); _top(m, TOP_INPUTS, "--inputs")
    'tok_embeddings'
    >>> m.wte = nn.Embedding(4, 2); _top(m, TOP_INPUTS, "--inputs")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    graphcheck.errors.LayoutError: tok_embeddings, wte all sit at the top of Module: ...
    """
    children = dict(model.named_children())
    found = [name for name in names if children.get(name) is not None]
    if len(found) > 1:
        raise LayoutError(
            f"{', '.join(found)} all sit at the top of {type(model).__name__}: no single one "
            f"found (ambiguous); pass {flag} FQN[,FQN]"
        )
    return found[0] if found else None


def _auto_layers(model: nn.Module) -> str | None:
    """The longest top-level ``ModuleList`` outside the embeddings; a tie is ambiguous.

    >>> m = nn.Module(); m.a = nn.ModuleList([nn.ReLU()] * 2); m.b = nn.ModuleList([nn.ReLU()] * 3)
    >>> _auto_layers(m)
    'b'
    >>> m.c = nn.ModuleList([nn.ReLU()] * 3); _auto_layers(m)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    graphcheck.errors.LayoutError: the decoder-layer container is ambiguous: b, c each hold 3 ...
    """
    edges = [fqn for fqn in _embedding_fqns(model) if fqn]
    lists = _top_lists(model, edges)
    if not lists:
        return None
    longest = max(size for _, size in lists)
    best = [fqn for fqn, size in lists if size == longest]
    if len(best) > 1:
        raise LayoutError(
            f"the decoder-layer container is ambiguous: {', '.join(best)} each hold "
            f"{longest} modules, no single one found; pass --layers PREFIX"
        )
    return best[0]


def _top_lists(model: nn.Module, edges: list[str]) -> list[tuple[str, int]]:
    """``(fqn, len)`` of each ``ModuleList`` of 2+ entries not inside another one or an edge."""
    seen: list[str] = []
    found = []
    for fqn, module in model.named_modules():
        if not fqn or not isinstance(module, nn.ModuleList):
            continue
        inside = any(_within(fqn, outer) for outer in (*seen, *edges))
        seen.append(fqn)
        if not inside and len(module) >= 2:
            found.append((fqn, len(module)))
    return found


def _final_norm(model: nn.Module, prefix: str) -> str | None:
    """The one norm-like module beside the layer container not named for the embedding.

    >>> m = nn.Module(); m.layers = nn.ModuleList(); m.emb_ln = nn.LayerNorm(2)
    >>> m.ln_out = nn.LayerNorm(2); _final_norm(m, "layers")
    'ln_out'
    """
    parent = prefix.rpartition(".")[0]
    found = [
        f"{parent}.{name}" if parent else name
        for name, child in model.get_submodule(parent).named_children()
        if "norm" in type(child).__name__.lower() and "emb" not in name.lower()
    ]
    if len(found) > 1:
        raise LayoutError(
            f"the final norm is ambiguous: {', '.join(found)} all sit beside {prefix}, "
            "no single one found; pass --outputs FQN[,FQN]"
        )
    return found[0] if found else None


def _embedding_fqns(model: nn.Module) -> tuple[str | None, str | None]:
    """The FQNs of ``get_input_embeddings()`` and ``get_output_embeddings()``, by identity."""
    names = {id(module): fqn for fqn, module in model.named_modules() if fqn}
    found = (_call(model, "get_input_embeddings"), _call(model, "get_output_embeddings"))
    return tuple(names.get(id(module)) if module is not None else None for module in found)


def _call(model: nn.Module, method: str) -> nn.Module | None:
    get = getattr(model, method, None)
    if not callable(get):
        return None
    try:
        found = get()
    except (NotImplementedError, AttributeError):  # transformers' base raises these
        return None
    return found if isinstance(found, nn.Module) else None


def _widen(fqn: str | None, prefix: str) -> str | None:
    """The outermost module holding ``fqn`` that does not hold the layers.

    >>> _widen("bert.embeddings.word_embeddings", "bert.encoder.layer")
    'bert.embeddings'
    >>> _widen("model.decoder.embed_tokens", "model.decoder.layers"), _widen("lm_head", "h")
    ('model.decoder.embed_tokens', 'lm_head')
    >>> _widen("model.layers.0.embed", "model.layers") is None
    True
    """
    if fqn is None or _within(fqn, prefix):
        return None
    parts = fqn.split(".")
    for end in range(1, len(parts) + 1):
        head = ".".join(parts[:end])
        if not _within(prefix, head):
            return head
    return None


def _within(fqn: str, outer: str) -> bool:
    return fqn == outer or fqn.startswith(outer + ".")


def _get(model: nn.Module, fqn: str) -> nn.Module | None:
    try:
        return model.get_submodule(fqn)
    except AttributeError:
        return None


def _submodule(model: nn.Module, fqn: str, what: str) -> nn.Module:
    found = _get(model, fqn)
    if found is None:
        raise LayoutError(f"{what} {fqn!r} not found in {type(model).__name__}")
    return found


def _layer_keys(container: nn.Module, prefix: str) -> tuple[dict[str, int], int]:
    if isinstance(container, nn.ModuleList):
        keys = {str(i): i for i, layer in enumerate(container) if layer is not None}
        return keys, len(container)
    if isinstance(container, nn.ModuleDict):
        names = list(container.keys())
        if all(name.isdigit() for name in names):
            keys = {name: int(name) for name in names}
            return keys, max(keys.values(), default=-1) + 1
        return {name: i for i, name in enumerate(names)}, len(names)
    raise LayoutError(f"{prefix!r} is a {type(container).__name__}, not a ModuleList or ModuleDict")
