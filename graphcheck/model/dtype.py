"""The dtype a model is built in (``--dtype``), and ``Module.to()`` on fake weights.

``bfloat16`` (the default) calls the factory with bf16 as the default dtype. ``float32``
calls it with fp32 as the default dtype, the dtype a model written for fp32 builds in,
then casts to bf16 what loading it for bf16 casts: every fp32 parameter and buffer
except

* the model's **declared fp32 carve-outs**: the transformers class attribute
  ``_keep_in_fp32_modules_strict`` (patterns searched in the tensor's name, ``*`` any
  text, as transformers matches them; ``_keep_in_fp32_modules`` applies to fp16 loading
  only, so a bf16 build casts those), and the ``"fp32_params"`` globs of
  ``get_pp_module_config()`` (``fnmatch`` over parameter and buffer names);
* the ``--allow-fp32`` globs the user passed (the built-in ``*.A_log``, ``*.dt_bias`` are
  only allowed by GC501, not kept);
* tensors the model's code creates in fp32 whatever the default dtype
  (``dtype=torch.float32``): fp32 in a bf16-default build too, they keep their dtype, as
  a bf16 loader keeps a parameter's own dtype, and GC501 reports such a parameter
  unless it is declared or allowed.

The fake build therefore runs the factory twice (bf16 default first, for the names of
the tensors it pins to fp32). A :class:`DtypePlan` records what is kept, so a real build
(the gate) repeats the same cast without building twice. Tensors are replaced in place
(``module._parameters[name] = nn.Parameter(p.to(bf16), requires_grad=...)``), storage
shared by several names stays shared; ``Module.to()`` is never called.

A factory that calls ``model.to(torch.bfloat16)`` itself failed on fake weights:
``nn.Module._apply`` swaps every fake parameter with its converted copy
(``torch.utils.swap_tensors``), which refuses a tensor that has a weak reference, and
the fake mode's converter keeps one to every tensor it makes. :func:`fake_conversions`
makes ``.to()``, ``.float()``, ``.bfloat16()`` of fake parameters replace them instead.

>>> build_dtype("float32"), BuildDtype.BFLOAT16.torch
(<BuildDtype.FLOAT32: 'float32'>, torch.bfloat16)
>>> m = nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2))
>>> cast_to_bf16(m, keep={"1.weight"})
['0.bias', '0.weight', '1.bias']
>>> m[0].weight.dtype, m[1].weight.dtype
(torch.bfloat16, torch.float32)
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor

from graphcheck.errors import ModelLoadError
from graphcheck.model.modes import choice
from graphcheck.model.values import shadow_values

__all__ = [
    "BuildDtype",
    "DtypePlan",
    "build_dtype",
    "build_in",
    "cast_to_bf16",
    "declared_fp32",
    "fake_conversions",
    "fp32_names",
]

FP32_PARAMS = "fp32_params"  # the get_pp_module_config() key of declared fp32 globs


class BuildDtype(StrEnum):
    """The default dtype the factory runs under."""

    BFLOAT16 = "bfloat16"
    FLOAT32 = "float32"

    @property
    def torch(self) -> torch.dtype:
        return getattr(torch, self.value)


def build_dtype(value: BuildDtype | str) -> BuildDtype:
    """``value`` as a :class:`BuildDtype`; a :class:`UsageError` naming the choices."""
    return choice(BuildDtype, value, "build dtype")


@dataclass(frozen=True)
class DtypePlan:
    """How a model was built: its :class:`BuildDtype`, the fp32 tensors kept fp32 (by
    name; every other fp32 parameter and buffer was cast to bf16) and those the model
    declares fp32 (GC501 allows them)."""

    dtype: BuildDtype = BuildDtype.BFLOAT16
    keep: frozenset[str] = frozenset()
    declared: tuple[str, ...] = ()

    def apply(self, model: nn.Module, names: Callable[[str], str] = str) -> nn.Module:
        """Cast ``model`` (built under :attr:`dtype`) as the plan says; ``names`` maps its
        tensor names to the planned model's (a stage's names to the uncut model's)."""
        if self.dtype is BuildDtype.FLOAT32:
            cast_to_bf16(model, {n for n in _tensor_names(model) if names(n) in self.keep})
        return model


def build_in(
    build: Callable[[torch.dtype], nn.Module],
    dtype: BuildDtype | str,
    allow_fp32: Sequence[str] = (),
) -> tuple[nn.Module, DtypePlan]:
    """``build(default_dtype)`` for :class:`BuildDtype` ``dtype`` and its plan; for
    ``float32`` cast as the module docstring says."""
    dtype = build_dtype(dtype)
    if dtype is BuildDtype.BFLOAT16:
        return build(torch.bfloat16), DtypePlan()
    model = build(torch.float32)
    pinned = fp32_names(build(torch.bfloat16))  # created fp32 by the model's own code
    declared = declared_fp32(model)
    allowed = {n for n in _tensor_names(model) if any(fnmatchcase(n, g) for g in allow_fp32)}
    plan = DtypePlan(dtype, frozenset(pinned | set(declared) | allowed), tuple(declared))
    return plan.apply(model), plan


def _tensor_names(model: nn.Module) -> list[str]:
    names = [n for n, _ in model.named_parameters(remove_duplicate=False)]
    return names + [n for n, _ in model.named_buffers(remove_duplicate=False)]


