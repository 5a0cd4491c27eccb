"""Place the nodes that carry state (activations and weight-derived values).

Every such *flow* node gets an interval ``[earliest, latest]`` of layer
positions it can run at: layer ``i`` nodes are pinned to ``i``, the input
modules to -1, the output modules to L (the number of layers). Model-level glue
is free between its producers and its consumers; the proof decides where it
runs. Boundary ``k`` (before layer ``k``) separates positions ``< k`` from
``>= k``, so a node is free at ``k`` when ``earliest < k <= latest``.

Edge-module nodes whose dataflow contradicts their pin (an embedding applied
to a layer's output, a final norm feeding a layer) are left free and recorded
in :attr:`PlaceNodesPass.misplaced` (GC102); an edge running against the layer
order (layer 5 feeding layer 3) is recorded in :attr:`backward` (GC101).
"""

from __future__ import annotations

from collections.abc import Callable

import torch.fx

from graphcheck.analysis.regions import GRAPH_OUTPUT, INPUT, OUTPUT, Region, RegionKind
from graphcheck.analysis.taint import Role

__all__ = ["FLOW_ROLES", "PlaceNodesPass"]

FLOW_ROLES = (Role.ACTIVATION, Role.PARAMETER)


class PlaceNodesPass:
    """``inputs(node)`` are the values ``node`` reads: its arguments, plus the in-place
    writes into storage it reads through an older alias (link mutations pass)."""

    def __init__(
        self,
        region: dict[torch.fx.Node, Region],
        role,
        num_layers: int,
        inputs: Callable[[torch.fx.Node], list[torch.fx.Node]] | None = None,
    ) -> None:
        self.region = region
        self.role = role
        self.num_layers = num_layers
        self.inputs = inputs or (lambda node: node.all_input_nodes)
        self.interval: dict[torch.fx.Node, tuple[int, int]] = {}
        self.misplaced: list[tuple[torch.fx.Node, int, int]] = []
        self.backward: list[tuple[torch.fx.Node, torch.fx.Node]] = []

    def is_flow(self, node: torch.fx.Node) -> bool:
        if self.region.get(node) == GRAPH_OUTPUT:
            return True
        return node.op == "call_function" and self.role.get(node) in FLOW_ROLES

    def run(self, graph: torch.fx.Graph) -> None:
        nodes = [n for n in graph.nodes if self.is_flow(n)]
        pins = {n: p for n in nodes if (p := self._layer_pin(n)) is not None}
        early, late = self._sweep(nodes, pins)
        for node in nodes:
            kind = self.region[node]
            if kind in (INPUT, OUTPUT):
                pin = -1 if kind == INPUT else self.num_layers
                if early[node] <= pin <= late[node]:
                    pins[node] = pin
                else:
                    self.misplaced.append((node, early[node], late[node]))
        early, late = self._sweep(nodes, pins)
        self.interval = {n: (early[n], late[n]) for n in nodes}
        self.backward = [(u, w) for w in nodes for u in self.flow_inputs(w) if early[u] > late[w]]

    def flow_inputs(self, node: torch.fx.Node) -> list[torch.fx.Node]:
        return [a for a in self.inputs(node) if self.is_flow(a)]

    def _layer_pin(self, node: torch.fx.Node) -> int | None:
        region = self.region[node]
        if region.kind == RegionKind.LAYER:
            return region.layer
        return self.num_layers if region == GRAPH_OUTPUT else None

    def _sweep(self, nodes, pins) -> tuple[dict, dict]:
        early: dict[torch.fx.Node, int] = {}
        readers: dict[torch.fx.Node, list[torch.fx.Node]] = {}
        for node in nodes:
            ins = self.flow_inputs(node)
            for arg in ins:
                readers.setdefault(arg, []).append(node)
            early[node] = pins.get(node, max((early[a] for a in ins), default=-1))
        late: dict[torch.fx.Node, int] = {}
        for node in reversed(nodes):
            outs = [late[u] for u in readers.get(node, ()) if u in late]
            late[node] = pins.get(node, min(outs, default=self.num_layers))
        return early, late
