"""Length cases: one program per branch the model's code takes on the packed length T.

``torch.export`` traces one side of every Python condition on a size. Code that
branches on T itself (torch's flex attention builds its block mask one way when all T
tokens fit in one 128-token block, another way for more) cannot be exported with T
fully symbolic: the program export returns holds for a range of T only, the range its
example lies in (``2 <= T <= 128`` for an example of 29 tokens). The other side of the
branch is another program, valid on the other range. Neither alone is a proof for every
length; together they are, when their ranges cover every T.

graphcheck exports each side: it traces an example from the first range no program
holds for yet, reads the range the new program holds for (its range constraints),
and repeats until the ranges cover every T from the declared lowest, or
:data:`MAX_PROGRAMS` programs were exported, or the gap starts past :data:`MAX_TRACED`
tokens (a range export ends near 2**63 for a data-dependent size: no batch is traced
there). Each program is proven as the first one is (cuts, rules, stage programs); the
verdict holds for every T only when every program passes and the ranges leave no gap
(otherwise GC403 stays).

>>> spans = [Span(2, 128)]
>>> first_gap(spans), example_tokens(first_gap(spans))
(Span(lo=129, hi=None), 131)
>>> first_gap([Span(2, 128), Span(129, None)]) is None
True
>>> str(Span(2, 128)), str(Span(129, None))
('2..128', '≥ 129')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.export import ExportedProgram
from torch.utils._sympy.numbers import int_oo

from graphcheck.varlen import rows

__all__ = [
    "MAX_PROGRAMS",
    "MAX_TRACED",
    "Coverage",
    "Span",
    "example_tokens",
    "first_gap",
    "token_span",
]

MAX_PROGRAMS = 4  # the programs exported for one model: the first and three more cases
MAX_TRACED = 1 << 24  # no example longer than this is traced: past any batch a trainer packs


@dataclass(frozen=True, slots=True)
class Span:
    """The lengths ``lo..hi`` (``hi`` ``None``: every T from ``lo`` on)."""

    lo: int
    hi: int | None = None

    def __str__(self) -> str:
        return f"≥ {self.lo}" if self.hi is None else f"{self.lo}..{self.hi}"

    def contains(self, tokens: int) -> bool:
        return self.lo <= tokens and (self.hi is None or tokens <= self.hi)

    def as_dict(self) -> dict:
        return {"min": self.lo, "max": self.hi}


@dataclass(frozen=True, slots=True)
class Coverage:
    """The ranges of T the programs of one model hold for (the first program's first),
    from the declared ``lowest`` T on."""

    spans: tuple[Span, ...]
    lowest: int = 2
    uncovered: str | None = None  # why no program holds for the first gap (GC403 says it)
    examples: tuple[tuple[int, ...], ...] = ()  # the document lengths each was traced on
    differs: str | None = None  # where two programs compute differently (GC403 says it)

    def as_dicts(self) -> list[dict]:
        """Each program's range and example, for reports."""
        examples = self.examples or ((),) * len(self.spans)
        return [
            span.as_dict() | {"example": list(docs)}
            for span, docs in zip(self.spans, examples, strict=True)
        ]

    @property
    def complete(self) -> bool:
        """Every T from ``lowest`` on lies in some program's range, and the programs
        agree (:mod:`graphcheck.analysis.agreement`)."""
        return first_gap(self.spans, self.lowest) is None and self.differs is None

    @property
    def split(self) -> bool:
        """More than one program: the export branched on T."""
        return len(self.spans) > 1


def first_gap(spans: Sequence[Span], lowest: int = 2) -> Span | None:
    """The first range of T from ``lowest`` on that none of ``spans`` holds for."""
    at = lowest
    for span in sorted(spans, key=lambda s: s.lo):
        if span.lo > at:
            return Span(at, span.lo - 1)
        if span.hi is None:
            return None
        at = max(at, span.hi + 1)
    return Span(at, None)


def example_tokens(gap: Span, documents: int = 1) -> int:
    """A T to trace ``gap`` with: two past its start (a length equal to a block size or
    another model dim could be taken for that dim), and room for ``documents`` of 2
    tokens, where the gap allows; else its start.

    >>> example_tokens(Span(2, 8)), example_tokens(Span(2, 8), 3), example_tokens(Span(2, 5), 3)
    (4, 6, 2)
    """
    tokens = max(gap.lo + 2, 2 * documents)
    return tokens if gap.hi is None or tokens <= gap.hi else gap.lo


def token_span(program: ExportedProgram, names: Sequence[str], hidden: int = 1) -> Span | None:
    """The range of T ``program`` holds for, from its range constraints; ``None`` when T
    is not one plain symbol of it (specialised to a constant, or exported as a multiple)."""
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    user = program.graph_signature.user_inputs
    for name, arg in zip(names, user, strict=False):
        row = rows(hidden)[name]
        if row.dim_name != "T" or row.dim is None:
            continue
        val = nodes[arg].meta.get("val")
        size = val.shape[row.dim] if isinstance(val, torch.Tensor) else val
        expr = getattr(getattr(size, "node", None), "expr", None)
        bounds = program.range_constraints.get(expr) if expr is not None else None
        if bounds is None or not expr.is_Symbol:
            return None
        return Span(int(bounds.lower), None if bounds.upper == int_oo else int(bounds.upper))
    return None
