"""Built-in stand-ins for Liger's fused per-token kernels (``liger_kernel.ops``).

Liger's ``torch.autograd.Function`` classes (RMSNorm, fused add + RMSNorm, LayerNorm,
rotary embedding, SwiGLU and GEGLU products) launch Triton kernels, which neither run
on a CPU nor export. Each stand-in replaces the class's ``apply`` with the same
computation in torch ops, row by row as the kernel computes it: every argument the
model passes is honoured (weight, offset, epsilon, casting mode, multipliers, the
rotary width), and an argument the stand-in does not implement raises, so the model
is never proven with a value dropped. The stand-ins export to aten ops that the op
table proves like any other code: nothing about them is trusted. Their forward and
backward match the transformers modules Liger replaces, bitwise on CPU in the modes
those modules compute (``tests/kernels/test_liger.py``).

A stand-in applies only when the model's code has imported Liger: a model that never
imports ``liger_kernel`` is unchanged. The report lists the stand-ins applied.

>>> x = torch.ones(2, 4)
>>> rms_norm(x, torch.full((4,), 2.0), 0.0).tolist()[0]
[2.0, 2.0, 2.0, 2.0]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "STAND_INS",
    "fused_add_rms_norm",
    "fused_gate_up_silu_mul",
    "gelu_mul",
    "layer_norm",
    "rms_norm",
    "rope",
    "silu_mul",
]

_CASTING = ("llama", "gemma", "none")


def rms_norm(X, W, eps, offset=0.0, casting_mode="llama", in_place=True, row_mode=None):
    """``LigerRMSNormFunction.apply``: ``y = x / rms(x) * (offset + w)`` over the last
    dim. ``llama`` computes the inverse RMS in fp32 and scales in the input's dtype,
    ``gemma`` computes everything in fp32, ``none`` in the input's dtype; the output
    has the input's dtype. ``in_place`` and ``row_mode`` choose how the kernel runs,
    not what it computes."""
    mode = _casting(casting_mode)
    dtype = X.dtype
    x = X.float() if mode != "none" else X
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    y = x * rstd
    if W is None:
        return y.to(dtype)
    if mode == "llama":
        return (y.to(dtype) * (offset + W)).to(dtype)
    if mode == "gemma":
        return (y * (offset + W.float())).to(dtype)
    return y * (offset + W)


def fused_add_rms_norm(X, R, W, eps, offset=0.0, casting_mode="llama", in_place=False):
    """``LigerFusedAddRMSNormFunction.apply``: ``s = x + r`` (the residual stream, in
    the input's dtype) and ``rms_norm(s)``; returns ``(y, s)``."""
    S = X + R
    return rms_norm(S, W, eps, offset, casting_mode), S


def layer_norm(X, W, B, eps):
    """``LigerLayerNormFunction.apply``: LayerNorm over the last dim in fp32, cast back."""
    y = F.layer_norm(X.float(), X.shape[-1:], None, None, eps)
    if W is not None:
        y = y * W.float()
    if B is not None:
        y = y + B.float()
    return y.to(X.dtype)


def rope(q, k, cos, sin, position_ids=None, unsqueeze_dim=1, rotary_dim=None):
    """``LigerRopeFunction.apply``: the rotate-half rotary embedding of ``q`` and ``k``
    (``[batch, heads, seq, head_dim]``) by ``cos``/``sin`` rows indexed by the token's
    row, over the first ``rotary_dim`` dims (the width of ``cos`` by default); the rest
    pass through. ``position_ids`` is not read (``cos`` already holds each token's
    angle), as in the kernel."""
    cos, sin = _rows(cos, unsqueeze_dim), _rows(sin, unsqueeze_dim)
    head_dim = q.shape[-1]
    width = min(cos.shape[-1], head_dim) if rotary_dim is None else rotary_dim
    if width % 2 or not 0 < width <= head_dim or cos.shape[-1] < width // 2:
        raise ValueError(f"rotary_dim must be even and in (0, head_dim={head_dim}]; got {width}")
    half = width // 2
    c, s = cos[..., :half].unsqueeze(1), sin[..., :half].unsqueeze(1)
    return _rotated(q, c, s, width), _rotated(k, c, s, width)


def silu_mul(a, b, gate_multiplier: float = 1.0, down_multiplier: float = 1.0):
    """``LigerSiLUMulFunction.apply``: ``silu(a * gate) * b * down``, the SiLU in fp32
    cast to ``b``'s dtype before the product."""
    c = F.silu(a.float() * float(gate_multiplier)).to(b.dtype) * b
    return c * float(down_multiplier) if float(down_multiplier) != 1.0 else c


def fused_gate_up_silu_mul(y, in_place=False):
    """``LigerFusedGateUpSiLUMulFunction.apply``: ``silu_mul(*y.chunk(2, -1))``."""
    a, b = y.chunk(2, dim=-1)
    return silu_mul(a, b)


def gelu_mul(a, b):
    """``LigerGELUMulFunction.apply``: tanh-approximated GELU of ``a`` in fp32, cast to
    ``b``'s dtype, times ``b``."""
    return F.gelu(a.float(), approximate="tanh").to(b.dtype) * b


def _casting(mode) -> str:
    if isinstance(mode, int) and 0 <= mode + 1 < len(_CASTING) + 1:
        return {-1: "none", 0: "llama", 1: "gemma"}[mode]
    if mode not in _CASTING:
        raise ValueError(f"Liger RMSNorm casting mode {mode!r} is not one of {_CASTING}")
    return mode


def _rows(table: torch.Tensor, unsqueeze_dim: int) -> torch.Tensor:
    """``cos``/``sin`` as ``[batch or 1, seq, width]``, as the kernel reads them."""
    if table.ndim == 4:
        dim = unsqueeze_dim if table.shape[unsqueeze_dim] == 1 else 1
        table = table.squeeze(dim) if table.shape[dim] == 1 else table.squeeze()
    return table.unsqueeze(0) if table.ndim == 2 else table


def _rotated(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, width: int):
    """``x`` (``[batch, heads, seq, head_dim]``) rotated over its first ``width`` dims,
    in the dtype of ``cos``, cast back to ``x``'s."""
    half = width // 2
    left, right = x[..., :half].to(cos.dtype), x[..., half:width].to(cos.dtype)
    rotated = torch.cat([left * cos - right * sin, right * cos + left * sin], dim=-1)
    return torch.cat([rotated.to(x.dtype), x[..., width:]], dim=-1)


def _targets() -> dict[str, object]:
    """``"module:Class.apply"`` -> stand-in, for each module the class is exposed from."""
    classes = {
        "rms_norm": ("LigerRMSNormFunction", rms_norm),
        "fused_add_rms_norm": ("LigerFusedAddRMSNormFunction", fused_add_rms_norm),
        "layer_norm": ("LigerLayerNormFunction", layer_norm),
        "rope": ("LigerRopeFunction", rope),
        "swiglu": ("LigerSiLUMulFunction", silu_mul),
        "geglu": ("LigerGELUMulFunction", gelu_mul),
    }
    table: dict[str, object] = {}
    for module, (name, fn) in classes.items():
        table[f"liger_kernel.ops.{module}:{name}.apply"] = fn
        table[f"liger_kernel.ops:{name}.apply"] = fn
    table["liger_kernel.ops.swiglu:LigerFusedGateUpSiLUMulFunction.apply"] = fused_gate_up_silu_mul
    return table


STAND_INS: dict[str, object] = _targets()
