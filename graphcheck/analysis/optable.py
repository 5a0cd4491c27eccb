"""The op table: how each ATen op moves data along the token dimension.

Each entry of :data:`FAMILIES` names ATen ops and their transfer function
``(interp, node) -> Val`` over the domain of :mod:`graphcheck.analysis.locality`:
token-wise (pointwise) ops, views, reductions and norms, softmaxes, factories and
sizes. Contractions, scans, sorts, indexing, attention and higher-order ops are in
:mod:`graphcheck.analysis.optable_mixers`; :mod:`graphcheck.analysis.transfer`
assembles both into the one table. ``docs/soundness.md`` says what each family
assumes.
"""

from __future__ import annotations

import sympy
import torch
import torch.fx

from graphcheck.analysis import optable_conv, optable_groups
from graphcheck.analysis.fx import op_name
from graphcheck.analysis.layout_terms import (
    TOKEN,
    combined,
    covers_shift,
    is_window,
    shift_counterexample,
    substitute,
    term_of,
)
from graphcheck.analysis.locality import (
    Dep,
    Fill,
    Interp,
    Kind,
    Pair,
    Tok,
    Val,
    align,
    bind,
    carry,
    is_length,
    is_one,
    meta_toks,
    moved_pairs,
    ndim_of,
    norm_dim,
    shape_of,
    symbols,
    union,
    unknown,
)

__all__ = ["FAMILIES"]


# --- sizes, factories --------------------------------------------------------------------


def structural(interp: Interp, node: torch.fx.Node) -> Val:
    """Sizes and asserts carry no data; a size involving T used as a value is an
    absolute quantity (the packed length)."""
    val = node.meta.get("val")
    if isinstance(val, torch.SymInt | torch.SymFloat | torch.SymBool):
        if (grouped := optable_groups.counted(interp, node)) is not None:
            return grouped  # a group size (counts of all documents) used as a value
        vals = [interp.val(a) for a in node.all_input_nodes]
        absolute = union(v.absolute for v in vals if v is not None)
        if symbols(val) & interp.tokens and not absolute:
            absolute = interp.fabricate(node, "the packed length T used as a value")
        return Val((), kind=Kind.LENGTH, absolute=absolute)
    return Val(meta_toks(val, interp.tokens))


def factory(interp: Interp, node: torch.fx.Node) -> Val:
    """New tensors: no token data (``*_like`` reads its argument's metadata only)."""
    fill = interp.val(bind(node).get("fill_value"))
    absolute = fill.absolute if fill is not None else frozenset()
    return Val(meta_toks(node.meta.get("val"), interp.tokens), absolute=absolute)


def scalar_tensor(interp: Interp, node: torch.fx.Node) -> Val:
    """``torch.tensor(T)``: the packed length as a tensor (structural in ``cat([starts,
    [T]])``, an absolute quantity anywhere else)."""
    arg = node.args[0] if node.args else None
    size = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    if isinstance(size, torch.SymInt) and is_length(size, interp.tokens):
        origin = interp.fabricate(node, "the packed length T used as a value")
        return Val((), kind=Kind.LENGTH, extra="T", absolute=origin)
    return factory(interp, node)


def arange(interp: Interp, node: torch.fx.Node) -> Val:
    """An ``arange`` over T is the absolute token index (from another start, the index
    plus that start: a function of the layout)."""
    if (grouped := optable_groups.counted(interp, node)) is not None:
        return grouped  # positions inside a group of rows
    toks = meta_toks(node.meta.get("val"), interp.tokens)
    if not any(toks):
        return Val(toks)
    origin = interp.fabricate(node, "an arange over the packed length (absolute token index)")
    bound = bind(node)
    start, step = bound.get("start", 0), bound.get("step", 1)
    if start == 0 and step == 1:
        return Val(toks, kind=Kind.INDEX, absolute=origin)
    if type(start) is int and step == 1:
        return Val(toks, kind=Kind.LAYOUT, extra=("add", TOKEN, ("int", start)), absolute=origin)
    return Val(toks, absolute=origin)


