"""What graphcheck knows about individual ops.

Tables and predicates over ``node.target``: which ops are views, dtype casts,
metadata-only factories, and which mix tokens along the sequence axis
(attention, convolutions, scans) together with the arguments through which
they can see document boundaries.

>>> import torch
>>> is_view_target(torch.ops.aten.slice.Tensor), is_view_target(torch.ops.aten.add.Tensor)
(True, False)
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
import torch.fx

__all__ = [
    "METADATA_ONLY",
    "SequenceMixer",
    "is_cast_node",
    "is_view_node",
    "is_view_target",
    "op_name",
    "sequence_mixer",
    "tensor_val",
]

aten = torch.ops.aten


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


@dataclass(frozen=True)
class SequenceMixer:
    """A sequence-mixing op: ``data`` are the token-carrying operands, ``segments``
    the operands through which it can see document boundaries (masks,
    ``cu_seqlens``, sequence indices). ``segments`` may be empty: such an op
    cannot see document boundaries at all."""

    kind: str
    data: tuple[torch.fx.Node, ...]
    segments: tuple[torch.fx.Node, ...]


def _arg(node: torch.fx.Node, index: int, name: str):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name)


def _nodes(*values) -> tuple[torch.fx.Node, ...]:
    out: list[torch.fx.Node] = []
    for value in values:
        if isinstance(value, torch.fx.Node):
            out.append(value)
        elif isinstance(value, (list, tuple)):
            out.extend(_nodes(*value))
    return tuple(out)


_SDPA = {
    "aten.scaled_dot_product_attention.default": 3,
    "aten._scaled_dot_product_efficient_attention.default": 3,
    "aten._scaled_dot_product_cudnn_attention.default": 3,
    "aten._scaled_dot_product_flash_attention_for_cpu.default": 6,
    "aten._scaled_dot_product_flash_attention.default": None,
}
_SOFTMAX = {"aten._softmax.default", "aten.softmax.int", "aten._safe_softmax.default"}
_SCANS = {"aten.cumsum.default", "aten.cumprod.default", "aten.logcumsumexp.default"}
_CONVS = {"aten.convolution.default", "aten.conv1d.default", "aten.conv1d.padding"}


def sequence_mixer(node: torch.fx.Node, token_axis) -> SequenceMixer | None:
    """Classify ``node`` as a sequence-mixing op, or ``None``.

    ``token_axis(node, dim)`` tells whether ``dim`` of ``node``'s value runs over
    the tokens T; it separates attention softmaxes and token-axis scans from
    per-token ones (a router softmax over experts).
    """
    name = op_name(node.target)
    if name in _SDPA:
        index = _SDPA[name]
        mask = _arg(node, index, "attn_mask") if index is not None else None
        return SequenceMixer("sdpa", _nodes(*node.args[:3]), _nodes(mask))
    if name.startswith("torch_attn._varlen_attn") or name.endswith("varlen_attn.default"):
        return SequenceMixer("varlen_attn", _nodes(*node.args[:3]), _nodes(*node.args[3:5]))
    if name == "flex_attention":
        return SequenceMixer("flex_attention", _nodes(*node.args[:3]), _nodes(*node.args[4:]))
    if name in _SOFTMAX and token_axis(node.args[0], node.args[1]):
        return SequenceMixer("softmax", _nodes(node.args[0]), ())
    if name in _SCANS and token_axis(node.args[0], node.args[1]):
        return SequenceMixer("scan", _nodes(node.args[0]), ())
    if name in _CONVS and token_axis(node.args[0], -1):
        return SequenceMixer("convolution", _nodes(node.args[0]), ())
    return None


# Arguments that select rows (indices), by op: a permutation made with arange there
# reorders tokens (MoE dispatch), it does not invent positions.
INDEX_ARGUMENTS = {
    "aten.index.Tensor": 1,
    "aten._unsafe_index.Tensor": 1,
    "aten.index_put.default": 1,
    "aten.index_put_.default": 1,
    "aten._unsafe_index_put.default": 1,
    "aten.index_select.default": 2,
    "aten.index_add.default": 2,
    "aten.index_copy.default": 2,
    "aten.gather.default": 2,
    "aten.scatter.src": 2,
    "aten.scatter.value": 2,
    "aten.scatter_add.default": 2,
    "aten.scatter_reduce.two": 2,
    "aten.take.default": 1,
}


def index_operands(node: torch.fx.Node) -> set[torch.fx.Node]:
    """The operands ``node`` uses only to pick rows (see :data:`INDEX_ARGUMENTS`)."""
    position = INDEX_ARGUMENTS.get(op_name(node.target))
    if position is None or len(node.args) <= position:
        return set()
    return set(_nodes(node.args[position]))


_KNOWN_NAMESPACES = {
    "aten",
    "prims",
    "torch_attn",
    "_c10d_functional",
    "c10d_functional",
    "quantized",
}


def custom_mixer(node: torch.fx.Node) -> SequenceMixer | None:
    """An op from a user namespace (a custom kernel): graphcheck cannot tell
    whether it mixes tokens, so every tensor operand is both data and a
    possible segmentation argument."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or target.namespace in _KNOWN_NAMESPACES:
        return None
    operands = _nodes(*node.args, *node.kwargs.values())
    return SequenceMixer(f"custom op {op_name(target)}", operands, operands)


def is_higher_order(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator)


def subgraph_mixers(node: torch.fx.Node, root: torch.nn.Module, token_axis) -> list[str]:
    """Kinds of the sequence-mixing ops inside a higher-order op's subgraphs."""
    kinds: list[str] = []
    for arg in node.all_input_nodes:
        sub = getattr(root, str(arg.target), None) if arg.op == "get_attr" else None
        if not isinstance(sub, torch.fx.GraphModule):
            continue
        for inner in sub.graph.nodes:
            if inner.op != "call_function":
                continue
            mixer = sequence_mixer(inner, token_axis) or custom_mixer(inner)
            if mixer is not None:
                kinds.append(mixer.kind)
            if is_higher_order(inner):
                kinds.extend(subgraph_mixers(inner, sub, token_axis))
    return kinds
