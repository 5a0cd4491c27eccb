"""The ``graphcheck`` custom ops: fused GPU kernels as single opaque graph nodes.

Each op takes the document boundaries (``cu_seqlens``) as an argument, has a
fake implementation (shapes only, any T) and a plain eager implementation
that loops over documents, so it can be checked against a reference on small
CPU tensors. In an exported graph each op is one node whose segmentation
argument GC401 follows back to ``cu_seq_lens``.

* ``graphcheck::varlen_attention`` - varlen attention with what
  ``torch.nn.attention.varlen.varlen_attn`` lacks: attention sinks and logit
  softcapping.
* ``graphcheck::chunk_gated_delta_rule`` - the gated delta rule of linear
  attention layers (the chunked kernel of flash-linear-attention).
* ``graphcheck::causal_conv1d`` - a depthwise causal convolution over the
  token axis that restarts at every document.

>>> import torch
>>> x = torch.randn(1, 3, 5)
>>> w = torch.randn(3, 2)
>>> y = causal_conv1d(x, w, None, torch.tensor([0, 2, 5], dtype=torch.int32), None)
>>> tuple(y.shape), bool(torch.allclose(y[..., 2], x[..., 2] * w[:, 1]))
((1, 3, 5), True)
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

__all__ = [
    "causal_conv1d",
    "chunk_gated_delta_rule",
    "varlen_attention",
    "varlen_attention_backward",
]


def _bounds(cu_seqlens: torch.Tensor) -> list[tuple[int, int]]:
    cu = cu_seqlens.tolist()
    return list(itertools.pairwise(cu))


def _attend(query, key, value, cu_seq_lens_q, cu_seq_lens_k, scale, window_left, causal,
            softcap, sinks) -> torch.Tensor:  # fmt: skip
    """The varlen attention of every document alone (see :func:`varlen_attention`)."""
    out = query.new_zeros(query.shape[0], query.shape[1], value.shape[-1])
    groups = query.shape[1] // key.shape[1]
    for (qs, qe), (ks, ke) in zip(_bounds(cu_seq_lens_q), _bounds(cu_seq_lens_k), strict=True):
        q = query[qs:qe].float().transpose(0, 1)
        k = key[ks:ke].float().repeat_interleave(groups, dim=1).transpose(0, 1)
        v = value[ks:ke].float().repeat_interleave(groups, dim=1).transpose(0, 1)
        scores = q @ k.transpose(-1, -2) * scale
        if softcap:
            scores = torch.tanh(scores / softcap) * softcap
        i = torch.arange(qe - qs)[:, None] + (ke - ks) - (qe - qs)
        j = torch.arange(ke - ks)[None, :]
        allowed = (j <= i) if causal else torch.ones_like(j - i, dtype=torch.bool)
        if window_left >= 0:
            allowed &= j >= i - window_left
        scores = scores.masked_fill(~allowed, float("-inf"))
        if sinks is not None:
            sink = sinks.float()[:, None, None].expand(-1, scores.shape[1], 1)
            probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
        else:
            probs = torch.softmax(scores, dim=-1)
        out[qs:qe] = (probs @ v).transpose(0, 1).to(out.dtype)
    return out


@torch.library.custom_op("graphcheck::varlen_attention", mutates_args=())
def varlen_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seq_lens_q: torch.Tensor,
    cu_seq_lens_k: torch.Tensor,
    max_length_q: int,
    max_length_k: int,
    scale: float,
    window_left: int,
    causal: bool,
    softcap: float,
    sinks: torch.Tensor | None,
) -> torch.Tensor:
    """Attention over packed documents: q ``[T, H, D]``, k/v ``[T, Hkv, D(v)]``.

    ``window_left`` -1 means no window; ``softcap`` 0 means none; ``sinks``
    ``[H]`` adds one learned logit per head to every softmax denominator."""
    return _attend(query, key, value, cu_seq_lens_q, cu_seq_lens_k, scale, window_left,
                   causal, softcap, sinks)  # fmt: skip


@torch.library.custom_op("graphcheck::varlen_attention_backward", mutates_args=())
def varlen_attention_backward(
    grad: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seq_lens_q: torch.Tensor,
    cu_seq_lens_k: torch.Tensor,
    max_length_q: int,
    max_length_k: int,
    scale: float,
    window_left: int,
    causal: bool,
    softcap: float,
    sinks: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of :func:`varlen_attention` (query, key, value, sinks: empty when
    it has none), each document's from that document alone."""
    inputs = [t.detach().requires_grad_() for t in (query, key, value)]
    held = sinks.detach().requires_grad_() if sinks is not None else None
    with torch.enable_grad():
        out = _attend(*inputs, cu_seq_lens_q, cu_seq_lens_k, scale, window_left, causal,
                      softcap, held)  # fmt: skip
        wrt = [*inputs, *([held] if held is not None else [])]
        grads = torch.autograd.grad(out, wrt, grad, allow_unused=True)
    grads = [torch.zeros_like(w) if g is None else g for g, w in zip(grads, wrt, strict=True)]
    return (*grads[:3], grads[3] if held is not None else query.new_zeros(0))


