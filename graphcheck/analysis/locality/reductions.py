"""Reductions, norms and softmaxes.

Assumes each op reduces (or normalises) over the dims it is given and nothing else:
over feature dims it is token-wise; over a token dim it mixes every token of the
packed row, document-local only when the reduced value holds the op's neutral element
(``0`` for a sum, ``-inf`` for a max or softmax) wherever the two tokens lie in
different documents (a guard). Counts of a one-hot routing map summed over the tokens
are bookkeeping for a grouped matmul.
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.locality import chunks
from graphcheck.analysis.locality.domain import (
    Dep,
    Fill,
    Interp,
    Kind,
    Pair,
    Val,
    bind,
    carry,
    moved_pairs,
    norm_dim,
    unknown,
)
from graphcheck.analysis.locality.pointwise import _base
from graphcheck.analysis.locality.registry import register

__all__ = ["norm", "reduce", "softmax"]

aten = torch.ops.aten


_GUARD_NEUTRAL = {
    "sum": Fill.ZERO,
    "any": Fill.ZERO,
    "amax": Fill.NEGINF,
    "max": Fill.NEGINF,
    "logsumexp": Fill.NEGINF,
    "softmax": Fill.NEGINF,
    "_softmax": Fill.NEGINF,
    "_safe_softmax": Fill.NEGINF,
    "log_softmax": Fill.NEGINF,
    "_log_softmax": Fill.NEGINF,
}


def _reduced_dims(node, n: int) -> list[int]:
    bound = bind(node)
    dims = bound.get("dim", bound.get("dims"))
    if dims is None or dims == []:
        return list(range(n))
    dims = [dims] if isinstance(dims, int) else list(dims)
    return sorted({norm_dim(d, n) for d in dims})


def _over_tokens(interp, node, src: Val, dims: list[int], keep: bool):
    """A reduction over ``dims``: the remaining token dims and a possible leak."""
    base = _base(node)
    reduced = [d for d in dims if src.toks[d] is not None]
    left = [i for i in range(len(src.toks)) if i not in dims or keep]
    toks = [src.toks[i] if i not in dims else None for i in left]
    if not reduced:
        return Val(tuple(toks), **carry([src]), **moved_pairs(src, _renumber(left)))
    if (earlier := interp.passed_on(node, [src])) is not None:
        return earlier.with_(toks=tuple(toks))
    guard = src.guard
    neutral = _GUARD_NEUTRAL.get(base)
    if chunks.place_guard(src):  # the places of a chunk summed to its representative
        summary = chunks.summarised(src, reduced, toks, left) if neutral == Fill.ZERO else None
        if summary is not None:
            return summary
        return interp.leak(node, f"{base} over the token dimension without a document mask", toks)
    ok = len(reduced) == 1 and guard is not None and reduced[0] in (guard.row, guard.col)
    if ok and guard.fill == neutral and src.dep <= Dep.DOC:
        return Val(tuple(toks), **{**carry([src]), "dep": Dep.DOC})
    if base == "sum" and all(t is None for t in toks):
        interp.sums.add(node)
    return interp.leak(node, f"{base} over the token dimension without a document mask", toks)


def _renumber(left: list[int]) -> dict[int, int]:
    return {d: i for i, d in enumerate(left)}


def _counts_of_onehot(interp: Interp, node: torch.fx.Node) -> Val | None:
    """``onehot.sum(token dims)`` of a one-hot map of ``topk`` indices: how many tokens
    chose each expert, bookkeeping for a grouped matmul (``None``: not such a sum)."""
    src = interp.val(node.args[0]) if node.args else None
    if src is None or src.kind != Kind.ONEHOT:
        return None
    n = len(src.toks)
    dims = bind(node).get("dim")
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    summed = {norm_dim(d, n) for d in dims}
    if summed != set(range(n - 1)) or bind(node).get("keepdim"):
        return None
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dtype not in (torch.int64, torch.int32):
        return None  # a narrower or floating count may not be exact
    why = "counts of tokens per expert over all documents used as data or kept in a buffer "
    why += "a forward reads"
    interp.reasons.setdefault(node, why)
    return Val((None,), Dep.LEAK, leaks=frozenset({node}), kind=Kind.COUNTS, ref=src.ref,
               extra="one-hot")  # fmt: skip


@register(
    aten.sum.dim_IntList,
    aten.sum.default,
    aten.mean.dim,
    aten.mean.default,
    aten.amax.default,
    aten.amin.default,
    aten.max.dim,
    aten.min.dim,
    aten.max.default,
    aten.min.default,
    aten.argmax.default,
    aten.argmin.default,
    aten.prod.dim_int,
    aten.var.correction,
    aten.std.correction,
    aten.var_mean.correction,
    aten.logsumexp.default,
    aten.any.dim,
    aten.any.dims,
    aten.any.default,
    aten.all.dim,
    aten.all.default,
    aten.linalg_vector_norm.default,
    aten.norm.ScalarOpt_dim,
    aten.count_nonzero.default,
)
def reduce(interp: Interp, node: torch.fx.Node):
    src = interp.val(node.args[0])
    if src is None:
        return unknown(interp, node)
    if _base(node) == "sum" and (counts := _counts_of_onehot(interp, node)) is not None:
        return counts
    n = len(src.toks)
    dims = _reduced_dims(node, n)
    keep = bool(bind(node).get("keepdim", False))
    result = _over_tokens(interp, node, src, dims, keep)
    if isinstance(node.meta.get("val"), tuple | list):  # max.dim: (values, indices)
        return (result, result)
    return result


@register(
    aten.layer_norm.default,
    aten.rms_norm.default,
    aten.native_layer_norm.default,
    aten._fused_rms_norm.default,
)
def norm(interp: Interp, node: torch.fx.Node):
    """``layer_norm`` / ``rms_norm`` over the trailing ``normalized_shape`` dims."""
    src = interp.val(node.args[0])
    if src is None:
        return unknown(interp, node)
    n = len(src.toks)
    dims = list(range(n - len(node.args[1]), n))
    if any(src.toks[d] is not None for d in dims):
        return interp.leak(node, "normalises over the token dimension")
    weights = [interp.val(a) for a in node.args[2:4] if isinstance(a, torch.fx.Node)]
    result = Val(src.toks, **carry([src, *weights]))
    if isinstance(node.meta.get("val"), tuple | list):
        return tuple(result for _ in node.meta["val"])
    return result


@register(
    aten.softmax.int,
    aten._softmax.default,
    aten._safe_softmax.default,
    aten.log_softmax.int,
    aten._log_softmax.default,
)
def softmax(interp: Interp, node: torch.fx.Node) -> Val:
    """Over a feature dim (router over experts): token-wise. Over a token dim: attention
    weights, document-local only when the scores are ``-inf`` across documents."""
    src = interp.val(node.args[0])
    if src is None:
        return unknown(interp, node)
    dim = norm_dim(node.args[1], len(src.toks))
    if src.toks[dim] is None:
        return src.with_(kind=None)
    if (earlier := interp.passed_on(node, [src])) is not None:
        return earlier
    guard = src.guard
    masked = guard is not None and guard.fill == Fill.NEGINF and dim in (guard.row, guard.col)
    masked = masked and not chunks.place_guard(src)
    if masked and src.dep <= Dep.DOC and len(src.token_dims) == 2:
        return src.with_(dep=Dep.DOC, guard=Pair(guard.row, guard.col, Fill.ZERO), kind=None)
    return interp.leak(node, "softmax over the token dimension without a document mask")