def getitem(interp: Interp, node: torch.fx.Node) -> Val:
    source, index = node.args
    found = interp.vals.get(source)
    if isinstance(found, tuple | list) and isinstance(index, int) and index < len(found):
        return found[index]
    return unknown(interp, node)


# --- token-wise ops ----------------------------------------------------------------------

_PRESERVE = {"to", "_to_copy", "clone", "contiguous", "type_as", "alias", "detach", "copy"}
_PRESERVE |= {"lift_fresh_copy", "float", "bfloat16", "half", "positive"}
_ZERO_KEEP = {"neg", "relu", "silu", "gelu", "tanh", "sin", "abs", "sqrt", "sign", "erf"}
_ZERO_KEEP |= {"dropout", "feature_dropout"}  # x * mask / (1 - p): a zero stays zero
_NEGINF_TO_ZERO = {"exp", "sigmoid", "softplus", "relu", "exp2"}
_RELATIVE = {"sub", "eq", "ne", "lt", "le", "gt", "ge"}
_ORDER = {"gt": 1, "ge": 0}  # a > b: a - b >= 1; a >= b: a - b >= 0 (lt / le swap the sides)


def _base(node: torch.fx.Node) -> str:
    """``aten.add_.Tensor`` -> ``add``; ``operator.mul`` -> ``mul``."""
    name = op_name(node.target)
    if not name.startswith("aten."):
        return name.removeprefix("<built-in function ").removesuffix(">")
    base = name.split(".")[1]
    return base[:-1] if base.endswith("_") and not base.endswith("__") else base


def pointwise(interp: Interp, node: torch.fx.Node) -> Val:
    """Element ``x`` of the result reads element ``x`` of each operand (broadcast)."""
    operands = [a for a in (*node.args, *node.kwargs.values()) if not isinstance(a, list)]
    toks = align(interp, node, operands)
    vals = [interp.val(a) for a in operands]
    if toks is None:
        return interp.leak(node, "combines tensors whose token dimensions do not line up")
    base = _base(node)
    result = Val(toks, **carry(vals))
    result = _relative(interp, node, base, operands, result)
    result = _pairs(interp, node, base, operands, result)
    result = _kind(interp, node, base, operands, result)
    return _shifted(interp, node, base, operands, result)


def _shifted(interp, node, base: str, operands, result: Val) -> Val:
    """A token shift (``prev[t] = x[t - k]``) stays a pending leak until it is masked
    to a constant wherever ``t - k`` lies in another document (``pos(t) < k``: for
    ``k = 1``, the document starts); then ``t - k`` is in ``t``'s document."""
    found = []
    for arg in operands:
        val = interp.val(arg)
        if val is not None and val.shift is not None:
            offset = ndim_of(node) - len(val.toks)
            found.append((arg, (val.shift[0] + offset, *val.shift[1:])))
    if not found:
        return result
    found = [f for f in found if f[1][1] != 0] or found  # padded behind: nothing to mask
    arg, shift = found[0]
    if shift[1] == 0:
        return result.with_(shift=shift)
    relative = _masked_at_starts(interp, node, base, operands, arg, shift[1])
    if len(found) == 1 and relative is not None:
        leaks = result.leaks - {shift[2]}
        dep = Dep.LEAK if leaks else max(Dep.DOC, min(result.dep, Dep.DOC))
        return result.with_(shift=None, leaks=leaks, dep=dep, absolute=result.absolute - relative)
    return result.with_(shift=shift)


