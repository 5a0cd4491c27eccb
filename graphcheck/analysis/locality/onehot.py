"""One-hot routing maps, repeats and copy-axis views: MoE by row provenance.

* ``one_hot(idx, C)``: element ``[..., c]`` is ``idx[...] == c``. The index's dims keep
  their token coordinates and the class dim is appended (a feature dim, unless the class
  count involves T: then classes are tokens). A one-hot of per-token ``topk`` or
  ``argmax`` choices is a routing map (:attr:`Kind.ONEHOT`): summing or contracting it
  over the expert dim is token-wise; over the token dim it counts or ranks other
  documents' tokens (a leak at that op, unless the counts only group rows).
* ``x.repeat(C, 1)``: a token dim repeated ``C`` times is a **copy axis** ``"CxT"``
  (:mod:`graphcheck.analysis.locality.rows`): element ``i`` is token ``i mod T``'s. A
  ``(C, T)`` dim pair merged into one dim (an expert-major ``[E, T] -> [E*T]``) is the
  same copy axis. A view that splits it back into ``(C, T, ...)`` recovers the copies (a
  feature dim) and the tokens; any other split of it puts different tokens on one
  coordinate (a leak at the view). Views that touch no copy axis are
  :func:`graphcheck.analysis.locality.views.view`.
"""

from __future__ import annotations

import sympy
import torch
import torch.fx

from graphcheck.analysis.fx import op_name
from graphcheck.analysis.locality import views
from graphcheck.analysis.locality.domain import (
    Dep,
    Interp,
    Kind,
    Tok,
    Val,
    bind,
    carry,
    is_length,
    is_one,
    meta_toks,
    norm_dim,
    shape_of,
    unknown,
)
from graphcheck.analysis.locality.registry import register
from graphcheck.analysis.locality.rows import (
    VIEWS,
    copies,
    copy_axis,
    topk_indices,
    written_in_place,
)
from graphcheck.analysis.locality.views import _groups, _map_group, _split, _sym, _viewed

__all__ = ["copy_view", "one_hot", "repeat", "view"]

aten = torch.ops.aten


@register(aten.one_hot.default)
def one_hot(interp: Interp, node: torch.fx.Node) -> Val:
    """``one_hot(idx, C)``: ``idx``'s dims, then the class dim. A one-hot of per-token
    routing choices is :attr:`Kind.ONEHOT` (its ``ref`` the ``topk`` or ``argmax``)."""
    src = interp.val(node.args[0])
    if src is None:
        return unknown(interp, node)
    out = meta_toks(node.meta.get("val"), interp.tokens)
    classes = out[-1] if out else None  # a class count involving T: the classes are tokens
    result = Val((*src.toks, classes), **carry([src]))
    choice = _routing_choice(interp, node.args[0])
    if classes is None and choice is not None and src.dep < Dep.LEAK and not src.leaks:
        return result.with_(kind=Kind.ONEHOT, ref=choice)
    return result


def _routing_choice(interp: Interp, index) -> torch.fx.Node | None:
    """The ``topk`` (indices) or ``argmax`` over a feature dim that ``index`` is, through
    views none of which is written in place; ``None`` for any other index."""
    top = topk_indices(index)
    if top is not None:
        scores = interp.val(top.args[0])
        return top if scores is not None and scores.toks and scores.toks[-1] is None else None
    while isinstance(index, torch.fx.Node) and op_name(index.target) in VIEWS:
        if written_in_place(index):
            return None
        index = index.args[0]
    if not isinstance(index, torch.fx.Node) or op_name(index.target) != "aten.argmax.default":
        return None
    bound, scores = bind(index), interp.val(index.args[0])
    dim = bound.get("dim")
    if scores is None or dim is None or bound.get("keepdim") or written_in_place(index):
        return None
    return index if scores.toks[norm_dim(dim, len(scores.toks))] is None else None


@register(aten.repeat.default)
def repeat(interp: Interp, node: torch.fx.Node) -> Val:
    """``x.repeat(*reps)``: new leading dims are copies (feature dims); a token dim
    repeated ``C`` times (a Python int) is a copy axis of ``C`` copies."""
    src = interp.val(node.args[0])
    if src is None:
        return unknown(interp, node)
    reps = list(node.args[1])
    offset = len(reps) - len(src.toks)
    toks: list[Tok | None] = [None] * offset
    for i, tok in enumerate(src.toks):
        count = reps[i + offset]
        if tok is None or (type(count) is int and count == 1):
            toks.append(tok)
        elif type(count) is int and count > 1:
            toks.append(copy_axis(count, tok))
        else:
            return interp.leak(node, "repeats the token dimension a number of times "
                               "graphcheck cannot read (fail closed)")  # fmt: skip
    return Val(tuple(toks), **carry([src]))


