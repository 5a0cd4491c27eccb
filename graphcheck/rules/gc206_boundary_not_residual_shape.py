"""GC206 boundary-not-residual-shape

What it checks
    The value crossing each cut is shaped like the residual stream, ``[1, T, H]``
    or the flat ``[T, H]`` of varlen code, with ``H`` the model's hidden size, and no
    bitcast (``aten.view.dtype``: ``x.view(torch.bfloat16)`` of an fp32 tensor) lies on
    its path from the op that computed it (views and copies are looked through). The
    layout and ``H`` are the residual stream's where the model defines it
    (:func:`graphcheck.analysis.residual.residual_evidence`): what the input modules
    hand to the rest of the model (or a stage's ``hidden`` input), else what the output
    modules read from it. Widths must agree on both sides; a layout both sides show
    two ways is a finding too.

    A model whose boundary state is deliberately not the residual declares it
    (``get_pp_module_config()["pipeline_boundary_state"]`` or ``--boundary-state``:
    rank, dtype, shape suffix, state name). Then every cut, 0 and L included, must
    carry a value of exactly that rank, dtype and trailing shape, with the token dim
    before the suffix.

Why it matters
    The pipeline wire is one bf16 residual tensor, ``[1, T, H]`` or ``[T, H]`` as the
    model lays it out: runtimes allocate its receive buffer from that shape (one shape
    for every cut) and treat it as the residual. A rank-4
    multi-stream residual ``[1, T, n, H]`` does not fit it unless the model declares
    it (and the runtime then checks every received tensor against the declaration),
    and the bits of an fp32 residual carried as a bf16 ``[1, T, 2H]`` tensor are not
    the bf16 residual the contract names: bf16 checks pass on bytes that are really
    fp32.

Example
    Hyper-connections that pass ``n`` residual streams between layers
    (``[1, T, n, H]``) without declaring them, or declaring rank 3; a layer that
    keeps an fp32 residual and returns ``x32.view(torch.bfloat16)``; a model whose
    embedding hands on ``[T, H]`` but whose layers return ``[1, T, H]``.

Fix
    Hand over the residual in the model's layout: collapse the streams inside the layer (or
    cut where they are collapsed) and round an fp32 residual with
    ``.to(torch.bfloat16)`` instead of reinterpreting its bits. A multi-stream state
    that is the boundary by design is declared: the message shows the declaration
    that matches the crossing value (``"pipeline_boundary_state": {"rank": 4,
    "dtype": "bfloat16", "shape_suffix": (4, 64), "state": "NAME"}``; rank 2 for a
    flat ``[T, 64]`` wire).
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.dataflow import copies_data
from graphcheck.analysis.fx import is_view_node, op_name, tensor_val
from graphcheck.analysis.residual import ResidualEvidence, residual_evidence
from graphcheck.diagnostics import Diagnostic
from graphcheck.model.boundary import WireShape, declaration

__all__ = ["CODE", "NAME", "EXAMPLE", "SEVERITY", "SUMMARY", "check", "hidden_size"]

CODE = "GC206"
NAME = "boundary-not-residual-shape"
SEVERITY = "error"
SUMMARY = (
    "the crossing value is not the residual in the model's layout, `[1, T, H]` or `[T, H]` "
    "(rank, width, bitcast), or not the declared boundary state"
)
# The documentation's example, run by tests/rules/test_rule_table.py: the code fires
# at the cut on the violating model and not on its passing twin.
EXAMPLE = {
    "violating": "fixtures/soundness_dataflow.py:multi_stream_residual",
    "passing": "fixtures/soundness_dataflow.py:multi_stream_collapsed",
    "cut": 4,
}

_COPIES = {"aten.clone.default", "aten.alias.default", "aten.detach.default"}
_DECLARE = 'get_pp_module_config()["pipeline_boundary_state"]'


def check(ctx) -> list[Diagnostic]:
    program = ctx.program
    evidence = residual_evidence(program)
    found = []
    if len(evidence.widths) > 1:
        found.append(_ambiguous(sorted(evidence.widths)))
    layout = evidence.layout
    if layout is None and program.layout.boundary_state is None:
        found.append(_ambiguous_layout(evidence))
    for cut in ctx.cuts:
        node = ctx.wire(cut).boundary
        if node is None:
            continue
        problems = [_shape_problem(program, node, evidence), _bitcast_problem(program, node)]
        problems = [p for p in problems if p]
        if problems:
            message = f"{node.name} crossing cut {cut.position} {'; it also '.join(problems)}"
            where = {"cut": cut.position, "stage": ctx.right_stage(cut)}
            found.append(Diagnostic.at(CODE, NAME, message, node=node, **where))
    return found


def hidden_size(program) -> int | None:
    """The residual stream's width, or ``None`` when the model does not show one width."""
    return residual_evidence(program).width


def _shape_problem(program, node: torch.fx.Node, evidence: ResidualEvidence) -> str | None:
    shape, dtype = program.shape(node), program.dtype(node)
    if shape is None:
        return None
    state = program.layout.boundary_state
    if state is not None:
        return _state_problem(state, dtype, shape)
    layout = evidence.layout
    if layout is None:
        return None  # the edges show both layouts: reported once, for the whole model
    if layout.matches(shape):
        return None
    wire = WireShape.of(shape)
    if wire is not None and len(wire.suffix) == 1 and wire.batched != layout.batched:
        side = (
            "input modules hand the residual on"
            if len(evidence.inputs) == 1
            else "output modules read the residual"
        )
        fix = f"the model's {side} as {layout.expected}: keep that layout at every cut"
    elif len(shape) != layout.rank:
        fix = "collapse extra streams inside the layer and hand over the residual itself"
    else:
        fix = "hand over the residual itself, not a reshaped or widened copy"
    token = 1 if layout.batched else 0
    if "T" not in shape and len(shape) > token and shape[token].isdigit():
        fix = f"its token dim is the fixed size {shape[token]}: the export specialised T (GC403)"
    return (
        f"is {dtype} [{', '.join(shape)}], but the pipeline wire is one bf16 "
        f"{layout.expected} tensor (the residual stream); {fix}{_declare_hint(dtype, shape)}"
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


def _ambiguous(widths: list[int]) -> Diagnostic:
    return Diagnostic.at(
        CODE,
        NAME,
        f"the model shows several residual widths {widths} (the input modules' "
        "output and what the output modules read differ), so the wire's width cannot be "
        f"checked; make both the hidden size, or declare the boundary state with {_DECLARE}",
    )


def _ambiguous_layout(evidence: ResidualEvidence) -> Diagnostic:
    width = evidence.width if evidence.width is not None else "H"
    return Diagnostic.at(
        CODE,
        NAME,
        f"the model shows its residual stream both as [T, {width}] and as [1, T, {width}] "
        "(among what the input modules hand on and among what the output modules read), "
        "so the wire's layout cannot be told; keep one layout, or declare the boundary "
        f"state with {_DECLARE}",
    )
