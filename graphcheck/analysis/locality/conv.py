"""Convolutions along the token axis, and the pads and crops around them: sums of shifts.

Assumes ``conv1d`` / ``convolution`` compute PyTorch's cross-correlation over the last
dim (mixing nothing along the others) and a ``constant`` pad only adds fill elements at
the ends of a dim. A conv along T is followed when it is 1-d with stride 1, int padding
and dilation and weights that depend on no token; it computes at output index ``o`` the
sum over its taps ``j`` of ``w[j] * x[o - p + j*d]`` (kernel ``K``, dilation ``d``,
padding ``p``): the sum of ``K`` token shifts of ``x``, by ``p - j*d`` for
``j = 0 .. K - 1``. Each is the shift ``roll`` and pad-and-crop make (``Val.shift``,
:mod:`graphcheck.analysis.locality.shifts`), and the conv's result is a pending leak
with the same obligation: the shifted-in value must be masked wherever the token it
reads lies in another document. The value carries the range of amounts it reads,
``Val.shift = (dim, hi, origin, lo)`` (``t`` reads ``t - hi .. t - lo``); a mask that
covers ``hi`` covers every smaller amount (``pos(t) < s`` implies ``pos(t) < hi``), so
the existing obligation at ``hi`` (``covers_shift`` in
:mod:`graphcheck.analysis.layout_terms`) discharges every tap at once. Causal padding
(``p = d*(K - 1)``, or ``F.pad`` by it in front) gives ``lo = 0``; a conv that looks
ahead (``lo < 0``: ``padding="same"``, symmetric padding) reads a later token, in
another document wherever one ends: it fails closed, as does any other conv along T
(strided, transposed, a kernel of a size not known, weights computed from tokens).

The pads and crops (:func:`pad` for :mod:`~graphcheck.analysis.locality.shifts`,
:func:`crop` for :mod:`~graphcheck.analysis.locality.views`): a pad of T by ``a`` in
front (an int; behind, any width, symbolic too: padding up to a chunk multiple) makes
element ``o`` read token ``o - a`` (``a = 0`` moves no token: not a pending leak, but
its token dim is no longer T itself); a slice ``[s : s + T]`` of a shifted value shifts
it by ``-s``. A slice of a pad of a function of the layout (document ids padded with a
fill, ``F.pad(doc, (k, 0), value=-1)[:T]``) is a function of the layout again:
``doc(t - k)``, the fill where ``t < k``.
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.fx import op_name
from graphcheck.analysis.layout_terms import TOKEN, substitute, term_of
from graphcheck.analysis.locality.chunks import padded
from graphcheck.analysis.locality.domain import (
    Dep,
    Interp,
    Kind,
    Tok,
    Val,
    bind,
    is_length,
    meta_toks,
    ndim_of,
    norm_dim,
    shape_of,
)
from graphcheck.analysis.locality.registry import Work, register

__all__ = ["convolution", "crop", "pad", "span"]

aten = torch.ops.aten


def span(val: Val) -> tuple[int, int]:
    """``(hi, lo)``: a shifted value's element ``t`` reads tokens ``t - hi .. t - lo``."""
    shift = val.shift
    return (shift[1], shift[3] if len(shift) > 3 else shift[1])


def _pending(interp, node, src: Val, dim: int, hi: int, lo: int, reason: str) -> Val:
    """A shift by ``lo .. hi`` along ``dim``: a pending leak of origin ``node`` (replacing
    the shift it composes with) until a mask discharges it."""
    toks = meta_toks(node.meta.get("val"), interp.tokens)
    earlier = src.leaks - ({src.shift[2]} if src.shift is not None else set())
    if earlier and src.dep == Dep.LEAK:
        return Val(toks, Dep.LEAK, leaks=earlier)  # already leaking: the earlier finding
    interp.reasons.setdefault(node, reason)
    return Val(toks, Dep.SPAN, leaks=earlier | {node}, absolute=src.absolute,
               shift=(dim, hi, node, lo))  # fmt: skip


def _tokens_back(hi: int, lo: int) -> str:
    last = f"t - {lo}" if lo else "t"
    reads = f"token t - {hi}" if hi == lo else f"tokens t - {hi} .. {last}"
    fix = "== 0" if hi == 1 else f"< {hi}"
    return (f"element t reads {reads}, in another document wherever position_ids < {hi} "
            f"(zero it where position_ids {fix}, or mask each tap by document-id "
            "equality)")  # fmt: skip


