"""Token-wise (pointwise) ops: element ``x`` of the result reads element ``x`` of
each operand, broadcast.

Assumes each listed op is elementwise along every dim (arithmetic, comparisons,
casts and copies, activations, in-place random fills, dropout): it moves no data
between tokens, so the result depends on what its operands depend on. On top of that
the family tracks what survives an elementwise op: guards and triangles (the constant a
pairwise value holds across documents or outside a triangle, created by comparing
document ids or token indices of both sides), the structural kinds (document ids,
positions, permutations), a function of the layout's term, and a pending token shift
that a mask at the document starts makes document-local.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.fx

from graphcheck.analysis.fx import op_name
from graphcheck.analysis.layout_terms import (
    TOKEN,
    combined,
    covers_shift,
    is_position,
    is_window,
    shift_counterexample,
    term_of,
)
from graphcheck.analysis.locality import chunks
from graphcheck.analysis.locality.domain import (
    Dep,
    Fill,
    Interp,
    Kind,
    Pair,
    Val,
    align,
    carry,
    is_one,
    is_wildcard,
    ndim_of,
    shape_of,
    union,
    unknown,
)
from graphcheck.analysis.locality.groups import rounds_down
from graphcheck.analysis.locality.registry import register

__all__ = ["dropout", "pointwise"]

aten = torch.ops.aten

_POINTWISE = (
    aten.add.Tensor,
    aten.add.Scalar,
    aten.sub.Tensor,
    aten.sub.Scalar,
    aten.rsub.Scalar,
    aten.rsub.Tensor,
    aten.mul.Tensor,
    aten.mul.Scalar,
    aten.div.Tensor,
    aten.div.Scalar,
    aten.div.Tensor_mode,
    aten.neg.default,
    aten.exp.default,
    aten.log.default,
    aten.log1p.default,
    aten.expm1.default,
    aten.exp2.default,
    aten.log2.default,
    aten.sqrt.default,
    aten.rsqrt.default,
    aten.pow.Tensor_Scalar,
    aten.pow.Tensor_Tensor,
    aten.pow.Scalar,
    aten.reciprocal.default,
    aten.abs.default,
    aten.sign.default,
    aten.sigmoid.default,
    aten.silu.default,
    aten.gelu.default,
    aten.relu.default,
    aten.tanh.default,
    aten.softplus.default,
    aten.erf.default,
    aten.cos.default,
    aten.sin.default,
    aten.square.default,
    aten.clamp.default,
    aten.clamp.Tensor,
    aten.clamp_min.default,
    aten.clamp_max.default,
    aten.maximum.default,
    aten.minimum.default,
    aten.where.self,
    aten.where.ScalarSelf,
    aten.where.ScalarOther,
    aten.where.Scalar,
    aten.masked_fill.Scalar,
    aten.masked_fill.Tensor,
    aten.eq.Tensor,
    aten.eq.Scalar,
    aten.ne.Tensor,
    aten.ne.Scalar,
    aten.lt.Tensor,
    aten.lt.Scalar,
    aten.le.Tensor,
    aten.le.Scalar,
    aten.gt.Tensor,
    aten.gt.Scalar,
    aten.ge.Tensor,
    aten.ge.Scalar,
    aten.bitwise_and.Tensor,
    aten.bitwise_or.Tensor,
    aten.bitwise_xor.Tensor,
    aten.bitwise_not.default,
    aten.__and__.Tensor,
    aten.__or__.Tensor,
    aten.__xor__.Tensor,
    aten.logical_and.default,
    aten.logical_or.default,
    aten.logical_not.default,
    aten.logical_xor.default,
    aten.floor_divide.default,
    aten.floor_divide.Scalar,
    aten.remainder.Scalar,
    aten.remainder.Tensor,
    aten.fmod.Scalar,
    aten.floor.default,
    aten.ceil.default,
    aten.round.default,
    aten.trunc.default,
    aten.isnan.default,
    aten.isinf.default,
    aten.isfinite.default,
    aten.nan_to_num.default,
    aten.lerp.Scalar,
    aten.lerp.Tensor,
    aten.addcmul.default,
    aten.addcdiv.default,
    aten.to.dtype,
    aten.to.device,
    aten.to.dtype_layout,
    aten.to.other,
    aten._to_copy.default,
    aten.type_as.default,
    aten.clone.default,
    aten.contiguous.default,
    aten.alias.default,
    aten.detach.default,
    aten.lift_fresh_copy.default,
    aten.copy.default,
    "aten::float.default",
    "aten::bfloat16.default",
    "aten::half.default",
    aten.positive.default,
    aten.fill.Scalar,
    aten.fill.Tensor,
    aten.hardtanh.default,
    aten.leaky_relu.default,
    aten.elu.default,
    aten.mish.default,
    aten.logit.default,
    aten.atan.default,
    aten.cosh.default,
    aten.sinh.default,
    aten.bernoulli.p,
    aten.bernoulli.default,
    aten.uniform.default,
    aten.exponential.default,
    aten.normal.Tensor_float,
    aten.multiply.Tensor,
    aten.min.other,
    aten.max.other,
    aten.polar.default,
)


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


@register(*_POINTWISE)
def pointwise(interp: Interp, node: torch.fx.Node) -> Val:
    """Element ``x`` of the result reads element ``x`` of each operand (broadcast)."""
    operands = [a for a in (*node.args, *node.kwargs.values()) if not isinstance(a, list)]
    base, vals = _base(node), [interp.val(a) for a in operands]
    if chunks.meets(interp, node, operands):  # representatives meet their chunks' places
        if (chunked := chunks.anchored(interp, node, base, operands)) is not None:
            return chunked
        if (earlier := interp.passed_on(node, vals)) is not None:
            return earlier
        return interp.leak(node, chunks.UNMASKED)
    else:
        toks, wild = _aligned(interp, node, operands, vals)
    if toks is None and (earlier := interp.passed_on(node, vals)) is not None:
        return earlier  # already leaking: the earlier finding
    if toks is None:
        return interp.leak(node, "combines tensors whose token dimensions do not line up")
    operands = [a for a in operands if not any(a is w for w in wild)] or operands
    result = Val(toks, **carry(vals))
    result = _relative(interp, node, base, operands, result)
    result = _pairs(interp, node, base, operands, result)
    result = _kind(interp, node, base, operands, result)
    return _shifted(interp, node, base, operands, result)


def _aligned(interp, node, operands, vals) -> tuple:
    """The result's token dims, and the operands that line up with anything (read no
    token) when the others do not line up with them."""
    toks = align(interp, node, operands)
    if toks is not None:
        return toks, []
    wild = [a for a, v in zip(operands, vals, strict=True) if is_wildcard(v)]
    return (align(interp, node, operands, skip=wild) if wild else None), wild


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
    one_each = len(set(pa) - set(pb)) == len(set(pb) - set(pa)) == 1  # a chunk index shared
    if not (a and b and a.absolute and b.absolute and len(pa) == len(pb) and one_each):
        return result
    if _same_in_a_document(a, b):
        return result.with_(absolute=frozenset())
    for origin in a.absolute | b.absolute:  # say why the difference did not cancel
        said = interp.reasons.get(origin, "an absolute token index")
        why = (
            f"compared at `{node.name}` after arithmetic that a document alone does "
            "not repeat (index + constant moves with the document, `i // C` does not)"
        )
        interp.reasons[origin] = said if why in said else f"{said}, {why},"
    return result


def _same_in_a_document(a: Val, b: Val) -> bool:
    """Whether comparing (or subtracting) ``a`` at one token and ``b`` at another gives
    the same for two tokens of one document packed and alone: both indices that move
    with the document, or both one labelling of the documents (their document ids, or
    one prefix sum equal only inside a document: constant over a document)."""
    if _moves_with_tokens(a) and _moves_with_tokens(b):
        return True
    if _chunk_index(a) and _chunk_index(b):
        return True  # chunk numbers: what they carry between chunks is chunks.py's proof
    if a.kind == b.kind == Kind.DOCID:
        return True
    return a.kind == b.kind == Kind.DOCSEP and a.ref is b.ref


def _chunk_index(val: Val) -> bool:
    """An index over chunks of the row (a chunk view's index, an arange over
    ``ceil(T / C)``): what a chunked scan carries between chunks is proven by
    :mod:`~graphcheck.analysis.locality.chunks`, not by this difference."""
    chunked = [t for t in val.toks if t is not None]
    return bool(chunked) and all("@0/" in t.axis or t.inner is None for t in chunked)


def _moves_with_tokens(val: Val) -> bool:
    """The value at token ``i`` is ``i + c``: moving a document by ``o`` tokens moves it
    by ``o``, so the difference of two such values is the same packed and alone
    (``i // C`` is not: chunk boundaries sit at multiples of ``C`` of the packed row)."""
    term = term_of(val) if not val.token_dims or len(val.token_dims) == 1 else None
    while term is not None and term != TOKEN:
        if term[0] == "add" and term[2][0] == "int":
            term = term[1]
        elif term[0] == "add" and term[1][0] == "int":
            term = term[2]
        elif term[0] == "sub" and term[2][0] == "int":
            term = term[1]
        else:
            return False
    return term == TOKEN


def _outside(interp, node, arg, pair: Pair, which: str) -> Fill | str | None:
    """What ``arg`` holds outside the relation of ``pair`` (``"finite"``: some value)."""
    if not isinstance(arg, torch.fx.Node):
        return _constant(arg)
    if (value := _filled(arg)) is not None:
        return _constant(value)  # a tensor of one constant (scalar_tensor(-inf), full)
    val = interp.val(arg)
    mine = getattr(val, which, None) if val is not None else None
    if mine is not None:
        offset = ndim_of(node) - len(val.toks)
        moved = replace(mine, row=mine.row + offset, col=mine.col + offset)
        if (moved.row, moved.col, moved.k, moved.rep) == (pair.row, pair.col, pair.k, pair.rep):
            return moved.fill
    val_meta = arg.meta.get("val")
    if isinstance(val_meta, torch.Tensor) and val_meta.dtype == torch.bool:
        return None
    return "finite"


def _filled(arg: torch.fx.Node):
    """The constant every element of ``arg`` holds, when a factory of one value made it
    (``scalar_tensor(v)``, ``full(size, v)``); ``None`` otherwise."""
    if arg.target is aten.scalar_tensor.default and arg.args:
        return arg.args[0]
    if arg.target is aten.full.default and len(arg.args) > 1:
        return arg.args[1]
    return None


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
            pair = replace(pair, fill=fill) if isinstance(fill, Fill) else None
        result = result.with_(**{which: pair})
    if result.guard is not None and result.dep == Dep.SPAN:
        result = result.with_(dep=Dep.DOC)  # a span between two tokens of one document
    return result


def _candidate(interp, node, operands, which: str) -> Pair | None:
    for arg in operands:
        val = interp.val(arg)
        pair = getattr(val, which, None) if val is not None else None
        if pair is not None and not _broadcast(node, arg, pair):
            offset = ndim_of(node) - len(val.toks)
            return replace(pair, row=pair.row + offset, col=pair.col + offset)
    return None


def _broadcast(node: torch.fx.Node, arg, pair: Pair) -> bool:
    """One end of ``arg``'s ``pair`` is a size-1 dim broadcast in the result."""
    shape, out = shape_of(arg), shape_of(node)
    if shape is None or out is None:
        return True
    offset = len(out) - len(shape)
    return any(is_one(shape[d]) and not is_one(out[d + offset]) for d in (pair.row, pair.col))


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
    if term is not None and is_position(term):  # i - cu[doc(i)]: the token's own position
        return result.with_(kind=Kind.POS, extra=None, absolute=frozenset())
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
    floor = base in ("floordiv", "floor_divide") or rounds_down(node, base)
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


@register(
    aten.dropout.default,
    aten.native_dropout.default,
    aten.alpha_dropout.default,
    aten.feature_dropout.default,
    aten.feature_alpha_dropout.default,
)
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
