"""GC206 boundary-not-residual-shape

What it checks
    The value crossing each cut is shaped like the residual stream, ``[1, T, H]``
    with ``H`` the model's hidden size, and no bitcast (``aten.view.dtype``:
    ``x.view(torch.bfloat16)`` of an fp32 tensor) lies on its path from the op
    that computed it (views and copies are looked through). ``H`` is the width of
    the residual stream where the model defines it: the last dim of what the input
    modules hand to the rest of the model (or of a stage's ``hidden`` input), and of
    what the output modules read from it; they must agree.

    A model whose boundary state is deliberately not the residual declares it
    (``get_pp_module_config()["pipeline_boundary_state"]`` or ``--boundary-state``:
    rank, dtype, shape suffix, state name). Then every cut, 0 and L included, must
    carry a value of exactly that rank, dtype and trailing shape, with the token dim
    before the suffix.

Why it matters
    The pipeline wire is one bf16 ``[1, T, H]`` tensor: runtimes allocate its
    receive buffer from that shape and treat it as the residual. A rank-4
    multi-stream residual ``[1, T, n, H]`` does not fit it unless the model declares
    it (and the runtime then checks every received tensor against the declaration),
    and the bits of an fp32 residual carried as a bf16 ``[1, T, 2H]`` tensor are not
    the bf16 residual the contract names: bf16 checks pass on bytes that are really
    fp32.

Example
    Hyper-connections that pass ``n`` residual streams between layers
    (``[1, T, n, H]``) without declaring them, or declaring rank 3; a layer that
    keeps an fp32 residual and returns ``x32.view(torch.bfloat16)``.

Fix
    Hand over the ``[1, T, H]`` residual: collapse the streams inside the layer (or
    cut where they are collapsed) and round an fp32 residual with
    ``.to(torch.bfloat16)`` instead of reinterpreting its bits. A multi-stream state
    that is the boundary by design is declared: the message shows the declaration
    that matches the crossing value (``"pipeline_boundary_state": {"rank": 4,
    "dtype": "bfloat16", "shape_suffix": (4, 64), "state": "NAME"}``).
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.dataflow import copies_data
from graphcheck.analysis.fx import is_view_node, op_name, tensor_val
from graphcheck.analysis.regions import RegionKind
from graphcheck.diagnostics import Diagnostic
from graphcheck.model.boundary import declaration

__all__ = ["CODE", "NAME", "SEVERITY", "SUMMARY", "check", "hidden_size"]

CODE = "GC206"
NAME = "boundary-not-residual-shape"
SEVERITY = "error"
SUMMARY = (
    "the crossing value is not a `[1, T, H]` residual (rank, width, bitcast) or not the "
    "declared boundary state"
)

_COPIES = {"aten.clone.default", "aten.alias.default", "aten.detach.default"}
_DECLARE = 'get_pp_module_config()["pipeline_boundary_state"]'


def check(ctx) -> list[Diagnostic]:
    program = ctx.program
    widths = _widths(program)
    found = []
    if len(widths) > 1:
        found.append(_ambiguous(widths))
    width = next(iter(widths)) if len(widths) == 1 else None
    for cut in ctx.cuts:
        node = ctx.wire(cut).boundary
        if node is None:
            continue
        problems = [_shape_problem(program, node, width), _bitcast_problem(program, node)]
        problems = [p for p in problems if p]
        if problems:
            message = f"{node.name} crossing cut {cut.position} {'; it also '.join(problems)}"
            where = {"cut": cut.position, "stage": ctx.right_stage(cut)}
            found.append(Diagnostic.at(CODE, NAME, message, node=node, **where))
    return found


def hidden_size(program) -> int | None:
    """The residual stream's width, or ``None`` when the model does not show one width."""
    widths = _widths(program)
    return next(iter(widths)) if len(widths) == 1 else None


