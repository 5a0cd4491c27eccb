"""A transformers attention implementation that calls a real varlen kernel.

``register()`` adds ``"graphcheck_varlen"`` to ``transformers.AttentionInterface``.
Set ``config._attn_implementation = "graphcheck_varlen"`` and call the model
with ``cu_seq_lens_q/k`` and ``max_length_q/k``: transformers passes them down
to every attention layer through ``**kwargs`` (its flash-attention keyword
arguments), and no dense mask is built (the name is not in the mask
interface, so ``create_causal_mask`` returns ``None``).

Each layer's attention becomes one node consuming the document boundaries:
``torch.nn.attention.varlen.varlen_attn`` with the layer's scale and window
(a layer's ``sliding_window`` W becomes ``window_size=(W - 1, 0)``, as in
flash attention), or ``graphcheck::varlen_attention`` where the layer needs
attention sinks (``s_aux``) or logit softcapping, which ``varlen_attn`` lacks.

A model that drops the varlen keyword arguments on the way to its attention
layers gets one document spanning the whole row: the graph then shows
boundaries made from T, and GC401 reports the leak.

It fails closed. It honours exactly: the document boundaries and causality (or
``is_causal=False``), ``scaling``, ``sliding_window``, ``softcap`` and ``s_aux``.
A call that passes anything else it would drop raises :class:`AttentionDropped`
naming it, and the analysis stops with exit 2 instead of proving another program:

* an ``attention_mask`` that is a tensor (an additive bias, ALiBi, a learned score
  bias, a padding mask): the kernel has no mask argument;
* keys or values with more (or fewer) tokens than the queries (appended memory or
  compressed keys): the boundaries describe the queries' tokens only;
* a tensor keyword (``position_bias``, ``sinks``, ``indices``) or another
  non-empty keyword it does not know, and attention dropout above 0 (random, drawn
  inside the softmax);
* a mask transformers built (see below) that says more than causal documents: a
  padding mask, a chunked or block-wise overlay, an extra mask function, or a
  window that differs from the call's ``sliding_window``.

The name is in transformers' mask interface too: ``create_causal_mask`` and its
siblings return a :class:`DocumentMask`, a marker of the mask transformers would
apply (read from its mask function: causal or bidirectional, the window, the
overlays). The attention accepts the marker when it agrees with the call; any
other use of it (the model's own attention code adding it to scores, slicing or
reading it) raises :class:`AttentionDropped`: that code would run without the
mask transformers gives every other implementation.

>>> from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function
>>> document_mask(causal_mask_function)
DocumentMask(causal=True, window=None, extra=())
>>> document_mask(sliding_window_causal_mask_function(128))
DocumentMask(causal=True, window=128, extra=())
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import StrEnum

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.varlen import varlen_attn

from graphcheck.errors import ExportError
from graphcheck.kernels import custom_ops as ops
from graphcheck.varlen import INPUTS, Structure

__all__ = [
    "ATTENTION",
    "AttentionDropped",
    "AttentionKind",
    "attention_record",
    "DocumentMask",
    "document_mask",
    "register",
    "varlen_attention_forward",
]

ATTENTION = "graphcheck_varlen"
# keywords the implementation reads, or that carry no computation (flags)
_VARLEN = {row.name for row in INPUTS if row.structure is not Structure.TOKENS}  # honoured
_FLAGS = {"is_causal", "output_attentions", "use_cache", "return_dict", "deterministic"}
_HINT = (
    "the analysis would prove another program; for an hf: model, --set "
    "attn_implementation=sdpa (or eager) analyses the family's own attention instead"
)


class AttentionKind(StrEnum):
    """Which attention a report's proof ran through."""

    VARLEN = "varlen"  # graphcheck_varlen: a varlen kernel fed the document boundaries
    SDPA = "sdpa"  # the family's own attention through sdpa, transformers' packed mask
    EAGER = "eager"  # the family's own attention, eager (scores + mask + softmax)
    OTHER = "other"  # another implementation (flex_attention, ...)


_KINDS = {ATTENTION: AttentionKind.VARLEN, "sdpa": AttentionKind.SDPA, "eager": AttentionKind.EAGER}
_CALLS = {
    AttentionKind.VARLEN: (
        "torch_attn._varlen_attn.default",
        "graphcheck.varlen_attention.default",
    ),
    AttentionKind.SDPA: ("aten.scaled_dot_product_attention.default",),
}


def attention_record(implementation: str | None, graph) -> dict | None:
    """What a report says of the attention: ``{"kind", "implementation", "calls"}``
    (``calls``: the attention nodes of the exported ``graph``, ``None`` where eager
    attention is plain matmuls), or ``None`` for a model that is not a transformers
    model (no ``implementation``).

    >>> attention_record("graphcheck_varlen", None)
    {'kind': 'varlen', 'implementation': 'graphcheck_varlen', 'calls': None}
    """
    if not isinstance(implementation, str):
        return None
    kind = _KINDS.get(implementation, AttentionKind.OTHER)
    calls = None
    if graph is not None and kind in _CALLS:
        counts = Counter(str(node.target) for node in graph.nodes if node.op == "call_function")
        calls = sum(counts[name] for name in _CALLS[kind])
    return {"kind": str(kind), "implementation": implementation, "calls": calls}


