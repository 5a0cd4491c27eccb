"""A tiny ``torch.fx.Interpreter``-style base: dispatch on ``node.op``."""

from __future__ import annotations

import torch.fx

__all__ = ["NodePass"]


class NodePass:
    """Visit every node of a graph in order, calling the method named ``node.op``."""

    def run(self, graph: torch.fx.Graph) -> None:
        for node in graph.nodes:
            getattr(self, node.op)(node)

    def placeholder(self, node: torch.fx.Node) -> None:
        pass

    def get_attr(self, node: torch.fx.Node) -> None:
        pass

    def call_function(self, node: torch.fx.Node) -> None:
        pass

    def call_method(self, node: torch.fx.Node) -> None:
        self.call_function(node)

    def call_module(self, node: torch.fx.Node) -> None:
        self.call_function(node)

    def output(self, node: torch.fx.Node) -> None:
        pass
