"""Scans and triangles: prefix sums, neighbour differences, ``tril`` / ``triu``.

Assumes a scan over a token dim reads every earlier token of the packed row: admitted
when it counts document starts (document ids, proven by the solver from the
indicator's term), when it runs inside a triangle masked to one document, or over
values that depend on no token (positions over the packed row, an absolute quantity).
``diff`` over T reads the neighbouring token, another document's at a start.
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.fx import op_name
from graphcheck.analysis.layout_terms import document_id_shift, layout_diff, term_of
from graphcheck.analysis.locality.domain import (
    Dep,
    Fill,
    Interp,
    Kind,
    Pair,
    Val,
    _src,
    bind,
    carry,
    is_one,
    norm_dim,
    shape_of,
    unknown,
)
from graphcheck.analysis.locality.registry import register

__all__ = ["diff", "scan", "triangle"]

aten = torch.ops.aten


@register(aten.cumsum.default, aten.cumprod.default, aten.logcumsumexp.default)
def scan(interp: Interp, node: torch.fx.Node) -> Val:
    """``cumsum``: over a feature dim token-wise; over T a prefix over other documents,
    unless it counts document starts (document ids) or runs inside a triangle."""
    src = _src(interp, node)
    if src is None:
        return unknown(interp, node)
    dim = norm_dim(node.args[1], len(src.toks))
    if src.toks[dim] is None:
        kind = Kind.OFFSETS if src.kind == Kind.COUNTS else None
        return src.with_(kind=kind, guard=None)
    if (earlier := interp.passed_on(node, [src])) is not None:
        return earlier
    if src.kind == Kind.ONEHOT:  # a capacity: each token's place in its expert's queue
        return interp.leak(node, "ranks every token among the earlier tokens of all documents "
                           "that chose its expert (an expert capacity over the packed row); "
                           "count per document, or drop no tokens")  # fmt: skip
    if (ids := _counted_documents(interp, node, src, dim)) is not None:
        return ids
    tri = src.tri
    if tri is not None and tri.row == dim and tri.k >= 0 and src.dep <= Dep.DOC:
        return src.with_(dep=Dep.SPAN if src.dep else Dep.NONE, guard=None, kind=None)
    if src.dep == Dep.NONE and not src.leaks:
        origin = interp.fabricate(node, "positions counted over the packed row (cumsum over T)")
        return Val(src.toks, absolute=src.absolute | origin)
    return interp.leak(node, "prefix sum over the token dimension crosses document boundaries")


def _counted_documents(interp, node, src: Val, dim: int) -> Val | None:
    """A prefix sum over T of an indicator the solver proves is "a document starts
    here" (``(position_ids == 0)``, transformers' ``diff(positions) != 1``): the document
    ids (:func:`~graphcheck.analysis.layout_terms.document_id_shift`)."""
    term = term_of(src)
    out = node.meta.get("val")
    exact = isinstance(out, torch.Tensor) and not out.dtype.is_floating_point
    if term is None or src.toks[dim] is None or not exact:
        return None
    counted = document_id_shift(term)
    if counted.separates:
        origin = interp.fabricate(node, "document separators counted over the packed row")
        return Val(src.toks, kind=Kind.DOCSEP, ref=node, absolute=origin)
    if counted.shift is None:
        if counted.why:
            why = "a prefix sum over T of a function of the positions that is not the "
            why += f"document id ({counted.why})"
            return interp.leak(node, why)
        return None
    origin = interp.fabricate(node, "document ids counted over the packed row")
    return Val(src.toks, kind=Kind.DOCID, absolute=origin, extra=counted.shift)


@register(aten.diff.default)
def diff(interp: Interp, node: torch.fx.Node) -> Val:
    """``diff``: over a feature dim token-wise; over T each token minus its neighbour,
    which at a document start is the previous document's last token. Of a function of
    the layout (positions), with a ``prepend`` that is one too, the result is one too
    (its term); any other ``prepend`` or ``append`` is not followed (fails closed)."""
    src = _src(interp, node)
    bound = bind(node)
    if src is None:
        return unknown(interp, node)
    dim = norm_dim(bound.get("dim", -1), len(src.toks))
    before, after = interp.val(bound.get("prepend")), bound.get("append")
    term, first = term_of(src), term_of(before)
    simple = bound.get("n", 1) == 1 and after is None and src.toks[dim] is not None
    if simple and term is not None and first is not None and not before.token_dims:
        shape = shape_of(bound.get("prepend"))
        if shape is not None and len(shape) == len(src.toks) and is_one(shape[dim]):
            return src.with_(kind=Kind.LAYOUT, extra=layout_diff(term, first), guard=None,
                             tri=None, **carry([src, before]))  # fmt: skip
    if bound.get("prepend") is not None or after is not None:
        return unknown(interp, node)
    if src.toks[dim] is None:
        return src.with_(kind=None, guard=None, tri=None)
    return interp.leak(node, "difference of neighbouring tokens (diff over T) crosses documents")


@register(aten.tril.default, aten.triu.default)
def triangle(interp: Interp, node: torch.fx.Node) -> Val:
    """``tril`` / ``triu`` of a pairwise tensor: 0 outside a triangle."""
    src = _src(interp, node)
    if src is None:
        return unknown(interp, node)
    n = len(src.toks)
    row, col = n - 2, n - 1
    diagonal = node.args[1] if len(node.args) > 1 else 0
    if n < 2 or src.toks[row] is None or src.toks[col] is None:
        return src.with_(kind=None)
    if "tril" in op_name(node.target):
        tri = Pair(row, col, Fill.ZERO, -diagonal)
    else:
        tri = Pair(col, row, Fill.ZERO, diagonal)
    return src.with_(tri=tri, kind=None)
