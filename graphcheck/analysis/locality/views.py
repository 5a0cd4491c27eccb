"""Views: ops that rearrange dims without moving elements between tokens.

Assumes each op only permutes, inserts, removes, splits or merges dims (or picks an
element of a multi-output op: ``getitem``). Token coordinates follow the dims they
move to; a token dim split into several keeps its coordinate on the dims that step
over whole tokens. Picking, slicing, splitting or unbinding part of a token dim shifts
or drops tokens (a leak), except the slices of ``cu_seq_lens`` that keep every
boundary and one token of a function of the layout picked at a constant index.
``view`` / ``reshape`` / ``flatten`` are registered in
:mod:`graphcheck.analysis.locality.onehot`, which judges copy axes first.
"""

from __future__ import annotations

import operator

import sympy
import torch
import torch.fx

from graphcheck.analysis.layout_terms import TOKEN, substitute, term_of
from graphcheck.analysis.locality import chunks, conv
from graphcheck.analysis.locality.domain import (
    Interp,
    Kind,
    Tok,
    Val,
    bind,
    carry,
    is_one,
    meta_toks,
    moved_pairs,
    ndim_of,
    norm_dim,
    shape_of,
    unknown,
)
from graphcheck.analysis.locality.groups import split_by_groups
from graphcheck.analysis.locality.pointwise import _base
from graphcheck.analysis.locality.registry import register

__all__ = [
    "bitcast",
    "complex_view",
    "expand",
    "getitem",
    "permute",
    "select",
    "slice_",
    "split",
    "squeeze",
    "unbind",
    "unsqueeze",
    "view",
]

aten = torch.ops.aten
_LAST_TWO = {"mT", "mH", "adjoint"}  # transpose the last two dims


@register(operator.getitem)
def getitem(interp: Interp, node: torch.fx.Node) -> Val:
    source, index = node.args
    found = interp.vals.get(source)
    if isinstance(found, tuple | list) and isinstance(index, int) and index < len(found):
        return found[index]
    return unknown(interp, node)


def _viewed(interp, node, mapping: dict[int, int], toks) -> Val:
    src = interp.val(node.args[0])
    if src is None:
        return Val(tuple(toks))
    pairs = moved_pairs(src, mapping)
    return src.with_(toks=tuple(toks), **pairs)


@register(
    aten.permute.default, aten.transpose.int, aten.t.default, aten.numpy_T.default,
    aten.mT.default, aten.mH.default, aten.adjoint.default,
)  # fmt: skip
def permute(interp: Interp, node: torch.fx.Node) -> Val:
    src = interp.val(node.args[0])
    n = len(src.toks) if src else ndim_of(node)
    name = _base(node)
    if name == "permute":
        order = [norm_dim(d, n) for d in node.args[1]]
    elif name == "numpy_T":
        order = list(reversed(range(n)))
    else:
        a, b = (0, 1) if name == "t" else (n - 2, n - 1) if name in _LAST_TWO else (
            norm_dim(node.args[1], n), norm_dim(node.args[2], n))  # fmt: skip
        order = list(range(n))
        order[a], order[b] = order[b], order[a]
    toks = [src.toks[d] for d in order] if src else [None] * n
    return _viewed(interp, node, {d: i for i, d in enumerate(order)}, toks)


@register(aten.unsqueeze.default)
def unsqueeze(interp: Interp, node: torch.fx.Node) -> Val:
    src = interp.val(node.args[0])
    out = ndim_of(node)
    at = norm_dim(node.args[1], out)
    toks = list(src.toks if src else [None] * (out - 1))
    toks.insert(at, None)
    mapping = {i: i if i < at else i + 1 for i in range(out - 1)}
    return _viewed(interp, node, mapping, toks)