def _masked_at_starts(interp, node, base: str, operands, shifted, amount: int):
    """``masked_fill(prev, mask, c)`` or ``where(mask, c, prev)`` with ``mask`` on the
    shifted dimension true wherever the token ``amount`` before lies in another
    document (proven by the solver from the mask's term: ``position_ids == 0`` for a
    shift by one, ``position_ids < k`` for ``k``), or ``prev * mask`` with ``mask`` 0
    there (``doc == doc shifted by k``). ``None``: not masked (a refuted mask puts the
    solver's counterexample into the shift's finding); else the absolute origins the
    mask drops (a product's mask proven to be ``pos >= k``, a function of positions)."""
    mask = None
    if base == "masked_fill" and len(operands) >= 3 and operands[0] is shifted:
        mask = operands[1] if not isinstance(operands[2], torch.fx.Node) else None
    elif base == "where" and len(operands) >= 3 and operands[2] is shifted:
        mask = operands[0] if not isinstance(operands[1], torch.fx.Node) else None
    elif base == "mul" and len(operands) == 2 and shifted in operands:  # x * (mask: 0 or 1)
        mask = operands[1] if operands[0] is shifted else operands[0]
    val = interp.val(mask) if isinstance(mask, torch.fx.Node) else None
    term = term_of(val) if val is not None and val.shift is None else None
    if term is not None and base == "mul":
        term = ("eq", term, ("int", 0))  # the product is 0 where the mask is
    if term is None or not covers_shift(term, amount):
        if term is not None and (found := shift_counterexample(term, amount)):
            origin = interp.val(shifted).shift[2]
            said = interp.reasons.get(origin, "a token shift")
            interp.reasons[origin] = said if found in said else f"{said}; {found}"
        return None
    shift_dim = interp.val(shifted).shift[0] + ndim_of(node) - len(interp.val(shifted).toks)
    if _placed(interp, node, mask) != (shift_dim,):
        return None
    if base != "mul" or not is_window(term, amount):
        return frozenset()
    others = [interp.val(a) for a in operands if a is not mask and isinstance(a, torch.fx.Node)]
    return val.absolute - union(v.absolute for v in others if v is not None)


def _placed(interp: Interp, node, arg) -> tuple[int, ...]:
    """The output dims at which ``arg``'s token dims sit after broadcasting."""
    val, shape, out = interp.val(arg), shape_of(arg), shape_of(node)
    if val is None or shape is None or out is None:
        return ()
    offset = len(out) - len(shape)
    return tuple(
        i + offset for i in val.token_dims if not (is_one(shape[i]) and not is_one(out[i + offset]))
    )


def _relative(interp, node, base: str, operands, result: Val) -> Val:
    """``a[:, None] - b[None, :]`` of two absolute indices is relative: translation
    invariant, the same in the packed row and in each document alone."""
    tensors = [a for a in operands if isinstance(a, torch.fx.Node)]
    if base not in _RELATIVE or len(tensors) != 2:
        return result
    a, b = (interp.val(t) for t in tensors)
    pa, pb = (_placed(interp, node, t) for t in tensors)
    if a and b and a.absolute and b.absolute and len(pa) == len(pb) == 1 and pa != pb:
        return result.with_(absolute=frozenset())
    return result


def _outside(interp, node, arg, pair: Pair, which: str) -> Fill | str | None:
    """What ``arg`` holds outside the relation of ``pair`` (``"finite"``: some value)."""
    if not isinstance(arg, torch.fx.Node):
        return _constant(arg)
    val = interp.val(arg)
    mine = getattr(val, which, None) if val is not None else None
    if mine is not None:
        offset = ndim_of(node) - len(val.toks)
        moved = Pair(mine.row + offset, mine.col + offset, mine.fill, mine.k)
        if (moved.row, moved.col, moved.k) == (pair.row, pair.col, pair.k):
            return moved.fill
    val_meta = arg.meta.get("val")
    if isinstance(val_meta, torch.Tensor) and val_meta.dtype == torch.bool:
        return None
    return "finite"


def _constant(value) -> Fill | str | None:
    if isinstance(value, bool):
        return Fill.TRUE if value else Fill.ZERO
    if isinstance(value, int | float):
        if value == 0:
            return Fill.ZERO
        return Fill.NEGINF if value <= -1e30 else "finite"
    return None


