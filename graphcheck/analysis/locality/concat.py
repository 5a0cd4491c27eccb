"""Concatenation, stacking and repeats.

Assumes ``cat`` / ``stack`` place their operands side by side: along a feature dim
token-wise when the operands' token dims line up, along a token dim a leak (rows of
one document would follow another's), except ``cat([starts, [T]])``, which is
``cu_seq_lens``. Pieces of rows split by group sizes are judged first
(:mod:`graphcheck.analysis.locality.groups`).
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.layout_terms import TOKEN, substitute, term_of
from graphcheck.analysis.locality.domain import (
    Interp,
    Kind,
    Tok,
    Val,
    _src,
    bind,
    carry,
    has_tokens,
    is_one,
    meta_toks,
    ndim_of,
    norm_dim,
    shape_of,
    unknown,
)
from graphcheck.analysis.locality.registry import register

__all__ = ["cat", "repeat_interleave", "stack"]

aten = torch.ops.aten


@register(aten.cat.default, aten.concat.default)
def cat(interp: Interp, node: torch.fx.Node) -> Val:
    tensors = list(node.args[0])
    kinds = [(v.kind, v.extra) if (v := interp.val(t)) is not None else None for t in tensors]
    if kinds == [(Kind.CU_INNER, "starts"), (Kind.LENGTH, "T")]:  # cat([starts, [T]])
        origin = interp.fabricate(node, "cu_seq_lens offsets used as a value")
        return Val((None,), kind=Kind.CU, absolute=origin)
    n = ndim_of(node)
    dim = norm_dim(node.args[1] if len(node.args) > 1 else 0, n)
    vals = [interp.val(t) for t in tensors]
    toks = meta_toks(node.meta.get("val"), interp.tokens)
    joined = [None] * n
    for val in vals:
        if val is None or len(val.toks) != n:
            continue
        for i, tok in enumerate(val.toks):
            if tok is not None and joined[i] not in (None, tok):
                return interp.leak(node, "concatenates tensors whose token dims do not line up")
            joined[i] = joined[i] or tok
    if joined[dim] is not None or toks[dim] is not None:
        if (extended := _prepended(node, vals, dim, toks)) is not None:
            return extended
        if has_tokens(vals):
            return interp.leak(node, "concatenates along the token dimension")
        return Val(toks, **carry(vals))
    return Val(tuple(joined), **carry(vals))


def _prepended(node: torch.fx.Node, vals: list, dim: int, toks) -> Val | None:
    """``cat([first, x], T)`` of functions of the layout, ``first`` one element long:
    a function of the layout over the index ``j`` of ``0..T`` (``first`` at ``j = 0``,
    ``x(j - 1)`` after), its dim not T itself (a slice of it back to T is: see
    :func:`graphcheck.analysis.locality.views.slice_`). ``diff(x, prepend=first)`` as
    AOT autograd writes it."""
    tensors = list(node.args[0])
    if len(vals) != 2 or any(v is None for v in vals):
        return None
    first, rest = (term_of(v) for v in vals)
    shape = shape_of(tensors[0])
    if first is None or rest is None or shape is None or not is_one(shape[dim]):
        return None
    if vals[0].token_dims or vals[1].toks[dim] != Tok("T", 1):
        return None
    term = ("ite", ("eq", TOKEN, ("int", 0)), first,
            substitute(rest, ("sub", TOKEN, ("int", 1))))  # fmt: skip
    return Val(toks, **carry(vals), kind=Kind.LAYOUT, extra=term)


@register(aten.stack.default)
def stack(interp: Interp, node: torch.fx.Node) -> Val:
    vals = [interp.val(t) for t in node.args[0]]
    if len(vals) == 1 and vals[0] is not None and vals[0].kind == Kind.LENGTH:
        return vals[0].with_(toks=(None,))
    n = ndim_of(node)
    dim = norm_dim(node.args[1] if len(node.args) > 1 else 0, n)
    base = next((v.toks for v in vals if v is not None and len(v.toks) == n - 1), None)
    if base is None:
        return Val(meta_toks(node.meta.get("val"), interp.tokens), **carry(vals))
    if any(v is not None and v.toks != base and v.token_dims for v in vals):
        return interp.leak(node, "stacks tensors whose token dims do not line up")
    return Val((*base[:dim], None, *base[dim:]), **carry(vals))


@register(aten.repeat_interleave.self_int, aten.repeat_interleave.self_Tensor)
def repeat_interleave(interp: Interp, node: torch.fx.Node) -> Val:
    src = _src(interp, node)
    bound = bind(node)
    dim = bound.get("dim")
    if src is None or dim is None:
        return unknown(interp, node)
    d = norm_dim(dim, len(src.toks))
    if src.toks[d] is not None:
        return interp.leak(node, "repeats elements along the token dimension")
    return Val(src.toks, **carry([src]))
