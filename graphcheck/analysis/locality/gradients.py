"""Backward ops: the ops AOT autograd writes for the gradients of forward ops.

Assumes each backward op reads what its forward read and mixes tokens where its
forward did, and no more: ``slice_backward`` / ``select_backward`` place the gradient
back into the sliced dim (a token dim: a shift, fail closed); a norm's or softmax's
backward reduces over the dims the forward normalised (features: token-wise; tokens:
document-local only under the forward's document mask); the attention backward reads
the boundaries its forward was given. A weight's gradient (a norm's weight and bias,
``embedding_dense_backward``) is a plain sum over every token, admitted by the backward
proof (:mod:`graphcheck.analysis.backward`) where it becomes a parameter's gradient;
``embedding_dense_backward`` with ``scale_grad_by_freq`` scales each row by how often
its token occurs in the whole packed row, which no document alone does.
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.locality.attention import _doc_attention, separates
from graphcheck.analysis.locality.domain import (
    Dep,
    Fill,
    Interp,
    Kind,
    Val,
    bind,
    carry,
    meta_toks,
    norm_dim,
)
from graphcheck.analysis.locality.pointwise import pointwise
from graphcheck.analysis.locality.registry import register

__all__ = [
    "attention_backward",
    "elementwise_backward",
    "embedding_backward",
    "norm_backward",
    "placed_back",
    "scattered_back",
    "sdpa_backward",
    "softmax_backward",
]

aten = torch.ops.aten


def _out_toks(interp: Interp, node: torch.fx.Node, index: int | None = None):
    val = node.meta.get("val")
    if index is not None:
        val = val[index]
    return meta_toks(val, interp.tokens)


@register(aten.slice_backward.default, aten.select_backward.default)
def placed_back(interp: Interp, node: torch.fx.Node) -> Val:
    """The gradient of a slice (a select) placed back into zeros of the input's size:
    along a feature dim each token keeps its rows; along a token dim it moves them."""
    grad = interp.val(node.args[0])
    toks = _out_toks(interp, node)
    bound = bind(node)
    dim = norm_dim(bound["dim"], len(toks))
    if toks[dim] is not None and not _whole(node, bound, dim):
        if grad is not None and (earlier := interp.passed_on(node, [grad])) is not None:
            return earlier.with_(toks=toks)
        return interp.leak(node, "places a gradient back along the token dimension (the "
                           "backward of a slice of the tokens: a shift)", toks)  # fmt: skip
    if grad is not None and len(grad.toks) == len(toks) and grad.toks[dim] is None:
        toks = grad.toks  # the same rows (in the order they were in: a sort's, say)
    return Val(toks, **carry([grad]))


@register(aten.slice_scatter.default, aten.select_scatter.default)
def scattered_back(interp: Interp, node: torch.fx.Node) -> Val:
    """``self`` with ``src`` written into a slice of ``dim``: along a feature dim each
    token's rows come from its own rows of both; along a token dim rows move (fail
    closed) unless ``src`` spans the whole dim."""
    bound = bind(node)
    vals = [interp.val(bound.get("self")), interp.val(bound.get("src"))]
    toks = _out_toks(interp, node)
    dim = norm_dim(bound.get("dim", 0), len(toks))
    src = bound.get("src").meta.get("val")
    whole = isinstance(src, torch.Tensor) and src.dim() == len(toks) and (
        str(src.shape[dim]) == str(node.meta["val"].shape[dim]))  # fmt: skip
    if toks[dim] is not None and not whole:
        if (earlier := interp.passed_on(node, vals)) is not None:
            return earlier.with_(toks=toks)
        return interp.leak(node, "writes rows into a slice of the token dimension", toks)
    base, part = vals
    if base is not None and part is not None and len(part.toks) == len(base.toks):
        others = [i for i in range(len(toks)) if i != dim]
        if any(None not in (base.toks[i], part.toks[i]) and base.toks[i] != part.toks[i]
               for i in others):  # fmt: skip
            return interp.leak(node, "writes rows of one token order into another's", toks)
    if base is not None and len(base.toks) == len(toks) and base.toks[dim] is None:
        toks = base.toks  # the rows of ``self``, in their own order
    return Val(toks, **carry(vals))


def _whole(node: torch.fx.Node, bound: dict, dim: int) -> bool:
    """The gradient already spans the whole dim (the backward of ``x[:, 0:]``)."""
    grad = bound["grad_output"].meta.get("val") if "grad_output" in bound else None
    size = bound["input_sizes"][dim]
    if node.target is aten.select_backward.default or not isinstance(grad, torch.Tensor):
        return False
    size = size.meta.get("val") if isinstance(size, torch.fx.Node) else size
    return str(grad.shape[dim]) == str(size)


@register("torch_attn::_varlen_attn_backward.default")
def attention_backward(interp: Interp, node: torch.fx.Node):
    """Varlen attention's backward reads the boundaries its forward was given."""
    bound = bind(node)
    cus = [interp.val(bound.get(k)) for k in ("cu_seq_q", "cu_seq_k")]
    proven = all(c is not None and c.kind == Kind.CU for c in cus)
    why = "the backward of varlen attention whose cu_seq_lens are not the batch's document "
    why += "boundaries"
    data = [bound.get(k) for k in ("grad_out", "query", "key", "value", "out", "lse")]
    return _doc_attention(interp, node, data, proven, why)


