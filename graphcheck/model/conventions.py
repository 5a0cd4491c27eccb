"""Input conventions: how each framework's ``forward`` takes a packed batch.

graphcheck traces one packed batch (:mod:`graphcheck.varlen`): tokens and positions
``[1, T]``, document boundaries ``cu_seq_lens_q/k`` ``[N + 1]`` and the longest
document ``max_length_q/k``. Frameworks hand these to a model under different
names: one row of :data:`CONVENTIONS` per framework says which.

* ``transformers`` - ``forward(input_ids, position_ids, cu_seq_lens_q, cu_seq_lens_k,
  max_length_q, max_length_k)`` by keyword, the flash-attention varlen kwargs
  transformers passes down to attention;
* ``torchtitan`` - ``forward(tokens, positions, attention_masks)`` with the masks
  built by the model's own ``get_attention_masks(positions)``, as torchtitan's
  trainer builds them and hands them to every pipeline stage.

Masks from the model (``MaskSource.MODEL``): the model's function runs on the
example batch's real positions first. A flex ``BlockMask`` (or ``None``: no mask, or
a mapping of names to those, one per kind of layer) is built again inside the
exported program from its symbolic positions, so the proof sees the mask the way a
stage receives it, derived from positions.
Varlen metadata (a ``VarlenMetadata``: ``cu_seq_q``, ``cu_seq_k``, ``max_q``,
``max_k``) cannot be traced from positions: torchtitan's
``create_varlen_metadata_for_document`` takes ``int(lengths.max().item())``, a
data-dependent integer export cannot extract. Its fields are the program's inputs
instead, the batch's boundaries and longest document, and the example's metadata
must be exactly those (else the convention does not describe the model: an error).
The trainer builds that metadata before the first stage and hands the same object
to every stage, so a stage program takes it as an input in any case.

Which row applies: ``--inputs-from NAME`` (config key ``inputs_from``), else the
model's ``graphcheck_inputs`` attribute naming a row, else the first row whose
argument names the forward takes (a ``**kwargs`` forward fits ``transformers``).
Another framework registers its row with :func:`register`. A forward that fits
none is one line that lists the rows and the flag (exit 2).

>>> sorted(CONVENTIONS)
['torchtitan', 'transformers']
>>> CONVENTIONS["torchtitan"].tokens, CONVENTIONS["torchtitan"].masks
('tokens', <MaskSource.MODEL: 'model'>)
>>> from torch import nn
>>> class Titan(nn.Module):
...     def forward(self, tokens, positions=None, attention_masks=None): ...
...     def get_attention_masks(self, positions): ...
>>> detect(Titan()).name
'torchtitan'
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from graphcheck.errors import ExportError, UsageError
from graphcheck.varlen import INPUTS, Structure, model_inputs

__all__ = [
    "CONVENTIONS",
    "Convention",
    "MaskSource",
    "bind",
    "call",
    "check_name",
    "detect",
    "register",
    "roles",
]

# graphcheck's names for the inputs (graphcheck.varlen's rows), in table order
_TOKENS, _POSITIONS = model_inputs()[:2]  # the token ids, the positions
# the varlen metadata a mask stands for: the document boundaries and the longest document
_METADATA = tuple(
    r.name for r in INPUTS if r.structure in (Structure.BOUNDARIES, Structure.MAX_LENGTH)
)
_ATTRIBUTE = "graphcheck_inputs"  # a model's own choice of row


class MaskSource(StrEnum):
    """Where the attention masks come from."""

    ARGUMENTS = "arguments"  # the forward takes cu_seq_lens/max_length as arguments
    MODEL = "model"  # the model's get_attention_masks(positions)


@dataclass(frozen=True)
class Convention:
    """One framework's ``forward`` arguments for a packed batch.

    ``tokens`` and ``positions`` name the forward's arguments for tokens (``[B, L]``
    with ``batch_dim``, B = 1 for a packed batch; a row without is refused, as the
    export takes ``[1, T]`` only) and positions; with
    ``MaskSource.ARGUMENTS`` the forward takes the varlen metadata under graphcheck's
    names, with ``MaskSource.MODEL`` the model's ``masks_method(positions)`` builds
    them and the forward takes them as ``masks_argument``; ``metadata`` makes the
    framework's varlen metadata object from boundaries and lengths (the program's
    inputs when the mask method returns varlen metadata). ``stage_builder`` is the
    builtin stage builder that builds this framework's stages by default."""

    name: str
    tokens: str
    positions: str
    masks: MaskSource
    masks_argument: str | None = None
    masks_method: str | None = None
    batch_dim: bool = True
    stage_builder: str | None = None
    summary: str = ""
    metadata: Callable | None = None  # (cu_q, cu_k, max_q, max_k) -> the masks object

    def fits(self, model) -> bool:
        """Whether ``model.forward`` takes this row's arguments by name (and the model
        has its mask method)."""
        params = _parameters(model)
        names = [self.tokens, self.positions, *filter(None, [self.masks_argument])]
        if self.masks is MaskSource.MODEL:
            return all(n in params for n in names) and callable(
                getattr(model, self.masks_method or "", None)
            )
        return self.tokens in params


