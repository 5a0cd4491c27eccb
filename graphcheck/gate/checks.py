"""The gate's comparisons: staged against uncut logits and parameters after one
optimizer step. Document isolation is exact, with no tolerance, in
:mod:`graphcheck.gate.exact` (perturb, shift, gradients).

Bytes are compared with ``torch.equal`` (shape and dtype first); where they differ
the check says by how much and where the first difference is.

>>> a = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
>>> same(a, a.clone()), same(a, a.float()), relative(a * 2, a)
(True, False, 1.0)
"""

from __future__ import annotations

import torch

from graphcheck.gate.batch import PackedBatch
from graphcheck.gate.exact import token_axis
from graphcheck.results.gate import (
    ByteCheck,
    ByteStatus,
    TrainCheck,
    TrainStatus,
)

__all__ = ["abs_diff", "bytes_check", "relative", "same", "train_check"]


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal, shape and dtype included."""
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b| / max |b|`` (``inf`` for NaN)."""
    diff = (a.float() - b.float()).abs().max().item()
    scale = b.float().abs().max().item()
    value = diff / max(scale, 1e-30)
    return value if value == value else float("inf")


def abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b|`` (``inf`` for another shape or NaN)."""
    if a.shape != b.shape:
        return float("inf")
    return (a.float() - b.float()).abs().nan_to_num(float("inf")).max().item()


def bytes_check(
    staged, uncut: torch.Tensor, batch: PackedBatch, blocked, batched: bool = True
) -> ByteCheck:
    """Staged logits (or the :class:`Blocked` that stopped them) against the uncut ones;
    the first difference is located on the token axis (``batched``: the model's residual
    is ``[1, T, H]``, else ``[T, H]``; :func:`~graphcheck.gate.exact.token_axis`)."""
    if blocked is not None:
        return ByteCheck(ByteStatus.BLOCKED, blocked=blocked, message=blocked.message)
    if staged is None:
        return ByteCheck(ByteStatus.BLOCKED, message="the last stage returned nothing")
    if staged.shape != uncut.shape or staged.dtype != uncut.dtype:
        message = (
            f"staged logits {staged.dtype}{list(staged.shape)}, "
            f"uncut {uncut.dtype}{list(uncut.shape)}"
        )
        return ByteCheck(ByteStatus.DIFFER, float("inf"), None, message=message)
    if torch.equal(staged, uncut):
        return ByteCheck(ByteStatus.EQUAL)
    diff = (staged.float() - uncut.float()).abs().nan_to_num(float("inf"))
    index = (staged != uncut).nonzero()[0].tolist()
    first = None
    axis = token_axis(staged.shape, batch.tokens, batched) if staged.dim() >= 2 else None
    if axis is not None and axis < staged.dim() - 1:
        document, position = batch.locate(index[axis])
        first = {"token": index[axis], "document": document, "position": position}
        first["column"] = index[-1]
    return ByteCheck(ByteStatus.DIFFER, diff.max().item(), first, message=f"first at index {index}")


def train_check(uncut: dict, results: dict[int, dict], after: torch.Tensor) -> TrainCheck:
    """Every parameter (global name) after one step, and the logits of a second forward."""
    staged: dict[str, list[torch.Tensor]] = {}
    for result in results.values():
        trained = set(result["trained"])
        for name, value in result["params"].items():
            if name in trained:
                staged.setdefault(name, []).append(value)
    for result in results.values():
        for name, value in result["params"].items():
            staged.setdefault(name, [value])
    differing, worst = [], 0.0
    for name, value in uncut["params"].items():
        copies = staged.get(name, [])
        bad = [c for c in copies if not same(c, value)]
        if not copies or bad:
            differing.append(name)
            worst = max([worst, *(abs_diff(c, value) for c in bad)], default=worst)
    logits = TrainStatus.EQUAL if same(after, uncut["after"]) else TrainStatus.DIFFER
    equal = not differing and logits is TrainStatus.EQUAL
    status = TrainStatus.EQUAL if equal else TrainStatus.DIFFER
    return TrainCheck(status, len(uncut["params"]), differing, worst, logits)
