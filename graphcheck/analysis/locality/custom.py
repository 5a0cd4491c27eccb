"""Custom ops: trusted kernels judged by the document structure they are given.

Assumes a custom kernel (graphcheck's stand-ins, a ``--kernels`` file, any namespace
other than ``aten`` and ``prims``) keeps documents apart when an argument's *value* is
the batch's document structure (the real ``cu_seq_lens`` or document ids, whatever the
argument is called) and every other integer tensor it is given is that structure too;
its scalar arguments are sizes. One given other boundaries is a leak; one given none,
touching tokens, is unknown. :func:`custom` is also the dispatch's fallback for any
unregistered op of such a namespace.
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.fx import op_name
from graphcheck.analysis.locality.attention import _doc_attention
from graphcheck.analysis.locality.domain import Interp, Kind, bind, unknown
from graphcheck.analysis.locality.registry import register

__all__ = ["custom"]

aten = torch.ops.aten


_STRUCTURE = (Kind.CU, Kind.DOCID)


def _integer_metadata(arg) -> bool:
    """An integer tensor that is not a scalar: an argument through which a kernel could
    be told where documents begin (boundaries, lengths, ids, a block table)."""
    val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or val.dtype.is_floating_point or val.dim() == 0:
        return False
    return val.dtype != torch.bool and not val.is_complex()


def _described(interp: Interp, bound: dict) -> tuple[list[str], list[str]]:
    """The arguments whose values are the batch's document structure (``cu_seq_lens``,
    document ids), and the other integer tensors a kernel is given (positions are
    per-token data: a rotary kernel reads them)."""
    structure, other = [], []
    for name, arg in bound.items():
        val = interp.val(arg)
        if val is not None and val.kind in _STRUCTURE:
            structure.append(name)
        elif _integer_metadata(arg) and not (val is not None and val.kind == Kind.POS):
            other.append(name)
    return structure, other


@register(
    "graphcheck::varlen_attention.default",
    "graphcheck::chunk_gated_delta_rule.default",
    "graphcheck::causal_conv1d.default",
)
def custom(interp: Interp, node: torch.fx.Node):
    """A custom kernel (graphcheck's stand-ins, a ``--kernels`` file, any namespace) is
    trusted to keep documents apart when an argument's *value* is the batch's document
    structure (the real ``cu_seq_lens`` or document ids, whatever the argument is
    called) and every other integer tensor it is given is that structure too; its
    scalar arguments are sizes (``max_seqlen``). One given other boundaries is a leak;
    one given none, touching tokens, is unknown."""
    bound = bind(node)
    structure, other = _described(interp, bound)
    name = f"`{op_name(node.target)}`"
    if other:
        given = ", ".join(f"`{k}`" for k in other)
        verb = "is" if len(other) == 1 else "are"
        why = f"{name} is given {given}, which {verb} not the batch's document structure "
        why += "(cu_seq_lens or document ids), so it is not trusted to keep documents apart"
        return _doc_attention(interp, node, [], False, why)
    if not structure:
        return unknown(interp, node)
    data = [v for k, v in bound.items() if k not in structure and not _scalar(v)]
    return _doc_attention(interp, node, data, True, "")


def _scalar(arg) -> bool:
    """A SymInt or number: a trusted kernel's sizes (``max_seqlen``), not its data."""
    val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg
    return not isinstance(val, torch.Tensor)