def pad(interp: Interp, node: torch.fx.Node, src: Val, dim: int) -> Val | None:
    """``constant_pad_nd`` of the token dim ``dim`` by an int ``a >= 0`` in front and any
    width behind: element ``o`` reads token ``o - a`` (``None``: not such a pad)."""
    widths = list(bind(node).get("pad") or [])
    i = ndim_of(node) - 1 - dim
    if 2 * i + 1 >= len(widths) or bind(node).get("mode", "constant") != "constant":
        return None  # reflect / replicate / circular pads read other tokens
    before = widths[2 * i]
    if type(before) is not int or before < 0 or (src.dep == Dep.SPAN and src.shift is None):
        return None  # in front by a size, or a span between two tokens: not followed
    hi, lo = span(src) if src.shift is not None else (0, 0)
    if src.shift is not None and src.shift[0] != dim:
        return None
    if before == 0 and src.shift is None:  # padded behind (leaking or not): no token moves
        kind = _separating(src, bind(node).get("value") or 0)
        toks = padded(src, dim, meta_toks(node.meta.get("val"), interp.tokens))
        return src.with_(toks=toks, kind=kind,
                         ref=node if kind else None, extra=None, guard=None, tri=None,
                         shift=(dim, 0, node, 0))  # fmt: skip
    why = f"`{op_name(node.target)}` pads the token dimension by {before} in front: "
    return _pending(interp, node, src, dim, hi + before, lo + before, why + _tokens_back(
        hi + before, lo + before))  # fmt: skip


def _separating(src: Val, fill) -> Kind | None:
    """Document ids ``doc + k`` padded behind with a fill below ``k``: values equal only
    inside one document, or both in the padding (which holds no token's data)."""
    fill = int(fill) if isinstance(fill, float) and fill.is_integer() else fill
    ids = src.kind == Kind.DOCID and type(src.extra) is int
    return Kind.DOCSEP if ids and type(fill) is int and fill < src.extra else None


def crop(interp: Interp, node: torch.fx.Node) -> Val | None:
    """A slice ``[s : s + T]`` (step 1) of a value shifted along the sliced dim: the shift
    less ``s``, on T itself (``None``: not such a slice)."""
    src, out = interp.val(node.args[0]), shape_of(node)
    bound = bind(node)
    if src is None or src.shift is None or out is None:
        return None
    dim = norm_dim(bound.get("dim", 0), len(src.toks))
    start = bound.get("start") or 0
    if dim != src.shift[0] or type(start) is not int or bound.get("step", 1) not in (1, None):
        return None
    if start < 0 or not is_length(out[dim], interp.tokens):
        return None
    hi, lo = span(src)
    toks = tuple(Tok("T") if d == dim else t for d, t in enumerate(src.toks))
    if (term := _padded_term(interp, node.args[0], dim, start)) is not None:
        return Val(toks, kind=Kind.LAYOUT, extra=term, absolute=src.absolute)
    if lo - start < 0:
        return interp.leak(node, f"`{op_name(node.target)}` of a padded token dimension reads "
                           f"{start - lo} token(s) ahead, in the next document wherever one "
                           "ends (fail closed)", toks=toks)  # fmt: skip
    if hi == start:  # every element is its own token again
        origin = src.shift[2]
        if origin not in src.leaks:  # padded behind: nothing was pending
            return src.with_(toks=toks, shift=None)
        left = src.leaks - {origin}
        return src.with_(toks=toks, shift=None, leaks=left, dep=Dep.LEAK if left else Dep.DOC)
    return src.with_(toks=toks, shift=(dim, hi - start, src.shift[2], lo - start))