@register(
    aten.view.default,
    aten.reshape.default,
    aten._unsafe_view.default,
    aten.view_as.default,
    aten.reshape_as.default,
    aten.view_copy.default,
    aten.flatten.using_ints,
    aten.unflatten.int,
)
def view(interp: Interp, node: torch.fx.Node) -> Val:
    """``view`` / ``reshape`` / ``flatten``: a view that makes, keeps or splits a copy axis
    (:func:`copy_view`), else :func:`graphcheck.analysis.views.view`."""
    src, before, after = interp.val(node.args[0]), shape_of(node.args[0]), shape_of(node)
    if src is not None and before is not None and after is not None and _may_copy(src, before):
        groups = _groups(before, after)
        copied = copy_view(interp, node, src, before, after, groups) if groups else None
        if copied is not None:
            return copied
    return views.view(interp, node)


def _may_copy(src: Val, before) -> bool:
    """``src`` holds a copy axis, or a token dim after a dim of more than one element."""
    if len(src.toks) != len(before):
        return False
    if any(copies(tok) is not None for tok in src.toks):
        return True
    first = next((d for d in src.token_dims), None)
    return first is not None and any(not is_one(before[d]) for d in range(first))


def copy_view(interp: Interp, node: torch.fx.Node, src: Val, before, after, groups):
    """A view that makes, keeps or splits a copy axis (``None``: it touches none, the
    ordinary view rules apply)."""
    touched = [_touches(src, before, ins, outs) for ins, outs in groups]
    if not any(touched):
        return None
    toks: list[Tok | None] = [None] * len(after)
    mapping: dict[int, int] = {}
    for (ins, outs), kind in zip(groups, touched, strict=True):
        if kind == "merge":
            toks[outs[0]] = _merged_copies(src, before, ins)
        elif kind == "split" and not _recovered(src, before, after, ins, outs, toks):
            count, _ = copies(next(src.toks[d] for d in ins if src.toks[d] is not None))
            shape = ", ".join("T" if is_length(after[d], interp.tokens) else str(after[d])
                              for d in outs)  # fmt: skip
            return interp.leak(node, f"views {count} copies of the tokens (a repeat or an "
                               f"expert-major merge) as ({shape}): only ({count}, tokens) "
                               "recovers them, any other split puts different tokens on one "
                               "coordinate; view as (copies, tokens) first")  # fmt: skip
        elif not kind:
            _map_group(src, before, after, ins, outs, toks, mapping)
    return _viewed(interp, node, mapping, toks)


def _touches(src: Val, before, ins, outs) -> str:
    """``"merge"``: constant dims and one token dim merged into a copy axis; ``"split"``:
    a copy axis split into several dims; ``""``: neither."""
    tokens = [d for d in ins if src.toks[d] is not None]
    if len(tokens) != 1:
        return ""
    (at,) = tokens
    if len(outs) > 1:
        return "split" if copies(src.toks[at]) is not None else ""
    lead = _int_prod(before[d] for d in ins if d < at)
    whole = "@" not in src.toks[at].axis
    return "merge" if whole and lead is not None and lead > 1 else ""


def _merged_copies(src: Val, before, ins) -> Tok:
    """``[C, n, F] -> [C*n*F]``: a copy axis of ``C`` copies, ``F`` elements more per
    token."""
    (at,) = [d for d in ins if src.toks[d] is not None]
    tok, features = src.toks[at], _int_prod(before[d] for d in ins if d > at)
    inner = tok.inner * features if tok.inner is not None and features is not None else None
    return copy_axis(_int_prod(before[d] for d in ins if d < at), Tok(tok.axis, inner))


def _recovered(src: Val, before, after, ins, outs, toks) -> bool:
    """``[C*n, F] -> [C, n, F]``: the leading output dims make exactly ``C`` (the copy
    index, a feature dim), the rest split the copied token dim. A split that keeps the
    copy axis whole on one dim is the ordinary split of a token dim."""
    (at,) = [d for d in ins if src.toks[d] is not None]
    count, tok = copies(src.toks[at])
    features = _int_prod(before[d] for d in ins if d > at)
    lead, k = 1, 0
    while k < len(outs) and lead < count and _int_prod([after[outs[k]]]) is not None:
        lead, k = lead * _int_prod([after[outs[k]]]), k + 1
    if lead == count:
        inner = tok.inner * features if tok.inner is not None and features is not None else None
        _split(tok.axis, inner, [after[d] for d in outs[k:]], outs[k:], toks)
        return True
    trial: list[Tok | None] = list(toks)
    _map_group(src, before, after, ins, outs, trial, {})
    if sum(trial[d] is not None for d in outs) != 1:
        return False
    toks[:] = trial
    return True


def _int_prod(sizes) -> int | None:
    out = sympy.Integer(1)
    for size in sizes:
        out = out * _sym(size)
    return int(out) if out.is_Integer else None
