"""Export a model with symbolic packed-varlen inputs.

The example batch follows the packed-varlen convention of :mod:`graphcheck.varlen`
(how a framework's forward takes it, :mod:`graphcheck.model.conventions`):
``input_ids`` and ``position_ids`` ``[1, T]`` int64, ``cu_seq_lens_q/k`` ``[N + 1]``
int32 and ``max_length_q/k`` ints. T, N + 1 and the max lengths are symbolic; example
sizes avoid 0 and 1 (which specialise) and values that collide with model
widths. Only the inputs ``forward`` accepts are passed; a ``**kwargs``
forward is wrapped with explicit arguments, since torch rejects
``dynamic_shapes`` on ``**kwargs``.

The example batch is an :class:`~graphcheck.varlen.ExampleBatch` (``--docs``,
``--tokens``; by default 29 tokens in 3 documents). With ``--token-multiple K`` T is
exported as ``K * Tk`` (a derived dim, ``Dim("Tk", min=1) * K``): a model that needs
``T % K == 0`` (tokens viewed in groups of K) exports for every multiple of K, and
the input dims read ``K*s0``, named ``T`` (``s0`` is ``T/K``).

If export specialises or guards T or N the proof would hold for some lengths
only, so the export is retried with automatic dims and the guard is recorded
in :attr:`Exported.guards` (reported as GC403).

The module is exported in its program mode (:class:`~graphcheck.model.load.ProgramMode`):
``train`` by default, the program pipeline-parallel training runs (``model.train()``:
dropout active, kernels a module picks by ``self.training``), or ``eval``
(``model.eval()``). :func:`export_model` puts the module in the mode it is given, so a
stage module a builder constructs afresh (in train mode, as every new module is) runs
the same program as the uncut model, and records the mode in :attr:`Exported.program_mode`.

Export runs under ``torch.no_grad()``: graphcheck analyses the forward program,
and with grad enabled some kernels refuse to trace (FlexAttention with a
document ``mask_mod`` on CPU: "FlexAttention does not support backward on CPU").
The training IR is the same ATen graph either way for the models graphcheck
checks (``requires_grad`` in the recorded values is what differs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import re
import time
from dataclasses import dataclass, field

import sympy
import torch
from torch import nn
from torch.export import Dim, ExportedProgram

from graphcheck.analysis.export_failure import export_error, is_constraint_violation, user_frame
from graphcheck.analysis.guards import SizeRange, discharged
from graphcheck.analysis.lengths import Span, token_span
from graphcheck.analysis.token_multiple import multiple_of, undeclared
from graphcheck.kernels.attention import AttentionDropped
from graphcheck.kernels.functions import FunctionCall, TensorArg
from graphcheck.model.conventions import Convention, bind, detect, roles
from graphcheck.model.load import ProgramMode, default_dtype, in_program_mode
from graphcheck.varlen import (
    BY_NAME,
    EXAMPLE_DOCS,
    ExampleBatch,
    VarlenInput,
    example_values,
    hidden_dim,
    rows,
    stage_inputs,
)

__all__ = [
    "EXAMPLE_DOCS",
    "Exported",
    "accepted_inputs",
    "autograd_functions",
    "example_inputs",
    "export_model",
]


@dataclass
class Exported:
    """An exported program and what graphcheck learned while exporting it."""

    program: ExportedProgram
    inputs: tuple[str, ...]
    seconds: float
    symbols: dict[str, str] = field(default_factory=dict)  # sympy name -> readable name
    guards: list[str] = field(default_factory=list)
    batch: ExampleBatch = field(default_factory=ExampleBatch)  # the example it traced
    program_mode: ProgramMode = ProgramMode.TRAIN  # model.train() or model.eval()
    hidden_dim: int = 1  # the token dim of a stage's ``hidden`` input (0: a flat [T, H])

    @property
    def rows(self) -> dict[str, VarlenInput]:
        """The varlen table of this export (``hidden``'s token dim where it was traced)."""
        return rows(self.hidden_dim)

    @property
    def span(self) -> Span | None:
        """The range of T the program holds for (``None``: T is not one plain symbol)."""
        return token_span(self.program, self.inputs, self.hidden_dim)

    def tokens(self) -> dict:
        """For which T the program holds, for reports: T a multiple of ``multiple_of``,
        at least ``min`` (``None``: T is not symbolic), and the example's lengths."""
        return {
            "symbol": "T",
            "multiple_of": self.batch.multiple,
            "min": _lowest_tokens(self),
            "example": list(self.batch.docs),
        }


def example_inputs(
    names: tuple[str, ...], hidden_size=0, docs: tuple[int, ...] = EXAMPLE_DOCS
) -> dict[str, object]:
    """Example values (under the active fake mode) for the accepted varlen inputs, for
    documents of lengths ``docs``.

    ``hidden`` is the bf16 residual a later pipeline stage takes in place of
    ``input_ids``: ``hidden_size`` is its :class:`~graphcheck.model.boundary.WireShape`
    (``[1, T, H]`` or the flat ``[T, H]``), or a width of the batched ``[1, T, H]``."""
    return example_values(docs, names, hidden_size)


def _dim(name: str, multiple: int):
    """The symbolic dim ``name``; T as ``multiple * Tk`` when ``multiple`` > 1."""
    if name == "T" and multiple > 1:
        return Dim("Tk", min=1) * multiple
    return Dim(name, min=2)


def _dynamic_shapes(
    names: tuple[str, ...], auto: bool, multiple: int = 1, hidden: int = 1
) -> dict[str, object]:
    """Every varlen dim symbolic (``T``, ``N1``, the max lengths), or automatic;
    ``hidden`` is the token dim of the ``hidden`` input's wire."""
    dims: dict[str, object] = {}
    spec: dict[str, object] = {}
    for name in names:
        row = rows(hidden)[name]
        if row.dim_name is not None and not auto and row.dim_name not in dims:
            dims[row.dim_name] = _dim(row.dim_name, multiple)
        dim = Dim.AUTO if auto else dims.get(row.dim_name, Dim.DYNAMIC)
        spec[name] = dim if row.dim is None else {row.dim: dim}
    return spec


def accepted_inputs(
    model: nn.Module,
    convention: Convention | str | None = None,
    docs: tuple[int, ...] = EXAMPLE_DOCS,
) -> tuple[tuple[str, ...], bool]:
    """The varlen inputs ``model.forward`` accepts under its input ``convention``
    (:mod:`graphcheck.model.conventions`; ``None``: detected, a name: that row), and
    whether it needs a wrapper."""
    return roles(model, _convention(model, convention), docs)


def _convention(model: nn.Module, convention: Convention | str | None) -> Convention:
    return convention if isinstance(convention, Convention) else detect(model, convention)


def export_model(
    model: nn.Module,
    mode,
    strict: bool = False,
    *,
    stage_input: str | None = None,
    hidden_size=0,
    batch: ExampleBatch | None = None,
    program_mode: ProgramMode | str | None = None,
    convention: Convention | str | None = None,
) -> Exported:
    """Export ``model`` (built under fake ``mode``) with symbolic varlen inputs, traced
    on ``batch`` (default: 29 tokens in 3 documents, T any length), in ``program_mode``
    (``None``: the mode the model is in).

    With ``stage_input`` (``"input_ids"`` or ``"hidden"``) the model is a pipeline
    stage module, called positionally as ``forward(x, position_ids, cu_seq_lens_q,
    cu_seq_lens_k, max_length_q, max_length_k)``; ``hidden_size`` is the wire ``x``
    is on a later stage (a :class:`~graphcheck.model.boundary.WireShape`, or the width
    of ``[1, T, H]``), its token dim symbolic like the other inputs' ``T``. Otherwise
    ``convention`` says how its forward takes them (``None``: detected from its
    signature)."""
    batch = batch or ExampleBatch()
    rules = None
    if stage_input is None:
        rules = _convention(model, convention)
        names, wrap = roles(model, rules, batch.docs)
    else:
        names, wrap = stage_inputs(stage_input), False
    if program_mode is not None:
        in_program_mode(model, program_mode)
    traced = ProgramMode.TRAIN if model.training else ProgramMode.EVAL
    start = time.perf_counter()
    with _forward_over(model, names if wrap else None, rules):
        arguments = dict(zip(inspect.signature(model.forward).parameters, names, strict=False))
        program, guards = _export_guarded(model, mode, names, strict, hidden_size, batch)
    hidden = hidden_dim(hidden_size)
    if batch.multiple > 1:
        guards += _derived_guards(program, arguments, batch.multiple, hidden)
    seconds = time.perf_counter() - start
    exported = Exported(
        program, names, seconds, guards=guards, batch=batch, program_mode=traced,
        hidden_dim=hidden,
    )  # fmt: skip
    exported.symbols = _symbol_names(exported)
    return exported


def autograd_functions(
    model: nn.Module, mode, batch: ExampleBatch, convention: Convention | str | None = None
) -> tuple[FunctionCall, ...]:
    """The user ``torch.autograd.Function`` classes ``model``'s forward applies (built
    under fake ``mode``; run once with gradients on the example ``batch``), one call of
    each: the export keeps their forward only, so the backward proof must not stand in a
    derived backward for their own. Read from the autograd graph the forward records,
    whatever the function is called; torch's own (reentrant checkpointing, which
    recomputes the forward) are not listed."""
    rules = _convention(model, convention)
    names, wrap = roles(model, rules, batch.docs)
    found: dict[type, str] = {}
    calls: dict[type, tuple] = {}
    for recording in (False, True):  # find the classes, then run again recording their calls
        with _forward_over(model, names if wrap else None, rules), mode, torch.enable_grad():
            args = tuple(example_inputs(names, 0, batch.docs).values())
            with _forwards_recorded(tuple(found) if recording else (), calls):
                out = model(*args)
        if recording or not _functions_in(out, found):
            break
    tokens = sum(batch.docs)
    return tuple(
        FunctionCall(name, cls, _recorded_args(calls[cls], tokens) if cls in calls else None)
        for cls, name in sorted(found.items(), key=lambda item: item[1])
    )


def _functions_in(out, found: dict[type, str]) -> bool:
    """Add the user Function classes in ``out``'s autograd graph to ``found``."""
    seen: set = set()
    stack = [t.grad_fn for t in _tensors(out) if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        cls = getattr(fn, "_forward_cls", None)
        if cls is not None and not cls.__module__.startswith("torch."):
            found[cls] = _where(cls)
        stack.extend(next_fn for next_fn, _ in fn.next_functions)
    return bool(found)


@contextlib.contextmanager
def _forwards_recorded(classes: tuple[type, ...], calls: dict[type, tuple]):
    """Each of ``classes`` recording the arguments of its first ``forward`` in ``calls``
    (the Function's own, without ``ctx``), restored on exit."""
    saved = []
    for cls in classes:
        raw = inspect.getattr_static(cls, "forward")
        with_ctx = cls.setup_context is torch.autograd.Function.setup_context

        def forward(*args, _cls=cls, _raw=raw, _ctx=with_ctx, **kwargs):
            if not kwargs:
                calls.setdefault(_cls, args[1:] if _ctx else args)
            return _raw.__func__(*args, **kwargs) if isinstance(_raw, staticmethod) else _raw(
                *args, **kwargs)  # fmt: skip

        saved.append((cls, cls.__dict__.get("forward", _ABSENT)))
        cls.forward = staticmethod(forward)
    try:
        yield
    finally:
        for cls, original in reversed(saved):
            if original is _ABSENT:
                delattr(cls, "forward")
            else:
                cls.forward = original


_ABSENT = object()


def _recorded_args(args: tuple, tokens: int) -> tuple:
    def recorded(arg):
        if not isinstance(arg, torch.Tensor):
            return arg
        shape = tuple(None if d == tokens else int(d) for d in arg.shape)
        return TensorArg(shape, arg.dtype, arg.requires_grad)

    return tuple(recorded(a) for a in args)


def _where(cls: type) -> str:
    """``Name (file.py:line)`` of a class, the file relative to the working directory."""
    try:
        _, line = inspect.getsourcelines(cls)
        path = os.path.relpath(inspect.getsourcefile(cls) or "?")
    except (OSError, TypeError):
        return cls.__qualname__
    return f"{cls.__qualname__} ({path}:{line})"


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, tuple | list):
        return [t for item in value for t in _tensors(item)]
    return [t for item in vars(value).values() for t in _tensors(item)] if hasattr(
        value, "__dict__") else []  # fmt: skip


@contextlib.contextmanager
def _forward_over(model: nn.Module, names: tuple[str, ...] | None, convention):
    """With ``names``, ``model.forward`` taking exactly those inputs (handed over as
    ``convention`` says), removed again however the export ends: the user's module is
    left as it was."""
    if names is None:
        yield
        return
    model.forward = bind(model, convention, names)
    try:
        yield
    finally:
        del model.forward


def _export_guarded(model, mode, names, strict: bool, hidden_size, batch: ExampleBatch):
    """The export with every dim symbolic; when that guards or specialises, the export
    with automatic dims and the guard it hit (GC403 reads it)."""
    guards: list[str] = []
    hidden = hidden_dim(hidden_size)
    # what earlier compilations left, in this process or on disk (torch.compile'd helpers
    # such as create_block_mask: frame caches, dims marked dynamic after a recompile and
    # the profile torch keeps of them for later processes) must not shape this export:
    # it is a function of the model and the options only
    torch._dynamo.reset()
    fresh = torch._dynamo.config.patch(
        automatic_dynamic_local_pgo=False, automatic_dynamic_remote_pgo=False
    )
    with fresh, mode, default_dtype(torch.float32), torch.no_grad():
        args = tuple(example_inputs(names, hidden_size, batch.docs).values())
        try:
            return _export(model, args, names, strict, batch.multiple, hidden), guards
        except _GuardedError as err:
            program = _export(model, args, names, strict, None, hidden)
            sizes = _size_ranges(model, names, hidden, batch.multiple)
            span = token_span(program, names, hidden)
            if not _holds(str(err.__cause__), sizes, span):
                guards.append(_condense(err.__cause__))
            return program, guards


def _holds(message: str, sizes: dict[tuple[str, int], SizeRange], span: Span | None) -> bool:
    """Export's guards hold for every size, or for every size in the range of T the
    program exported with automatic dims holds for (``span``: that range is the program's
    own limit, which GC403 reports, or which other length cases cover)."""
    if discharged(message, sizes) is not None:
        return True
    if span is None:
        return False
    within = {
        key: dataclasses.replace(size, lowest=max(size.lowest, span.lo), highest=span.hi)
        if size.dim == "T" and size.step == 1
        else size
        for key, size in sizes.items()
    }
    return discharged(message, within) is not None


def _size_ranges(model, names, hidden: int, multiple: int) -> dict[tuple[str, int], SizeRange]:
    """Where each symbolic input size ranges, keyed as export's messages name it (the
    forward's parameter, the dim): :func:`graphcheck.analysis.guards.discharged`."""
    params = list(inspect.signature(model.forward).parameters)
    sizes: dict[tuple[str, int], SizeRange] = {}
    for param, name in zip(params, names, strict=False):
        row = rows(hidden)[name]
        if row.dim is None or row.dim_name is None:
            continue
        step = multiple if row.dim_name == "T" and multiple > 1 else 1
        sizes[(param, row.dim)] = SizeRange(row.dim_name, max(2, step), step)
    return sizes


def _derived_guards(
    program: ExportedProgram, inputs: dict[str, str], multiple: int, hidden_dim: int = 1
):
    """The first guard on T that export kept without raising (T exported as a multiple:
    see :mod:`graphcheck.analysis.token_multiple`), as a list."""
    kept = getattr(program, "_guards_code", None)
    if kept is None:
        return ["the export's guards on T cannot be read (no ExportedProgram._guards_code)"]
    first = next(undeclared(kept, inputs, multiple, hidden_dim), None)
    return [] if first is None else [f"{first} (beyond T a multiple of {multiple})"]


class _GuardedError(Exception):
    """Export specialised or guarded the symbolic dims; ``__cause__`` says how."""


def _export(
    model, args, names, strict: bool, multiple: int | None, hidden: int = 1
) -> ExportedProgram:
    """The export with T a multiple of ``multiple``, or with automatic dims (``None``);
    ``hidden`` the token dim of the ``hidden`` input."""
    auto = multiple is None
    shapes = _dynamic_shapes(names, auto, multiple or 1, hidden)
    try:
        return torch.export.export(
            model, args, dynamic_shapes=tuple(shapes.values()), strict=strict
        )
    except Exception as err:
        if is_constraint_violation(err) and not auto:
            raise _GuardedError() from err
        refused = _refusal(err)
        if refused is not None:  # the attention would drop what the model passes
            raise refused from err
        raise export_error(err, strict) from err


def _refusal(err: BaseException) -> AttentionDropped | None:
    """The :class:`AttentionDropped` that ``err`` is (or was raised from), with the model
    line it came from as its detail."""
    seen: BaseException | None = err
    while seen is not None and not isinstance(seen, AttentionDropped):
        seen = seen.__cause__ or seen.__context__
    if seen is None:
        return None
    frame = user_frame(seen)
    where = () if frame is None else (f"at {frame.filename}:{frame.lineno} in {frame.name}",)
    return AttentionDropped(str(seen), where)


def _condense(err: BaseException) -> str:
    """Torch's error as one line: its first informative line, shortened."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    text = f"{type(err).__name__}: {lines[0] if lines else ''}"
    for line in lines[1:4]:
        if re.search(r"guard|Eq\(|Mod\(|specializ|Ne\(|<|>", line):
            text += " " + line
            break
    return text if len(text) <= 300 else text[:297] + "..."


def _lowest_tokens(exported: Exported) -> int | None:
    """The smallest T the range constraints of the program allow."""
    ranges = {str(sym): bounds for sym, bounds in exported.program.range_constraints.items()}
    multiple = exported.batch.multiple
    for sym, name in exported.symbols.items():
        if name == "T":
            expr = sympy.sympify(sym)
            root = expr if expr.is_Symbol else multiple_of(expr, multiple)
            bounds = ranges.get(str(root))
            if bounds is not None:
                return int(bounds.lower) * (1 if expr.is_Symbol else multiple)
    return None


def _symbol_names(exported: Exported) -> dict[str, str]:
    """Readable names for the symbols of the input dims: T, N+1, max_length_q; with
    ``--token-multiple K``, T's ``K*s0`` is ``T`` and ``s0`` is ``T/K``."""
    names: dict[str, str] = {}
    nodes = {n.name: n for n in exported.program.graph.nodes if n.op == "placeholder"}
    user = exported.program.graph_signature.user_inputs
    multiple = exported.batch.multiple
    for name, arg in zip(exported.inputs, user, strict=False):
        val = nodes[arg].meta.get("val")
        dims = (val,) if isinstance(val, torch.SymInt) else getattr(val, "shape", ())
        symbol = BY_NAME[name].symbol
        for dim in dims:
            expr = getattr(getattr(dim, "node", None), "expr", None)
            if expr is not None and getattr(expr, "is_Symbol", False):
                names.setdefault(str(expr), symbol)
            elif expr is not None and multiple > 1 and symbol == "T":
                root = multiple_of(expr, multiple)
                if root is not None:
                    names.setdefault(str(expr), symbol)
                    names.setdefault(str(root), f"{symbol}/{multiple}")
    return names
