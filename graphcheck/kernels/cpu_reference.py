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

FlexAttention's eager CPU kernel applies the ``mask_mod`` to every pair and reads none
of the ``BlockMask``'s block tables, where the GPU kernels attend a *full* block whole
without the mask_mod. Inside :func:`cpu_kernels` the ``flex_attention`` operator runs
:func:`flex_blocks` instead: the pairs of the listed partial blocks where the mask_mod
is true, every pair of the listed full blocks, no other, so a ``BlockMask`` whose full
blocks hold pairs its mask_mod rejects shows in the bytes as it does on a GPU. Code the
model wraps in ``torch.compile`` (torchtitan compiles ``flex_attention`` and
``create_block_mask``) runs eagerly inside the block (``torch.compiler.set_stance(
"force_eager")``), so the references run in place of kernels compiled for the CPU.

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

__all__ = ["cpu_kernels", "flex_blocks", "varlen_attention", "varlen_attention_backward"]

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


def _dense_blocks(num, idx, shape, sizes) -> torch.Tensor:
    """The ``[B, H, Q, KV]`` pairs of the blocks ``idx[..., i, :num[..., i]]`` lists."""
    rows, cols = idx.shape[-2], idx.shape[-1]
    listed = torch.arange(cols, device=idx.device) < num[..., None]
    where = torch.where(listed, idx.long(), cols)
    blocks = torch.zeros(*idx.shape[:-1], cols + 2, dtype=torch.bool, device=idx.device)
    blocks.scatter_(-1, where, True)
    blocks[..., cols:] = False  # the dump column, and the column of keys past the table
    blocks = torch.cat([blocks, torch.zeros_like(blocks[..., :1, :])], dim=-2)
    q_block = (torch.arange(shape[0], device=idx.device) // sizes[0]).clamp(max=rows)
    kv_block = (torch.arange(shape[1], device=idx.device) // sizes[1]).clamp(max=cols + 1)
    return blocks[..., q_block[:, None], kv_block[None, :]]


def flex_blocks(query, key, value, score_mod, block_mask, scale, kernel_options,
                score_mod_other_buffers=(), mask_mod_other_buffers=()):  # fmt: skip
    """``flex_attention`` as the block-sparse kernels compute it: torch's eager kernel
    on the mask ``(partial blocks and mask_mod) or full blocks``."""
    from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
    from torch._higher_order_ops.flex_attention import sdpa_dense
    from torch.nn.attention.flex_attention import _vmap_for_bhqkv

    shape, sizes = (query.shape[-2], key.shape[-2]), (block_mask[-3], block_mask[-2])
    batch, heads = query.shape[0], query.shape[1]
    mask_mod = _vmap_for_bhqkv(block_mask[-1], prefix=(), suffix=(None,) * len(
        mask_mod_other_buffers))  # fmt: skip
    ranges = [torch.arange(n, device=query.device) for n in (batch, heads, *shape)]
    with TransformGetItemToIndex():
        applied = mask_mod(*ranges, *mask_mod_other_buffers)
    allowed = _dense_blocks(block_mask[2], block_mask[3], shape, sizes) & applied
    if block_mask[4] is not None:
        allowed = allowed | _dense_blocks(block_mask[4], block_mask[5], shape, sizes)
    allowed = allowed.expand(batch, heads, *shape).contiguous()
    tables = (*block_mask[:-1], _read_allowed)
    return sdpa_dense(query, key, value, score_mod, tables, scale, kernel_options,
                      score_mod_other_buffers, (allowed,))  # fmt: skip


def _read_allowed(b, h, q, kv, allowed):
    """A ``mask_mod`` reading the dense mask of the block tables."""
    return allowed[b, h, q, kv]


def _swap_flex(kernel) -> object:
    """Install ``kernel`` as ``flex_attention``'s dense kernel; the one it replaces."""
    from torch._C import DispatchKey
    from torch._higher_order_ops.flex_attention import flex_attention

    key = DispatchKey.CompositeExplicitAutograd
    previous = flex_attention.py_kernels[key]
    flex_attention.py_kernels[key] = kernel
    flex_attention._dispatch_cache.clear()
    return previous


@contextlib.contextmanager
def cpu_kernels() -> Iterator[None]:
    """Register the CPU reference for ``torch_attn::_varlen_attn(_out)`` and the
    block-sparse ``flex_attention`` inside the block."""
    with _LOCK:
        if not _ACTIVE:
            library = torch.library.Library("torch_attn", "IMPL")
            library.impl("_varlen_attn", varlen_attention, "CPU")
            library.impl("_varlen_attn_out", _varlen_attention_out, "CPU")
            library.impl("_varlen_attn_backward", varlen_attention_backward, "CPU")
            _ACTIVE[:] = [library, 0, _swap_flex(flex_blocks)]
        _ACTIVE[1] += 1
    try:
        with torch.compiler.set_stance("force_eager"):
            yield
    finally:
        with _LOCK:
            _ACTIVE[1] -= 1
            if _ACTIVE[1] == 0:
                _ACTIVE[0]._destroy()
                _swap_flex(_ACTIVE[2])
                _ACTIVE.clear()
