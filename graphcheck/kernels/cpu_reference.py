"""An exact CPU reference for ``torch.nn.attention.varlen.varlen_attn``, for the gate.

``varlen_attn`` calls ``torch_attn::_varlen_attn``, whose only implementation
dispatches to flash attention: there is no CPU kernel. :func:`cpu_kernels`
registers one for the duration of a ``with`` block (a ``torch.library.Library``
``IMPL`` handle on the CPU key, destroyed on exit, so torch's own behaviour is
back afterwards; nested blocks share one registration).

The reference honours the op's arguments the way flash attention reads them:
``scale`` (default ``head_dim ** -0.5``), ``window_size = (left, right)`` with
-1 for unbounded, ``is_causal`` (``right = 0``, aligned bottom-right when a
document has more keys than queries) and ``enable_gqa`` (each group of query
heads shares a key/value head). It computes **each document on its own** (fp32
scores, softmax and weighted sum, rounded once to the input dtype), so a
document gives the same bytes whether it is packed with others or run alone:
the reference is itself a document-isolation oracle. A query row with no key in
its window gets zeros and a ``-inf`` log-sum-exp, as in flash attention.

The out variant ``torch_attn::_varlen_attn_out`` is covered too, and so is the
backward ``torch_attn::_varlen_attn_backward`` (``graphcheck gate --train``):
the closed-form attention gradients, per document in fp32, GQA gradients
summed over each group of query heads. The
``graphcheck::`` stand-in ops already have per-document eager implementations
(:mod:`graphcheck.kernels.custom_ops`) and need nothing here.

>>> import torch
>>> from torch.nn.attention.varlen import varlen_attn
>>> q = torch.randn(7, 4, 8, dtype=torch.bfloat16)
>>> kv = torch.randn(7, 2, 8, dtype=torch.bfloat16)
>>> cu, one = torch.tensor([0, 3, 7]).int(), torch.tensor([0, 4]).int()
>>> with cpu_kernels():
...     packed = varlen_attn(q, kv, kv, cu, cu, 4, 4, window_size=(2, 0), enable_gqa=True)
...     alone = varlen_attn(q[3:], kv[3:], kv[3:], one, one, 4, 4, window_size=(2, 0),
...                         enable_gqa=True)
>>> torch.equal(packed[3:], alone)
True
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator

import torch

__all__ = ["cpu_kernels", "varlen_attention", "varlen_attention_backward"]

_LOCK = threading.Lock()
_ACTIVE: list = []  # [Library handle, depth] while a block is open


def _bounds(cu: torch.Tensor) -> list[tuple[int, int]]:
    return list(itertools.pairwise(int(x) for x in cu.tolist()))


def _allowed(lq: int, lk: int, left: int, right: int) -> torch.Tensor:
    """``[lq, lk]`` mask of the keys each query may read (bottom-right aligned)."""
    i = torch.arange(lq)[:, None] + (lk - lq)
    j = torch.arange(lk)[None, :]
    allowed = torch.ones(lq, lk, dtype=torch.bool)
    if left >= 0:
        allowed &= j >= i - left
    if right >= 0:
        allowed &= j <= i + right
    return allowed


def _document(q, k, v, scale: float, allowed: torch.Tensor):
    """One document: q ``[Lq, H, D]``, k/v ``[Lk, H, D(v)]`` -> (out ``[Lq, H, Dv]`` fp32,
    lse ``[H, Lq]``)."""
    q, k, v = (x.float().transpose(0, 1).contiguous() for x in (q, k, v))
    scores = (q @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.softmax(scores, dim=-1)
    probs = torch.where(allowed.any(-1)[:, None], probs, torch.zeros_like(probs))
    return (probs @ v).transpose(0, 1), lse


def varlen_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seq_q: torch.Tensor,
    cu_seq_k: torch.Tensor | None,
    max_q: int,
    max_k: int,
    is_causal: bool = False,
    scale: float | None = None,
    window_size: list[int] | None = None,
    enable_gqa: bool = False,
    seqused_k: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    num_splits: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``torch_attn::_varlen_attn`` on CPU: (out ``[T, H, Dv]``, lse ``[H, T]`` fp32,
    rng_state ``[2]`` uint64)."""
    if seqused_k is not None or block_table is not None:
        raise NotImplementedError("the CPU varlen reference has no paged KV cache")
    heads, kv_heads = query.shape[1], key.shape[1]
    if heads % kv_heads or (heads != kv_heads and not enable_gqa):
        raise ValueError(f"{heads} query heads cannot share {kv_heads} key/value heads")
    groups = heads // kv_heads
    left, right = window_size if window_size is not None else (-1, -1)
    right = 0 if is_causal else right
    scale = scale if scale is not None else query.shape[-1] ** -0.5
    out = query.new_zeros(query.shape[0], heads, value.shape[-1])
    lse = torch.full((heads, query.shape[0]), float("-inf"))
    cu_k = cu_seq_k if cu_seq_k is not None else cu_seq_q
    for (qs, qe), (ks, ke) in zip(_bounds(cu_seq_q), _bounds(cu_k), strict=True):
        if qe == qs:
            continue
        k = key[ks:ke].repeat_interleave(groups, dim=1)
        v = value[ks:ke].repeat_interleave(groups, dim=1)
        allowed = _allowed(qe - qs, ke - ks, left, right)
        piece, piece_lse = _document(query[qs:qe], k, v, scale, allowed)
        out[qs:qe] = piece.to(out.dtype)
        lse[:, qs:qe] = piece_lse
    return out, lse, torch.zeros(2, dtype=torch.uint64)


