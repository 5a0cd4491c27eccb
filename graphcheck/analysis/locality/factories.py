"""Sizes and factories: values that carry no token data.

Assumes sizes, asserts and the SymInt arithmetic of export carry no data (a size
involving the packed length ``T`` used as a value is an absolute quantity), that a
factory makes a tensor from its arguments' metadata only (``*_like`` reads no
elements), and that an ``arange`` over ``T`` is the absolute token index. Group sizes
read back as Python ints are judged by :mod:`graphcheck.analysis.locality.groups`.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from graphcheck.analysis.layout_terms import TOKEN
from graphcheck.analysis.locality.domain import (
    Interp,
    Kind,
    Val,
    bind,
    is_length,
    meta_toks,
    symbols,
    union,
)
from graphcheck.analysis.locality.groups import counted
from graphcheck.analysis.locality.registry import register

__all__ = ["arange", "factory", "scalar_tensor", "structural"]

aten = torch.ops.aten

_STRUCTURAL = (
    aten.sym_size.int,
    aten.sym_numel.default,
    aten.sym_stride.int,
    aten.sym_storage_offset.default,
    aten._assert_tensor_metadata.default,
    aten._assert_scalar.default,
    aten.sym_constrain_range_for_size.default,
    aten.sym_constrain_range.default,
    aten._assert_async.msg,
    aten._assert_async.default,
    aten._functional_assert_async.msg,
    operator.eq,
    operator.ne,
    operator.ge,
    operator.le,
    operator.gt,
    operator.lt,
    torch.sym_max,
    torch.sym_min,
    torch.sym_not,
    torch.sym_float,
    torch.sym_int,
    torch.sym_ite,
    operator.mod,
    operator.pow,
    operator.add,
    operator.sub,
    operator.mul,
    operator.truediv,
    operator.floordiv,
    operator.neg,
)

_FACTORY = (
    aten.zeros.default,
    aten.ones.default,
    aten.empty.memory_format,
    aten.full.default,
    aten.new_zeros.default,
    aten.new_ones.default,
    aten.new_empty.default,
    aten.new_empty_strided.default,
    aten.new_full.default,
    aten.zeros_like.default,
    aten.ones_like.default,
    aten.empty_like.default,
    aten.full_like.default,
    aten.rand.default,
    aten.randn.default,
    aten.rand_like.default,
    aten.randn_like.default,
    aten.randint.low,
    aten.empty_strided.default,
    aten.eye.default,
    aten.linspace.default,
    aten.tensor.default,
)


@register(*_STRUCTURAL)
def structural(interp: Interp, node: torch.fx.Node) -> Val:
    """Sizes and asserts carry no data; a size involving T used as a value is an
    absolute quantity (the packed length)."""
    val = node.meta.get("val")
    if isinstance(val, torch.SymInt | torch.SymFloat | torch.SymBool):
        if (grouped := counted(interp, node)) is not None:
            return grouped  # a group size (counts of all documents) used as a value
        vals = [interp.val(a) for a in node.all_input_nodes]
        absolute = union(v.absolute for v in vals if v is not None)
        if symbols(val) & interp.tokens and not absolute:
            absolute = interp.fabricate(node, "the packed length T used as a value")
        return Val((), kind=Kind.LENGTH, absolute=absolute)
    return Val(meta_toks(val, interp.tokens))


@register(*_FACTORY)
def factory(interp: Interp, node: torch.fx.Node) -> Val:
    """New tensors: no token data (``*_like`` reads its argument's metadata only)."""
    fill = interp.val(bind(node).get("fill_value"))
    absolute = fill.absolute if fill is not None else frozenset()
    return Val(meta_toks(node.meta.get("val"), interp.tokens), absolute=absolute)


@register(aten.scalar_tensor.default)
def scalar_tensor(interp: Interp, node: torch.fx.Node) -> Val:
    """``torch.tensor(T)``: the packed length as a tensor (structural in ``cat([starts,
    [T]])``, an absolute quantity anywhere else)."""
    arg = node.args[0] if node.args else None
    size = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    if isinstance(size, torch.SymInt) and is_length(size, interp.tokens):
        origin = interp.fabricate(node, "the packed length T used as a value")
        return Val((), kind=Kind.LENGTH, extra="T", absolute=origin)
    return factory(interp, node)


@register(aten.arange.default, aten.arange.start, aten.arange.start_step)
def arange(interp: Interp, node: torch.fx.Node) -> Val:
    """An ``arange`` over T is the absolute token index (from another start, the index
    plus that start: a function of the layout)."""
    if (grouped := counted(interp, node)) is not None:
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
