"""A transformers attention implementation that calls a real varlen kernel.

``register()`` adds ``"graphcheck_varlen"`` to ``transformers.AttentionInterface``.
Set ``config._attn_implementation = "graphcheck_varlen"`` and call the model
with ``cu_seq_lens_q/k`` and ``max_length_q/k``: transformers passes them down
to every attention layer through ``**kwargs`` (its flash-attention keyword
arguments), and no dense mask is built (the name is not in the mask
interface, so ``create_causal_mask`` returns ``None``).

Each layer's attention becomes one node consuming the document boundaries:
``torch.nn.attention.varlen.varlen_attn`` with the layer's scale and window
(a layer's ``sliding_window`` W becomes ``window_size=(W - 1, 0)``, as in
flash attention), or ``graphcheck::varlen_attention`` where the layer needs
attention sinks (``s_aux``) or logit softcapping, which ``varlen_attn`` lacks.

A model that drops the varlen keyword arguments on the way to its attention
layers gets one document spanning the whole row: the graph then shows
boundaries made from T, and GC401 reports the leak.

Attention dropout (transformers passes ``dropout=attention_dropout`` in training) is
random: neither kernel draws it, so a probability above 0 puts a dropout of that
probability on the attention output, and the program shows the random op (GC304)
instead of silently proving a deterministic program the model does not run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.varlen import varlen_attn

from graphcheck.kernels import custom_ops as ops

__all__ = ["ATTENTION", "register", "varlen_attention_forward"]

ATTENTION = "graphcheck_varlen"


def register() -> str:
    """Register the implementation with transformers (idempotent); its name."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, varlen_attention_forward)
    return ATTENTION


def varlen_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    s_aux: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """q ``[1, H, T, D]``, k/v ``[1, Hkv, T, D]`` -> ``([1, T, H, Dv], None)``."""
    q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))
    cu_q, cu_k, max_q, max_k = _boundaries(q, kwargs)
    scale = scaling if scaling is not None else q.shape[-1] ** -0.5
    causal = kwargs.get("is_causal", getattr(module, "is_causal", True))
    left = sliding_window - 1 if sliding_window else -1
    if s_aux is not None or softcap:
        out = ops.varlen_attention(
            q, k, v, cu_q, cu_k, max_q, max_k, scale, left, causal, softcap or 0.0, s_aux
        )
        return _dropped(out, dropout)[None], None
    v_dim = v.shape[-1]
    if v_dim != q.shape[-1]:  # MLA: pad v to the q/k head dim, crop the output
        v = F.pad(v, [0, q.shape[-1] - v_dim])
    out = varlen_attn(
        q,
        k,
        v,
        cu_q,
        cu_k,
        max_q,
        max_k,
        scale=scale,
        window_size=(left, 0 if causal else -1),
        enable_gqa=q.shape[1] != k.shape[1],
    )
    return _dropped(out, dropout)[None, ..., :v_dim], None


def _dropped(out: torch.Tensor, dropout: float) -> torch.Tensor:
    """``out`` with the layer's attention dropout, when it has one (see the module doc)."""
    return F.dropout(out, dropout, training=True) if dropout else out


def _boundaries(q: torch.Tensor, kwargs: dict):
    """``cu_seq_lens_q/k``, ``max_length_q/k`` from the keyword arguments, or one
    document over the whole row when the model did not pass them down."""
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is None or cu_k is None:
        total = q.shape[0]
        whole = torch.arange(2, dtype=torch.int32, device=q.device) * total
        return whole, whole, total, total
    return cu_q, cu_k, kwargs.get("max_length_q"), kwargs.get("max_length_k")
