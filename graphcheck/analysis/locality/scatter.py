"""Scatters: writes at positions given by data.

Assumes a scatter along a feature dim is element-aligned on the rest, and a scatter
into a token dim is document-local only when rows go back to the positions their labels
say they were gathered from (the inverse of a sort or a selection), or are added at
their document id into a fresh tensor (one row per document). Also: the document
offsets torchtitan scatters at the document starts, a one-hot map scattered from
``topk`` indices, and ``torchtitan::deterministic_scatter_add`` with a row index
expanded over the features (an ``index_add`` of rows).
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.fx import op_name
from graphcheck.analysis.locality.domain import (
    Dep,
    Interp,
    Kind,
    Tok,
    Val,
    _src,
    bind,
    carry,
    is_length,
    is_one,
    meta_toks,
    ndim_of,
    norm_dim,
    shape_of,
    unknown,
)
from graphcheck.analysis.locality.registry import register
from graphcheck.analysis.locality.rows import VIEWS, as_index, row_label, topk_indices

__all__ = ["expanded_column", "index_add", "index_put", "row_scatter_add", "scatter"]

aten = torch.ops.aten


@register(
    aten.scatter.src,
    aten.scatter.value,
    aten.scatter_add.default,
    aten.scatter_reduce.two,
    aten.scatter.reduce,
    aten.scatter.value_reduce,
)
def scatter(interp: Interp, node: torch.fx.Node) -> Val:
    """``scatter`` / ``scatter_add`` along a feature dim: element-aligned on the rest."""
    src = _src(interp, node)
    if src is None:
        return unknown(interp, node)
    dim = norm_dim(node.args[1], len(src.toks))
    operands = [a for a in node.args[2:] if isinstance(a, torch.fx.Node)]
    if (offsets := _doc_offsets(interp, node, src, dim)) is not None:
        return offsets
    if src.toks[dim] is not None:
        return interp.leak(node, "scatters along the token dimension")
    vals = [interp.val(a) for a in operands]
    if (top := _onehot(node, dim)) is not None:
        return Val(src.toks, **carry([src, *vals]), kind=Kind.ONEHOT, ref=top)
    return Val(src.toks, **carry([src, *vals]))


_CASTS = {"aten.to.dtype", "aten._to_copy.default", "aten.clone.default"}


def _doc_offsets(interp: Interp, node: torch.fx.Node, dst: Val, dim: int) -> Val | None:
    """``dst.scatter(0, where(starts, doc, T), where(starts, arange(T), _))``: each
    document start ``t`` of document ``d`` writes ``t`` at ``d``, every other token
    writes at ``T``, past the last document id: element ``d < N`` is the first token of
    document ``d`` (:attr:`Kind.DOCOFFSETS`; torchtitan's packed-document mask)."""
    plain = op_name(node.target) in ("aten.scatter.src", "aten.scatter_.src")
    if not plain or node.kwargs or len(node.args) != 4 or dim != 0 or len(dst.toks) != 1:
        return None
    index, value = (_at_starts(interp, a) for a in node.args[2:4])
    if index is None or value is None or dst.dep != Dep.NONE or dst.leaks:
        return None
    (doc, rest), (tokens, _) = index, value
    ids = interp.val(doc)
    exact_ids = ids is not None and ids.kind == Kind.DOCID and ids.extra == 0
    arange = interp.val(tokens)
    if not exact_ids or arange is None or arange.kind != Kind.INDEX or not _is_T(interp, rest):
        return None
    origin = interp.fabricate(node, "document offsets used as values")
    return Val((None,), kind=Kind.DOCOFFSETS, extra=0, absolute=origin | arange.absolute)


def _at_starts(interp: Interp, arg) -> tuple | None:
    """``(a, b)`` of ``where(starts, a, b)`` (through casts), ``starts`` the document
    starts of the packed row."""
    while isinstance(arg, torch.fx.Node) and op_name(arg.target) in _CASTS:
        arg = arg.args[0]
    if not isinstance(arg, torch.fx.Node) or op_name(arg.target) != "aten.where.self":
        return None
    cond = interp.val(arg.args[0])
    if cond is None or cond.kind != Kind.DOCSTART or len(cond.toks) != 1:
        return None
    return arg.args[1], arg.args[2]


def _is_T(interp: Interp, arg) -> bool:
    """The packed length ``T``: a number, or ``full_like(x, T)``."""
    if isinstance(arg, torch.fx.Node) and op_name(arg.target) == "aten.full_like.default":
        arg = bind(arg).get("fill_value")
    size = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    return isinstance(size, torch.SymInt) and is_length(size, interp.tokens)


_ZEROS = {"aten.zeros_like.default", "aten.zeros.default", "aten.new_zeros.default"}


def _onehot(node: torch.fx.Node, dim: int) -> torch.fx.Node | None:
    """``zeros.scatter(-1, topk_indices, True)``: the one-hot map of the chosen indices
    (the ``topk`` node), each row holding exactly ``k`` ones."""
    if op_name(node.target) not in ("aten.scatter.value", "aten.scatter_.value"):
        return None
    dst, index, value = node.args[0], node.args[2], node.args[3]
    n = ndim_of(node)
    fresh = isinstance(dst, torch.fx.Node) and len(dst.users) == 1  # no other write to it
    if not fresh or op_name(dst.target) not in _ZEROS:
        return None
    direct = isinstance(index, torch.fx.Node) and op_name(index.target) == "getitem"
    top = topk_indices(index) if direct else None
    if top is None or ndim_of(index) != n or dim != n - 1 or (value is not True and value != 1):
        return None
    pairs = zip(shape_of(index)[:-1], shape_of(node)[:-1], strict=True)
    lead = [_same_size(a, b) for a, b in pairs]
    return top if all(lead) else None


def _same_size(a, b) -> bool:
    return str(a) == str(b)


@register(aten.index_add.default, aten.index_copy.default)
def index_add(interp: Interp, node: torch.fx.Node) -> Val:
    """Scatter rows back into the token dim they were gathered from."""
    bound = bind(node)
    dst, idx = interp.val(bound.get("self")), interp.val(bound.get("index"))
    rows = interp.val(bound.get("source"))
    if dst is None or idx is None or rows is None:
        return unknown(interp, node)
    dim = norm_dim(bound.get("dim", 0), len(dst.toks))
    return _scatter_rows(interp, node, dst, dim, idx, rows)


def _scatter_rows(interp, node, dst: Val, dim: int, idx: Val, rows: Val) -> Val:
    if (placed := _permuted(dst, dim, idx, rows)) is not None:
        return placed
    if dst.toks[dim] is None and (summary := _per_document(dst, dim, idx, rows)) is not None:
        return summary
    if dst.toks[dim] is None:
        if rows.token_dims and not dst.token_dims:
            summed = meta_toks(node.meta.get("val"), interp.tokens)
            if _adds(node) and not any(t is not None for t in summed):
                interp.sums.add(node)  # every token added into its own row (an expert's)
            return interp.leak(node, "accumulates tokens into positions that are not tokens")
        return Val(dst.toks, **carry([dst, rows, as_index(idx)]))
    tok = row_label(dst.toks[dim], idx)
    row_tok = rows.toks[dim] if dim < len(rows.toks) else None
    if tok is None or row_tok != tok:
        if (earlier := interp.passed_on(node, [dst, idx, rows])) is not None:
            return earlier.with_(toks=dst.toks)
        return interp.leak(node, "scatters rows into the token dimension at positions other than "
                           "those they were gathered from")  # fmt: skip
    return Val(dst.toks, **carry([dst, rows]))


def _adds(node: torch.fx.Node) -> bool:
    """The scatter adds its rows (``index_add``, ``index_put(accumulate=True)``,
    ``scatter_add``) rather than writing them over."""
    name = op_name(node.target)
    if name.startswith("aten.index_put") or name.startswith("aten._unsafe_index_put"):
        return bool(bind(node).get("accumulate"))
    return "index_copy" not in name


def _permuted(dst: Val, dim: int, idx: Val, rows: Val) -> Val | None:
    """Rows added into a fresh tensor at the places a permutation sends them (the
    backward of a gather, which returns each row's gradient to the row it was read
    from): ``zeros.index_put([inv], x)`` of rows in token order puts them in the sort's
    order; ``zeros.index_put([perm], x)`` of rows in the sort's order puts them back in
    token order; ``zeros.index_put([perm // k], x)`` adds each token's ``k`` sorted
    slots to it. Every destination row receives its own rows only; ``None`` otherwise."""
    if dst.dep > Dep.NONE or dst.leaks or dim >= len(rows.toks) or len(idx.toks) != 1:
        return None
    row_tok, sort = rows.toks[dim], getattr(idx.ref, "name", None)
    if idx.kind == Kind.INVERSE and row_tok == idx.extra:
        placed = Tok(f"P:{sort}")
    elif idx.kind == Kind.PERM and row_tok == Tok(f"P:{sort}"):
        placed = idx.extra
    elif idx.kind == Kind.PERMDIV and row_tok == Tok(f"P:{sort}") and idx.extra[0] is not None:
        placed = Tok(idx.extra[0].axis, 1)
    else:
        return None
    if any(t is not None for i, t in enumerate(rows.toks) if i != dim):
        return None
    toks = list(dst.toks)
    toks[dim] = placed
    return Val(tuple(toks), **carry([dst, rows]))


def _per_document(dst: Val, dim: int, idx: Val, rows: Val) -> Val | None:
    """Rows added at their document id into a fresh tensor (``zeros(N, H).index_add(0,
    doc, x)``): one row per document, each summing its own document's tokens, on a
    document axis ``D<k>`` (row ``d + k`` holds document ``d``); ``None`` otherwise."""
    shift = idx.extra if idx.kind == Kind.DOCID and type(idx.extra) is int else None
    tok = rows.toks[dim] if dim < len(rows.toks) else None
    if shift is None or tok != Tok("T") or [idx.toks[d] for d in idx.token_dims] != [tok]:
        return None
    if dst.token_dims or dst.dep > Dep.NONE or dst.leaks or rows.leaks:
        return None
    toks = list(dst.toks)
    toks[dim] = Tok(f"D{shift}")
    others = [t for i, t in enumerate(rows.toks) if i != dim and t is not None]
    if others:
        return None
    return Val(tuple(toks), **{**carry([dst, rows]), "dep": Dep.DOC})


@register("torchtitan::deterministic_scatter_add.default")
def row_scatter_add(interp: Interp, node: torch.fx.Node) -> Val:
    """``out.scatter_add(0, index, src)`` (``torchtitan::deterministic_scatter_add``,
    whose kernel is exactly that): with ``index`` a column of row positions expanded
    over the features, each row ``i`` of ``src`` is added to row ``index[i]`` of
    ``out`` -- an ``index_add`` of rows, proven like one. Any other index scatters
    elements along the token dim: a leak."""
    bound = bind(node)
    dst, rows = interp.val(bound.get("out")), interp.val(bound.get("src"))
    column = expanded_column(bound.get("index"))
    idx = interp.val(column)
    if dst is None or rows is None or len(dst.toks) != 2:
        return unknown(interp, node)
    if idx is None:
        if dst.toks[0] is None and not rows.token_dims:
            return Val(dst.toks, **carry([dst, rows, interp.val(bound.get("index"))]))
        return interp.leak(node, "scatters elements along the token dimension at positions "
                           "that are not whole rows")  # fmt: skip
    return _scatter_rows(interp, node, dst, 0, idx, rows)


def expanded_column(index) -> torch.fx.Node | None:
    """``col.reshape(-1, 1).expand(-1, D)``: the 1-D ``col`` every column repeats."""
    if not isinstance(index, torch.fx.Node) or op_name(index.target) != "aten.expand.default":
        return None
    base, shape = index.args[0], shape_of(index)
    base_shape = shape_of(base)
    if shape is None or base_shape is None or len(shape) != 2 or len(base_shape) != 2:
        return None
    if not is_one(base_shape[1]) or op_name(base.target) not in (*VIEWS, "aten.unsqueeze.default"):
        return None
    col = base.args[0]
    rows_kept = _same_size(shape[0], base_shape[0])  # only the feature dim is stretched
    return col if rows_kept and ndim_of(col) == 1 else None


@register(aten.index_put.default, aten._unsafe_index_put.default)
def index_put(interp: Interp, node: torch.fx.Node) -> Val:
    """``inv[perm] = arange(n)`` builds the inverse permutation; ``x[sel] = rows`` puts
    selected rows back where they came from."""
    dst, indices, values = _src(interp, node), node.args[1], interp.val(node.args[2])
    used = [(d, interp.val(i)) for d, i in enumerate(indices) if i is not None]
    if dst is None or values is None or len(used) != 1 or used[0][1] is None:
        return unknown(interp, node)
    d, idx = used[0]
    if idx.kind == Kind.PERM and values.kind == Kind.INDEX and dst.dep == Dep.NONE:
        interp.reasons.setdefault(node, "an inverse permutation of tokens used as data")
        extra = idx.extra
        return Val((extra,), Dep.LEAK, leaks=frozenset({node}), kind=Kind.INVERSE, ref=idx.ref,
                   extra=extra)  # fmt: skip
    return _scatter_rows(interp, node, dst, d, idx, values)
