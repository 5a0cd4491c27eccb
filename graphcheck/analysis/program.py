"""The analysed program: an export plus regions, taint, roles and placement.

:func:`analyse` runs the passes in order (assign regions → propagate taint →
link mutations → place nodes); everything downstream reads the :class:`Program` it returns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import sympy
import torch
import torch.fx

from graphcheck.analysis.export import Exported
from graphcheck.analysis.locality import Tokens
from graphcheck.analysis.passes.assign_regions_pass import AssignRegionsPass
from graphcheck.analysis.passes.link_mutations_pass import LinkMutationsPass
from graphcheck.analysis.passes.place_nodes_pass import PlaceNodesPass
from graphcheck.analysis.passes.propagate_locality_pass import PropagateLocalityPass
from graphcheck.analysis.passes.propagate_taint_pass import PropagateTaintPass
from graphcheck.analysis.regions import Region, RegionKind
from graphcheck.analysis.taint import Role
from graphcheck.diagnostics import module_path
from graphcheck.errors import AnalysisError
from graphcheck.model.layout import Layout
from graphcheck.varlen import Taint

__all__ = ["Program", "analyse", "tokens_of"]


@dataclass
class Program:
    exported: Exported
    layout: Layout
    region: dict[torch.fx.Node, Region]
    owner: dict[torch.fx.Node, str]
    taint: dict[torch.fx.Node, Taint]
    role: dict[torch.fx.Node, Role]
    interval: dict[torch.fx.Node, tuple[int, int]]
    user_inputs: dict[str, torch.fx.Node]
    misplaced: list[tuple[torch.fx.Node, int, int]] = field(default_factory=list)
    backward: list[tuple[torch.fx.Node, torch.fx.Node]] = field(default_factory=list)
    leaks: dict[torch.fx.Node, str] = field(default_factory=dict)  # GC401 origins -> reason
    fabricated: dict[torch.fx.Node, str] = field(default_factory=dict)  # GC402 origins
    # GC404: buffers the forward only accumulates into -> their own leak origins, reasons
    step_state: dict[torch.fx.Node, dict[torch.fx.Node, str]] = field(default_factory=dict)
    # GC401: the first op over a T the export fixed to a constant (documents untracked)
    untracked: dict[torch.fx.Node, str] = field(default_factory=dict)
    # in-place writes (see passes/link_mutations_pass.py): extra write -> read edges,
    # every write with the storage root it writes, and state carried to the next step
    mutation_inputs: dict[torch.fx.Node, list[torch.fx.Node]] = field(default_factory=dict)
    writes: dict[torch.fx.Node, torch.fx.Node] = field(default_factory=dict)
    persisted: list = field(default_factory=list)
    # size relations the locality pass proved (the group sizes of a split partition its
    # rows): GC403 does not report an export assert that is one of them
    facts: list = field(default_factory=list)
    # custom ops held to their trust by execution (kernels/validation): op -> OpCheck
    validated: dict = field(default_factory=dict)
    # GC403: control flow that chooses by the packed length (a cond on T) -> reason
    length_branches: dict[torch.fx.Node, str] = field(default_factory=dict)
    # the backward program's proof (--backward: analysis/backward.BackwardProof), or None
    gradients: object | None = None

    @property
    def graph(self) -> torch.fx.Graph:
        return self.exported.program.graph

    @property
    def num_layers(self) -> int:
        return self.layout.num_layers

    @property
    def parameters(self) -> list[torch.fx.Node]:
        return [n for n, r in self.region.items() if r.kind == RegionKind.PARAMETER]

    @property
    def aliases(self) -> dict[str, tuple[str, ...]]:
        """Parameter FQNs that name the same tensor (tied weights)."""
        groups: dict[int, list[str]] = {}
        for fqn, tensor in self.exported.program.state_dict.items():
            groups.setdefault(id(tensor), []).append(fqn)
        return {f: tuple(g for g in fqns if g != f) for fqns in groups.values() for f in fqns}

    @property
    def present_layers(self) -> list[int]:
        """Global indices of the layers that run (``None`` entries do not)."""
        return sorted({r.layer for r in self.region.values() if r.kind == RegionKind.LAYER})

    def neighbours(self, k: int) -> tuple[int, int | None]:
        """The running layers around boundary ``k``: the last one before it (-1: the input
        modules) and the first one after it (``None``: the output modules)."""
        present = self.present_layers
        before = max((i for i in present if i < k), default=-1)
        after = min((i for i in present if i >= k), default=None)
        return before, after

    def label(self, node: torch.fx.Node) -> str:
        """Where ``node`` runs, for reports: its module path or region."""
        if node.op == "placeholder":
            return self.owner.get(node, "input")
        path = module_path(node)
        region = self.region.get(node)
        if region is not None and region.kind == RegionKind.GLUE:
            return f"{path or '<root>'} ({self._glue_place(node)})"
        return path or str(region)

    def _glue_place(self, node: torch.fx.Node) -> str:
        """``prelude``, ``glue after layer k`` or ``epilogue``."""
        lo = self.interval.get(node, (-1, -1))[0]
        if lo < 0:
            return "prelude"
        return "epilogue" if lo >= self.num_layers else f"glue after layer {lo}"

    def shape(self, node: torch.fx.Node) -> list[str] | None:
        """Symbolic shape with readable symbol names (``['1', 'T', '64']``)."""
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):
            return [self.readable(val)]
        if not isinstance(val, torch.Tensor):
            return None
        return [self.readable(d) for d in val.shape]

    def readable(self, value) -> str:
        """``value`` with the input symbols named (``s0`` as ``T``); a name replaces
        whole symbols and products only (not the ``4*s0`` in ``14*s0``)."""
        text = str(value)
        for sym, name in sorted(self.exported.symbols.items(), key=lambda kv: -len(kv[0])):
            text = re.sub(rf"(?<![\w.]){re.escape(sym)}(?![\w.])", lambda _, n=name: n, text)
        return text

    def dtype(self, node: torch.fx.Node) -> str | None:
        val = node.meta.get("val")
        return str(val.dtype).removeprefix("torch.") if isinstance(val, torch.Tensor) else None


def analyse(
    exported: Exported, layout: Layout, token_local: frozenset[str] = frozenset()
) -> Program:
    """Run the analysis passes over ``exported``; ``token_local``: the custom ops a
    kernels file declares token-local (``"namespace::op"``)."""
    graph = exported.program.graph
    regions = AssignRegionsPass(exported.program, layout)
    regions.run(graph)
    user = dict(zip(exported.program.graph_signature.user_inputs, exported.inputs, strict=False))
    taint = PropagateTaintPass(regions.region, user)
    taint.run(graph)
    tokens = tokens_of(exported)
    locality = PropagateLocalityPass(exported.program.graph_module, user, tokens, exported.rows)
    locality.token_local = token_local
    locality.run(graph)
    mutations = LinkMutationsPass(regions.region, taint.role)
    mutations.run(graph)
    place = PlaceNodesPass(regions.region, taint.role, layout.num_layers, mutations.inputs)
    place.run(graph)
    nodes = {n.name: n for n in graph.nodes}
    program = Program(
        exported=exported,
        layout=layout,
        region=regions.region,
        owner=regions.owner,
        taint=taint.taint,
        role=taint.role,
        interval=place.interval,
        user_inputs={name: nodes[arg] for arg, name in user.items()},
        misplaced=place.misplaced,
        backward=place.backward,
        mutation_inputs=mutations.mutation_inputs,
        writes=mutations.writes,
        persisted=mutations.persisted,
        leaks=locality.leaks,
        fabricated=locality.fabricated,
        step_state=locality.step_state,
        untracked=locality.untracked,
        facts=locality.facts,
        validated=locality.validated,
        length_branches=locality.length_branches,
    )
    _check_layers_seen(program)
    return program


def tokens_of(exported: Exported) -> Tokens:
    """The packed length T for the locality pass: its expressions (``s0``; ``4*s0``
    under ``--token-multiple 4``) and the symbols they are built from."""
    length = {sym for sym, name in exported.symbols.items() if name == "T"}
    roots = {str(s) for sym in length for s in sympy.sympify(sym).free_symbols}
    return Tokens(roots, length)


def _check_layers_seen(program: Program) -> None:
    """Fail closed when a layer owns parameters but no node was attributed to it."""
    seen = {r.layer for r in program.region.values() if r.kind == RegionKind.LAYER}
    for node, fqn in program.owner.items():
        layer = program.layout.layer_of(fqn)
        if layer is not None and node.users and layer not in seen:
            raise AnalysisError(
                f"layer {layer} owns {fqn} but no operation was attributed to it "
                "(nn_module_stack missing); cannot verify"
            )
