"""Where a model keeps its decoder layers and its edge modules.

The layout comes from, in order: a ``get_pp_module_config()`` method on the
model (keys ``layer_prefix``, ``input_fqns``, ``output_fqns``, ``num_layers``, and
the declarations of :mod:`graphcheck.model.boundary`: ``pipeline_boundary_state``,
``pipeline_layer_ranges``);
auto-detection of the common transformers layout; explicit overrides
(``--layers``, ``--inputs``, ``--outputs``), which win over both.

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

from torch import nn

from graphcheck.errors import LayoutError
from graphcheck.model.boundary import BoundaryState, boundary_state, layer_ranges

__all__ = ["Layout", "detect_layout"]

_LAYER_CANDIDATES = ("model.layers", "layers", "model.decoder.layers", "transformer.h", "blocks")
_INPUT_CANDIDATES = ("model.embed_tokens", "embed_tokens", "transformer.wte", "tok_embeddings")
_OUTPUT_CANDIDATES = (
    ("model.norm", "lm_head"),
    ("norm", "lm_head"),
    ("model.decoder.final_layer_norm", "lm_head"),
    ("transformer.ln_f", "lm_head"),
    ("norm", "output"),
    ("model.norm",),  # a decoder that returns hidden states (the loss applies the head)
    ("norm",),
)


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
    if prefix is None:
        raise LayoutError("no decoder-layer container found; pass --layers PREFIX")
    container = _submodule(model, prefix, "layer container")
    ins = inputs or _tuple(declared.get("input_fqns")) or _auto_inputs(model)
    outs = outputs or _tuple(declared.get("output_fqns")) or _auto_outputs(model)
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


def _auto_inputs(model: nn.Module) -> tuple[str, ...]:
    found = _first_present(model, _INPUT_CANDIDATES)
    return (found,) if found else ()


def _auto_outputs(model: nn.Module) -> tuple[str, ...]:
    for group in _OUTPUT_CANDIDATES:
        if all(_get(model, fqn) is not None for fqn in group):
            return group
    return ()


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
