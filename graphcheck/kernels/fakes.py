"""Shapes torch's fake kernels get wrong, corrected for export.

``torch_attn::_varlen_attn``'s fake (``torch.nn.attention.varlen``) returns an
output shaped like the query. Attention's output has the value's head dim, and
multi-head latent attention (DeepSeek V3's MLA) has a value head dim that is not
the query's: the real kernel returns ``[T, H, Dv]``, the fake ``[T, H, Dq]``, and the
export of such a model fails at the output projection. :func:`install` replaces the
fake by one that returns the value's head dim (everything else as torch's).

>>> import torch
>>> from graphcheck.model.load import fake_mode
>>> from torch.nn.attention.varlen import varlen_attn
>>> install()
>>> with fake_mode():
...     q, v = torch.empty(5, 2, 8), torch.empty(5, 2, 4)
...     cu = torch.tensor([0, 5], dtype=torch.int32)
...     tuple(varlen_attn(q, q, v, cu, cu, 5, 5).shape)
(5, 2, 4)
"""

from __future__ import annotations

__all__ = ["install"]

_INSTALLED: list = []  # torch's own fake, once replaced


def install() -> None:
    """Replace ``torch_attn::_varlen_attn``'s fake by one with the value's head dim
    (once; nothing when this torch has no such op)."""
    if _INSTALLED:
        return
    try:
        from torch.nn.attention import varlen
    except ImportError:
        return
    op = getattr(varlen, "_varlen_attn", None)
    original = getattr(op, "_abstract_fn", None)
    if original is None:
        return

    def fake(query, key, value, *args, **kwargs):
        output, *rest = original(query, key, value, *args, **kwargs)
        if value.size(-1) != query.size(-1):
            output = query.new_empty((*query.shape[:-1], value.size(-1)))
        return (output, *rest)

    op.register_fake(fake)
    _INSTALLED.append(original)