@varlen_attention_backward.register_fake
def _(grad, query, key, value, *rest):
    sinks = rest[-1]
    tail = sinks.new_empty(sinks.shape) if sinks is not None else query.new_empty(0)
    return query.new_empty(query.shape), key.new_empty(key.shape), value.new_empty(
        value.shape), tail  # fmt: skip


def _setup(ctx, inputs, output) -> None:
    query, key, value, cu_q, cu_k, *sizes, sinks = inputs
    ctx.save_for_backward(query, key, value, cu_q, cu_k, sinks)
    ctx.sizes = sizes


def _backward(ctx, grad):
    query, key, value, cu_q, cu_k, sinks = ctx.saved_tensors
    dq, dk, dv, ds = torch.ops.graphcheck.varlen_attention_backward(
        grad, query, key, value, cu_q, cu_k, *ctx.sizes, sinks
    )
    return dq, dk, dv, None, None, None, None, None, None, None, None, (
        ds if sinks is not None else None)  # fmt: skip


@varlen_attention.register_fake
def _(query, key, value, cu_seq_lens_q, cu_seq_lens_k, max_length_q, max_length_k, *rest):
    return query.new_empty(query.shape[0], query.shape[1], value.shape[-1])


varlen_attention.register_autograd(_backward, setup_context=_setup)


@torch.library.custom_op("graphcheck::chunk_gated_delta_rule", mutates_args=())
def chunk_gated_delta_rule(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    cu_seqlens: torch.Tensor | None,
    scale: float,
    use_qk_l2norm: bool,
) -> torch.Tensor:
    """The gated delta rule over packed documents, the state reset at each one.

    q/k ``[1, T, Hk, Dk]``, v ``[1, T, Hv, Dv]``, g/beta ``[1, T, Hv]``;
    returns ``[1, T, Hv, Dv]`` in the dtype of ``query``."""
    total = query.shape[1]
    bounds = _bounds(cu_seqlens) if cu_seqlens is not None else [(0, total)]
    groups = value.shape[2] // key.shape[2]
    q, k = (x[0].float().repeat_interleave(groups, dim=1) for x in (query, key))
    if use_qk_l2norm:
        q, k = F.normalize(q, dim=-1, eps=1e-6), F.normalize(k, dim=-1, eps=1e-6)
    q = q * scale
    v, decay, rate = value[0].float(), g[0].float().exp(), beta[0].float()
    out = torch.zeros_like(v)
    for start, end in bounds:
        state = v.new_zeros(v.shape[1], k.shape[-1], v.shape[-1])
        for t in range(start, end):
            state = state * decay[t][:, None, None]
            delta = (v[t] - (state * k[t][..., None]).sum(-2)) * rate[t][:, None]
            state = state + k[t][..., None] * delta[:, None, :]
            out[t] = (state * q[t][..., None]).sum(-2)
    return out[None].to(query.dtype)


@chunk_gated_delta_rule.register_fake
def _(query, key, value, g, beta, cu_seqlens, scale, use_qk_l2norm):
    return value.new_empty(value.shape, dtype=query.dtype)


@torch.library.custom_op("graphcheck::causal_conv1d", mutates_args=())
def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
    activation: str | None,
) -> torch.Tensor:
    """Depthwise causal conv1d: x ``[1, C, T]``, weight ``[C, W]``; restarts at
    every document boundary."""
    total = x.shape[-1]
    bounds = _bounds(cu_seqlens) if cu_seqlens is not None else [(0, total)]
    out = torch.empty_like(x)
    for start, end in bounds:
        piece = F.conv1d(
            x[..., start:end].to(weight.dtype),
            weight[:, None, :],
            bias,
            padding=weight.shape[-1] - 1,
            groups=x.shape[1],
        )[..., : end - start]
        if activation in ("silu", "swish"):
            piece = F.silu(piece)
        out[..., start:end] = piece.to(x.dtype)
    return out


@causal_conv1d.register_fake
def _(x, weight, bias, cu_seqlens, activation):
    return torch.empty_like(x)
