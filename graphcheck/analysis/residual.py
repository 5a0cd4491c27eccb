"""Which crossing activation is the residual stream, and what else crossed.

At boundary ``k`` the residual is the crossing activation produced by layer
``k - 1`` (or the glue right after it; the input modules for ``k = 0``) and
consumed by layer ``k`` (the output modules for ``k = L``), possibly through
glue on the right. Every other crossing activation is either a *twin* of the
residual (the same value in another dtype: a dtype cast of it, or the value it
was rounded from) or an *extra* activation.

How the model lays out its residual stream - ``[1, T, H]`` or the flat ``[T, H]`` of
varlen code, and its width ``H`` - is read from its edges, not from the cuts it is
checked at (:func:`residual_evidence`): the values the input modules (or a stage's
``hidden`` input) hand to the rest of the model, else those the output modules read.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import sympy
import torch
import torch.fx

from graphcheck.analysis.dataflow import CutAnalysis, copies_data
from graphcheck.analysis.fx import is_cast_node, is_view_node
from graphcheck.analysis.program import Program
from graphcheck.analysis.regions import RegionKind
from graphcheck.model.boundary import ResidualLayout, WireShape

__all__ = [
    "ResidualEvidence",
    "Wire",
    "cast_root",
    "classify_wire",
    "residual_evidence",
    "residual_layout",
    "view_base",
]


@dataclass(frozen=True)
class ResidualEvidence:
    """What the model's edges show of its residual stream: ``widths`` (the last dims of
    the values the input modules, or a stage's ``hidden`` input, hand to the rest of the
    model and of those the output modules read) and the layouts of those values on each
    side (``True``: ``[1, T, ...]``, ``False``: ``[T, ...]``).

    >>> ResidualEvidence(frozenset({64}), frozenset({False}), frozenset({True})).layout
    ResidualLayout(batched=False, width=64)
    >>> ResidualEvidence(frozenset({64}), frozenset({False, True}), frozenset()).layout is None
    True
    """

    widths: frozenset[int]
    inputs: frozenset[bool]
    outputs: frozenset[bool]

    @property
    def width(self) -> int | None:
        return next(iter(self.widths)) if len(self.widths) == 1 else None

    @property
    def layout(self) -> ResidualLayout | None:
        """The residual's layout: the one the input side shows, else the output side's
        (input modules may hand on parts that broadcast), ``[1, T, H]`` when neither
        shows one; ``None`` when the edges show both and neither side settles it."""
        for side in (self.inputs, self.outputs):
            if len(side) == 1:
                return ResidualLayout(next(iter(side)), self.width)
        if self.inputs or self.outputs:
            return None
        return ResidualLayout(True, self.width)


def residual_evidence(program: Program) -> ResidualEvidence:
    """The residual stream's width and layout as the model's edges show them."""
    inputs, outputs = _edge_values(program)
    widths = frozenset(d for node in (*inputs, *outputs) for d in _last_dim(node))
    return ResidualEvidence(widths, _layouts(program, inputs), _layouts(program, outputs))


def residual_layout(program: Program) -> ResidualLayout | None:
    """The residual stream's layout (``None``: the edges show both ``[T, H]`` and
    ``[1, T, H]``); a declared boundary state is checked by itself, not by this."""
    return residual_evidence(program).layout


def _edge_values(program: Program) -> tuple[list[torch.fx.Node], list[torch.fx.Node]]:
    """The values entering the model from the input modules (or a stage's ``hidden``
    input), and the values the output modules read from the model."""
    hidden = program.user_inputs.get("hidden")
    inputs, outputs = ([hidden] if hidden is not None else []), []
    for node in program.interval:
        kind = program.region[node].kind
        users = [u for u in node.users if u in program.interval]
        if kind == RegionKind.INPUT and any(program.region[u].kind != kind for u in users):
            inputs.append(node)
        if kind != RegionKind.OUTPUT and any(
            program.region[u].kind == RegionKind.OUTPUT for u in users
        ):
            outputs.append(node)
    return inputs, outputs


def _last_dim(node: torch.fx.Node) -> set[int]:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dim() == 0 or not isinstance(val.shape[-1], int):
        return set()
    return {val.shape[-1]}


def _layouts(program: Program, nodes: list[torch.fx.Node]) -> frozenset[bool]:
    wires = (WireShape.of(program.shape(node)) for node in nodes)
    return frozenset(wire.batched for wire in wires if wire is not None)


@dataclass
class Wire:
    residual: torch.fx.Node | None
    twins: list[torch.fx.Node] = field(default_factory=list)
    extras: list[torch.fx.Node] = field(default_factory=list)

    @property
    def boundary(self) -> torch.fx.Node | None:
        """The value the boundary checks look at: the residual, else a lone activation."""
        if self.residual is not None:
            return self.residual
        return self.extras[0] if len(self.extras) == 1 else None


def classify_wire(program: Program, cut: CutAnalysis) -> Wire:
    acts = cut.activations
    candidates = [a for a in acts if _is_residual(program, cut, a)]
    # an in-place write into shared state is never the residual, whatever it feeds; a
    # declared boundary state is preferred, then bf16
    state = program.layout.boundary_state
    candidates.sort(
        key=lambda a: (
            a in program.writes,
            state is not None and not state.matches(program.dtype(a), program.shape(a)),
            program.dtype(a) != "bfloat16",
        )
    )
    residual = candidates[0] if candidates else None
    wire = Wire(residual)
    for act in acts:
        if act is residual:
            continue
        if residual is not None and _is_twin(program, act, residual):
            wire.twins.append(act)
        else:
            wire.extras.append(act)
    return wire


def _is_residual(program: Program, cut: CutAnalysis, node: torch.fx.Node) -> bool:
    before, after = program.neighbours(cut.position)
    if program.interval[node][0] != before:
        return False
    return any(_is_next(program, user, after) for user in _right_readers(program, cut, node))


def _is_next(program: Program, node: torch.fx.Node, layer: int | None) -> bool:
    region = program.region[node]
    if layer is None:
        return region.kind in (RegionKind.OUTPUT, RegionKind.GRAPH_OUTPUT)
    return region.kind == RegionKind.LAYER and region.layer == layer


def _right_readers(program: Program, cut: CutAnalysis, node: torch.fx.Node):
    """Pinned readers of ``node`` on the right, looking through right-side glue."""
    todo, seen = list(node.users), set()
    while todo:
        user = todo.pop()
        if user in seen or user not in program.interval:
            continue
        seen.add(user)
        if program.region[user].kind == RegionKind.GLUE and not cut.on_left(program, user):
            todo.extend(user.users)
        elif not cut.on_left(program, user):
            yield user


def cast_root(node: torch.fx.Node) -> torch.fx.Node:
    while is_cast_node(node) and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
    return node


def _is_twin(program: Program, a: torch.fx.Node, b: torch.fx.Node) -> bool:
    return cast_root(a) is cast_root(b) and program.dtype(a) != program.dtype(b)


def view_base(node: torch.fx.Node) -> torch.fx.Node | None:
    """The materialized tensor ``node`` is a view of, when that holds more (or
    fewer) elements than ``node`` itself; ``None`` when ``node`` carries all of it.

    ``aten.contiguous`` and ``aten.to`` are typed as views (they may return their
    input), but copy when the input is not contiguous or the dtype changes: the walk
    stops at such a copy, which is a materialized tensor of its own."""
    base = node
    while is_view_node(base) and not copies_data(base):
        src = base.args[0]
        base = src.args[0] if base.target is operator.getitem else src
        if not isinstance(base, torch.fx.Node):
            return None
    if base is node:
        return None
    return base if not _same_numel(base, node) else None


def _same_numel(a: torch.fx.Node, b: torch.fx.Node) -> bool:
    va, vb = a.meta.get("val"), b.meta.get("val")
    if not isinstance(va, torch.Tensor) or not isinstance(vb, torch.Tensor):
        return False
    diff = sympy.expand(sympy.sympify(str(va.numel())) - sympy.sympify(str(vb.numel())))
    return diff == 0
