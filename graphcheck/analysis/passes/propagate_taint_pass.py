"""Forward taint from the graph's sources; derive every node's role."""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.fx import METADATA_ONLY, op_name
from graphcheck.analysis.passes.base import NodePass
from graphcheck.analysis.regions import PARAMETER, USER_INPUT, Region
from graphcheck.analysis.taint import Role, role_of
from graphcheck.varlen import BY_NAME, Taint

__all__ = ["PropagateTaintPass", "is_tensor_value"]

_SYM = (torch.SymInt, torch.SymBool, torch.SymFloat)


def is_tensor_value(val) -> bool:
    """A tensor, or a tuple/list holding one (multi-output ops before ``getitem``)."""
    if isinstance(val, torch.Tensor):
        return True
    return isinstance(val, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in val)


class PropagateTaintPass(NodePass):
    def __init__(self, region: dict[torch.fx.Node, Region], input_names: dict[str, str]) -> None:
        self.region = region
        self.input_names = input_names  # placeholder name -> varlen input name
        self.taint: dict[torch.fx.Node, Taint] = {}
        self.role: dict[torch.fx.Node, Role] = {}

    def placeholder(self, node: torch.fx.Node) -> None:
        region = self.region[node]
        bits = Taint.NONE
        if region == PARAMETER:
            bits = Taint.PARAM
        elif region == USER_INPUT:
            row = BY_NAME.get(self.input_names.get(node.name, ""))
            bits = row.taint if row is not None else Taint.NONE
        self._set(node, bits)

    def get_attr(self, node: torch.fx.Node) -> None:
        self._set(node, Taint.NONE)

    def call_function(self, node: torch.fx.Node) -> None:
        name = op_name(node.target)
        if name in METADATA_ONLY:
            bits = self._metadata_taint(node)
        else:
            bits = Taint.NONE
            for arg in node.all_input_nodes:
                bits |= self.taint.get(arg, Taint.NONE)
        if name.startswith("aten.arange") or _slices_by_size(node, name):
            bits |= Taint.ARANGE
        self._set(node, bits)

    def _metadata_taint(self, node: torch.fx.Node) -> Taint:
        """Sizes of symbolic tensors are LENGTH; their values do not flow. A size that
        depends on the data (an unbacked symbol: the count ``nonzero`` returned) carries
        the data's taint: no other stage can recompute it."""
        bits = Taint.NONE
        for arg in node.all_input_nodes:
            val = arg.meta.get("val")
            if isinstance(val, _SYM):
                bits |= self.taint.get(arg, Taint.NONE)
            elif isinstance(val, torch.Tensor) and any(
                isinstance(d, torch.SymInt) for d in val.shape
            ):
                bits |= Taint.LENGTH
                if _data_dependent(node.meta.get("val")):
                    bits |= self.taint.get(arg, Taint.NONE)
        return bits

    def _set(self, node: torch.fx.Node, bits: Taint) -> None:
        val = node.meta.get("val")
        if isinstance(val, _SYM) and self.region.get(node) != USER_INPUT and not bits:
            bits = Taint.LENGTH
        self.taint[node] = bits
        self.role[node] = role_of(bits, is_tensor_value(val) or _unknown_result(node))


def _data_dependent(val) -> bool:
    """A size read out of data (unbacked symbols are named ``u0``, ``u1``, ...)."""
    expr = getattr(getattr(val, "node", None), "expr", None)
    return any(str(s).startswith("u") for s in getattr(expr, "free_symbols", ()))


def _slices_by_size(node: torch.fx.Node, name: str) -> bool:
    """``table[:T]``: taking the first T rows is indexing with ``arange(T)``."""
    if name not in ("aten.slice.Tensor", "aten.narrow.default"):
        return False
    bounds = node.args[2:4]
    return any(isinstance(b, torch.fx.Node) and isinstance(b.meta.get("val"), _SYM) for b in bounds)


def _unknown_result(node: torch.fx.Node) -> bool:
    """A call whose value export did not record: treat it as a tensor (fail closed),
    unless its schema says it returns nothing (asserts)."""
    if node.op != "call_function" or "val" in node.meta:
        return False
    schema = getattr(node.target, "_schema", None)
    return schema is None or len(schema.returns) > 0
