"""Sorts and selections: the bookkeeping of token-choice routing.

Assumes a sort along T reorders rows (the values keep their dependence, in the sort's
row order; the permutation is bookkeeping, to be inverted), ``argsort`` of a sort
permutation is its inverse, ``nonzero`` / ``where(cond)`` of a per-token predicate
select tokens, ``histc`` of sorted keys counts the groups, and
``searchsorted(cu_seq_lens, arange(T), right=True)`` is each token's document id.
Top-k over T keeps the tokens other tokens outrank: a leak.
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
    meta_toks,
    ndim_of,
    norm_dim,
    unknown,
)
from graphcheck.analysis.locality.registry import Work, register

__all__ = ["argsort", "histc", "nonzero", "searchsorted", "sort", "topk", "where_indices"]

aten = torch.ops.aten


@register(aten.sort.default, aten.sort.stable)
def sort(interp: Interp, node: torch.fx.Node):
    """Sorting along T reorders rows: the values keep their dependence in the sort's
    row order; the permutation is bookkeeping, to be inverted."""
    src = _src(interp, node)
    bound = bind(node)
    if src is None:
        return unknown(interp, node)
    dim = norm_dim(bound.get("dim", -1), len(src.toks))
    if src.toks[dim] is None:
        plain = src.with_(kind=None, guard=None, tri=None)
        return plain if op_name(node.target).startswith("aten.argsort") else (plain, plain)
    toks = list(src.toks)
    toks[dim] = Tok(f"P:{node.name}")
    values = src.with_(toks=tuple(toks), kind=Kind.SORTED, ref=node, extra=src.toks[dim])
    interp.reasons.setdefault(node, "the sort order of tokens used as data")
    perm = Val(tuple(toks), Dep.LEAK, kind=Kind.PERM, ref=node, extra=src.toks[dim])
    perm = perm.with_(leaks=frozenset({node}))
    return perm if op_name(node.target).startswith("aten.argsort") else (values, perm)


@register(aten.kthvalue.default)
@register(aten.topk.default, work=Work.ROUTED)
def topk(interp: Interp, node: torch.fx.Node):
    """Top-k over T keeps the tokens other tokens outrank (expert-choice routing)."""
    src = _src(interp, node)
    bound = bind(node)
    if src is None:
        return unknown(interp, node)
    dim = norm_dim(bound.get("dim", -1), len(src.toks))
    if src.toks[dim] is not None:
        one = interp.leak(node, "top-k over the token dimension (which tokens are kept depends "
                          "on other documents)")  # fmt: skip
        return (one, one)
    plain = src.with_(kind=None, guard=None, tri=None)
    return (plain, plain)


@register(aten.nonzero.default, aten.argwhere.default)
def nonzero(interp: Interp, node: torch.fx.Node) -> Val:
    """Positions where a per-token predicate holds: a selection of tokens."""
    src = _src(interp, node)
    if src is None or not src.token_dims:
        return Val(meta_toks(node.meta.get("val"), interp.tokens), **carry([src]))
    if src.kind == Kind.DOCSTART and len(src.toks) == 1:  # the positions of the starts
        return Val((None, None), kind=Kind.CU_INNER, extra="starts")
    if src.dep > Dep.DOC or src.leaks:
        return interp.passed_on(node, [src]) or interp.leak(
            node, "selects tokens by a predicate that mixes documents"
        )
    interp.reasons.setdefault(node, "positions of selected tokens used as data")
    toks = (Tok(f"G:{node.name}"), None)
    return Val(toks, Dep.LEAK, leaks=frozenset({node}), kind=Kind.SELECT, ref=node, extra=src.toks)


@register(aten.where.default)
def where_indices(interp: Interp, node: torch.fx.Node) -> tuple:
    """``torch.where(cond)``: one index tensor per dim of ``cond``; the token dim's is a
    selection of tokens by a per-token predicate."""
    src = _src(interp, node)
    outs = node.meta.get("val") or ()
    if src is None or not src.token_dims:
        return tuple(Val((None,), **carry([src])) for _ in outs)
    if src.dep > Dep.DOC or src.leaks:
        one = interp.passed_on(node, [src]) or interp.leak(
            node, "selects tokens by a predicate that mixes documents"
        )
        return tuple(one for _ in outs)
    interp.reasons.setdefault(node, "positions of selected tokens used as data")
    tok = Tok(f"G:{node.name}")
    return tuple(
        Val((tok,), Dep.LEAK, leaks=frozenset({node}), kind=Kind.SELECT, ref=node, extra=comp)
        for comp in src.toks
    )


@register(aten.histc.default, aten.bincount.default)
def histc(interp: Interp, node: torch.fx.Node) -> Val:
    """Counts of the sorted keys (the expert sizes) are bookkeeping for a grouped matmul."""
    src = _src(interp, node)
    if src is not None and src.kind == Kind.SORTED:
        interp.reasons.setdefault(node, "counts over tokens used as data")
        return Val((None,), Dep.LEAK, leaks=frozenset({node}), kind=Kind.COUNTS, ref=src.ref)
    if src is not None and (src.token_dims or src.dep):
        return interp.leak(node, "counts values over the token dimension")
    return Val((None,), **carry([src]))


@register(aten.searchsorted.Tensor, aten.bucketize.Tensor)
def searchsorted(interp: Interp, node: torch.fx.Node) -> Val:
    """``searchsorted(cu_seq_lens, arange(T), right=True)`` is the document id of each
    token."""
    bound = bind(node)
    name = op_name(node.target)
    seq_key, in_key = ("boundaries", "self") if "bucketize" in name else ("sorted_sequence", "self")
    seq, index = interp.val(bound.get(seq_key)), interp.val(bound.get(in_key))
    structural = seq is not None and index is not None and bound.get("right")
    if structural and seq.kind in (Kind.CU, Kind.CU_INNER) and index.kind == Kind.INDEX:
        origin = interp.fabricate(node, "document ids used as values")
        shift = 1 if seq.kind == Kind.CU or seq.extra == "starts" else 0  # doc + shift
        return Val(index.toks, kind=Kind.DOCID, absolute=origin, extra=shift)
    vals = [v for v in (seq, index) if v is not None]
    if any(v.dep > Dep.POINT or v.leaks for v in vals) or (seq is not None and seq.token_dims):
        return interp.leak(node, "searches values across the token dimension")
    return Val(index.toks if index else (), **carry(vals))


@register(aten.argsort.default, aten.argsort.stable)
def argsort(interp: Interp, node: torch.fx.Node):
    """``perm.argsort()`` of a sort permutation (ascending, along it) is the inverse
    permutation: ``inv[perm[i]] = i``, so ``sorted[inv]`` is back in token order.
    ``argsort`` of anything else sorts it (:func:`sort`)."""
    src = interp.val(node.args[0]) if node.args else None
    bound = bind(node)
    is_perm = src is not None and src.kind == Kind.PERM and len(src.toks) == 1
    along = is_perm and norm_dim(bound.get("dim", -1), 1) == 0 and ndim_of(node) == 1
    if not along or bound.get("descending") or src.extra is None:
        return sort(interp, node)
    interp.reasons.setdefault(node, "an inverse permutation of tokens used as data")
    return Val((src.extra,), Dep.LEAK, leaks=frozenset({node}), kind=Kind.INVERSE, ref=src.ref,
               extra=src.extra)  # fmt: skip