def _pairs(interp, node, base: str, operands, result: Val) -> Val:
    """Guards and triangles through a token-wise op (and their creation)."""
    for which in ("guard", "tri"):
        pair = _created(interp, node, base, operands, which) or _candidate(
            interp, node, operands, which
        )
        if pair is None:
            continue
        if _created(interp, node, base, operands, which) is None:
            fills = [_outside(interp, node, a, pair, which) for a in operands]
            fill = _combine(base, fills, node)
            pair = Pair(pair.row, pair.col, fill, pair.k) if isinstance(fill, Fill) else None
        result = result.with_(**{which: pair})
    if result.guard is not None and result.dep == Dep.SPAN:
        result = result.with_(dep=Dep.DOC)  # a span between two tokens of one document
    return result


def _candidate(interp, node, operands, which: str) -> Pair | None:
    for arg in operands:
        val = interp.val(arg)
        pair = getattr(val, which, None) if val is not None else None
        if pair is not None:
            offset = ndim_of(node) - len(val.toks)
            return Pair(pair.row + offset, pair.col + offset, pair.fill, pair.k)
    return None


def _created(interp, node, base: str, operands, which: str) -> Pair | None:
    """``doc[:, None] == doc[None, :]`` makes a guard; ``idx[:, None] >= idx[None, :]``
    a triangle."""
    if base not in ("eq", "ne", "gt", "ge", "lt", "le"):
        return None
    tensors = [a for a in operands if isinstance(a, torch.fx.Node)]
    if len(tensors) != 2:
        return None
    vals = [interp.val(t) for t in tensors]
    places = [_placed(interp, node, t) for t in tensors]
    if any(v is None for v in vals) or not all(places) or len(places[0]) != len(places[1]):
        return None
    shared = set(places[0]) & set(places[1])  # a chunk index: the same on both sides
    if len(places[0]) != len(shared) + 1 or (shared and not _one_separator(vals)):
        return None
    ((ra,), (rb,)) = (tuple(set(p) - shared) for p in places)
    kinds = {v.kind for v in vals}
    same_ids = type(vals[0].extra) is int and vals[0].extra == vals[1].extra  # doc + k both
    ids = (kinds == {Kind.DOCID} and same_ids) or _one_separator(vals)
    if which == "guard" and ids and base in ("eq", "ne"):
        return Pair(ra, rb, Fill.ZERO if base == "eq" else Fill.TRUE)
    if which == "tri" and kinds == {Kind.INDEX} and base in ("gt", "ge", "lt", "le"):
        if base in ("lt", "le"):
            ra, rb = rb, ra
        return Pair(ra, rb, Fill.ZERO, _ORDER["gt" if base in ("gt", "lt") else "ge"])
    return None


def _one_separator(vals: list[Val]) -> bool:
    """Both sides read one prefix sum (or one padding of document ids) whose values are
    equal only inside a document."""
    return all(v.kind == Kind.DOCSEP for v in vals) and vals[0].ref is vals[1].ref


def _combine(base: str, fills: list, node) -> Fill | str | None:
    """What the result holds outside the relation, from what the operands hold."""
    if base in _PRESERVE:
        return fills[0]
    if base in ("where",):
        cond, a, b = [*fills, None, None, None][:3]
        return b if cond == Fill.ZERO else a if cond == Fill.TRUE else None
    if base == "masked_fill":
        x, mask, value = [*fills, None, None, None][:3]
        return value if mask == Fill.TRUE else x if mask == Fill.ZERO else None
    return _arith(base, fills)


def _arith(base: str, fills: list) -> Fill | str | None:
    if base in ("add", "sub"):
        if Fill.NEGINF in fills[:1] or (base == "add" and Fill.NEGINF in fills):
            return Fill.NEGINF if None not in fills else None
        return Fill.ZERO if all(f == Fill.ZERO for f in fills) else None
    if base in ("mul", "bitwise_and", "logical_and", "and", "__and__", "div"):
        zero = Fill.ZERO in (fills if base != "div" else fills[:1])
        return Fill.ZERO if zero and Fill.NEGINF not in fills else None
    if base in ("bitwise_or", "logical_or", "or", "__or__"):
        if Fill.TRUE in fills:
            return Fill.TRUE
        return Fill.ZERO if all(f == Fill.ZERO for f in fills) else None
    if base in ("bitwise_not", "logical_not", "invert", "__invert__"):
        return {Fill.ZERO: Fill.TRUE, Fill.TRUE: Fill.ZERO}.get(fills[0])
    if base in _NEGINF_TO_ZERO and fills[0] == Fill.NEGINF:
        return Fill.ZERO
    if base in _ZERO_KEEP and fills[0] == Fill.ZERO:
        return Fill.ZERO
    return None


