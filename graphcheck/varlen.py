"""The packed-varlen inputs: one table every part of graphcheck reads.

A packed batch is one row of T tokens holding N documents back to back. A model
(or a pipeline stage) takes it as the inputs below; the export makes T, N + 1 and
the max lengths symbolic, the taint pass starts from each input's taint, the
locality pass from its structure, GC403 checks its symbolic dim, and the gate
builds real values from document lengths. A new input is one row.

>>> [row.name for row in INPUTS]
['input_ids', 'position_ids', 'cu_seq_lens_q', 'cu_seq_lens_k', 'max_length_q', 'max_length_k']
>>> BY_NAME["cu_seq_lens_q"].symbol, BY_NAME["cu_seq_lens_q"].dim
('N+1', 0)
>>> values = example_values((2, 3), ("position_ids", "max_length_q"))
>>> values["position_ids"].tolist(), values["max_length_q"]
([[0, 1, 0, 1, 2]], 3)

``hidden`` is not a model input: it is the bf16 residual ``[1, T, H]`` a later
pipeline stage takes in place of ``input_ids`` (:data:`HIDDEN`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from enum import IntFlag, StrEnum

__all__ = [
    "BY_NAME",
    "HIDDEN",
    "INPUTS",
    "Structure",
    "Taint",
    "VarlenInput",
    "example_values",
    "model_inputs",
    "stage_inputs",
]


class Taint(IntFlag):
    """What a value depends on (the taint pass's lattice; a join is a union)."""

    NONE = 0
    TOKENS = 1 << 0  # input_ids
    DOCS = 1 << 1  # document boundaries: cu_seq_lens_*, position_ids
    POSITIONS = 1 << 2  # position_ids
    MAXLEN = 1 << 3  # max_length_*
    PARAM = 1 << 4  # parameters
    LENGTH = 1 << 5  # sizes derived from T or N (arange over T, ...)
    ARANGE = 1 << 6  # index ramps (arange): positions or masks made from T
    DATA = TOKENS | DOCS | POSITIONS | MAXLEN


class Structure(StrEnum):
    """What an input is to the token-locality proof."""

    TOKENS = "tokens"  # one value per token, independent across tokens
    POSITIONS = "positions"  # position of each token in its document
    BOUNDARIES = "boundaries"  # cumulative document offsets [0, ..., T]
    MAX_LENGTH = "max length"  # the longest document, a scalar


@dataclass(frozen=True)
class VarlenInput:
    """One packed-varlen input.

    ``dim`` is the symbolic dimension (``None`` for a scalar), ``dim_name`` the name
    the export gives it (``T``, ``N1``; ``None``: a dynamic scalar), ``symbol`` how
    reports print it, ``dtype`` the torch dtype's name (``None``: a Python int)."""

    name: str
    dim: int | None
    dim_name: str | None
    symbol: str
    dtype: str | None
    taint: Taint
    structure: Structure

    def value(self, docs: tuple[int, ...]):
        """A real value of this input for documents of lengths ``docs``."""
        return _VALUES[self.structure](docs, self)


INPUTS = (
    VarlenInput("input_ids", 1, "T", "T", "int64", Taint.TOKENS, Structure.TOKENS),
    VarlenInput(
        "position_ids",
        1,
        "T",
        "T",
        "int64",
        Taint.POSITIONS | Taint.DOCS,
        Structure.POSITIONS,
    ),
    VarlenInput("cu_seq_lens_q", 0, "N1", "N+1", "int32", Taint.DOCS, Structure.BOUNDARIES),
    VarlenInput("cu_seq_lens_k", 0, "N1", "N+1", "int32", Taint.DOCS, Structure.BOUNDARIES),
    VarlenInput("max_length_q", None, None, "max_q", None, Taint.MAXLEN, Structure.MAX_LENGTH),
    VarlenInput("max_length_k", None, None, "max_k", None, Taint.MAXLEN, Structure.MAX_LENGTH),
)
# A later stage's incoming residual: an activation, so it carries parameter taint too.
HIDDEN = VarlenInput(
    "hidden", 1, "T", "T", "bfloat16", Taint.TOKENS | Taint.PARAM, Structure.TOKENS
)
BY_NAME = {row.name: row for row in (*INPUTS, HIDDEN)}


def model_inputs() -> tuple[str, ...]:
    """The names a model's ``forward`` may take, in order."""
    return tuple(row.name for row in INPUTS)


def stage_inputs(first: str) -> tuple[str, ...]:
    """The positional inputs of a stage module: ``x`` (``input_ids`` on the first stage,
    ``hidden`` on the others), then the rest of the varlen inputs.

    >>> stage_inputs("hidden")[:2]
    ('hidden', 'position_ids')
    """
    return (first, *model_inputs()[1:])


def example_values(
    docs: tuple[int, ...], names: tuple[str, ...], hidden_size: int = 0
) -> dict[str, object]:
    """Values of the inputs ``names`` for documents of lengths ``docs`` (zeros for the
    token inputs; under a fake mode they are fake).

    >>> example_values((2, 1), ("cu_seq_lens_k",))["cu_seq_lens_k"].tolist()
    [0, 2, 3]
    """
    values = {}
    for name in names:
        values[name] = _hidden(docs, hidden_size) if name == "hidden" else BY_NAME[name].value(docs)
    return values


def _bounds(docs: tuple[int, ...]) -> list[int]:
    return list(itertools.accumulate(docs, initial=0))


def _tensor(data, dtype: str):
    import torch

    return torch.tensor(data, dtype=getattr(torch, dtype))


def _tokens(docs: tuple[int, ...], row: VarlenInput):
    import torch

    return torch.zeros(1, sum(docs), dtype=getattr(torch, row.dtype))


def _hidden(docs: tuple[int, ...], hidden_size: int):
    import torch

    return torch.zeros(1, sum(docs), hidden_size, dtype=torch.bfloat16)


_VALUES = {
    Structure.TOKENS: _tokens,
    Structure.POSITIONS: lambda docs, row: _tensor(
        [[i for n in docs for i in range(n)]], row.dtype
    ),
    Structure.BOUNDARIES: lambda docs, row: _tensor(_bounds(docs), row.dtype),
    Structure.MAX_LENGTH: lambda docs, row: max(docs),
}
