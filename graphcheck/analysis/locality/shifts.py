"""Shifts: ``roll``, ``flip`` and padding of the token dimension.

Assumes these move tokens onto other tokens' positions. A shift by ``k`` tokens of a
clean value stays a pending leak until a mask at the document starts (``position_ids
< k``) replaces it wherever the token ``k`` back lies in another document
(:mod:`graphcheck.analysis.locality.pointwise`); any other move along T, or a pad by a
width computed from sizes, is a leak.
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.fx import op_name
from graphcheck.analysis.locality import conv
from graphcheck.analysis.locality.domain import (
    Dep,
    Interp,
    Val,
    _src,
    bind,
    carry,
    meta_toks,
    norm_dim,
    unknown,
)
from graphcheck.analysis.locality.registry import register

__all__ = ["shift"]

aten = torch.ops.aten


@register(aten.roll.default, aten.flip.default, aten.constant_pad_nd.default, aten.pad.default)
def shift(interp: Interp, node: torch.fx.Node) -> Val:
    """``roll`` / ``flip`` / padding of T move tokens onto other tokens' positions."""
    src = _src(interp, node)
    if src is None:
        return unknown(interp, node)
    dims = [d for d in _shifted_dims(node, len(src.toks)) if src.toks[d] is not None]
    clean = src.shift is None and src.dep <= Dep.DOC and not src.leaks
    amount = _shift_amount(node, dims[0], len(src.toks)) if len(dims) == 1 else None
    if clean and type(amount) is int and amount >= 1:
        back = "the previous token" if amount == 1 else f"the token {amount} back"
        fix = "== 0" if amount == 1 else f"< {amount}"
        interp.reasons.setdefault(node, f"`{op_name(node.target)}` shifts tokens by {amount} "
                                  f"along the token dimension and reads {back} where it lies in "
                                  f"another document (zero the shifted value where position_ids "
                                  f"{fix})")  # fmt: skip
        pending = frozenset({node})
        return src.with_(dep=Dep.SPAN, leaks=pending, shift=(dims[0], amount, node), kind=None,
                         guard=None, tri=None)  # fmt: skip
    if len(dims) == 1 and _pad_widths(node) is not None:
        padded = conv.pad(interp, node, src, dims[0])  # in front by an int, or behind
        if padded is not None:
            return padded
    if dims and _symbolic_pad(node, dims, len(src.toks)):
        return interp.leak(node, f"`{op_name(node.target)}` pads the token dimension by a "
                           "width computed from sizes, which graphcheck does not follow "
                           "(fail closed)")  # fmt: skip
    if dims:
        return interp.leak(node, f"`{op_name(node.target)}` moves tokens along the token "
                           "dimension onto other tokens' positions")  # fmt: skip
    return Val(meta_toks(node.meta.get("val"), interp.tokens), **carry([src]))


def _pad_widths(node: torch.fx.Node) -> list | None:
    """The ``pad`` argument of a pad op (entries an int or a size node), else ``None``."""
    if op_name(node.target).split(".")[1] not in ("constant_pad_nd", "pad"):
        return None
    return list(bind(node).get("pad") or [])


def _symbolic_pad(node: torch.fx.Node, dims: list[int], n: int) -> bool:
    """A pad of one of ``dims`` by a width that is not a Python int (a size of the graph)."""
    pad = _pad_widths(node)
    sides = [pad[2 * (n - 1 - d) + j] for d in dims for j in (0, 1)] if pad is not None else []
    return any(type(width) is not int for width in sides)


def _shift_amount(node: torch.fx.Node, dim: int, n: int) -> int | None:
    """By how many tokens a ``roll`` or a pad-and-crop moves dimension ``dim``."""
    name = op_name(node.target).split(".")[1]
    bound = bind(node)
    if name == "roll":
        shifts, dims = bound.get("shifts"), bound.get("dims")
        shifts = [shifts] if isinstance(shifts, int) else list(shifts or [])
        dims = [dims] if isinstance(dims, int) else list(dims or [])
        if len(shifts) == 1 and len(dims) == 1 and norm_dim(dims[0], n) == dim:
            return shifts[0]
        return None
    if name in ("constant_pad_nd", "pad"):
        pad = list(bound.get("pad") or [])
        i = n - 1 - dim
        before, after = pad[2 * i], pad[2 * i + 1]
        if type(before) is not int or type(after) is not int:  # a symbolic width
            return None
        return before if before == -after else None
    return None


def _shifted_dims(node: torch.fx.Node, n: int) -> list[int]:
    name = op_name(node.target).split(".")[1]
    bound = bind(node)
    if name in ("constant_pad_nd", "pad"):
        pad = list(bound.get("pad") or [])
        nonzero = [not (type(w) is int and w == 0) for w in pad]  # a symbolic width may not be 0
        return [n - 1 - i for i in range(len(pad) // 2) if nonzero[2 * i] or nonzero[2 * i + 1]]
    dims = bound.get("dims")
    if dims is None or dims == []:
        return list(range(n))
    dims = [dims] if isinstance(dims, int) else list(dims)
    return [norm_dim(d, n) for d in dims]