def _kind(interp, node, base: str, operands, result: Val) -> Val:
    """Structural kinds that survive or arise in a token-wise op; otherwise, when every
    operand is a function of the layout, the result is one too (its term)."""
    known = _structural_kind(interp, node, base, operands, result)
    if known.kind is not None or result.leaks:
        return known
    return _layout_kind(interp, node, base, operands, known)


_EXACT = {torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8}


def _layout_kind(interp, node, base: str, operands, result: Val) -> Val:
    """``position_ids[:, :1] - 1``, ``diff != 1``: the term of an element-wise op over
    functions of the layout, all along one token dim (exact integers and booleans)."""
    out = node.meta.get("val")
    if not isinstance(out, torch.Tensor) or out.dtype not in _EXACT:
        return result
    args, places = [], set()
    for arg in operands:
        if not isinstance(arg, torch.fx.Node):
            args.append(arg)
            continue
        term = term_of(interp.val(arg))
        if term is None:
            return result
        args.append(term)
        places |= set(_placed(interp, node, arg))
    term = combined(base, args) if len(places) <= 1 else None
    return result if term is None else result.with_(kind=Kind.LAYOUT, extra=term)


def _structural_kind(interp, node, base: str, operands, result: Val) -> Val:
    first = interp.val(operands[0]) if operands else None
    if first is None or first.kind is None:
        return result
    others = operands[1:]
    exact = getattr(node.meta.get("val"), "dtype", None) in _EXACT
    boolean = base in _PRESERVE and _dtype(operands[0]) == torch.bool  # 0 or 1 in any dtype
    if first.kind == Kind.LAYOUT and not exact and not boolean:
        return result  # a term is exact; a float or bf16 copy may round it
    if base in _PRESERVE and not any(isinstance(a, torch.fx.Node) for a in others):
        return result.with_(kind=first.kind, ref=first.ref, extra=first.extra, dep=first.dep)
    if base == "eq" and first.kind == Kind.POS and others == [0]:
        return result.with_(kind=Kind.DOCSTART)
    if base in ("add", "sub") and first.kind == Kind.INDEX and others == [0]:
        return result.with_(kind=Kind.INDEX)  # cache_position = arange(T) + 0
    if base in ("add", "sub") and first.kind == Kind.DOCID and _constants(others):
        return result.with_(kind=Kind.DOCID, extra=_doc_shift(first.extra, base, others))
    floor = base in ("floordiv", "floor_divide") or optable_groups.rounds_down(node, base)
    divisor = node.args[1] if len(node.args) == 2 else None  # not the rounding mode
    if floor and first.kind == Kind.PERM and isinstance(divisor, int):
        extra = (first.extra, divisor)
        return result.with_(kind=Kind.PERMDIV, ref=first.ref, extra=extra, dep=first.dep)
    return result


def _dtype(arg) -> torch.dtype | None:
    return getattr(arg.meta.get("val"), "dtype", None) if isinstance(arg, torch.fx.Node) else None


def _doc_shift(shift, base: str, others) -> int | None:
    """The constant ``k`` of document ids ``doc + k`` after adding or subtracting
    integers (``None``: not known)."""
    if not isinstance(shift, int) or not all(type(a) is int for a in others):
        return None
    total = sum(others)
    return shift + total if base == "add" else shift - total


def _constants(args) -> bool:
    return all(isinstance(a, int | float) for a in args)


# --- views ------------------------------------------------------------------------------


def _viewed(interp, node, mapping: dict[int, int], toks) -> Val:
    src = interp.val(node.args[0])
    if src is None:
        return Val(tuple(toks))
    pairs = moved_pairs(src, mapping)
    return src.with_(toks=tuple(toks), **pairs)


