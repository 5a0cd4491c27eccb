"""Chunked token axes: T padded behind, split into chunks, one place picked per chunk.

Chunked scans (linear attention, SSD, delta rules) pad T behind to a multiple of the
chunk ``C``, view it ``[T/C, C, ...]``, work inside each chunk, summarise each chunk by
one of its tokens (its last token's state, its first token's document id) and carry
those summaries between chunks. The abstract domain follows that by meaning:

* a pad behind of T is the axis ``"T+"``: element ``t`` is token ``t`` for ``t < T``,
  the fill after it (:func:`padded`); the slice ``[0 : T]`` of it is T again
  (:func:`cropped`);
* a view of an axis into ``[n, C]`` tags the chunk index ``<axis>@0/2`` and the place
  ``<axis>@1/2`` (:mod:`graphcheck.analysis.locality.views`);
* picking place ``r`` of every chunk (``x[:, r]``, ``x[:, r : r + 1]``, ``r = -1``: the
  last) leaves the chunk index standing for token ``k * C + r``: ``Tok.rep = r``
  (:func:`pick`). A guard between the picked place and another place of the chunk
  becomes a guard between that place and the chunk's representative;
* an elementwise op where a representative meets the places of the same chunks
  (:func:`anchored`) is admitted when the representative holds no token data (its
  document id compared with the places' ids makes a guard ``Pair(place, chunk,
  rep=r)``: "0 unless token ``(k, i)`` and token ``(k, r)`` share a document"), or when
  the op is a product with an operand that is 0 wherever they do not: the result then
  depends on the place's document only;
* a sum over the places of a chunk guarded to its representative depends on the
  representative's document only: the chunk index takes the representative
  (:func:`summarised`). A sum over chunk indices guarded between two representatives
  is an ordinary guarded contraction
  (:mod:`graphcheck.analysis.locality.contractions`).

A guard between a chunk index and a place (either form) is never a reason to sum over
the chunk index: the other consumers of guards (contractions, softmax, attention)
ignore it (:func:`place_guard`).
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.fx

from graphcheck.analysis.locality.domain import (
    Dep,
    Fill,
    Interp,
    Kind,
    Pair,
    Tok,
    Val,
    carry,
    is_length,
    is_one,
    is_wildcard,
    shape_of,
)

__all__ = [
    "PADDED",
    "UNMASKED",
    "anchored",
    "meets",
    "cropped",
    "padded",
    "pick",
    "place_guard",
    "summarised",
]

PADDED = "T+"
UNMASKED = (
    "puts what one token of each chunk holds (a chunk's state, its first or last token) on "
    "every place of the chunk without a mask where the place's document differs (a "
    "document that starts inside the chunk receives another document's state); multiply "
    "by document-id equality with that token"
)
_ANNIHILATE = {"mul", "bitwise_and", "logical_and", "and", "__and__"}


def _is_chunk(tok: Tok | None) -> bool:
    return tok is not None and tok.axis.endswith("@0/2") and tok.inner == 1


def _is_place(tok: Tok | None) -> bool:
    return tok is not None and tok.axis.endswith("@1/2") and tok.inner == 1 and tok.rep is None


def _axis(tok: Tok) -> str:
    return tok.axis.rpartition("@")[0]


def _chunk_of(toks, place: int) -> int | None:
    """The one plain chunk index of the axis whose place dim is ``place``."""
    if not _is_place(toks[place]):
        return None
    axis = _axis(toks[place])
    found = [d for d, t in enumerate(toks) if _is_chunk(t) and _axis(t) == axis]
    if len(found) != 1 or toks[found[0]].rep is not None:
        return None
    return found[0]


def place_guard(val: Val | None) -> bool:
    """``val``'s guard relates a place of a chunk to the chunk's representative."""
    g = val.guard if val is not None else None
    if g is None:
        return False
    if g.rep is not None:
        return True
    ends = [val.toks[g.row], val.toks[g.col]] if max(g.row, g.col) < len(val.toks) else []
    return any(_is_place(t) for t in ends) and any(_is_chunk(t) for t in ends)


def padded(src: Val, dim: int, toks: tuple) -> tuple:
    """The token dims after padding ``dim`` of ``src`` behind: T there becomes ``T+``."""
    if src.toks[dim] != Tok("T"):
        return toks
    return tuple(Tok(PADDED) if d == dim else t for d, t in enumerate(toks))


def cropped(node: torch.fx.Node, src: Val, dim: int, start, interp: Interp) -> Val | None:
    """``x[0 : T]`` of a ``T+`` dim: every element is its own token again."""
    out = shape_of(node)
    if src.toks[dim] != Tok(PADDED) or start not in (0, None) or out is None:
        return None
    if not is_length(out[dim], interp.tokens):
        return None
    toks = tuple(Tok("T") if d == dim else t for d, t in enumerate(src.toks))
    return src.with_(toks=toks, shift=None)


def pick(src: Val, place: int, index, size, keep: bool) -> Val | None:
    """Place ``index`` of every chunk: ``select`` (``keep=False``: the place dim goes) or
    a width-1 slice (``keep=True``); ``None`` when ``place`` is not a chunk's place."""
    chunk = _chunk_of(src.toks, place)
    if chunk is None or type(index) is not int or type(size) is not int:
        return None
    r = index + size if index < 0 else index
    if not 0 <= r < size:
        return None
    toks = list(src.toks)
    toks[chunk] = replace(toks[chunk], rep=r)
    toks[place] = None
    guard, g = None, src.guard
    if g is not None and g.rep is None and place in (g.row, g.col):
        other = g.col if g.row == place else g.row
        if other != chunk and _is_place(src.toks[other]):
            guard = Pair(other, chunk, g.fill)  # the other place vs the representative
    kept = list(range(len(toks))) if keep else [d for d in range(len(toks)) if d != place]
    number = {d: i for i, d in enumerate(kept)}
    if guard is not None:
        guard = Pair(number[guard.row], number[guard.col], guard.fill)
    return src.with_(toks=tuple(toks[d] for d in kept), guard=guard, tri=None, shift=None)


