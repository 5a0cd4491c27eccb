"""Attention kernels: SDPA and varlen attention.

Assumes SDPA isolates documents only through a mask that is false (or ``-inf``) across
documents, and varlen attention only when its ``cu_seq_q`` / ``cu_seq_k`` are the
batch's real document boundaries (``torch_attn::_varlen_attn`` is registered by name:
its namespace may not be loaded).
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.locality import chunks
from graphcheck.analysis.locality.domain import (
    Dep,
    Fill,
    Interp,
    Kind,
    Val,
    bind,
    carry,
    meta_toks,
    union,
)
from graphcheck.analysis.locality.registry import Work, register

__all__ = ["sdpa", "separates", "varlen"]

aten = torch.ops.aten


def _doc_attention(interp, node, data: list, proven: bool, why: str):
    """Each output of an attention kernel (the output, a log-sum-exp ``[N, T]``) with the
    token dims of its own shape, of one origin: document-local when ``proven``."""
    vals = [interp.val(a) for a in data if isinstance(a, torch.fx.Node)]
    if not proven or any(v is not None and (v.dep > Dep.DOC or v.leaks) for v in vals):
        leak = interp.leak(node, why) if not proven else None
        result = leak or Val(meta_toks(_first(node), interp.tokens), **carry(vals))
    else:
        result = Val(meta_toks(_first(node), interp.tokens), **{**carry(vals), "dep": Dep.DOC})
        result = result.with_(absolute=union(v.absolute for v in vals if v is not None))
    val = node.meta.get("val")
    if not isinstance(val, tuple | list):
        return result
    return tuple(result.with_(toks=meta_toks(out, interp.tokens)) for out in val)


def _first(node):
    val = node.meta.get("val")
    return val[0] if isinstance(val, tuple | list) else val


@register(
    aten.scaled_dot_product_attention.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_cudnn_attention.default,
    aten._scaled_dot_product_flash_attention.default,
    work=Work.SDPA_ATTENTION,
)
def sdpa(interp: Interp, node: torch.fx.Node):
    """SDPA isolates documents only through a mask that is false (or ``-inf``) across
    documents."""
    bound = bind(node)
    why = "attention without a document mask (is_causal, or a mask that does not separate "
    why += "documents)"
    data = [bound.get("query"), bound.get("key"), bound.get("value"), bound.get("attn_mask")]
    return _doc_attention(interp, node, data, separates(interp, bound.get("attn_mask")), why)


def separates(interp: Interp, mask) -> bool:
    """Whether SDPA's ``mask`` is false (or ``-inf``) across documents on its query and
    key dims."""
    mask = interp.val(mask)
    g = mask.guard if mask is not None else None
    n = len(mask.toks) if mask is not None else 0
    return (
        g is not None and g.fill in (Fill.ZERO, Fill.NEGINF) and {g.row, g.col} == {n - 2, n - 1}
    ) and not chunks.place_guard(mask)


@register("torch_attn::_varlen_attn.default", work=Work.VARLEN_ATTENTION)
def varlen(interp: Interp, node: torch.fx.Node):
    """Varlen attention reads the document boundaries themselves."""
    bound = bind(node)
    cus = [interp.val(bound.get(k)) for k in ("cu_seq_q", "cu_seq_k")]
    proven = all(c is not None and c.kind == Kind.CU for c in cus)
    why = "varlen attention whose cu_seq_lens are not the batch's document boundaries"
    data = [bound.get("query"), bound.get("key"), bound.get("value")]
    return _doc_attention(interp, node, data, proven, why)