def permute(interp: Interp, node: torch.fx.Node) -> Val:
    src = interp.val(node.args[0])
    n = len(src.toks) if src else ndim_of(node)
    name = _base(node)
    if name == "permute":
        order = [norm_dim(d, n) for d in node.args[1]]
    elif name == "numpy_T":
        order = list(reversed(range(n)))
    else:
        a, b = (0, 1) if name == "t" else (norm_dim(node.args[1], n), norm_dim(node.args[2], n))
        order = list(range(n))
        order[a], order[b] = order[b], order[a]
    toks = [src.toks[d] for d in order] if src else [None] * n
    return _viewed(interp, node, {d: i for i, d in enumerate(order)}, toks)


def unsqueeze(interp: Interp, node: torch.fx.Node) -> Val:
    src = interp.val(node.args[0])
    out = ndim_of(node)
    at = norm_dim(node.args[1], out)
    toks = list(src.toks if src else [None] * (out - 1))
    toks.insert(at, None)
    mapping = {i: i if i < at else i + 1 for i in range(out - 1)}
    return _viewed(interp, node, mapping, toks)


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


def bitcast(interp: Interp, node: torch.fx.Node) -> Val:
    """``x.view(dtype)`` reinterprets the bytes of the last dim: token-wise unless the
    last dim runs over tokens (GC206 judges a bitcast on the wire)."""
    src, out = interp.val(node.args[0]), shape_of(node)
    if src is None or out is None or not src.toks or src.toks[-1] is not None:
        return unknown(interp, node)
    n = len(src.toks)
    return _viewed(interp, node, {i: i for i in range(n - 1)}, [*src.toks[:-1], None])


def select(interp: Interp, node: torch.fx.Node) -> Val:
    """Picking one index: of a token dim, one token for everyone (a leak)."""
    src = interp.val(node.args[0])
    n = len(src.toks) if src else ndim_of(node) + 1
    dim = norm_dim(node.args[1], n)
    if src is not None and src.toks[dim] is not None:
        if src.kind == Kind.SELECT:
            comps = src.extra or ()
            comp = comps[node.args[2]] if isinstance(node.args[2], int) else None
            return Val((src.toks[0],), kind=Kind.SELECT, ref=src.ref, extra=comp, **carry([src]))
        return interp.leak(node, "reads one position of the token dimension for every token")
    keep = [i for i in range(n) if i != dim]
    toks = [src.toks[i] for i in keep] if src else [None] * (n - 1)
    return _viewed(interp, node, {d: i for i, d in enumerate(keep)}, toks)


def slice_(interp: Interp, node: torch.fx.Node) -> Val:
    """A slice of a token dim that is not the whole dim shifts or drops tokens."""
    src, shape = interp.val(node.args[0]), shape_of(node.args[0])
    bound = bind(node)
    n = len(src.toks) if src else ndim_of(node)
    dim = norm_dim(bound.get("dim", 0), n)
    if src is not None and src.shift is not None and (cropped := optable_conv.crop(interp, node)):
        return cropped  # a pad (or a conv) cropped back to T: a shift
    if src is not None and src.toks[dim] is not None and not _whole(bound, shape, dim):
        picked = _layout_at(node, src, bound, dim)
        if picked is not None:
            return picked
        return interp.leak(node, "slices the token dimension (shifts or drops tokens)")
    toks = src.toks if src else meta_toks(node.meta.get("val"), interp.tokens)
    result = _viewed(interp, node, {i: i for i in range(n)}, toks)
    if src is not None and src.kind in (Kind.CU, Kind.CU_INNER) and not _whole(bound, shape, dim):
        part = _cu_part(bound, shape, dim) if src.kind == Kind.CU else None
        result = result.with_(kind=Kind.CU_INNER if part else None, extra=part)
    return result


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


