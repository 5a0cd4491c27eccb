"""Regions: which part of the model each FX node belongs to.

Every node gets exactly one :class:`Region`: a user input, a parameter or a
buffer (from ``graph_signature``, never from names), the input modules
(embedding), ``layer[i]``, the output modules (final norm + head), model-level
glue (prelude / between layers / epilogue: where it runs is decided by the
proof), or the graph output.

>>> str(Region("layer", 3)), str(Region("glue"))
('layer[3]', 'glue')
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BUFFER", "GLUE", "GRAPH_OUTPUT", "INPUT", "OUTPUT", "PARAMETER", "USER_INPUT", "Region"]


@dataclass(frozen=True)
class Region:
    kind: str
    layer: int | None = None

    def __str__(self) -> str:
        return f"layer[{self.layer}]" if self.kind == "layer" else self.kind


USER_INPUT = Region("user_input")
PARAMETER = Region("parameter")
BUFFER = Region("buffer")
INPUT = Region("input")
OUTPUT = Region("output")
GLUE = Region("glue")
GRAPH_OUTPUT = Region("graph_output")
