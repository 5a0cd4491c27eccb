"""Assign every node of an exported graph to one :class:`~graphcheck.analysis.regions.Region`."""

from __future__ import annotations

import torch.fx
from torch.export.graph_signature import InputKind

from graphcheck.analysis.passes.base import NodePass
from graphcheck.analysis.regions import (
    BUFFER,
    GLUE,
    GRAPH_OUTPUT,
    INPUT,
    OUTPUT,
    PARAMETER,
    USER_INPUT,
    Region,
    RegionKind,
)
from graphcheck.diagnostics import normalize_fqn
from graphcheck.model.layout import Layout

__all__ = ["AssignRegionsPass"]

_PLACEHOLDER_REGION = {InputKind.USER_INPUT: USER_INPUT, InputKind.PARAMETER: PARAMETER}


class AssignRegionsPass(NodePass):
    """Regions from the ``nn_module_stack`` values (outermost layer wins), with
    the parameter FQNs as a fallback for nodes whose stack is missing."""

    def __init__(self, program, layout: Layout) -> None:
        self.layout = layout
        specs = program.graph_signature.input_specs
        self.kinds = {spec.arg.name: spec.kind for spec in specs}
        self.targets = {spec.arg.name: spec.target for spec in specs if spec.target}
        self.region: dict[torch.fx.Node, Region] = {}
        self.owner: dict[torch.fx.Node, str] = {}

    def placeholder(self, node: torch.fx.Node) -> None:
        kind = self.kinds.get(node.name)
        self.region[node] = _PLACEHOLDER_REGION.get(kind, BUFFER)
        if node.name in self.targets:
            self.owner[node] = self.targets[node.name]

    def call_function(self, node: torch.fx.Node) -> None:
        stack = node.meta.get("nn_module_stack") or {}
        paths = [p for p in (normalize_fqn(path) for path, _cls in stack.values()) if p]
        self.region[node] = self._from_paths(paths) or self._from_parameters(node) or GLUE

    def get_attr(self, node: torch.fx.Node) -> None:
        self.region[node] = BUFFER

    def output(self, node: torch.fx.Node) -> None:
        self.region[node] = GRAPH_OUTPUT

    def _from_paths(self, paths: list[str]) -> Region | None:
        for path in paths:
            layer = self.layout.layer_of(path)
            if layer is not None:
                return Region(RegionKind.LAYER, layer)
        for path in paths:
            edge = self.layout.edge_of(path)
            if edge is not None:
                return INPUT if edge == "input" else OUTPUT
        return None

    def _from_parameters(self, node: torch.fx.Node) -> Region | None:
        found = {self._from_paths([self.owner[a]]) for a in node.all_input_nodes if a in self.owner}
        found.discard(None)
        return found.pop() if len(found) == 1 else None