@register(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def squeeze(interp: Interp, node: torch.fx.Node) -> Val:
    src, shape = interp.val(node.args[0]), shape_of(node.args[0])
    if src is None or shape is None:
        return unknown(interp, node)
    dims = node.args[1] if len(node.args) > 1 else None
    dims = [dims] if isinstance(dims, int) else dims
    gone = {norm_dim(d, len(shape)) for d in (dims if dims is not None else range(len(shape)))}
    gone = {d for d in gone if is_one(shape[d])}
    keep = [i for i in range(len(shape)) if i not in gone]
    return _viewed(interp, node, {d: i for i, d in enumerate(keep)}, [src.toks[d] for d in keep])


@register(aten.expand.default, aten.expand_copy.default, aten.expand_as.default)
def expand(interp: Interp, node: torch.fx.Node) -> Val:
    """New leading dims and size-1 dims stretched to T are token dims of a value that
    does not depend on them."""
    src = interp.val(node.args[0])
    out = meta_toks(node.meta.get("val"), interp.tokens)
    n = len(src.toks) if src else 0
    offset = len(out) - n
    toks = list(out)
    for i in range(n):
        if src.toks[i] is not None:
            toks[i + offset] = src.toks[i]
    return _viewed(interp, node, {i: i + offset for i in range(n)}, toks)


def view(interp: Interp, node: torch.fx.Node) -> Val:
    """``view``/``reshape``: dims grouped by equal products; a token dim split into
    several keeps the token coordinate on the dims that step over whole tokens."""
    src, before, after = interp.val(node.args[0]), shape_of(node.args[0]), shape_of(node)
    if src is None or before is None or after is None or len(src.toks) != len(before):
        return unknown(interp, node)
    groups = _groups(before, after)
    if groups is None:
        if not src.token_dims:
            return _viewed(interp, node, {}, [None] * len(after))
        toks = [Tok("T", None)] * len(after)  # unknown mapping: every dim may hold tokens
        return src.with_(toks=tuple(toks), guard=None, tri=None)
    toks: list[Tok | None] = [None] * len(after)
    mapping: dict[int, int] = {}
    for ins, outs in groups:
        _map_group(src, before, after, ins, outs, toks, mapping)
    return _viewed(interp, node, mapping, toks)


def _groups(before, after):
    """Pairs ``(input dims, output dims)`` of equal size products, in order; ``None``
    when the sizes do not pair up. Sizes are compared by their example values first
    (cheap), and equal products are confirmed symbolically."""
    a, b = [_Size(s) for s in before], [_Size(s) for s in after]
    groups, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        ins, outs, pa, pb = [i], [j], a[i], b[j]
        i, j = i + 1, j + 1
        while not pa.same(pb):
            if pa.hint < pb.hint and i < len(a):
                pa, ins, i = pa * a[i], [*ins, i], i + 1
            elif j < len(b):
                pb, outs, j = pb * b[j], [*outs, j], j + 1
            else:
                return None
        groups.append((ins, outs))
    if any(a[k].hint != 1 for k in range(i, len(a))) or any(
        b[k].hint != 1 for k in range(j, len(b))
    ):
        return None
    return groups


class _Size:
    """A dim size as its symbolic expression and its example value."""

    __slots__ = ("expr", "hint")

    def __init__(self, size, hint=None) -> None:
        if isinstance(size, torch.SymInt):
            self.expr, hint = size.node.expr, size.node.hint
        else:
            self.expr = size
        self.hint = hint if hint is not None else (size if isinstance(size, int) else 1009)

    def __mul__(self, other: _Size) -> _Size:
        out = _Size(self.expr * other.expr, self.hint * other.hint)
        return out

    def same(self, other: _Size) -> bool:
        if self.hint != other.hint:
            return False
        if isinstance(self.expr, int) and isinstance(other.expr, int):
            return self.expr == other.expr
        return self.expr == other.expr or sympy.expand(self.expr - other.expr) == 0


def _sym(size):
    return sympy.sympify(size.node.expr if isinstance(size, torch.SymInt) else size)


def _same(x, y) -> bool:
    return x == y or sympy.expand(x - y) == 0


def _map_group(src: Val, before, after, ins, outs, toks, mapping) -> None:
    tokens = [src.toks[d] for d in ins if src.toks[d] is not None]
    if not tokens:
        return
    if len(ins) == 1 and len(outs) == 1:
        toks[outs[0]] = src.toks[ins[0]]
        mapping[ins[0]] = outs[0]
        return
    if len(tokens) == 1 and tokens[0].rep is not None:
        for d in outs:  # a representative viewed apart: no known mapping
            toks[d] = Tok(tokens[0].axis, None)
        return
    if len(tokens) == 1 and len(ins) >= 1 and len(outs) >= 1:
        tok = tokens[0]
        last = max(d for d in ins if src.toks[d] is not None)
        inner = _prod(before[d] for d in ins if d > last)
        q = tok.inner * inner if isinstance(tok.inner, int) and isinstance(inner, int) else None
        _split(tok.axis, q, [after[d] for d in outs], outs, toks)
        return
    merged = _merged(src, before, ins) if len(outs) == 1 else None
    for d in outs:
        toks[d] = merged or Tok(tokens[0].axis, None)


def _split(axis: str, q: int | None, sizes, outs, toks) -> None:
    """Elements per token ``q`` over the output dims ``outs`` of one group: a dim whose
    steps stay within one token's elements is not a token dim. A token dim split over
    several dims (``[T] -> [T // 4, 4]``) tags them ``T@0/2``, ``T@1/2`` (outer to
    inner): they line up only with the same split, and merge back into ``T``."""
    suffix = sympy.Integer(1)
    for size, d in zip(reversed(sizes), reversed(outs), strict=True):
        step, suffix = suffix, suffix * _sym(size)
        if _sym(size) == 1:
            continue
        if q is not None and suffix.is_Integer and int(suffix) <= q:
            continue
        if q is None or not step.is_Integer:
            toks[d] = Tok(axis, None if q is None else 1)
            continue
        step = int(step)
        toks[d] = Tok(axis, q // step if step < q and q % step == 0 else 1)
    parts = [d for d in outs if toks[d] is not None]
    if q is not None and len(parts) > 1:
        for i, d in enumerate(parts):
            toks[d] = Tok(f"{axis}@{i}/{len(parts)}", toks[d].inner)


def _merged(src: Val, before, ins) -> Tok | None:
    """The token dim that every part of one split (``T@0/2``, ``T@1/2``), in order and
    followed by feature dims only, merges back into; ``None`` for any other merge."""
    dims = [d for d in ins if src.toks[d] is not None or _sym(before[d]) != 1]
    parts = [src.toks[d] for d in dims if src.toks[d] is not None]
    if any(p.rep is not None for p in parts):
        return None  # a chunk's representative does not merge back into its tokens
    if any(src.toks[d] is None for d in dims[: len(parts)]):
        return None  # a feature dim before a token part
    axis = parts[0].axis.rpartition("@")[0]
    expected = [f"{axis}@{i}/{len(parts)}" for i in range(len(parts))]
    if not axis or [p.axis for p in parts] != expected:
        return None
    if any(p.inner != 1 for p in parts[:-1]) or not isinstance(parts[-1].inner, int):
        return None
    features = _prod(before[d] for d in dims[len(parts) :])
    return Tok(axis, parts[-1].inner * features if features is not None else None)


def _prod(values) -> int | None:
    out = sympy.Integer(1)
    for v in values:
        out = out * _sym(v)
    return int(out) if out.is_Integer else None


@register(aten.view.dtype)
def bitcast(interp: Interp, node: torch.fx.Node) -> Val:
    """``x.view(dtype)`` reinterprets the bytes of the last dim: token-wise unless the
    last dim runs over tokens (GC206 judges a bitcast on the wire)."""
    src, out = interp.val(node.args[0]), shape_of(node)
    if src is None or out is None or not src.toks or src.toks[-1] is not None:
        return unknown(interp, node)
    n = len(src.toks)
    return _viewed(interp, node, {i: i for i in range(n - 1)}, [*src.toks[:-1], None])


@register(aten.select.int)
def select(interp: Interp, node: torch.fx.Node) -> Val:
    """Picking one index: of a token dim, one token for everyone (a leak)."""
    src = interp.val(node.args[0])
    n = len(src.toks) if src else ndim_of(node) + 1
    dim = norm_dim(node.args[1], n)
    if src is not None and src.toks[dim] is not None:
        shape = shape_of(node.args[0])
        if one := chunks.pick(src, dim, node.args[2], shape[dim] if shape else None, False):
            return one  # one place of every chunk: its representative
        if src.kind == Kind.SELECT:
            comps = src.extra or ()
            comp = comps[node.args[2]] if isinstance(node.args[2], int) else None
            return Val((src.toks[0],), kind=Kind.SELECT, ref=src.ref, extra=comp, **carry([src]))
        return interp.leak(node, "reads one position of the token dimension for every token")
    keep = [i for i in range(n) if i != dim]
    toks = [src.toks[i] for i in keep] if src else [None] * (n - 1)
    return _viewed(interp, node, {d: i for i, d in enumerate(keep)}, toks)


@register(aten.slice.Tensor, aten.narrow.default)
def slice_(interp: Interp, node: torch.fx.Node) -> Val:
    """A slice of a token dim that is not the whole dim shifts or drops tokens."""
    src, shape = interp.val(node.args[0]), shape_of(node.args[0])
    bound = bind(node)
    n = len(src.toks) if src else ndim_of(node)
    dim = norm_dim(bound.get("dim", 0), n)
    if src is not None and src.shift is not None and (cropped := conv.crop(interp, node)):
        return cropped  # a pad (or a conv) cropped back to T: a shift
    if src is not None and src.toks[dim] is not None and not _whole(bound, shape, dim):
        if (one := _place(interp, node, src, (bound, shape, dim))) is not None:
            return one  # x[:, r : r + 1] of the places of chunks, or x[:T] of T+
        if (back := _layout_window(interp, node, src, bound, dim)) is not None:
            return back  # T elements of a function of the layout over 0..T
        picked = _layout_at(node, src, bound, dim)
        if picked is not None:
            return picked
        if (earlier := interp.passed_on(node, [src])) is not None:
            return earlier  # already leaking: the earlier finding
        return interp.leak(node, "slices the token dimension (shifts or drops tokens)")
    toks = src.toks if src else meta_toks(node.meta.get("val"), interp.tokens)
    result = _viewed(interp, node, {i: i for i in range(n)}, toks)
    if src is not None and src.kind in (Kind.CU, Kind.CU_INNER) and not _whole(bound, shape, dim):
        part = _cu_part(bound, shape, dim) if src.kind == Kind.CU else None
        result = result.with_(kind=Kind.CU_INNER if part else None, extra=part)
    return result


def _place(interp: Interp, node: torch.fx.Node, src: Val, where: tuple) -> Val | None:
    """``x[:, r : r + 1]`` of a chunk's places (its representative, keeping the dim), or
    ``x[0 : T]`` of T padded behind (T again). ``where``: the slice's bound arguments,
    the sliced shape and dim."""
    bound, shape, dim = where
    start, step = bound.get("start") or 0, bound.get("step", 1)
    if step not in (1, None):
        return None
    out = shape_of(node)
    width_one = out is not None and is_one(out[dim]) and type(start) is int
    if width_one and shape is not None and (one := chunks.pick(src, dim, start, shape[dim], True)):
        return one
    return chunks.cropped(node, src, dim, start, interp)


def _layout_at(node: torch.fx.Node, src: Val, bound: dict, dim: int) -> Val | None:
    """``position_ids[:, :1]``: one token of a function of the layout, picked at a
    constant index, is that function's value there (no token dim left)."""
    term, out = term_of(src), shape_of(node)
    start, step = bound.get("start") or 0, bound.get("step", 1)
    if term is None or out is None or type(start) is not int or start < 0 or step not in (1, None):
        return None
    if not (isinstance(out[dim], int) and out[dim] == 1):
        return None
    toks = tuple(None if i == dim else t for i, t in enumerate(src.toks))
    return src.with_(toks=toks, kind=Kind.LAYOUT, extra=substitute(term, ("int", start)),
                     guard=None, tri=None)  # fmt: skip


def _layout_window(interp, node: torch.fx.Node, src: Val, bound: dict, dim: int) -> Val | None:
    """``ext[:, s : s + T]`` of a function of the layout over an index longer than T
    (``cat([first, x])``): at token ``i`` its value at ``i + s``."""
    start, step = bound.get("start") or 0, bound.get("step", 1)
    if src.kind != Kind.LAYOUT or not isinstance(src.extra, tuple) or len(src.token_dims) != 1:
        return None
    if type(start) is not int or start < 0 or step not in (1, None):
        return None
    toks = meta_toks(node.meta.get("val"), interp.tokens)
    if toks[dim] != Tok("T", 1) or any(t is not None for i, t in enumerate(toks) if i != dim):
        return None
    term = substitute(src.extra, ("add", TOKEN, ("int", start))) if start else src.extra
    return src.with_(toks=toks, extra=term, guard=None, tri=None)


def _cu_part(bound: dict, shape, dim: int) -> str | None:
    """``cu[:-1]`` (the starts), ``cu[1:]`` (the ends), ``cu[1:-1]``: slices that keep
    every boundary between two documents."""
    start, end, step = bound.get("start") or 0, bound.get("end"), bound.get("step", 1)
    if step not in (None, 1) or start not in (0, 1) or shape is None:
        return None
    size = _sym(shape[dim])
    end_val = end.meta.get("val") if isinstance(end, torch.fx.Node) else end
    drops_last = end_val == -1 or (end_val is not None and _same(_sym(end_val), size - 1))
    if not drops_last and not _whole({"end": end}, shape, dim):
        return None
    return {(0, True): "starts", (1, False): "ends", (1, True): "interior"}.get((start, drops_last))


def _whole(bound: dict, shape, dim: int) -> bool:
    start, end, step = bound.get("start"), bound.get("end"), bound.get("step", 1)
    if start not in (None, 0) or step not in (None, 1):
        return False
    if end is None or (isinstance(end, int) and end >= 2**62):
        return True
    size = shape[dim] if shape is not None else None
    end_val = end.meta.get("val") if isinstance(end, torch.fx.Node) else end
    return str(end_val) == str(size)


@register(
    aten.split.Tensor, aten.split_with_sizes.default, aten.chunk.default, aten.tensor_split.sections
)
def split(interp: Interp, node: torch.fx.Node) -> tuple:
    if (pieces := split_by_groups(interp, node)) is not None:
        return pieces  # rows split by their groups' sizes
    src = interp.val(node.args[0])
    n = len(src.toks) if src else 0
    dim = norm_dim(bind(node).get("dim", 0), n) if n else 0
    outs = node.meta.get("val") or ()
    if src is not None and n and src.toks[dim] is not None and len(outs) > 1:
        return tuple(interp.leak(node, "splits the token dimension") for _ in outs)
    return tuple(src if src is not None else Val(()) for _ in outs)


@register(aten.unbind.int)
def unbind(interp: Interp, node: torch.fx.Node) -> tuple:
    src = interp.val(node.args[0])
    n = len(src.toks) if src else 0
    dim = norm_dim(bind(node).get("dim", 0), n) if n else 0
    outs = node.meta.get("val") or ()
    if src is None or not n:
        return tuple(Val(()) for _ in outs)
    if src.kind == Kind.SELECT:
        comps = src.extra or ()
        return tuple(
            Val((src.toks[0],), kind=Kind.SELECT, ref=src.ref, extra=c, **carry([src]))
            for c in comps
        )
    if src.toks[dim] is not None:
        return tuple(interp.leak(node, "unbinds the token dimension") for _ in outs)
    keep = [i for i in range(n) if i != dim]
    one = src.with_(toks=tuple(src.toks[i] for i in keep), guard=None, tri=None)
    return tuple(one for _ in outs)


@register(aten.view_as_complex.default, aten.view_as_real.default)
def complex_view(interp: Interp, node: torch.fx.Node) -> Val:
    """``view_as_real`` adds a trailing dim of 2 (the real and imaginary parts) and
    ``view_as_complex`` takes it away: element ``x`` reads the pair at ``x``, one token's
    own values unless that trailing pair dim is a token dim (then it fails closed)."""
    src = interp.val(node.args[0])
    if src is None:
        return unknown(interp, node)
    n = len(src.toks)
    if _base(node) == "view_as_real":
        return _viewed(interp, node, {i: i for i in range(n)}, [*src.toks, None])
    if not src.toks or src.toks[-1] is not None:
        return unknown(interp, node)
    return _viewed(interp, node, {i: i for i in range(n - 1)}, list(src.toks[:-1]))
