"""The cost model's values: what each part of the model costs and what crosses each
boundary, per token. :func:`graphcheck.analysis.cost.costs` measures them on an exported
program (its docstring says how each number is counted); plans are balanced on them
(:mod:`graphcheck.planning.balance`) and the cut explorer draws them.

>>> keys_per_query(4, -1, 0), keys_per_query(4, 1, 0), keys_per_query(4, -1, -1)
(2.5, 1.75, 4.0)
>>> LayerCost("layer 0", 0, 10, 4.0).as_dict()["flops_per_token"]
4.0
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["DOC_LENGTH", "FIRST", "LAST", "Costs", "LayerCost", "keys_per_query"]

DOC_LENGTH = 4096  # the mean document length attention is counted at, unless given

FIRST, LAST = "first", "last"  # the parts that are not layers: embedding, norm + head


@dataclass
class LayerCost:
    """The cost of one part of the model: a decoder layer, or the first or last
    stage's own modules (``layer`` ``None``, ``name`` ``"first"``/``"last"``)."""

    name: str
    layer: int | None
    param_bytes: int = 0
    flops_per_token: float = 0.0  # matmul + attention
    attention_flops_per_token: float = 0.0
    uncounted: list[str] = field(default_factory=list)  # ops left out, "node (op)"

    def value(self, metric: str) -> float:
        """The cost planned on: ``"params"`` (bytes) or ``"flops"`` (per token)."""
        return self.param_bytes if metric == "params" else self.flops_per_token

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Costs:
    """Every part's cost: ``first`` (embedding, prelude), ``layers`` 0..L-1, ``last``
    (final norm, head, epilogue), and the bytes per token crossing each boundary."""

    first: LayerCost
    layers: list[LayerCost]
    last: LayerCost
    doc_length: int = DOC_LENGTH
    boundary_bytes_per_token: list[int | None] = field(default_factory=list)

    def values(self, metric: str) -> tuple[float, list[float], float]:
        """``(first, per layer, last)`` in ``metric`` (``params`` or ``flops``)."""
        return (
            self.first.value(metric),
            [c.value(metric) for c in self.layers],
            self.last.value(metric),
        )

    def as_dict(self) -> dict:
        return {
            "doc_length": self.doc_length,
            "first": self.first.as_dict(),
            "layers": [c.as_dict() for c in self.layers],
            "last": self.last.as_dict(),
            "boundary_bytes_per_token": self.boundary_bytes_per_token,
        }


def keys_per_query(length: int, left: int, right: int) -> float:
    """Mean keys a query attends to in a document of ``length`` tokens, with a window
    of ``left`` keys before and ``right`` after it (-1: unbounded).

    >>> keys_per_query(4096, 16, 0)  # a sliding window of 16 (17 keys with itself)
    16.966796875
    """
    n = length

    def side(w: int) -> int:  # sum over positions of min(distance to the edge, w)
        if w < 0 or w >= n - 1:
            return n * (n - 1) // 2
        return w * (w + 1) // 2 + w * (n - 1 - w)

    return (n + side(left) + side(right)) / n