class AttentionDropped(ExportError):
    """``graphcheck_varlen`` was called with something it would drop (one line: what,
    where, how to go on)."""


def register() -> str:
    """Register the implementation (and its mask marker) with transformers
    (idempotent); its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION, varlen_attention_forward)
    AttentionMaskInterface.register(ATTENTION, _mask_marker)
    return ATTENTION


def _dropped(module: nn.Module, what: str, hint: str = _HINT) -> AttentionDropped:
    layer = getattr(module, "layer_idx", None)
    where = type(module).__name__ + (f" (layer {layer})" if isinstance(layer, int) else "")
    return AttentionDropped(
        f"attention refused: {where} passes {what}, which {ATTENTION} would drop; {hint}"
    )


def _refusal(use: str) -> AttentionDropped:
    return AttentionDropped(
        f"attention refused: the model's own code {use} the attention mask transformers "
        f"builds (create_causal_mask), which {ATTENTION} stands for by a marker and does not "
        f"apply there; {_HINT}"
    )


def _refuse(use: str):
    def refuse(self, *args, **kwargs):
        raise _refusal(use)

    return refuse


class _Refusing:
    """Raises :class:`AttentionDropped` on any use: an operand, an index, an attribute."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise _refusal(f"computes {getattr(func, '__name__', func)} with")

    __add__ = __radd__ = __sub__ = __rsub__ = _refuse("adds a tensor to")
    __mul__ = __rmul__ = __truediv__ = _refuse("scales")
    __and__ = __rand__ = __or__ = __ror__ = __invert__ = _refuse("combines a boolean mask with")
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __neg__ = _refuse("computes with")
    __getitem__ = _refuse("indexes")
    __bool__ = __len__ = __iter__ = __float__ = _refuse("tests")
    __hash__ = object.__hash__

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise _refusal(f"reads .{name} of")


@dataclass(frozen=True, eq=False)
class DocumentMask(_Refusing):
    """The mask transformers would build for a layer: causal (else bidirectional) within
    each packed document, ``window`` tokens back (``None``: unbounded), and ``extra``:
    what else it holds, which the varlen kernel cannot apply."""

    causal: bool = True
    window: int | None = None
    extra: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"DocumentMask(causal={self.causal}, window={self.window}, extra={self.extra})"


def document_mask(mask_function, attention_mask=None) -> DocumentMask:
    """The :class:`DocumentMask` of one of transformers' mask functions (read from the
    functions and closures it is composed of)."""
    found = {"causal": set(), "window": set(), "extra": []}
    _walk(mask_function, found, under_or=False)
    if attention_mask is not None:
        found["extra"].append("a padding attention_mask")
    causal, window = found["causal"], found["window"]
    if len(causal) != 1:
        found["extra"].append("no single causal or bidirectional base mask")
    if len(window) > 1:
        found["extra"].append(f"several windows {sorted(window)}")
    return DocumentMask(
        causal=causal == {True}, window=min(window) if window else None, extra=tuple(found["extra"])
    )


def _codes() -> dict[str, object]:
    """The code objects of transformers' mask combinators and overlays."""
    from transformers import masking_utils as mu

    base = mu.causal_mask_function
    return {
        "and": mu.and_masks(base).__code__,
        "or": mu.or_masks(base).__code__,
        "window": mu.sliding_window_overlay(1).__code__,
        "chunked": mu.chunked_overlay(1, None).__code__,
        "blocks": mu.blockwise_overlay(None).__code__,
        "documents": mu.packed_sequence_mask_function(None).__code__,
        "remap": mu.remap_positions_for_packed_sequence(base, None).__code__,
        "offsets": mu.add_offsets_to_mask_function(base, 0, 0).__code__,
    }


def _walk(fn, found: dict, under_or: bool) -> None:
    """Sort the parts of mask function ``fn`` into ``found``."""
    from transformers import masking_utils as mu

    if fn is mu.causal_mask_function or fn is mu.bidirectional_mask_function:
        found["causal"].add(fn is mu.causal_mask_function)
        return
    code = getattr(fn, "__code__", None)
    cells = dict(zip(getattr(code, "co_freevars", ()), fn.__closure__ or (), strict=False))
    cells = {name: cell.cell_contents for name, cell in cells.items()}
    kind = next((k for k, c in _codes().items() if c is code), None)
    if kind == "and":
        for part in cells["mask_functions"]:
            _walk(part, found, under_or)
    elif kind == "or":
        names = ", ".join(getattr(f, "__qualname__", repr(f)) for f in cells["mask_functions"])
        found["extra"].append(f"a mask function OR-ed onto the causal mask ({names})")
    elif kind == "window":
        found["window"].add(int(cells["sliding_window"]))
    elif kind == "chunked":
        found["extra"].append(f"chunked attention (chunks of {cells['chunk_size']} tokens)")
    elif kind == "blocks":
        found["extra"].append("block-wise bidirectional attention (block_sequence_ids)")
    elif kind in ("remap", "offsets"):
        if kind == "offsets" and (cells["q_offset"], cells["kv_offset"]) != (0, 0):
            found["extra"].append("mask offsets (a cache)")
        _walk(cells["mask_function"], found, under_or)
    elif kind != "documents":  # the packed documents: the boundaries say them
        found["extra"].append(f"the mask function {getattr(fn, '__qualname__', repr(fn))}")