def _document_grads(q, k, v, dout, scale: float, allowed: torch.Tensor, groups: int):
    """Gradients of one document's attention: (dq ``[Lq, H, D]``, dk ``[Lk, Hk, D]``,
    dv ``[Lk, Hk, Dv]``) in fp32."""
    q, dout = (x.float().transpose(0, 1) for x in (q, dout))
    k, v = (x.float().repeat_interleave(groups, dim=1).transpose(0, 1) for x in (k, v))
    scores = ((q @ k.transpose(-1, -2)) * scale).masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    probs = torch.where(allowed.any(-1)[:, None], probs, torch.zeros_like(probs))
    dv = probs.transpose(-1, -2) @ dout
    dp = dout @ v.transpose(-1, -2)
    ds = probs * (dp - (dp * probs).sum(-1, keepdim=True))
    dq = (ds @ k) * scale
    dk = (ds.transpose(-1, -2) @ q) * scale

    def fold(grad: torch.Tensor) -> torch.Tensor:
        return grad.transpose(0, 1).unflatten(1, (-1, groups)).sum(2)

    return dq.transpose(0, 1), fold(dk), fold(dv)


def varlen_attention_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    cu_seq_q: torch.Tensor,
    cu_seq_k: torch.Tensor,
    max_q: int,
    max_k: int,
    is_causal: bool,
    rng_state: torch.Tensor,
    scale: float | None = None,
    window_size: list[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``torch_attn::_varlen_attn_backward`` on CPU: (dq, dk, dv) shaped like q, k, v."""
    groups = query.shape[1] // key.shape[1]
    left, right = window_size if window_size is not None else (-1, -1)
    right = 0 if is_causal else right
    scale = scale if scale is not None else query.shape[-1] ** -0.5
    grads = tuple(torch.zeros_like(x) for x in (query, key, value))
    for (qs, qe), (ks, ke) in zip(_bounds(cu_seq_q), _bounds(cu_seq_k), strict=True):
        if qe == qs:
            continue
        allowed = _allowed(qe - qs, ke - ks, left, right)
        pieces = _document_grads(
            query[qs:qe], key[ks:ke], value[ks:ke], grad_out[qs:qe], scale, allowed, groups
        )
        spans = ((qs, qe), (ks, ke), (ks, ke))
        for grad, piece, (start, end) in zip(grads, pieces, spans, strict=True):
            grad[start:end] = piece.to(grad.dtype)
    return grads


def _varlen_attention_out(out: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    result, lse, _ = varlen_attention(*args, **kwargs)
    out.copy_(result)
    return lse


@contextlib.contextmanager
def cpu_kernels() -> Iterator[None]:
    """Register the CPU reference for ``torch_attn::_varlen_attn(_out)`` inside the block."""
    with _LOCK:
        if not _ACTIVE:
            library = torch.library.Library("torch_attn", "IMPL")
            library.impl("_varlen_attn", varlen_attention, "CPU")
            library.impl("_varlen_attn_out", _varlen_attention_out, "CPU")
            library.impl("_varlen_attn_backward", varlen_attention_backward, "CPU")
            _ACTIVE[:] = [library, 0]
        _ACTIVE[1] += 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE[1] -= 1
            if _ACTIVE[1] == 0:
                _ACTIVE[0]._destroy()
                _ACTIVE.clear()