def split(interp: Interp, node: torch.fx.Node) -> tuple:
    if (pieces := optable_groups.split_by_groups(interp, node)) is not None:
        return pieces  # rows split by their groups' sizes
    src = interp.val(node.args[0])
    n = len(src.toks) if src else 0
    dim = norm_dim(bind(node).get("dim", 0), n) if n else 0
    outs = node.meta.get("val") or ()
    if src is not None and n and src.toks[dim] is not None and len(outs) > 1:
        return tuple(interp.leak(node, "splits the token dimension") for _ in outs)
    return tuple(src if src is not None else Val(()) for _ in outs)


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


# --- reductions, norms, softmax -----------------------------------------------------------

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
    ok = len(reduced) == 1 and guard is not None and reduced[0] in (guard.row, guard.col)
    if ok and guard.fill == neutral and src.dep <= Dep.DOC:
        return Val(tuple(toks), **{**carry([src]), "dep": Dep.DOC})
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
    if masked and src.dep <= Dep.DOC and len(src.token_dims) == 2:
        return src.with_(dep=Dep.DOC, guard=Pair(guard.row, guard.col, Fill.ZERO), kind=None)
    return interp.leak(node, "softmax over the token dimension without a document mask")


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


def dropout(interp: Interp, node: torch.fx.Node):
    """Dropout and its variants: element ``x`` of the result reads element ``x`` of the
    input (feature dropout zeroes whole slices chosen at random, never from another
    token's values); ``native_dropout`` also returns its mask, shaped like the input.
    Whether it draws random numbers is GC304's question."""
    if not isinstance(node.meta.get("val"), tuple | list):
        return pointwise(interp, node)
    src = interp.val(node.args[0])
    if src is None:
        return unknown(interp, node)
    zeros = src.guard if src.guard is not None and src.guard.fill == Fill.ZERO else None
    result = Val(src.toks, **carry([src]), guard=zeros)  # x * mask / (1 - p): 0 stays 0
    mask = Val(src.toks, **carry([src]))
    return (result, mask)