def _widths(program) -> set[int]:
    """Last dims of the values entering the model from the input modules (or a stage's
    ``hidden`` input) and of the values the output modules read from the model."""
    found: set[int] = set()
    hidden = program.user_inputs.get("hidden")
    if hidden is not None:
        found |= _last_dim(hidden)
    for node in program.interval:
        kind = program.region[node].kind
        users = [u for u in node.users if u in program.interval]
        if kind == RegionKind.INPUT and any(program.region[u].kind != kind for u in users):
            found |= _last_dim(node)
        if kind != RegionKind.OUTPUT and any(
            program.region[u].kind == RegionKind.OUTPUT for u in users
        ):
            found |= _last_dim(node)
    return found


def _last_dim(node: torch.fx.Node) -> set[int]:
    val = tensor_val(node)
    if val is None or val.dim() == 0 or not isinstance(val.shape[-1], int):
        return set()
    return {val.shape[-1]}


def _shape_problem(program, node: torch.fx.Node, width: int | None) -> str | None:
    shape, dtype = program.shape(node), program.dtype(node)
    if shape is None:
        return None
    state = program.layout.boundary_state
    if state is not None:
        return _state_problem(state, dtype, shape)
    expected = f"[1, T, {width if width is not None else 'H'}]"
    ok = len(shape) == 3 and shape[0] == "1" and shape[1] == "T"
    if ok and (width is None or shape[2] == str(width)):
        return None
    fix = (
        "collapse extra streams inside the layer and hand over the residual itself"
        if len(shape) != 3
        else "hand over the residual itself, not a reshaped or widened copy"
    )
    if "T" not in shape and len(shape) >= 2 and shape[1].isdigit():
        fix = f"its token dim is the fixed size {shape[1]}: the export specialised T (GC403)"
    return (
        f"is {dtype} [{', '.join(shape)}], but the pipeline wire is one bf16 {expected} "
        f"tensor (the residual stream); {fix}{_declare_hint(dtype, shape)}"
    )


def _state_problem(state, dtype: str | None, shape: list[str]) -> str | None:
    if state.matches(dtype, shape):
        return None
    return (
        f"is {dtype} [{', '.join(shape)}], but the model declares its boundary state "
        f"{state.state!r} as {state.expected} (rank {state.rank}, shape suffix "
        f"{tuple(state.shape_suffix)}); hand over that state at every cut"
        f"{_declare_hint(dtype, shape, state.state, 'correct the declaration')}"
    )


def _declare_hint(dtype, shape, name: str = "NAME", how: str = "declare it") -> str:
    """How to declare ``shape`` as the boundary state, when it can be one."""
    text = declaration(dtype, shape, name) if dtype else None
    if text is None:
        return ""
    return f", or, if this is the boundary state by design, {how}: {_DECLARE} = {text}"


def _bitcast_problem(program, node: torch.fx.Node) -> str | None:
    cast = _bitcast_on_path(node)
    if cast is None:
        return None
    src = tensor_val(cast.args[0])
    was = str(src.dtype).removeprefix("torch.") if src is not None else "another dtype"
    return (
        f"is the bits of a {was} tensor reinterpreted as {program.dtype(cast)} "
        f"({cast.name}: aten.view.dtype); round with .to(torch.bfloat16) instead of a "
        f"bitcast, or declare the boundary state with {_DECLARE}"
    )


def _bitcast_on_path(node: torch.fx.Node) -> torch.fx.Node | None:
    """An ``aten.view.dtype`` among the views and copies ``node`` was made by."""
    seen = 0
    while isinstance(node, torch.fx.Node) and seen < 64:
        name = op_name(node.target) if node.op == "call_function" else ""
        if name == "aten.view.dtype":
            return node
        passes_bits = (is_view_node(node) and not copies_data(node)) or name in _COPIES
        if not passes_bits or not node.args:
            return None
        src = node.args[0]
        node = src.args[0] if op_name(node.target) == "getitem" else src
        seen += 1
    return None


def _ambiguous(widths: set[int]) -> Diagnostic:
    return Diagnostic.at(
        CODE,
        NAME,
        f"the model shows several residual widths {sorted(widths)} (the input modules' "
        "output and what the output modules read differ), so the [1, T, H] wire cannot be "
        f"checked; make both the hidden size, or declare the boundary state with {_DECLARE}",
    )
