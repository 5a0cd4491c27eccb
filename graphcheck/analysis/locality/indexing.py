"""Indexing: gathers and table lookups.

Assumes an index along a feature dim is a table lookup (rows follow the index), and an
index along a token dim moves rows between tokens: admitted only when the index is
bookkeeping whose row labels are known (:mod:`graphcheck.analysis.locality.rows`: a
sort permutation, its inverse, a selection, the token index itself, a document id
reading its own document's row).
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.layout_terms import TOKEN
from graphcheck.analysis.locality.domain import (
    Dep,
    Interp,
    Kind,
    Val,
    _src,
    align,
    bind,
    carry,
    is_one,
    meta_toks,
    norm_dim,
    shape_of,
    unknown,
)
from graphcheck.analysis.locality.registry import register
from graphcheck.analysis.locality.rows import as_index, gather_rows, row_label
from graphcheck.analysis.locality.scatter import expanded_column

__all__ = ["embedding", "gather", "index", "index_fill", "index_select"]

aten = torch.ops.aten


@register(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def index_fill(interp: Interp, node: torch.fx.Node) -> Val:
    """``zeros(T).index_fill(0, cu[:-1], True)`` marks the document starts."""
    bound = bind(node)
    src, idx = interp.val(bound.get("self")), interp.val(bound.get("index"))
    if src is None or idx is None:
        return unknown(interp, node)
    dim = norm_dim(bound.get("dim", 0), len(src.toks))
    if src.toks[dim] is None:
        return Val(src.toks, **carry([src, idx]))
    starts = idx.kind == Kind.CU_INNER and idx.extra == "starts" and src.dep == Dep.NONE
    if starts and not isinstance(bound.get("value"), torch.fx.Node) and len(src.toks) == 1:
        return Val(src.toks, Dep.POINT, kind=Kind.DOCSTART)
    return interp.leak(node, "writes at token positions chosen by data")


@register(aten.index.Tensor, aten._unsafe_index.Tensor)
def index(interp: Interp, node: torch.fx.Node) -> Val:
    src = _src(interp, node)
    indices = node.args[1]
    if src is None:
        return unknown(interp, node)
    used = [(d, i) for d, i in enumerate(indices) if i is not None]
    if (same := _by_token_index(interp, node, src, used)) is not None:
        return same
    if len(used) == 1:
        d, idx = used[0]
        value = interp.val(idx)
        if (start := _document_start(src, value)) is not None:
            return start
        if value is not None:
            return gather_rows(interp, node, src, d, value)
    return _multi_index(interp, node, src, used)


def _document_start(src: Val, index: Val | None) -> Val | None:
    """``cu_seq_lens[doc]``, the boundaries read at each token's document id: the first
    token of the token's document, ``cu(doc(i)) = i - pos(i)`` (a term of the layout;
    still an absolute index until something makes it relative)."""
    if index is None or src.kind != Kind.CU or src.dep != Dep.NONE or src.token_dims:
        return None
    if index.kind != Kind.DOCID or index.extra != 0 or len(index.token_dims) != 1:
        return None
    term = ("sub", TOKEN, ("pos", TOKEN))
    absolute = src.absolute | index.absolute
    return Val(index.toks, kind=Kind.LAYOUT, extra=term, absolute=absolute)


def _by_token_index(interp, node, src: Val, used) -> Val | None:
    """``x[b, q_idx]`` with each token dim of ``x`` indexed by the token index itself
    (``arange(T)``, viewed to any shape) and its other indexed dims of size 1: every
    element reads the token it stands for, so ``x``'s value (and what it is) moves to
    the dims the index broadcasts to (``None``: not such an index)."""
    shape, out = shape_of(node.args[0]), shape_of(node)
    if shape is None or out is None or not used:
        return None
    lanes = max(len(shape_of(i) or ()) for _, i in used)
    placed: list = [None] * lanes
    for d, idx in used:
        value, ishape = interp.val(idx), shape_of(idx)
        if value is None or ishape is None:
            return None
        if src.toks[d] is None:
            if not is_one(shape[d]) or value.token_dims:
                return None
            continue
        if value.kind != Kind.INDEX or [value.toks[i] for i in value.token_dims] != [src.toks[d]]:
            return None
        lane = lanes - len(ishape) + value.token_dims[0]
        if placed[lane] not in (None, src.toks[d]):
            return None
        placed[lane] = src.toks[d]
    dims = [d for d, _ in used]
    kept = [src.toks[d] for d in range(len(src.toks)) if d not in dims]
    first = dims[0]
    adjacent = dims == list(range(first, first + len(dims)))
    toks = [*kept[:first], *placed, *kept[first:]] if adjacent else [*placed, *kept]
    if len(toks) != len(out):
        return None
    return src.with_(toks=tuple(toks), guard=None, tri=None, shift=None)


def _multi_index(interp, node, src: Val, used) -> Val:
    """Several index tensors (``x[rows, cols]``): each token dim must be indexed by
    bookkeeping, all landing on one row dim."""
    toks, others = set(), []
    for d, idx in used:
        value = interp.val(idx)
        if value is None:
            continue
        if src.toks[d] is None:
            others.append(as_index(value))
            continue
        tok = row_label(src.toks[d], value)
        if tok is None:
            earlier = interp.passed_on(node, [src, value])
            return earlier or interp.leak(node, "indexes the token dimension with "
                                          "data-dependent positions")  # fmt: skip
        toks.add(tok)
    out = shape_of(node)
    if len(toks) > 1 or out is None:
        return interp.leak(node, "indexes the token dimension with data-dependent positions")
    first = min(d for d, _ in used)
    rest = [src.toks[d] for d in range(len(src.toks)) if d > max(d for d, _ in used)]
    row = next(iter(toks)) if toks else None
    lead = list(src.toks[:first]) if _adjacent(used) else []
    result = [*lead, row, *rest]
    if len(result) != len(out):
        return interp.leak(node, "indexes the token dimension in a way graphcheck cannot follow")
    return Val(tuple(result), **carry([src.with_(leaks=src.leaks), *others]))


def _adjacent(used) -> bool:
    dims = [d for d, _ in used]
    return dims == list(range(dims[0], dims[0] + len(dims)))


@register(aten.index_select.default)
def index_select(interp: Interp, node: torch.fx.Node) -> Val:
    src, idx = _src(interp, node), interp.val(node.args[2])
    if src is None or idx is None:
        return unknown(interp, node)
    return gather_rows(interp, node, src, norm_dim(node.args[1], len(src.toks)), idx)


@register(aten.embedding.default)
def embedding(interp: Interp, node: torch.fx.Node) -> Val:
    """A table lookup: row ``t`` of the result is the table row ``ids[t]`` names."""
    weight, ids = interp.val(node.args[0]), interp.val(node.args[1])
    if ids is None:
        return Val(meta_toks(node.meta.get("val"), interp.tokens), **carry([weight]))
    deps = carry([weight, ids])
    return Val((*ids.toks, None), **deps)


@register(aten.gather.default)
def gather(interp: Interp, node: torch.fx.Node) -> Val:
    src, idx = _src(interp, node), interp.val(node.args[2])
    if src is None:
        return unknown(interp, node)
    dim = norm_dim(node.args[1], len(src.toks))
    column = expanded_column(node.args[2])
    if src.toks[dim] is not None and dim == 0 and column is not None and interp.val(column):
        # an index that picks whole rows: ``x.gather(0, col[:, None].expand(-1, H))`` is
        # ``x[col]`` (the backward of a scatter-add of rows)
        return gather_rows(interp, node, src, 0, interp.val(column))
    if src.toks[dim] is not None:
        return interp.leak(node, "gathers along the token dimension")
    toks = align(interp, node, [node.args[0], node.args[2]])
    if toks is None:
        return interp.leak(node, "gathers with an index whose token dimensions do not line up")
    return Val(toks, **carry([src, idx]))