CONVENTIONS: dict[str, Convention] = {}


def register(convention: Convention) -> Convention:
    """Add ``convention`` to the table (a later row of the same name replaces it)."""
    CONVENTIONS[convention.name] = convention
    return convention


register(
    Convention(
        "transformers", _TOKENS, _POSITIONS, MaskSource.ARGUMENTS,
        summary="input_ids, position_ids, cu_seq_lens_q/k, max_length_q/k",
    )
)  # fmt: skip


def _torchtitan_metadata(cu_q, cu_k, max_q, max_k):
    from torchtitan.models.common.attention import VarlenMetadata

    return VarlenMetadata(cu_seq_q=cu_q, cu_seq_k=cu_k, max_q=max_q, max_k=max_k)


register(
    Convention(
        "torchtitan", "tokens", "positions", MaskSource.MODEL, "attention_masks",
        "get_attention_masks", stage_builder="torchtitan",
        summary="tokens, positions, attention_masks = model.get_attention_masks(positions)",
        metadata=_torchtitan_metadata,
    )
)  # fmt: skip


def check_name(name: str | None) -> None:
    """A one-line :class:`UsageError` unless ``name`` (``--inputs-from``) is a row."""
    if name is not None and name not in CONVENTIONS:
        raise UsageError(f"unknown --inputs-from {name!r}: use {' or '.join(CONVENTIONS)}")


def detect(model, name: str | None = None) -> Convention:
    """The row ``model`` follows: ``name`` (``--inputs-from``), the model's
    ``graphcheck_inputs``, or the first row it fits; else one line (exit 2) listing
    the rows and how to name one."""
    check_name(name)
    declared = getattr(model, _ATTRIBUTE, None)
    if name is None and isinstance(declared, str):
        if declared not in CONVENTIONS:
            raise UsageError(
                f"{type(model).__name__}.{_ATTRIBUTE} = {declared!r} names no input "
                f"convention: use {' or '.join(CONVENTIONS)}"
            )
        name = declared
    if name is not None:
        return _named(model, CONVENTIONS[name])
    found = next((c for c in CONVENTIONS.values() if c.fits(model)), None)
    if found is None and _var_keyword(model):
        found = CONVENTIONS["transformers"]
    if found is None:
        raise UsageError(_no_row(model))
    return found


def _named(model, convention: Convention) -> Convention:
    """``convention``, named for ``model``: its mask method must be there."""
    method = convention.masks_method
    if convention.masks is MaskSource.MODEL and not callable(getattr(model, method or "", None)):
        raise UsageError(
            f"the {convention.name} input convention builds the masks with "
            f"model.{method}(positions), and {type(model).__name__} has no {method}: pick "
            f"another --inputs-from ({', '.join(CONVENTIONS)})"
        )
    return convention


def _no_row(model) -> str:
    params = ", ".join(_parameters(model))
    rows = "; ".join(f"{c.name} ({c.summary})" for c in CONVENTIONS.values())
    return (
        f"{type(model).__name__}.forward({params}) fits no input convention: {rows}; "
        "pass --inputs-from NAME if it takes one under these names, or set "
        f"{_ATTRIBUTE} = NAME on the model, or register a convention "
        "(graphcheck.model.conventions.register)"
    )


def _parameters(model) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(model.forward).parameters)


def _var_keyword(model) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in _parameters(model).values())


# --- the inputs the export takes, and the call that hands them to the model ----------


def roles(model, convention: Convention, docs: tuple[int, ...]) -> tuple[tuple[str, ...], bool]:
    """The inputs of the program (graphcheck's names, in table order) and whether the
    forward needs an explicit wrapper (its own parameters are not those, in order)."""
    if not convention.batch_dim:
        raise ExportError(
            f"the {convention.name} input convention takes tokens without a batch dim: "
            "graphcheck exports the packed batch as [1, T] only"
        )
    if convention.masks is MaskSource.ARGUMENTS:
        return _argument_roles(model, convention)
    masks = _example_masks(model, convention, docs)
    return ((_TOKENS, _POSITIONS, *_METADATA) if _is_varlen(masks) else (_TOKENS, _POSITIONS)), True