def _placed(interp: Interp, node, arg, n: int) -> list:
    """``arg``'s token dims at the output's dims (``None`` where it has none)."""
    val, shape, out = interp.val(arg), shape_of(arg), shape_of(node)
    placed: list = [None] * n
    if val is None or shape is None or out is None or len(val.toks) != len(shape):
        return placed
    offset = n - len(shape)
    for i, tok in enumerate(val.toks):
        broadcast = is_one(shape[i]) and not is_one(out[i + offset])
        if tok is not None and (not broadcast or _is_chunk(tok)):
            placed[i + offset] = tok  # a chunk index of size 1: the only chunk there is
    return placed


def meets(interp: Interp, node: torch.fx.Node, operands) -> bool:
    """Some operand's chunk representative lies on a dim where another has the chunks
    themselves (or another representative): :func:`anchored` judges the op."""
    out = shape_of(node)
    args = [a for a in operands if isinstance(a, torch.fx.Node)]
    if out is None or not any(_has_rep(interp.val(a)) for a in args):
        return False
    seen: dict[int, set] = {}
    for arg in args:
        for d, tok in enumerate(_placed(interp, node, arg, len(out))):
            if _is_chunk(tok):
                seen.setdefault(d, set()).add(tok.rep)
    return any(len(reps) > 1 for reps in seen.values())


def _has_rep(val: Val | None) -> bool:
    return val is not None and any(t is not None and t.rep is not None for t in val.toks)


def anchored(interp: Interp, node: torch.fx.Node, base: str, operands) -> Val | None:
    """An elementwise op where chunk representatives meet the places of the same chunks
    (``None``: not that, or not admitted)."""
    out = shape_of(node)
    args = [a for a in operands if isinstance(a, torch.fx.Node)]
    vals = [interp.val(a) for a in args]
    if out is None or any(v is None for v in vals):
        return None
    args = [a for a, v in zip(args, vals, strict=True) if not is_wildcard(v)]
    placed = {a: _placed(interp, node, a, len(out)) for a in args}
    toks, reps = _plain(placed, len(out))
    if toks is None or len(reps) != 1:
        return None
    ((chunk, r),) = reps.items()
    place = next((d for d, t in enumerate(toks) if _is_place(t) and _axis(t) == _axis(
        toks[chunk])), None)  # fmt: skip
    if place is None:
        return None
    rep_args = [a for a in args if placed[a][chunk] is not None and placed[a][chunk].rep == r]
    admitted, guard = _anchor_guard(interp, node, base, args, rep_args, (place, chunk, r))
    if not admitted:
        return None
    result = Val(toks, **carry([interp.val(a) for a in args]), guard=guard)
    if base in ("eq", "ne") and guard is not None:  # two document ids compared: relative
        result = result.with_(absolute=frozenset())
    return result


