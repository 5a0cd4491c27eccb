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

``hidden`` is not a model input: it is the bf16 residual a later pipeline stage takes
in place of ``input_ids`` (:data:`HIDDEN`), shaped as the model lays the residual out:
``[1, T, H]``, or ``[T, H]`` for varlen code that drops the batch dim
(:class:`graphcheck.model.boundary.WireShape`; its token dim is ``T``).

>>> from graphcheck.model.boundary import WireShape
>>> list(example_values((2, 3), ("hidden",), WireShape((8,), batched=False))["hidden"].shape)
[5, 8]
>>> hidden_dim(WireShape((8,), batched=False)), hidden_dim(8)
(0, 1)

The export traces one example batch (:class:`ExampleBatch`, chosen by
:func:`example_batch` from ``--docs``, ``--tokens`` and ``--token-multiple``):

>>> example_batch().docs, example_batch(docs=4, tokens=64).docs
((7, 12, 10), (14, 15, 17, 18))
>>> example_batch(token_multiple=4)
ExampleBatch(docs=(11, 12, 13), multiple=4)
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import IntFlag, StrEnum

from graphcheck.errors import UsageError

__all__ = [
    "BY_NAME",
    "EXAMPLE_DOCS",
    "HIDDEN",
    "INPUTS",
    "ExampleBatch",
    "Structure",
    "Taint",
    "VarlenInput",
    "WireShape",
    "example_batch",
    "example_values",
    "hidden_dim",
    "model_inputs",
    "rows",
    "split_tokens",
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
# A later stage's incoming residual: an activation, so it carries parameter taint too. Its
# token dim is 1 of the batched [1, T, H]; hidden_dim gives it for a wire of another layout.
HIDDEN = VarlenInput(
    "hidden", 1, "T", "T", "bfloat16", Taint.TOKENS | Taint.PARAM, Structure.TOKENS
)
BY_NAME = {row.name: row for row in (*INPUTS, HIDDEN)}


@functools.cache
def rows(hidden_dim: int = 1) -> dict[str, VarlenInput]:
    """:data:`BY_NAME` with ``hidden``'s token dim at ``hidden_dim`` (0 for a flat wire
    ``[T, H]``): the table of one export.

    >>> rows(0)["hidden"].dim, rows()["hidden"].dim, rows(0)["input_ids"].dim
    (0, 1, 1)
    """
    if hidden_dim == HIDDEN.dim:
        return BY_NAME
    return {**BY_NAME, HIDDEN.name: replace(HIDDEN, dim=hidden_dim)}


@dataclass(frozen=True)
class WireShape:
    """The shape of the one tensor a cut hands over: the token dim ``T`` (after a batch
    dim of 1 when ``batched``), then the fixed trailing dims ``suffix``.

    >>> flat = WireShape((64,), batched=False)
    >>> flat.dims, flat.rank, flat.token_dim, flat.sizes(29), flat.text
    (['T', '64'], 2, 0, (29, 64), '[T, 64]')
    >>> WireShape.of(["1", "T", "4", "64"])
    WireShape(suffix=(4, 64), batched=True)
    >>> WireShape.of(["T", "T"]), WireShape.of(["2", "T", "64"]), WireShape.of(["T"])
    (None, None, None)
    """

    suffix: tuple[int, ...]
    batched: bool = True

    @classmethod
    def of(cls, shape: Sequence[str] | None) -> WireShape | None:
        """The wire a value shaped ``shape`` (as the analysis prints shapes) is: ``[T,
        d...]`` or ``[1, T, d...]`` with fixed ``d``; ``None`` for any other shape."""
        dims = list(shape or ())
        lead = 1 if dims[:2] == ["1", "T"] else 0
        rest = dims[lead + 1 :]
        if dims[lead : lead + 1] != ["T"] or not rest or not all(d.isdigit() for d in rest):
            return None
        return cls(tuple(int(d) for d in rest), batched=bool(lead))

    @classmethod
    def coerce(cls, value: WireShape | int | Sequence[int] | None) -> WireShape | None:
        """``value`` as a wire: a width ``H`` or a suffix is the batched ``[1, T, ...]``
        (what stage inputs were before the flat layout), ``0`` or ``None`` no wire."""
        if value is None or isinstance(value, WireShape):
            return value
        if isinstance(value, int):
            return cls((value,)) if value else None
        return cls(tuple(value))

    @property
    def rank(self) -> int:
        return len(self.suffix) + (2 if self.batched else 1)

    @property
    def token_dim(self) -> int:
        return 1 if self.batched else 0

    @property
    def dims(self) -> list[str]:
        """The shape as the analysis prints it (``['1', 'T', '64']``)."""
        return [*(["1"] if self.batched else []), "T", *map(str, self.suffix)]

    @property
    def text(self) -> str:
        return f"[{', '.join(self.dims)}]"

    def sizes(self, tokens: int) -> tuple[int, ...]:
        """The real shape of the wire of a batch of ``tokens`` tokens."""
        return (*((1,) if self.batched else ()), tokens, *self.suffix)

    def matches(self, shape: Sequence[str] | None) -> bool:
        return list(shape or ()) == self.dims

    def as_dict(self) -> dict:
        return {"rank": self.rank, "shape": self.dims}


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


Hidden = "WireShape | int | tuple[int, ...]"


def example_values(
    docs: tuple[int, ...], names: tuple[str, ...], hidden_size: Hidden = 0
) -> dict[str, object]:
    """Values of the inputs ``names`` for documents of lengths ``docs`` (zeros for the
    token inputs; under a fake mode they are fake). ``hidden_size`` is the wire
    ``hidden`` takes: a :class:`~graphcheck.model.boundary.WireShape`, or a width
    (a suffix) of the batched ``[1, T, ...]``.

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


def _wire(hidden_size: Hidden) -> WireShape:
    return WireShape.coerce(hidden_size) or WireShape((0,))


def hidden_dim(hidden_size: Hidden) -> int:
    """The token dim of the wire ``hidden`` takes (1 of ``[1, T, ...]``, 0 of ``[T, ...]``)."""
    return _wire(hidden_size).token_dim


def _hidden(docs: tuple[int, ...], hidden_size: Hidden):
    """The bf16 wire: ``[1, T, H]``, ``[T, H]``, or the shape of a declared boundary state."""
    import torch

    return torch.zeros(_wire(hidden_size).sizes(sum(docs)), dtype=torch.bfloat16)


_VALUES = {
    Structure.TOKENS: _tokens,
    Structure.POSITIONS: lambda docs, row: _tensor(
        [[i for n in docs for i in range(n)]], row.dtype
    ),
    Structure.BOUNDARIES: lambda docs, row: _tensor(_bounds(docs), row.dtype),
    Structure.MAX_LENGTH: lambda docs, row: max(docs),
}


# --- the example batch the export traces ---------------------------------------------

EXAMPLE_DOCS = (7, 12, 10)  # T = 29 tokens in N = 3 documents
_DOCUMENTS = 3  # without --docs: 3 documents (fewer when T is small)
_TOKENS_PER_DOCUMENT = 10  # without --tokens: T = 10 N - 1 (29 for 3 documents)


@dataclass(frozen=True)
class ExampleBatch:
    """The document lengths the export traces, and ``multiple``: T is exported as
    ``multiple * Tk`` (``--token-multiple``), so the proof holds for every T that is a
    multiple of it (``1``: every T)."""

    docs: tuple[int, ...] = EXAMPLE_DOCS
    multiple: int = 1


def example_batch(
    docs: int | Sequence[int] | None = None,
    tokens: int | None = None,
    token_multiple: int | None = None,
) -> ExampleBatch:
    """The example batch for ``docs`` (a count of documents, or their lengths), ``tokens``
    (T) and ``token_multiple`` (T a multiple of it); raises :class:`UsageError` on a
    combination that does not make one. A count is split over T as evenly as distinct
    lengths allow; without ``tokens`` T is ``10 N - 1`` (rounded up to a multiple of
    ``token_multiple``, an odd number of times it)."""
    multiple = _positive("--token-multiple", 1 if token_multiple is None else token_multiple)
    if tokens is not None:
        _positive("--tokens", tokens)
    if docs is None and tokens is None and multiple == 1:
        return ExampleBatch()
    if docs is not None and not isinstance(docs, int):
        lengths = _lengths(docs, tokens)
    else:
        count = _positive("--docs", docs) if docs is not None else None
        total = tokens if tokens is not None else _default_tokens(count or _DOCUMENTS, multiple)
        count = count if count is not None else min(_DOCUMENTS, max(1, total // 4))
        lengths = split_tokens(total, count)
    _check_multiple(sum(lengths), multiple)
    return ExampleBatch(lengths, multiple)


def _positive(flag: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{flag} must be a positive whole number, got {value!r}")
    return value


def _lengths(docs: Sequence[int], tokens: int | None) -> tuple[int, ...]:
    lengths = tuple(docs)
    if not lengths or any(isinstance(n, bool) or not isinstance(n, int) for n in lengths):
        raise UsageError(f"--docs must be a count or a list of lengths, got {list(lengths)}")
    if min(lengths) < 1:
        raise UsageError(f"--docs: every document needs at least one token, got {list(lengths)}")
    if tokens is not None and sum(lengths) != tokens:
        raise UsageError(
            f"--docs {','.join(map(str, lengths))} holds {sum(lengths)} tokens, not --tokens "
            f"{tokens}: give one of them, or lengths that add up to it"
        )
    if max(lengths) < 2:
        raise UsageError("--docs: the longest document needs 2 tokens (1 would specialise)")
    return lengths


def _check_multiple(tokens: int, multiple: int) -> None:
    if tokens % multiple:
        raise UsageError(
            f"the example batch holds {tokens} tokens, not a multiple of --token-multiple "
            f"{multiple}: choose --tokens or --docs to match"
        )
    if multiple > 1 and tokens < 2 * multiple:
        raise UsageError(
            f"--token-multiple {multiple} needs at least {2 * multiple} tokens "
            f"(T / {multiple} = 1 would specialise), got {tokens}"
        )


def _default_tokens(count: int, multiple: int) -> int:
    tokens = _TOKENS_PER_DOCUMENT * count - 1
    if multiple == 1:
        return tokens
    times = max(2, -(-tokens // multiple))
    return multiple * (times + 1 - times % 2)  # an odd number of times: not a power of two


def split_tokens(tokens: int, count: int) -> tuple[int, ...]:
    """``tokens`` over ``count`` documents of at least 2 tokens: distinct lengths around
    the mean, else as even as possible.

    >>> split_tokens(64, 4), split_tokens(29, 3), split_tokens(8, 4)
    ((14, 15, 17, 18), (8, 10, 11), (2, 2, 2, 2))
    """
    if tokens < 2 * count:
        plural = "s" if count > 1 else ""
        raise UsageError(
            f"--tokens {tokens} cannot hold {count} document{plural} of 2 tokens or more"
        )
    if count == 1:
        return (tokens,)
    base, extra = divmod(tokens, count)
    half = count // 2
    offsets = [i - half + (count % 2 == 0 and i >= half) for i in range(count)]
    lengths = [base + o + (i >= count - extra) for i, o in enumerate(offsets)]
    if lengths[0] < 2:
        lengths = [base + (i >= count - extra) for i in range(count)]
    return tuple(lengths)