def _padded_term(interp: Interp, padded, dim: int, start: int):
    """The term of ``pad(x, a in front, fill)[start : start + T]`` for ``x`` a function of
    the layout along ``dim`` and an int fill: ``x(t + start - a)``, the fill before it."""
    names = ("aten.constant_pad_nd.default", "aten.pad.default")
    if not isinstance(padded, torch.fx.Node) or op_name(padded.target) not in names:
        return None
    bound = bind(padded)
    fill = bound.get("value") or 0
    fill = int(fill) if isinstance(fill, float) and fill.is_integer() else fill
    term = term_of(interp.val(bound.get("self", bound.get("input"))))
    widths = list(bound.get("pad") or [])
    i = ndim_of(padded) - 1 - dim
    others = [w for j, w in enumerate(widths) if j // 2 != i]
    if term is None or type(fill) is not int or 2 * i + 1 >= len(widths) or any(others):
        return None
    before = widths[2 * i]
    if type(before) is not int or start > before:
        return None
    index = ("add", TOKEN, ("int", start - before))
    return ("ite", ("lt", index, ("int", 0)), ("int", fill), substitute(term, index))


_CONV = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")


@register(aten.conv1d.padding, aten._convolution.default)
@register(aten.conv1d.default, aten.convolution.default, work=Work.CONVOLUTION)
def convolution(interp: Interp, node: torch.fx.Node) -> Val:
    """``conv1d`` / ``convolution`` along the last dim: token-wise when that dim is not a
    token dim; along T a sum of shifts by ``p - j*d`` (``j < K``), a pending leak the
    shift obligation discharges; anything else along T fails closed."""
    bound = bind(node)
    src, weight, bias = (interp.val(bound.get(k)) for k in ("input", "weight", "bias"))
    toks = meta_toks(node.meta.get("val"), interp.tokens)
    if src is None:
        return _fail(interp, node, "an input graphcheck does not follow")
    params = [v for v in (weight, bias) if v is not None]
    if any(v.token_dims or v.dep > Dep.NONE or v.leaks for v in params):
        return interp.leak(node, f"`{op_name(node.target)}` with weights computed from tokens")
    dims = src.token_dims
    if not dims:
        return Val(toks, dep=src.dep, leaks=src.leaks, absolute=src.absolute)
    if (earlier := interp.passed_on(node, [src])) is not None:
        return earlier
    taps = _taps(node, bound, len(src.toks))
    if isinstance(taps, str):
        return _fail(interp, node, taps)
    if dims != (len(src.toks) - 1,) or (src.shift is None and src.toks[-1] != Tok("T")):
        return _fail(interp, node, "token dims other than the conv's own, or not T itself")
    if src.shift is not None and src.shift[0] != dims[0]:
        return _fail(interp, node, "an input shifted along another dim")
    hi, lo = span(src) if src.shift is not None else (0, 0)
    first, last = taps  # the conv reads t - first .. t - last of its input
    if src.shift is None and first == last == 0:
        return Val(toks, dep=src.dep, leaks=src.leaks, absolute=src.absolute)
    if lo + last < 0:
        return interp.leak(node, f"`{op_name(node.target)}` looks {-(lo + last)} token(s) "
                           "ahead along the token dimension (padding that is not causal), "
                           "into the next document wherever one ends (fail closed)")  # fmt: skip
    why = f"`{op_name(node.target)}` sums {_kernel(node)} taps along the token dimension: "
    return _pending(interp, node, src, dims[0], hi + first, lo + last,
                    why + _tokens_back(hi + first, lo + last))  # fmt: skip


def _fail(interp: Interp, node: torch.fx.Node, what: str) -> Val:
    return interp.leak(node, f"`{op_name(node.target)}` over the token dimension with {what}, "
                       "which graphcheck does not follow (fail closed)")  # fmt: skip


def _kernel(node: torch.fx.Node) -> int | None:
    shape = shape_of(bind(node).get("weight"))
    return shape[-1] if shape and type(shape[-1]) is int else None


def _ints(value, n: int) -> list | None:
    values = [value] * n if isinstance(value, int) else list(value or [])
    return values if len(values) == n and all(type(v) is int for v in values) else None


def _taps(node: torch.fx.Node, bound: dict, ndim: int) -> tuple[int, int] | str:
    """``(p, p - d*(K - 1))``: the amounts of the first and the last tap of a 1-d conv with
    stride 1, or what it has that graphcheck does not follow."""
    kernel = _kernel(node)
    if ndim not in (2, 3) or kernel is None:
        return "a kernel that is not a 1-d int size"
    if bound.get("transposed", False) or any(bound.get("output_padding") or []):
        return "a transposed convolution"
    if _ints(bound.get("stride", 1), 1) != [1]:
        return "a stride other than 1"
    dilation, padding = _ints(bound.get("dilation", 1), 1), bound.get("padding", 0)
    if padding == "same" and dilation is not None:  # torch puts the odd one behind
        padding = dilation[0] * (kernel - 1) // 2
    padding = _ints(0 if padding == "valid" else padding, 1)
    if dilation is None or padding is None:
        return f"padding {bound.get('padding')!r} or dilation {bound.get('dilation')!r}"
    return padding[0], padding[0] - dilation[0] * (kernel - 1)
