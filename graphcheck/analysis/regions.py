"""Regions: which part of the model each FX node belongs to.

Every node gets exactly one :class:`Region`: a user input, a parameter or a
buffer (from ``graph_signature``, never from names), the input modules
(embedding), ``layer[i]``, the output modules (final norm + head), model-level
glue (prelude / between layers / epilogue: where it runs is decided by the
proof), or the graph output.

>>> str(Region(RegionKind.LAYER, 3)), str(GLUE), Region("layer", 3).kind
('layer[3]', 'glue', <RegionKind.LAYER: 'layer'>)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "BUFFER",
    "GLUE",
    "GRAPH_OUTPUT",
    "INPUT",
    "OUTPUT",
    "PARAMETER",
    "USER_INPUT",
    "Region",
    "RegionKind",
]


class RegionKind(StrEnum):
    """What part of the model a node belongs to."""

    USER_INPUT = "user_input"
    PARAMETER = "parameter"
    BUFFER = "buffer"
    INPUT = "input"  # the input modules (embedding)
    LAYER = "layer"
    OUTPUT = "output"  # the output modules (final norm, head)
    GLUE = "glue"  # model-level code between them
    GRAPH_OUTPUT = "graph_output"


@dataclass(frozen=True)
class Region:
    """A region: its kind, and for ``layer`` the layer's index. A kind given as a
    string is converted (``Region("layer", 3) == Region(RegionKind.LAYER, 3)``)."""

    kind: RegionKind
    layer: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", RegionKind(self.kind))

    def __str__(self) -> str:
        return f"layer[{self.layer}]" if self.kind == RegionKind.LAYER else str(self.kind)


USER_INPUT = Region(RegionKind.USER_INPUT)
PARAMETER = Region(RegionKind.PARAMETER)
BUFFER = Region(RegionKind.BUFFER)
INPUT = Region(RegionKind.INPUT)
OUTPUT = Region(RegionKind.OUTPUT)
GLUE = Region(RegionKind.GLUE)
GRAPH_OUTPUT = Region(RegionKind.GRAPH_OUTPUT)