def _argument_roles(model, convention: Convention) -> tuple[tuple[str, ...], bool]:
    from graphcheck.varlen import model_inputs

    params = _parameters(model)
    var_kw = _var_keyword(model)
    rename = {_TOKENS: convention.tokens, _POSITIONS: convention.positions}
    names = tuple(n for n in model_inputs() if rename.get(n, n) in params or var_kw)
    if _TOKENS not in names:
        raise ExportError(f"{type(model).__name__}.forward does not accept {convention.tokens}")
    own = [rename.get(n, n) for n in names]
    return names, list(params)[: len(names)] != own


def _example_masks(model, convention: Convention, docs: tuple[int, ...]):
    """The model's masks for the example batch's real positions, checked to be a kind
    graphcheck can take: varlen metadata of exactly the batch's documents, a flex
    ``BlockMask`` or ``None``, or a mapping of names to those (rebuilt inside the
    program)."""
    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    from graphcheck.varlen import BY_NAME

    with _disable_current_modes(), torch.no_grad():  # real positions, under a fake mode too
        positions = BY_NAME[_POSITIONS].value(docs)
        masks = getattr(model, convention.masks_method)(positions)
        if _is_varlen(masks):
            _check_metadata(model, masks, docs)
    if not _is_varlen(masks) and not _is_flex(masks):
        raise ExportError(
            f"{type(model).__name__}.{convention.masks_method}(positions) returned "
            f"{_kind(masks)}: graphcheck takes varlen metadata (cu_seq_q, cu_seq_k, "
            "max_q, max_k), a flex BlockMask or None, or a mapping of names to BlockMasks "
            "or None (one per kind of layer)"
        )
    return masks


def _check_metadata(model, masks, docs: tuple[int, ...]) -> None:
    from graphcheck.varlen import BY_NAME

    want = BY_NAME["cu_seq_lens_q"].value(docs).tolist()
    got = [masks.cu_seq_q.tolist(), masks.cu_seq_k.tolist(), masks.max_q, masks.max_k]
    if got != [want, want, max(docs), max(docs)]:
        raise ExportError(
            f"{type(model).__name__}'s varlen metadata for documents {list(docs)} is "
            f"{got}, not their boundaries {want} and longest document {max(docs)}: the "
            "torchtitan input convention does not describe this model"
        )


def _is_varlen(masks) -> bool:
    return all(hasattr(masks, f) for f in ("cu_seq_q", "cu_seq_k", "max_q", "max_k"))


def _is_flex(masks) -> bool:
    """A flex ``BlockMask`` or ``None``, or a non-empty mapping of names to those (a
    model whose layers pick their mask by name: a sliding window beside full causal),
    all rebuilt inside the program from its positions."""
    from torch.nn.attention.flex_attention import BlockMask

    if isinstance(masks, Mapping):
        return bool(masks) and all(m is None or isinstance(m, BlockMask) for m in masks.values())
    return masks is None or isinstance(masks, BlockMask)


def _kind(masks) -> str:
    """What the mask method returned: its type, and a mapping's value types."""
    if not isinstance(masks, Mapping):
        return type(masks).__name__
    values = sorted({type(m).__name__ for m in masks.values()})
    return f"{type(masks).__name__} of {', '.join(values) or 'nothing'}"


def bind(model, convention: Convention, names: tuple[str, ...]) -> Callable:
    """``forward(*args)`` taking the inputs ``names`` positionally and calling the
    model's own forward the way ``convention`` says (the export's wrapper)."""
    original = model.forward

    def forward(*args):
        values = dict(zip(names, args, strict=True))
        return call(model, convention, values, original, traced=True)

    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    forward.__signature__ = inspect.Signature(params)
    return forward


def call(
    model, convention: Convention, values: dict, forward: Callable | None = None,
    traced: bool = False,
):  # fmt: skip
    """``model``'s forward on the inputs ``values`` (graphcheck's names), as
    ``convention`` hands them over. With masks from the model its own mask method
    builds them from the positions, as the trainer does; ``traced`` (the export), varlen
    metadata is made from the boundaries among ``values`` (see the module docstring)."""
    forward = forward or model
    if convention.masks is MaskSource.ARGUMENTS:
        rename = {_TOKENS: convention.tokens, _POSITIONS: convention.positions}
        return forward(**{rename.get(k, k): v for k, v in values.items()})
    positions = values[_POSITIONS]
    if traced and all(k in values for k in _METADATA):
        if convention.metadata is None:
            raise ExportError(f"the {convention.name} input convention makes no varlen metadata")
        masks = convention.metadata(*(values[k] for k in _METADATA))
    else:
        masks = getattr(model, convention.masks_method)(positions)
    kwargs = {convention.positions: positions, convention.masks_argument: masks}
    return forward(values[_TOKENS], **kwargs)
