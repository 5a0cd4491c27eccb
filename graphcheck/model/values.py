"""Real values of the small tensors a model builds on fake weights.

Fake weights carry no values, so a buffer computed at construction (a rotary
``inv_freq`` whose base depends on the layer index) would compare equal to any other
buffer of its dtype and shape. :class:`ShadowValues` runs beside the fake mode while
the model is built: every op is computed as before on fake tensors, and once more on
real CPU tensors when its inputs have real values and each output holds at most
:data:`LIMIT` elements. The real result is the fake result's *shadow*, kept as long as
the fake tensor lives. Nothing the build sees changes: the fake build is the build.

What is computed is what the model's code computes: ``torch.arange``, ``pow``,
in-place writes through views (a real view shares its base's storage, as the fake one
does). A tensor derived from a larger one (a slice of a weight) has no shadow, nor has
one built outside the mode: its value is unknown (:func:`value_of` returns ``None``)
and whoever compares it must say so. A model given as a real module has real buffers:
their values are themselves.

At Llama-3.1-8B's shape only the norms' weights and the rotary table are computed for
real (about 0.5 MB); the projections are far above the limit.

>>> from graphcheck.model.load import fake_mode
>>> mode = fake_mode()
>>> with mode, shadow_values():
...     t = torch.arange(4.0) * 2
>>> value_of(t).tolist(), tensor_value(t).values
([0.0, 2.0, 4.0, 6.0], (0.0, 2.0, 4.0, 6.0))
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.weak import WeakIdKeyDictionary

__all__ = [
    "KEEP",
    "LIMIT",
    "ShadowValues",
    "TensorValue",
    "max_abs_diff",
    "shadow_values",
    "tensor_value",
    "value_of",
]

LIMIT = 1 << 20  # elements: a tensor with more is not computed for real
KEEP = 4096  # elements whose values travel with a TensorValue (for the max difference)

_SHADOWS: WeakIdKeyDictionary = WeakIdKeyDictionary()  # fake tensor -> real tensor


class _Unknown(Exception):
    """An input of the op has no real value."""


class ShadowValues(TorchDispatchMode):
    """Compute, beside the fake mode below it, the real value of every small tensor
    whose inputs have real values (see the module docstring)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        with contextlib.suppress(Exception):  # a value not computed stays unknown
            _shadow(func, args, kwargs, out)
        return out


def _shadow(func, args, kwargs, out) -> None:
    outs = [t for t in tree_flatten(out)[0] if isinstance(t, FakeTensor)]
    if not outs or any(t.numel() > LIMIT for t in outs):
        return
    try:
        real_args, real_kwargs = tree_map(_real, (args, kwargs))
    except _Unknown:
        return
    with _disable_current_modes(), torch.no_grad():
        real = func(*real_args, **real_kwargs)
    flat_out, flat_real = tree_flatten(out)[0], tree_flatten(real)[0]
    if len(flat_out) != len(flat_real):
        return
    for fake, value in zip(flat_out, flat_real, strict=True):
        if isinstance(fake, FakeTensor) and isinstance(value, torch.Tensor):
            _SHADOWS[fake] = value


def _real(value):
    if not isinstance(value, torch.Tensor):
        return value
    found = value_of(value)
    if found is None:
        raise _Unknown
    return found


@contextlib.contextmanager
def shadow_values() -> Iterator[None]:
    """Record real values of small tensors built inside (enter it inside the fake mode)."""
    with ShadowValues():
        yield


def value_of(tensor: torch.Tensor) -> torch.Tensor | None:
    """The real value of ``tensor``: itself if it is real, its shadow or the fake mode's
    constant if it is fake, ``None`` if unknown (a meta tensor, a fake one without)."""
    if isinstance(tensor, FakeTensor):
        found = _SHADOWS.get(tensor)
        return found if found is not None else tensor.constant
    if tensor.device.type == "meta":
        return None
    return tensor


@dataclass(frozen=True)
class TensorValue:
    """A tensor's value as plain data: dtype, shape and a hash of its bytes (``sha`` is
    ``None`` when the value is unknown; ``why`` then says why); its first :data:`KEEP`
    elements as floats, for the difference between two values."""

    dtype: str
    shape: tuple[int, ...]
    sha: str | None
    values: tuple[float, ...] = ()
    numel: int = 0
    why: str = ""

    @property
    def known(self) -> bool:
        return self.sha is not None

    def short(self) -> str:
        return self.sha[:12] if self.sha else "unknown"


def tensor_value(tensor: torch.Tensor) -> TensorValue:
    """The :class:`TensorValue` of ``tensor`` (fake or real)."""
    dtype = str(tensor.dtype).removeprefix("torch.")
    shape = tuple(int(d) for d in tensor.shape)
    real = value_of(tensor)
    if real is None:
        numel = tensor.numel()
        why = (
            f"{numel} elements, above the {LIMIT}-element limit of values computed for real"
            if numel > LIMIT
            else "it is computed from a tensor whose value graphcheck does not compute "
            "(a weight, or a tensor made outside the build)"
        )
        return TensorValue(dtype, shape, None, numel=numel, why=why)
    real = real.detach().cpu().contiguous()
    digest = hashlib.sha256(f"{dtype}{list(shape)}".encode())
    digest.update(real.reshape(-1).view(torch.uint8).numpy().tobytes())
    flat = torch.view_as_real(real).reshape(-1) if real.is_complex() else real.reshape(-1)
    kept = tuple(flat[:KEEP].double().tolist()) if flat.numel() <= KEEP else ()
    return TensorValue(dtype, shape, digest.hexdigest(), kept, real.numel())


def max_abs_diff(a: TensorValue, b: TensorValue) -> float | None:
    """The largest absolute difference of two values of the same shape, when both are
    kept (``None`` otherwise).

    >>> a, b = TensorValue("f", (2,), "a", (1.0, 2.0)), TensorValue("f", (2,), "b", (1.0, 2.5))
    >>> max_abs_diff(a, b)
    0.5
    """
    if not a.values or not b.values or len(a.values) != len(b.values) or a.shape != b.shape:
        return None
    return max(abs(x - y) for x, y in zip(a.values, b.values, strict=True))
