"""Stand-ins for fused kernels, patched into a model's code only during export.

On GPU, hybrid models call fused kernels that take the document boundaries
(``cu_seqlens``); on a CPU their modeling code falls back to a torch loop that
specialises T and ignores the boundaries. A stand-in replaces the function the
modeling code calls with one that calls a ``graphcheck`` custom op
(:mod:`graphcheck.kernels.custom_ops`): the export then holds for every T and shows
the kernel as one node whose segmentation argument GC401 can follow.

A stand-in is a target and a replacement. The target is
``"package.module:attribute"`` (that module's global is replaced, if the
module is imported) or a bare ``"attribute"`` (replaced in every module that
defines one of the model's classes and has that global). The attribute may be a
method, ``"Class.method"``: the class attribute is replaced, so every instance
calls the replacement (a function taking ``self``). Patches are undone when the
export ends, also when it fails.

The built-in stand-ins cover the linear-attention layers of the transformers
families ``qwen3_next``, ``qwen3_5`` and ``qwen3_5_moe``
(``torch_chunk_gated_delta_rule``, ``causal_conv1d_fn``), and FlexAttention's
``create_block_mask`` (one partial block: the ``mask_mod`` decides every pair).

A *kernels file* (``--kernels FILE.py``) adds stand-ins. It must define
``STAND_INS``, a dict from target to replacement callable, or ``TOKEN_LOCAL``, a
list of custom ops it declares token-local (:func:`token_local`, validated by
execution); it may define its
own ``torch.library`` custom ops (any namespace but ``aten``) for the
replacements to call. Its targets are *required*: one that does not resolve
(a module that does not import, a missing class, method or global) is a
:class:`~graphcheck.errors.ModelLoadError` naming it, raised by
:func:`check_targets` before the export. The built-in stand-ins target
transformers modules a given model may not use: they are skipped where absent.
Models that already call custom ops need no stand-in.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from graphcheck.errors import ModelLoadError, UsageError, one_line
from graphcheck.kernels import custom_ops as ops
from graphcheck.kernels import liger

__all__ = [
    "BUILTIN",
    "StandIn",
    "check_targets",
    "declared_token_local",
    "load_kernels",
    "patched",
    "token_local",
]


@dataclass(frozen=True)
class StandIn:
    """Replace ``target`` (``"module:attr"``, ``"attr"``, ``"module:Class.method"``,
    ``"Class.method"``) with ``replacement``. A ``required`` target (a kernels file's)
    that does not resolve is an error; any other is skipped."""

    target: str
    replacement: Callable
    required: bool = False


def chunk_gated_delta_rule(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    chunk_size: int = 64,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    scale: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """``fla.ops.gated_delta_rule.chunk_gated_delta_rule`` for training
    (no recurrent state in or out), calling ``graphcheck::chunk_gated_delta_rule``."""
    if initial_state is not None or output_final_state:
        raise NotImplementedError("the gated-delta-rule stand-in has no recurrent state")
    scale = scale if scale is not None else query.shape[-1] ** -0.5
    out = ops.chunk_gated_delta_rule(
        query, key, value, g, beta, cu_seqlens, scale, use_qk_l2norm_in_kernel
    )
    return out, None


def causal_conv1d_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    cu_seqlens: torch.Tensor | None = None,
    **kwargs,
) -> torch.Tensor:
    """A varlen causal conv1d (``x [1, C, T]``) that restarts at every document;
    the boundaries come from ``cu_seqlens`` or the ``cu_seq_lens_q`` the model
    passes through its keyword arguments."""
    if cu_seqlens is None:
        cu_seqlens = kwargs.get("cu_seq_lens_q")
    return ops.causal_conv1d(x, weight, bias, cu_seqlens, activation)


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device="cuda", *args, **kwargs):
    """``create_block_mask`` as one partial block covering the whole score matrix (the
    block size and compile options, by position or keyword, are not needed for one block:
    torch's own ``create_block_mask(..., _compile=True)`` calls this by position):
    ``mask_mod`` is applied to every query-key pair, so the attention is the same as
    with the block-sparse mask (which only skips blocks the mask_mod rejects whole and
    skips the mask_mod on blocks it accepts whole). Counting blocks over a symbolic T
    guards T; one block does not."""
    from torch.nn.attention.flex_attention import BlockMask

    batch, heads = B or 1, H or 1
    ones = torch.ones(batch, heads, 1, dtype=torch.int32, device=device)
    zeros = torch.zeros(batch, heads, 1, 1, dtype=torch.int32, device=device)
    return BlockMask.from_kv_blocks(
        ones, zeros, BLOCK_SIZE=(_ONE_BLOCK, _ONE_BLOCK), mask_mod=mask_mod,
        seq_lengths=(Q_LEN, KV_LEN), compute_q_blocks=False,
    )  # fmt: skip


_ONE_BLOCK = 1 << 20  # longer than any packed row
_HYBRIDS = (
    "transformers.models.qwen3_next.modeling_qwen3_next",
    "transformers.models.qwen3_5.modeling_qwen3_5",
    "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe",
)
_HYBRID_STAND_INS = tuple(
    StandIn(f"{module}:{attr}", fn)
    for module in _HYBRIDS
    for attr, fn in (
        ("torch_chunk_gated_delta_rule", chunk_gated_delta_rule),
        ("causal_conv1d_fn", causal_conv1d_fn),
    )
)
BUILTIN: tuple[StandIn, ...] = (
    *_HYBRID_STAND_INS,
    StandIn("torch.nn.attention.flex_attention:create_block_mask", create_block_mask),
    StandIn("create_block_mask", create_block_mask),
    *(StandIn(target, fn) for target, fn in liger.STAND_INS.items()),
)


def load_kernels(path: str) -> tuple[StandIn, ...]:
    """The stand-ins a kernels file declares in ``STAND_INS``."""
    file = Path(path)
    if not file.is_file():
        raise ModelLoadError(f"kernels file not found: {path}")
    module = _import_once(file)
    declared = token_local(path)
    table = getattr(module, "STAND_INS", {} if declared else None)
    if not isinstance(table, Mapping) or not all(
        isinstance(k, str) and callable(v) for k, v in table.items()
    ):
        raise ModelLoadError(
            f"{path} must define STAND_INS, a dict of 'module:attr' -> callable (or "
            "TOKEN_LOCAL, a list of 'namespace::op' names)"
        )
    return tuple(StandIn(target, fn, required=True) for target, fn in table.items())


def token_local(path: str | None) -> frozenset[str]:
    """The custom ops a kernels file declares token-local (``TOKEN_LOCAL``: a list of
    ``"namespace::op"`` names): fused per-token kernels (an RMSNorm, a rotary
    embedding, an activation) that take no document structure because they need none.
    graphcheck holds each to it by executing it (:mod:`graphcheck.kernels.validation`)."""
    if not path:
        return frozenset()
    file = Path(path)
    if not file.is_file():
        raise ModelLoadError(f"kernels file not found: {path}")
    declared = getattr(_import_once(file), "TOKEN_LOCAL", None)
    if declared is None:
        return frozenset()
    if isinstance(declared, str) or not all(_op_name(n) for n in declared):
        raise ModelLoadError(f"{path}: TOKEN_LOCAL must be a list of 'namespace::op' names")
    return frozenset(declared)


def declared_token_local(names) -> frozenset[str]:
    """Ops declared token-local by the command line or the configuration (``--token-local
    OP``, ``token_local = [...]``), checked before anything is built: a
    :class:`UsageError` names a malformed one."""
    names = [names] if isinstance(names, str) else list(names or ())
    for name in names:
        if not _op_name(name):
            raise UsageError(f"--token-local {name!r}: give a custom op as 'namespace::op' "
                             "(not aten or prims)")  # fmt: skip
    return frozenset(names)


def _op_name(name: object) -> bool:
    """``"namespace::op"``: a custom op's qualified name."""
    if not isinstance(name, str) or name.count("::") != 1:
        return False
    namespace, op = name.split("::")
    return namespace.isidentifier() and op.isidentifier() and namespace not in ("aten", "prims")


def _import_once(file: Path):
    """Import a kernels file once per process (its custom ops register once)."""
    name = "graphcheck_kernels_" + "_".join(file.resolve().with_suffix("").parts[-3:])
    name = "".join(c if c.isalnum() else "_" for c in name)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    try:
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise ModelLoadError(f"importing {file} raised {type(err).__name__}: {err}") from err
    return module


@contextlib.contextmanager
def patched(
    model: nn.Module, stand_ins: Sequence[StandIn], called: set[str] | None = None
) -> Iterator[list[str]]:
    """Apply ``stand_ins`` to the code ``model`` runs; yield the patched
    ``"module:attr"`` (``"module:Class.method"``) names; restore the originals on exit.
    ``called``, when given, collects the names of the stand-ins the model called.

    Targets that do not resolve are skipped here: a stage module may lack the class a
    required target names; :func:`check_targets` judges the whole model."""
    saved: list[tuple[object, str, object]] = []
    try:
        for stand_in in stand_ins:
            for owner, attr in _resolve(model, stand_in, strict=False):
                saved.append((owner, attr, getattr(owner, "__dict__", {}).get(attr, _ABSENT)))
                replacement = stand_in.replacement
                if called is not None and not isinstance(replacement, type):
                    replacement = _recorded(replacement, _label(owner, attr), called)
                setattr(owner, attr, replacement)
        yield [_label(owner, attr) for owner, attr, _ in saved]
    finally:
        for owner, attr, original in reversed(saved):
            if original is _ABSENT:
                delattr(owner, attr)  # it was inherited or a module's lazy attribute
            else:
                setattr(owner, attr, original)


def _recorded(fn: Callable, label: str, called: set[str]) -> Callable:
    """``fn``, adding ``label`` to ``called`` when it runs."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        called.add(label)
        return fn(*args, **kwargs)

    return run


def check_targets(model: nn.Module, stand_ins: Sequence[StandIn]) -> None:
    """Raise :class:`ModelLoadError` for the first required stand-in whose target does
    not resolve in ``model``, naming the target and what is missing."""
    for stand_in in stand_ins:
        if stand_in.required:
            _resolve(model, stand_in, strict=True)


_ABSENT = object()


def _resolve(model: nn.Module, stand_in: StandIn, strict: bool) -> list[tuple[object, str]]:
    """The ``(owner, attribute)`` pairs ``stand_in`` patches: a module and its global, or
    a class and its method. ``strict``: none is an error."""
    target = stand_in.target
    module_name, sep, path = target.rpartition(":")
    names = path.split(".")
    if sep:
        load = stand_in.required or module_name.startswith("torch.")
        roots = [_import(module_name, target, load, strict)]
    else:
        classes = sorted({type(m).__module__ for m in model.modules()})
        roots = [sys.modules.get(name) for name in classes]
    found: list[tuple[object, str]] = []
    missing: list[tuple[int, str]] = []
    for root in (r for r in roots if r is not None):
        owner, depth, why = _owner(root, names, root.__name__ if sep else "")
        if owner is None:
            missing.append((depth, why))
        elif not any(o is owner for o, _ in found):  # one class seen from two modules
            found.append((owner, names[-1]))
    if strict and not found:
        raise ModelLoadError(f"kernels target {target!r}: {_missing(sep, path, missing)}")
    return found


def _import(name: str, target: str, load: bool, strict: bool):
    """Module ``name`` (imported first if ``load``), or ``None``; ``strict``: a module
    that does not import is an error."""
    if load and name not in sys.modules:
        try:
            importlib.import_module(name)
        except Exception as err:
            if strict:
                raise ModelLoadError(
                    f"kernels target {target!r}: cannot import module {name!r} ({one_line(err)})"
                ) from None
            return None
    return sys.modules.get(name)


def _owner(root: object, names: list[str], label: str) -> tuple[object | None, int, str]:
    """The object holding ``names[-1]`` under ``root`` (a dotted path), or ``None``,
    the depth of the first missing name and what is missing (``label`` names ``root``)."""
    owner = root
    for depth, name in enumerate(names):
        if not hasattr(owner, name):
            return None, depth, f"{label or 'the module'} has no attribute {name!r}"
        if depth == len(names) - 1:
            break
        owner, label = getattr(owner, name), f"{label}.{name}".lstrip(".")
    return owner, len(names), ""


def _missing(qualified: str, path: str, missing: list[tuple[int, str]]) -> str:
    """What a target that resolves nowhere lacks."""
    if qualified:
        return missing[0][1] if missing else "its module is not imported"
    deeper = [why for depth, why in missing if depth > 0]
    if deeper:  # the class is there, the method is not
        return "; ".join(dict.fromkeys(deeper))
    return f"no module of the model's classes has {path.split('.')[0]!r}"


def _label(owner: object, attr: str) -> str:
    if isinstance(owner, type):
        return f"{owner.__module__}:{owner.__qualname__}.{attr}"
    return f"{getattr(owner, '__name__', type(owner).__name__)}:{attr}"