def fp32_names(model: nn.Module) -> set[str]:
    """Names of ``model``'s fp32 parameters and buffers."""
    tensors = [*model.named_parameters(remove_duplicate=False)]
    tensors += model.named_buffers(remove_duplicate=False)
    return {name for name, t in tensors if t.dtype == torch.float32}


def declared_fp32(model: nn.Module) -> list[str]:
    """Names of the floating parameters and buffers ``model`` declares fp32: matched by a
    ``_keep_in_fp32_modules_strict`` pattern of any of its modules or by a
    ``get_pp_module_config()["fp32_params"]`` glob."""
    patterns: set[str] = set()
    for module in model.modules():
        patterns |= set(getattr(module, "_keep_in_fp32_modules_strict", None) or ())
    regex = _hf_patterns(sorted(patterns))
    globs = _declared_globs(model)
    return [
        name
        for name in _tensor_names(model)
        if (regex is not None and regex.search(name)) or any(fnmatchcase(name, g) for g in globs)
    ]


def _hf_patterns(patterns: list[str]) -> re.Pattern | None:
    """transformers' matching of keep-in-fp32 patterns: ``*`` is any text, searched."""
    if not patterns:
        return None
    try:
        return re.compile("|".join(f"(?:{p.replace('*', '.*')})" for p in patterns))
    except re.error as err:
        raise ModelLoadError(f"_keep_in_fp32_modules_strict pattern is invalid: {err}") from None


def _declared_globs(model: nn.Module) -> tuple[str, ...]:
    method = getattr(model, "get_pp_module_config", None)
    config = method() if callable(method) else None
    globs = config.get(FP32_PARAMS, ()) if isinstance(config, dict) else ()
    globs = (globs,) if isinstance(globs, str) else tuple(globs or ())
    if not all(isinstance(g, str) for g in globs):
        raise ModelLoadError(
            f'get_pp_module_config()["{FP32_PARAMS}"] must be a list of parameter-name '
            'globs, e.g. ["*.e_score_correction_bias"]'
        )
    return globs


def cast_to_bf16(model: nn.Module, keep: Collection[str] = ()) -> list[str]:
    """Replace every fp32 parameter and buffer of ``model`` whose names are all outside
    ``keep`` with a bf16 copy (a parameter stays a parameter with its ``requires_grad``;
    tensors shared by several names stay shared); the names cast, sorted."""
    by_id: dict[int, list[str]] = {}
    for name, tensor in [*model.named_parameters(remove_duplicate=False),
                         *model.named_buffers(remove_duplicate=False)]:  # fmt: skip
        if tensor.dtype == torch.float32:
            by_id.setdefault(id(tensor), []).append(name)
    cast = {i for i, names in by_id.items() if not set(names) & set(keep)}
    memo: dict[int, torch.Tensor] = {}
    for module in model.modules():
        for slots in (module._parameters, module._buffers):
            for key, tensor in slots.items():
                if tensor is not None and id(tensor) in cast:
                    slots[key] = memo.setdefault(id(tensor), _bf16(tensor))
    return sorted(name for i in cast for name in by_id[i])


def _bf16(tensor: torch.Tensor) -> torch.Tensor:
    with torch.no_grad(), shadow_values():  # a buffer's value is cast with it
        value = tensor.detach().to(torch.bfloat16)
    if isinstance(tensor, nn.Parameter):
        return nn.Parameter(value, requires_grad=tensor.requires_grad)
    return value


class _Replacing:
    """``nn.Module._apply`` for modules holding fake parameters: each parameter replaced
    by a new one holding ``fn(param)`` (one replacement per tensor in one outermost call,
    so tied parameters stay tied), buffers as ``_apply`` sets them."""

    def __init__(self, original) -> None:
        self.original = original
        self.depth = 0
        self.memo: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, module: nn.Module, fn, recurse: bool = True):
        self.depth += 1
        try:
            if not any(isinstance(p, FakeTensor) for p in module._parameters.values()):
                return self.original(module, fn, recurse)
            if recurse:
                for child in module.children():
                    child._apply(fn)
            for slots in (module._parameters, module._buffers):
                for key, tensor in slots.items():
                    if tensor is not None:
                        slots[key] = self._converted(tensor, fn)
        finally:
            self.depth -= 1
            if self.depth == 0:
                self.memo.clear()
        return module

    def _converted(self, tensor: torch.Tensor, fn) -> torch.Tensor:
        if id(tensor) not in self.memo:
            with torch.no_grad():
                value = fn(tensor)
            if isinstance(tensor, nn.Parameter) and value is not tensor:
                value = nn.Parameter(value.detach(), requires_grad=tensor.requires_grad)
            self.memo[id(tensor)] = (tensor, value)  # the old tensor kept: its id stays its own
        return self.memo[id(tensor)][1]


@contextlib.contextmanager
def fake_conversions() -> Iterator[None]:
    """Inside the block, ``Module.to()`` (and ``.float()``, ``.bfloat16()``, ...) on a
    module with fake parameters replaces them instead of swapping them in place."""
    original = nn.Module._apply
    replacing = _Replacing(original)

    def _apply(module, fn, recurse=True):
        return replacing(module, fn, recurse)

    nn.Module._apply = _apply
    try:
        yield
    finally:
        nn.Module._apply = original
