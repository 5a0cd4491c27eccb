"""Export a model with symbolic packed-varlen inputs.

The example batch follows the packed-varlen convention of :mod:`graphcheck.varlen`:
``input_ids`` and ``position_ids`` ``[1, T]`` int64, ``cu_seq_lens_q/k`` ``[N + 1]``
int32 and ``max_length_q/k`` ints. T, N + 1 and the max lengths are symbolic; example
sizes avoid 0 and 1 (which specialise) and values that collide with model
widths. Only the inputs ``forward`` accepts are passed; a ``**kwargs``
forward is wrapped with explicit arguments, since torch rejects
``dynamic_shapes`` on ``**kwargs``.

If export specialises or guards T or N the proof would hold for some lengths
only, so the export is retried with automatic dims and the guard is recorded
in :attr:`Exported.guards` (reported as GC403).

Export runs under ``torch.no_grad()``: graphcheck analyses the forward program,
and with grad enabled some kernels refuse to trace (FlexAttention with a
document ``mask_mod`` on CPU: "FlexAttention does not support backward on CPU").
The training IR is the same ATen graph either way for the models graphcheck
checks (``requires_grad`` in the recorded values is what differs).
"""

from __future__ import annotations

import contextlib
import inspect
import re
import time
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.export import Dim, ExportedProgram

from graphcheck.analysis.export_failure import export_error, is_constraint_violation
from graphcheck.errors import ExportError
from graphcheck.model.load import default_dtype
from graphcheck.varlen import BY_NAME, example_values, model_inputs, stage_inputs

__all__ = ["EXAMPLE_DOCS", "Exported", "accepted_inputs", "example_inputs", "export_model"]

EXAMPLE_DOCS = (7, 12, 10)  # T = 29 tokens in N = 3 documents


@dataclass
class Exported:
    """An exported program and what graphcheck learned while exporting it."""

    program: ExportedProgram
    inputs: tuple[str, ...]
    seconds: float
    symbols: dict[str, str] = field(default_factory=dict)  # sympy name -> readable name
    guards: list[str] = field(default_factory=list)


def example_inputs(names: tuple[str, ...], hidden_size: int = 0) -> dict[str, object]:
    """Example values (under the active fake mode) for the accepted varlen inputs.

    ``hidden`` is the bf16 residual ``[1, T, hidden_size]`` a later pipeline stage
    takes in place of ``input_ids``."""
    return example_values(EXAMPLE_DOCS, names, hidden_size)


def _dynamic_shapes(names: tuple[str, ...], auto: bool) -> dict[str, object]:
    """Every varlen dim symbolic (``T``, ``N1``, the max lengths), or automatic."""
    dims: dict[str, object] = {}
    spec: dict[str, object] = {}
    for name in names:
        row = BY_NAME[name]
        if row.dim_name is not None and not auto:
            dims.setdefault(row.dim_name, Dim(row.dim_name, min=2))
        dim = Dim.AUTO if auto else dims.get(row.dim_name, Dim.DYNAMIC)
        spec[name] = dim if row.dim is None else {row.dim: dim}
    return spec


def accepted_inputs(model: nn.Module) -> tuple[tuple[str, ...], bool]:
    """The varlen inputs ``model.forward`` accepts, and whether it needs a wrapper."""
    params = inspect.signature(model.forward).parameters
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    names = tuple(n for n in model_inputs() if n in params or var_kw)
    if "input_ids" not in names:
        raise ExportError(f"{type(model).__name__}.forward does not accept input_ids")
    return names, list(params)[: len(names)] != list(names)


def _explicit_forward(model: nn.Module, names: tuple[str, ...]):
    original = model.forward

    def forward(*args):
        return original(**dict(zip(names, args, strict=False)))

    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    forward.__signature__ = inspect.Signature(params)
    return forward


def export_model(
    model: nn.Module,
    mode,
    strict: bool = False,
    *,
    stage_input: str | None = None,
    hidden_size: int = 0,
) -> Exported:
    """Export ``model`` (built under fake ``mode``) with symbolic varlen inputs.

    With ``stage_input`` (``"input_ids"`` or ``"hidden"``) the model is a pipeline
    stage module, called positionally as ``forward(x, position_ids, cu_seq_lens_q,
    cu_seq_lens_k, max_length_q, max_length_k)``."""
    if stage_input is None:
        names, wrap = accepted_inputs(model)
    else:
        names, wrap = stage_inputs(stage_input), False
    start = time.perf_counter()
    with _forward_over(model, names if wrap else None):
        program, guards = _export_guarded(model, mode, names, strict, hidden_size)
    seconds = time.perf_counter() - start
    exported = Exported(program, names, seconds, guards=guards)
    exported.symbols = _symbol_names(exported)
    return exported


@contextlib.contextmanager
def _forward_over(model: nn.Module, names: tuple[str, ...] | None):
    """With ``names``, ``model.forward`` taking exactly those inputs, removed again
    however the export ends: the user's module is left as it was."""
    if names is None:
        yield
        return
    model.forward = _explicit_forward(model, names)
    try:
        yield
    finally:
        del model.forward


def _export_guarded(model, mode, names, strict: bool, hidden_size: int):
    """The export with every dim symbolic; when that guards or specialises, the export
    with automatic dims and the guard it hit (GC403 reads it)."""
    guards: list[str] = []
    with mode, default_dtype(torch.float32), torch.no_grad():
        args = tuple(example_inputs(names, hidden_size).values())
        try:
            return _export(model, args, names, strict, auto=False), guards
        except _GuardedError as err:
            guards.append(_condense(err.__cause__))
            return _export(model, args, names, strict, auto=True), guards


class _GuardedError(Exception):
    """Export specialised or guarded the symbolic dims; ``__cause__`` says how."""


def _export(model, args, names, strict: bool, auto: bool) -> ExportedProgram:
    shapes = _dynamic_shapes(names, auto)
    try:
        return torch.export.export(
            model, args, dynamic_shapes=tuple(shapes.values()), strict=strict
        )
    except Exception as err:
        if is_constraint_violation(err) and not auto:
            raise _GuardedError() from err
        raise export_error(err, strict) from err


def _condense(err: BaseException) -> str:
    """Torch's error as one line: its first informative line, shortened."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    text = f"{type(err).__name__}: {lines[0] if lines else ''}"
    for line in lines[1:4]:
        if re.search(r"guard|Eq\(|Mod\(|specializ|Ne\(|<|>", line):
            text += " " + line
            break
    return text if len(text) <= 300 else text[:297] + "..."


def _symbol_names(exported: Exported) -> dict[str, str]:
    """Readable names for the symbols of the input dims: T, N+1, max_length_q."""
    names: dict[str, str] = {}
    nodes = {n.name: n for n in exported.program.graph.nodes if n.op == "placeholder"}
    user = exported.program.graph_signature.user_inputs
    for name, arg in zip(exported.inputs, user, strict=False):
        val = nodes[arg].meta.get("val")
        dims = (val,) if isinstance(val, torch.SymInt) else getattr(val, "shape", ())
        for dim in dims:
            expr = getattr(getattr(dim, "node", None), "expr", None)
            if expr is not None and getattr(expr, "is_Symbol", False):
                names.setdefault(str(expr), BY_NAME[name].symbol)
    return names