def _mask_marker(*, mask_function=None, attention_mask=None, **kwargs) -> DocumentMask:
    """transformers' mask interface for ``graphcheck_varlen``: the marker, no tensor."""
    return document_mask(mask_function, attention_mask)


def varlen_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | DocumentMask | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    s_aux: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """q ``[1, H, T, D]``, k/v ``[1, Hkv, T, D]`` -> ``([1, T, H, Dv], None)``; raises
    :class:`AttentionDropped` for a call passing what it would drop."""
    causal = kwargs.get("is_causal", getattr(module, "is_causal", True))
    _check_call(module, query, key, value, attention_mask, dropout, sliding_window, causal, kwargs)
    q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))
    cu_q, cu_k, max_q, max_k = _boundaries(q, kwargs)
    scale = scaling if scaling is not None else q.shape[-1] ** -0.5
    left = sliding_window - 1 if sliding_window else -1
    if s_aux is not None or softcap:
        out = ops.varlen_attention(
            q, k, v, cu_q, cu_k, max_q, max_k, scale, left, causal, softcap or 0.0, s_aux
        )
        return out[None], None
    v_dim = v.shape[-1]
    if v_dim != q.shape[-1]:  # MLA: pad v to the q/k head dim, crop the output
        v = F.pad(v, [0, q.shape[-1] - v_dim])
    out = varlen_attn(
        q,
        k,
        v,
        cu_q,
        cu_k,
        max_q,
        max_k,
        scale=scale,
        window_size=(left, 0 if causal else -1),
        enable_gqa=q.shape[1] != k.shape[1],
    )
    return out[None, ..., :v_dim], None


def _check_call(module, query, key, value, mask, dropout, window, causal, kwargs) -> None:
    """Raise :class:`AttentionDropped` for the first thing of the call the kernel would drop."""
    if isinstance(mask, torch.Tensor):
        shape = _dims(mask.shape, query.shape[-2])
        raise _dropped(module, f"an attention_mask tensor [{shape}] (a bias or mask on the scores)")
    if isinstance(mask, DocumentMask):
        _check_mask(module, mask, window, causal)
    elif mask is not None:
        raise _dropped(module, f"an attention_mask of type {type(mask).__name__}")
    tokens = query.shape[-2]
    for name, x in (("keys", key), ("values", value)):
        if x.shape[-2] != tokens:
            what = f"{name} over {_dims([x.shape[-2]], tokens)} tokens for T queries"
            raise _dropped(module, f"{what} (appended keys: memory, compressed or extra tokens)")
    if dropout:
        hint = "--set attention_dropout=0 or --mode eval proves the program without it"
        raise _dropped(module, f"attention dropout {dropout} (drawn inside the softmax)", hint)
    for name, val in kwargs.items():
        if name in _VARLEN or (name in _FLAGS and not isinstance(val, torch.Tensor)):
            continue
        if isinstance(val, torch.Tensor) or val not in (None, False):
            raise _dropped(module, f"the keyword {name}={_shown(val, tokens)}")


def _check_mask(module, mask: DocumentMask, window, causal) -> None:
    if mask.extra:
        raise _dropped(module, f"a mask from transformers with {'; '.join(mask.extra)}")
    if mask.window != (window or None):
        kind = "no window" if mask.window is None else f"a window of {mask.window} tokens"
        raise _dropped(module, f"sliding_window={window} with a mask of {kind}")
    if mask.causal != bool(causal):
        kind = "causal" if mask.causal else "bidirectional"
        raise _dropped(module, f"a {kind} mask but is_causal={causal}")


def _dims(shape, tokens) -> str:
    """``shape`` with the queries' token count written ``T``: ``1x4xTxT``, ``T + 4``."""
    text = "x".join(str(d) for d in shape)
    return text.replace(str(tokens), "T") if isinstance(tokens, torch.SymInt) else text


def _shown(val, tokens) -> str:
    if isinstance(val, torch.Tensor):
        return f"<tensor {_dims(val.shape, tokens)}>"
    text = repr(val)
    return text if len(text) <= 40 else text[:37] + "..."


def _boundaries(q: torch.Tensor, kwargs: dict):
    """``cu_seq_lens_q/k``, ``max_length_q/k`` from the keyword arguments, or one
    document over the whole row when the model did not pass them down."""
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is None or cu_k is None:
        total = q.shape[0]
        whole = torch.arange(2, dtype=torch.int32, device=q.device) * total
        return whole, whole, total, total
    return cu_q, cu_k, kwargs.get("max_length_q"), kwargs.get("max_length_k")
