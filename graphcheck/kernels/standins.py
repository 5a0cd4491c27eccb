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
defines one of the model's classes and has that global). Patches are undone
when the export ends.

The built-in stand-ins cover the linear-attention layers of the transformers
families ``qwen3_next``, ``qwen3_5`` and ``qwen3_5_moe``
(``torch_chunk_gated_delta_rule``, ``causal_conv1d_fn``), and FlexAttention's
``create_block_mask`` (one partial block: the ``mask_mod`` decides every pair).

A *kernels file* (``--kernels FILE.py``) adds stand-ins. It must define
``STAND_INS``, a dict from target to replacement callable; it may define its
own ``torch.library`` custom ops (any namespace but ``aten``) for the
replacements to call. Models that already call custom ops need no stand-in.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from graphcheck.errors import ModelLoadError
from graphcheck.kernels import custom_ops as ops

__all__ = ["BUILTIN", "StandIn", "load_kernels", "patched"]


@dataclass(frozen=True)
class StandIn:
    """Replace ``target`` (``"module:attr"`` or ``"attr"``) with ``replacement``."""

    target: str
    replacement: Callable


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


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device="cuda", **kwargs):
    """``create_block_mask`` as one partial block covering the whole score matrix:
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
)


def load_kernels(path: str) -> tuple[StandIn, ...]:
    """The stand-ins a kernels file declares in ``STAND_INS``."""
    file = Path(path)
    if not file.is_file():
        raise ModelLoadError(f"kernels file not found: {path}")
    module = _import_once(file)
    table = getattr(module, "STAND_INS", None)
    if not isinstance(table, Mapping) or not all(
        isinstance(k, str) and callable(v) for k, v in table.items()
    ):
        raise ModelLoadError(f"{path} must define STAND_INS, a dict of 'module:attr' -> callable")
    return tuple(StandIn(target, fn) for target, fn in table.items())


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
def patched(model: nn.Module, stand_ins: Sequence[StandIn]) -> Iterator[list[str]]:
    """Apply ``stand_ins`` to the code ``model`` runs; yield the patched
    ``"module:attr"`` names; restore the originals on exit."""
    saved: list[tuple[object, str, object]] = []
    try:
        for stand_in in stand_ins:
            for module, attr in _targets(model, stand_in.target):
                saved.append((module, attr, getattr(module, attr)))
                setattr(module, attr, stand_in.replacement)
        yield [f"{m.__name__}:{a}" for m, a, _ in saved]
    finally:
        for module, attr, original in reversed(saved):
            setattr(module, attr, original)


def _targets(model: nn.Module, target: str):
    module_name, sep, attr = target.rpartition(":")
    names = [module_name] if sep else sorted({type(m).__module__ for m in model.modules()})
    for name in names:
        if sep and name.startswith("torch.") and name not in sys.modules:
            importlib.import_module(name)  # torch's own modules: import to patch them
        module = sys.modules.get(name)
        if module is not None and hasattr(module, attr):
            yield module, attr
