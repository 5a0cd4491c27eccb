"""What graphcheck knows about individual ops.

Tables and predicates over ``node.target``: which ops are views, dtype casts and
metadata-only factories. How each op moves data along the token dimension is the
op table, :mod:`graphcheck.analysis.locality`.

>>> import torch
>>> is_view_target(torch.ops.aten.slice.Tensor), is_view_target(torch.ops.aten.add.Tensor)
(True, False)
"""

from __future__ import annotations

import operator

import torch
import torch.fx

__all__ = [
    "METADATA_ONLY",
    "is_cast_node",
    "is_view_node",
    "is_view_target",
    "op_name",
    "tensor_val",
]


def op_name(target) -> str:
    """``aten.add.Tensor`` style name of an FX target."""
    if target is operator.getitem:
        return "getitem"
    name = (
        getattr(target, "__name__", None) if not isinstance(target, torch._ops.OpOverload) else None
    )
    return name or str(target)


def is_view_target(target) -> bool:
    return bool(getattr(target, "is_view", False))


def is_view_node(node: torch.fx.Node) -> bool:
    """A view op, or an element of a multi-output view op (``unbind``, ``split``)."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        src = node.args[0]
        return isinstance(src, torch.fx.Node) and is_view_target(src.target)
    return is_view_target(node.target)


_CASTS = {
    "aten.to.dtype",
    "aten.to.dtype_layout",
    "aten.to.device",
    "aten.to.other",
    "aten._to_copy.default",
    "aten.type_as.default",
    "aten.clone.default",
    "aten.contiguous.default",
    "aten.alias.default",
    "aten.detach.default",
    "aten.float.default",
    "aten.bfloat16.default",
    "aten.half.default",
}


def is_cast_node(node: torch.fx.Node) -> bool:
    """A dtype conversion or copy of a single tensor (``x.float()``, ``x.to(bf16)``)."""
    return node.op == "call_function" and op_name(node.target) in _CASTS


# Ops whose result depends on their tensor arguments' metadata only, not their values.
METADATA_ONLY = {
    "aten.new_zeros.default",
    "aten.new_ones.default",
    "aten.new_empty.default",
    "aten.new_full.default",
    "aten.zeros_like.default",
    "aten.ones_like.default",
    "aten.empty_like.default",
    "aten.full_like.default",
    "aten.sym_size.int",
    "aten.sym_numel.default",
    "aten.sym_stride.int",
    "aten.sym_storage_offset.default",
    "aten._assert_tensor_metadata.default",
}


def tensor_val(node) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None