@register(
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
    aten._scaled_dot_product_efficient_attention_backward.default,
)
def sdpa_backward(interp: Interp, node: torch.fx.Node):
    """SDPA's backward is document-local under the mask its forward was given (a mask
    false, or ``-inf``, across documents)."""
    bound = bind(node)
    mask = bound.get("attn_mask", bound.get("attn_bias"))
    why = "the backward of attention without a document mask"
    keys = ("grad_out", "grad_out_", "query", "key", "value", "out", "logsumexp")
    data = [bound.get(k) for k in keys if bound.get(k) is not None] + [mask]
    return _doc_attention(interp, node, data, separates(interp, mask), why)


@register(aten.native_layer_norm_backward.default, aten._fused_rms_norm_backward.default)
def norm_backward(interp: Interp, node: torch.fx.Node):
    """A norm's backward: the input's gradient reduces over the normalised (trailing)
    dims as the forward did; the weight's and bias's gradients sum every token."""
    bound = bind(node)
    grad_in = _out_toks(interp, node, 0)
    normalised = len(bound["normalized_shape"])
    tensors = [interp.val(a) for a in node.all_input_nodes]
    if any(t is not None for t in grad_in[len(grad_in) - normalised :]):
        return _each(node, interp.leak(node, "normalises over the token dimension"))
    rows = Val(grad_in, **carry(tensors))
    summed = _summed(interp, node, tensors, "a norm's weight gradient")
    return (rows, *(summed for _ in node.meta["val"][1:]))


@register(aten.embedding_dense_backward.default)
def embedding_backward(interp: Interp, node: torch.fx.Node) -> Val:
    """The embedding's gradient: every token's gradient added into its token's row."""
    bound = bind(node)
    tensors = [interp.val(a) for a in node.all_input_nodes]
    if bound.get("scale_grad_by_freq"):
        why = "scales each embedding row's gradient by how often its token occurs in the "
        why += "whole packed row (scale_grad_by_freq)"
        return interp.leak(node, why, _out_toks(interp, node))
    return _summed(interp, node, tensors, "the embedding's gradient")


@register(aten._softmax_backward_data.default, aten._log_softmax_backward_data.default)
def softmax_backward(interp: Interp, node: torch.fx.Node) -> Val:
    """Over a feature dim token-wise; over a token dim document-local only when the
    forward's result is zero across documents (its document mask)."""
    grad, out = interp.val(node.args[0]), interp.val(node.args[1])
    toks = _out_toks(interp, node)
    dim = norm_dim(node.args[2], len(toks))
    vals = [grad, out]
    if toks[dim] is None:
        return Val(toks, **carry(vals))
    if (earlier := interp.passed_on(node, vals)) is not None:
        return earlier
    g = out.guard if out is not None else None
    if g is not None and g.fill == Fill.ZERO and dim in (g.row, g.col) and out.dep <= Dep.DOC:
        return Val(toks, **{**carry(vals), "dep": Dep.DOC}, guard=g)
    return interp.leak(node, "the backward of a softmax over the token dimension without a "
                       "document mask")  # fmt: skip


@register(
    aten.sigmoid_backward.default,
    aten.tanh_backward.default,
    aten.gelu_backward.default,
    aten.silu_backward.default,
    aten.threshold_backward.default,
    aten.hardtanh_backward.default,
    aten.elu_backward.default,
    aten.leaky_relu_backward.default,
    aten.softplus_backward.default,
    aten.mish_backward.default,
    aten.hardswish_backward.default,
    aten.hardsigmoid_backward.default,
    aten.native_dropout_backward.default,
)
def elementwise_backward(interp: Interp, node: torch.fx.Node) -> Val:
    """An activation's (or dropout's) backward: element ``x`` of the gradient reads
    element ``x`` of the incoming gradient and of the forward's values."""
    return pointwise(interp, node)


def _summed(interp: Interp, node: torch.fx.Node, tensors: list, what: str) -> Val:
    """A plain sum of every token's contribution (no token dim left): a leak origin the
    backward proof admits where it is a parameter's gradient."""
    if (earlier := interp.passed_on(node, tensors)) is not None:
        return earlier.with_(toks=(None,) * len(_out_toks(interp, node, _first_index(node))))
    interp.sums.add(node)
    toks = _out_toks(interp, node, _first_index(node))
    return interp.leak(node, f"{what} sums over the token dimension", toks, inputs=tensors)


def _first_index(node: torch.fx.Node) -> int | None:
    return 1 if isinstance(node.meta.get("val"), tuple | list) else None


def _each(node: torch.fx.Node, val: Val):
    return tuple(val for _ in node.meta["val"])