_POINTWISE = """
aten.add.Tensor aten.add.Scalar aten.sub.Tensor aten.sub.Scalar aten.rsub.Scalar
aten.rsub.Tensor aten.mul.Tensor aten.mul.Scalar aten.div.Tensor aten.div.Scalar
aten.div.Tensor_mode aten.neg.default aten.exp.default aten.log.default aten.log1p.default
aten.expm1.default aten.exp2.default aten.log2.default aten.sqrt.default aten.rsqrt.default
aten.pow.Tensor_Scalar aten.pow.Tensor_Tensor aten.pow.Scalar aten.reciprocal.default
aten.abs.default aten.sign.default aten.sigmoid.default aten.silu.default aten.gelu.default
aten.relu.default aten.tanh.default aten.softplus.default aten.erf.default aten.cos.default
aten.sin.default aten.square.default aten.clamp.default aten.clamp.Tensor
aten.clamp_min.default aten.clamp_max.default aten.maximum.default aten.minimum.default
aten.where.self aten.where.ScalarSelf aten.where.ScalarOther aten.where.Scalar
aten.masked_fill.Scalar aten.masked_fill.Tensor aten.eq.Tensor aten.eq.Scalar
aten.ne.Tensor aten.ne.Scalar aten.lt.Tensor aten.lt.Scalar aten.le.Tensor aten.le.Scalar
aten.gt.Tensor aten.gt.Scalar aten.ge.Tensor aten.ge.Scalar aten.bitwise_and.Tensor
aten.bitwise_or.Tensor aten.bitwise_xor.Tensor aten.bitwise_not.default
aten.__and__.Tensor aten.__or__.Tensor aten.__xor__.Tensor aten.logical_and.default
aten.logical_or.default aten.logical_not.default aten.logical_xor.default
aten.floor_divide.default aten.floor_divide.Scalar aten.remainder.Scalar
aten.remainder.Tensor aten.fmod.Scalar aten.floor.default aten.ceil.default
aten.round.default aten.trunc.default aten.isnan.default aten.isinf.default
aten.isfinite.default aten.nan_to_num.default aten.lerp.Scalar aten.lerp.Tensor
aten.addcmul.default aten.addcdiv.default aten.to.dtype aten.to.device
aten.to.dtype_layout aten.to.other aten._to_copy.default aten.type_as.default
aten.clone.default aten.contiguous.default aten.alias.default aten.detach.default
aten.lift_fresh_copy.default aten.copy.default aten.float.default aten.bfloat16.default
aten.half.default aten.positive.default aten.fill.Scalar aten.fill.Tensor
aten.hardtanh.default aten.leaky_relu.default aten.elu.default aten.mish.default
aten.logit.default aten.atan.default aten.cosh.default aten.sinh.default
aten.bernoulli.p aten.bernoulli.default aten.uniform.default aten.exponential.default
aten.normal.Tensor_float aten.multiply.Tensor aten.min.other aten.max.other
aten.polar.default
"""
_STRUCTURAL = """
aten.sym_size.int aten.sym_numel.default aten.sym_stride.int
aten.sym_storage_offset.default aten._assert_tensor_metadata.default
aten._assert_scalar.default aten.sym_constrain_range_for_size.default
aten.sym_constrain_range.default aten._assert_async.msg aten._assert_async.default
aten._functional_assert_async.msg op:eq op:ne
op:ge op:le op:gt
op:lt op:sym_max op:sym_min op:sym_not op:sym_float op:sym_int
op:sym_sqrt op:sym_ite op:mod op:pow op:add op:sub op:mul op:truediv op:floordiv op:neg
"""
_FACTORY = """
aten.zeros.default aten.ones.default aten.empty.memory_format aten.full.default
aten.new_zeros.default aten.new_ones.default
aten.new_empty.default aten.new_full.default aten.zeros_like.default
aten.ones_like.default aten.empty_like.default aten.full_like.default aten.rand.default
aten.randn.default aten.rand_like.default aten.randn_like.default aten.randint.low
aten.empty_strided.default aten.eye.default aten.linspace.default aten.tensor.default
"""
FAMILIES = [
    (_POINTWISE, pointwise),
    (
        "aten.dropout.default aten.native_dropout.default aten.alpha_dropout.default "
        "aten.feature_dropout.default aten.feature_alpha_dropout.default",
        dropout,
    ),
    (_STRUCTURAL, structural),
    (_FACTORY, factory),
    ("aten.arange.default aten.arange.start aten.arange.start_step", arange),
    ("aten.scalar_tensor.default", scalar_tensor),
    ("op:getitem", getitem),
    ("aten.permute.default aten.transpose.int aten.t.default aten.numpy_T.default", permute),
    ("aten.unsqueeze.default", unsqueeze),
    ("aten.squeeze.dim aten.squeeze.dims aten.squeeze.default", squeeze),
    ("aten.expand.default aten.expand_copy.default aten.expand_as.default", expand),
    # view, reshape, flatten: optable_onehot.view (copy axes), then view here
    ("aten.select.int", select),
    ("aten.view.dtype", bitcast),
    ("aten.view_as_complex.default aten.view_as_real.default", complex_view),
    ("aten.slice.Tensor aten.narrow.default", slice_),
    (
        "aten.split.Tensor aten.split_with_sizes.default aten.chunk.default "
        "aten.tensor_split.sections",
        split,
    ),
    ("aten.unbind.int", unbind),
    (
        "aten.sum.dim_IntList aten.sum.default aten.mean.dim aten.mean.default aten.amax.default "
        "aten.amin.default aten.max.dim aten.min.dim aten.max.default aten.min.default "
        "aten.argmax.default aten.argmin.default aten.prod.dim_int aten.var.correction "
        "aten.std.correction aten.var_mean.correction aten.logsumexp.default aten.any.dim "
        "aten.any.dims aten.any.default aten.all.dim aten.all.default "
        "aten.linalg_vector_norm.default aten.norm.ScalarOpt_dim aten.count_nonzero.default",
        reduce,
    ),
    (
        "aten.layer_norm.default aten.rms_norm.default aten.native_layer_norm.default "
        "aten._fused_rms_norm.default",
        norm,
    ),
    (
        "aten.softmax.int aten._softmax.default aten._safe_softmax.default "
        "aten.log_softmax.int aten._log_softmax.default",
        softmax,
    ),
]
