"""Crossing sets: what a pipeline cut has to carry.

One sweep over the flow edges buckets every edge under the boundaries its
live range spans (an edge ``u -> w`` can cross boundary ``k`` when
``earliest(u) < k <= latest(w)``). For a boundary the proof then solves a small
minimum vertex cut over its bucket alone: layer and edge-module nodes pinned
to their side, glue free to run on either side, each value costing one unit
(a hair more when it is not bf16, is a view or is not the boundary state the
model declares, so among equally small cuts the declared state, else a bf16
value, wins). The cut is the set of values the wire must carry under the best
placement of the glue.

Replicated side inputs, shared parameters and symbolic sizes that the right
side reads are listed too: they are part of what a reviewer wants to see.

In-place writes are dataflow (``passes/link_mutations_pass.py``): a node also reads
the writes into storage it reads through an older alias, and a buffer written on one
side of a cut and read, before this step's first write, on the other crosses the cut
as an activation (the value the next step reads).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import networkx as nx
import torch
import torch.fx

from graphcheck.analysis.fx import is_view_node, op_name, tensor_val
from graphcheck.analysis.program import Program
from graphcheck.analysis.regions import RegionKind
from graphcheck.analysis.taint import Role
from graphcheck.diagnostics import source_line
from graphcheck.results.values import CrossingValue

__all__ = ["Crossing", "CutAnalysis", "analyse_cut", "analyse_cuts", "copies_data", "live_edges"]

_UNIT = 1000


@dataclass(frozen=True)
class Crossing:
    """One value in a crossing set."""

    node: torch.fx.Node
    role: Role
    dtype: str | None
    shape: list[str] | None
    producer: str
    consumers: list[str]

    def as_dict(self) -> dict:
        return {
            "node": self.node.name,
            "role": self.role,
            "dtype": self.dtype,
            "shape": self.shape,
            "producer": self.producer,
            "consumers": self.consumers,
        }

    def snapshot(self) -> CrossingValue:
        """The value as plain data, for the report (its node by name, its source line)."""
        return CrossingValue(
            self.node.name, self.role, self.dtype, self.shape, self.producer,
            list(self.consumers), source_line(self.node),
        )  # fmt: skip


@dataclass
class CutAnalysis:
    """The crossing set of boundary ``position`` (before layer ``position``)."""

    position: int
    crossing: list[Crossing] = field(default_factory=list)
    left: set[torch.fx.Node] = field(default_factory=set)  # free glue placed left

    def on_left(self, program: Program, node: torch.fx.Node) -> bool:
        lo, hi = program.interval[node]
        if hi < self.position:
            return True
        if lo >= self.position:
            return False
        return node in self.left

    @property
    def activations(self) -> list[torch.fx.Node]:
        return [c.node for c in self.crossing if c.role == Role.ACTIVATION]


def live_edges(program: Program) -> list[list[tuple[torch.fx.Node, torch.fx.Node]]]:
    """For every boundary 0..L, the flow edges whose live range spans it (one sweep)."""
    buckets: list[list] = [[] for _ in range(program.num_layers + 1)]
    for w, (_, hi) in program.interval.items():
        for u in _reads(program, w):
            if u not in program.interval:
                continue
            lo = program.interval[u][0]
            for k in range(max(lo + 1, 0), min(hi, program.num_layers) + 1):
                buckets[k].append((u, w))
    return buckets


def _reads(program: Program, node: torch.fx.Node) -> list[torch.fx.Node]:
    """What ``node`` reads: its arguments and the writes linked to it."""
    extra = program.mutation_inputs.get(node)
    return [*node.all_input_nodes, *extra] if extra else node.all_input_nodes


def _readers(program: Program, node: torch.fx.Node) -> list[torch.fx.Node]:
    """Inverse of :func:`_reads` (the linked readers of a write, then its users)."""
    if node not in program.writes:
        return list(node.users)
    linked = [n for n, extra in program.mutation_inputs.items() if node in extra]
    return [*node.users, *linked]


def _weight(program: Program, node: torch.fx.Node) -> int:
    """A unit per value, a hair more for a value that is not bf16 or is a view and, when
    the model declares its boundary state, for a value that is not that state: among
    equally small cuts the declared state is the one handed over (at cut 0 and L too,
    where glue could run on either side of it)."""
    val = node.meta.get("val")
    bf16 = isinstance(val, torch.Tensor) and val.dtype == torch.bfloat16
    view = is_view_node(node) and not copies_data(node)
    state = program.layout.boundary_state
    other = state is not None and not state.matches(program.dtype(node), program.shape(node))
    return _UNIT + (0 if bf16 else 1) + (1 if view else 0) + (3 if other else 0)


def copies_data(node: torch.fx.Node) -> bool:
    """A view-typed op that copied: ``.contiguous()`` of a non-contiguous tensor,
    ``.to()`` into another dtype or with ``copy=True``."""
    name = op_name(node.target)
    src = tensor_val(node.args[0]) if node.args else None
    out = tensor_val(node)
    if src is None or out is None:
        return False
    if name.startswith("aten.to."):
        return src.dtype != out.dtype or bool(node.kwargs.get("copy"))
    if name == "aten.contiguous.default":
        try:
            return not bool(src.is_contiguous())
        except Exception:  # an undecidable stride: keep treating it as a view
            return False
    return False


def _min_cut(
    program: Program, k: int, edges, forced_left: frozenset = frozenset()
) -> tuple[list[torch.fx.Node], set[torch.fx.Node]]:
    """Values on the wire at boundary ``k`` and the free nodes placed left.

    ``forced_left`` are free nodes an earlier cut of the same plan already placed
    on its left: they are left of ``k`` too."""
    if not edges:
        return [], set()
    g = nx.DiGraph()
    nodes = {n for edge in edges for n in edge}
    for v in nodes:
        lo, hi = program.interval[v]
        if lo >= k:
            g.add_edge(("in", v), "T")
            g.add_edge(("out", v), "T")
            continue
        if hi < k or v in forced_left:
            g.add_edge("S", ("in", v))
        g.add_edge(("in", v), ("out", v), capacity=_weight(program, v))
        g.add_edge(("out", v), ("in", v))
    for u, w in edges:
        g.add_edge(("out", u), ("in", w))
        g.add_edge(("in", w), ("in", u))
    if "S" not in g:
        return [], set()
    _, (source_side, _) = nx.minimum_cut(g, "S", "T")
    wire = [v for v in nodes if ("in", v) in source_side and ("out", v) not in source_side]
    left = {v for v in nodes if ("in", v) in source_side}
    order = {n: i for i, n in enumerate(program.graph.nodes)}
    return sorted(wire, key=order.__getitem__), left


def analyse_cut(program: Program, k: int, edges, forced_left=frozenset()) -> CutAnalysis:
    """The crossing set of boundary ``k`` given its live ``edges``."""
    wire, left = _min_cut(program, k, edges, forced_left)
    cut = CutAnalysis(k, left=left)
    right = [n for n in program.interval if not cut.on_left(program, n)]
    right += [n for n, r in program.region.items() if _runs_right(program, n, r, k)]
    crossing = [_crossing(program, cut, v, program.role[v]) for v in wire]
    crossing += _persisted(program, cut, wire)
    crossing += _side_inputs(program, cut, right)
    cut.crossing = crossing
    return cut


def _persisted(program: Program, cut: CutAnalysis, wire) -> list[Crossing]:
    """Buffer writes read next step on the other side of ``cut`` (an activation)."""
    found = []
    for state in program.persisted:
        if state.writer in wire or state.writer not in program.interval:
            continue
        side = cut.on_left(program, state.writer)
        readers = [r for r in state.readers if (not side) in _sides(program, cut, r)]
        if readers:
            base = _crossing(program, cut, state.writer, Role.ACTIVATION)
            consumers = list(dict.fromkeys(program.label(r) for r in readers))
            found.append(Crossing(**{**base.__dict__, "consumers": consumers}))
    return found


def _sides(program: Program, cut: CutAnalysis, node: torch.fx.Node) -> set[bool]:
    """The sides of ``cut`` ``node`` runs on (``True``: left): both, for replicated glue."""
    if node in program.interval:
        return {cut.on_left(program, node)}
    region = program.region[node]
    if region.kind == RegionKind.LAYER:
        return {region.layer < cut.position}
    if region.kind in (RegionKind.INPUT, RegionKind.OUTPUT):
        return {region.kind == RegionKind.INPUT}
    return {True, False}


def _runs_right(program: Program, node, region, k: int) -> bool:
    """Non-flow nodes inside a right-hand layer or the output modules."""
    if node in program.interval or node.op != "call_function":
        return False
    return region.kind == RegionKind.OUTPUT or (
        region.kind == RegionKind.LAYER and region.layer >= k
    )


def analyse_cuts(
    program: Program,
    positions: list[int],
    plan: bool = False,
    progress: Callable[[int], None] | None = None,
) -> list[CutAnalysis]:
    """Crossing sets of ``positions``. Alone (``plan=False``, the cut map) each boundary
    is judged as the only cut. As the cuts of one plan (``plan=True``) the glue placement
    is kept consistent: a node an earlier cut runs on its left runs left of every later
    cut too, so every reported crossing set belongs to one placement of the whole plan.
    ``progress(done)`` is called after each cut."""
    buckets = live_edges(program)
    found, left = [], set()
    for k in positions:
        cut = analyse_cut(program, k, buckets[k], frozenset(left) if plan else frozenset())
        left |= cut.left
        found.append(cut)
        if progress is not None:
            progress(len(found))
    return found


def _crossing(program: Program, cut: CutAnalysis, node, role: Role) -> Crossing:
    consumers = []
    for user in _readers(program, node):
        flow_right = user in program.interval and not cut.on_left(program, user)
        if flow_right or _runs_right(program, user, program.region[user], cut.position):
            label = program.label(user)
            if label not in consumers:
                consumers.append(label)
    return Crossing(
        node, role, program.dtype(node), program.shape(node), program.label(node), consumers
    )


def _side_inputs(program: Program, cut: CutAnalysis, right) -> list[Crossing]:
    """Non-flow values (replicated, parameters, sizes) read on the right, made elsewhere."""
    found: dict[torch.fx.Node, Role] = {}
    for consumer in right:
        for arg in consumer.all_input_nodes:
            if arg in program.interval or arg in found:
                continue
            role = _side_role(program, cut, arg)
            if role is not None:
                found[arg] = role
    order = {n: i for i, n in enumerate(program.graph.nodes)}
    ranked = sorted(found, key=lambda n: (_ROLE_ORDER[found[n]], order[n]))
    return [_crossing(program, cut, n, found[n]) for n in ranked]


_ROLE_ORDER = {Role.PARAMETER: 0, Role.REPLICATED: 1, Role.SYMBOLIC: 2}


def _side_role(program: Program, cut: CutAnalysis, node: torch.fx.Node) -> Role | None:
    region = program.region[node]
    if region.kind == RegionKind.LAYER and region.layer >= cut.position:
        return None  # computed on the right itself
    if region.kind == RegionKind.PARAMETER:
        users = [u for u in node.users if u in program.interval]
        sides = {cut.on_left(program, u) for u in users}
        return Role.PARAMETER if sides == {True, False} else None
    return program.role[node] if program.role[node] != Role.PARAMETER else None