def _plain(placed: dict, n: int) -> tuple:
    """The operands' token dims with representatives made plain, lined up: ``(toks,
    {dim: rep})``; ``(None, {})`` when they do not line up."""
    toks: list = [None] * n
    reps: dict[int, int] = {}
    for dims in placed.values():
        for d, tok in enumerate(dims):
            if tok is None:
                continue
            if tok.rep is not None:
                if reps.setdefault(d, tok.rep) != tok.rep:
                    return None, {}
                tok = replace(tok, rep=None)
            if toks[d] not in (None, tok):
                return None, {}
            toks[d] = tok
    return tuple(toks), reps


def _anchor_guard(interp, node, base: str, args, rep_args, where) -> tuple[bool, Pair | None]:
    """Whether the op is admitted, and the result's guard ``Pair(place, chunk, rep=r)``:
    document ids of the representative compared with the places' ids; or a product with
    an operand 0 wherever the two lie in different documents; or representatives that
    hold no token data (no guard)."""
    place, chunk, r = where
    if base in ("eq", "ne") and len(args) == 2 and len(rep_args) == 1:
        if not _same_ids(interp.val(args[0]), interp.val(args[1])):
            return False, None
        return True, Pair(place, chunk, Fill.ZERO if base == "eq" else Fill.TRUE, rep=r)
    zero = Pair(place, chunk, Fill.ZERO, rep=r)
    data = [a for a in rep_args if interp.val(a).dep > Dep.NONE or interp.val(a).leaks]
    if any(interp.val(a).dep > Dep.DOC for a in data):
        return False, None  # a span or a leak relative to the representative
    if base in _ANNIHILATE and any(_zero_guard(interp, node, a, zero) for a in args):
        return True, zero
    return not data, None


def _same_ids(a: Val, b: Val) -> bool:
    """Both are the batch's document ids (one prefix sum's padding, or ``doc + k``)."""
    if a.kind == b.kind == Kind.DOCSEP:
        return a.ref is b.ref
    return a.kind == b.kind == Kind.DOCID and type(a.extra) is int and a.extra == b.extra


def _zero_guard(interp: Interp, node, arg, want: Pair) -> bool:
    """``arg`` is 0 wherever place ``want.row`` and the representative ``want.rep`` of
    chunk ``want.col`` lie in different documents (either form of the guard)."""
    val, shape = interp.val(arg), shape_of(arg)
    g = val.guard if val is not None else None
    if g is None or g.fill != Fill.ZERO or shape is None:
        return False
    offset = len(shape_of(node)) - len(shape)
    row, col = g.row + offset, g.col + offset
    if g.rep is not None:
        return (row, col, g.rep) == (want.row, want.col, want.rep)
    tok = val.toks[g.col]
    return (row, col) == (want.row, want.col) and tok is not None and tok.rep == want.rep


def summarised(src: Val, reduced: list[int], toks: list, left: list[int]) -> Val | None:
    """A sum over the places of each chunk, 0 wherever a place and the chunk's
    representative lie in different documents: on the representative's document."""
    g = src.guard
    if g is None or g.fill != Fill.ZERO or reduced != [g.row] or src.dep > Dep.DOC:
        return None
    if not _is_place(src.toks[g.row]) or not _is_chunk(src.toks[g.col]):
        return None
    rep = g.rep if g.rep is not None else src.toks[g.col].rep
    if rep is None or g.col not in left:
        return None
    at = left.index(g.col)
    toks = list(toks)
    toks[at] = replace(src.toks[g.col], rep=rep)
    return Val(tuple(toks), **{**carry([src]), "dep": Dep.DOC})
