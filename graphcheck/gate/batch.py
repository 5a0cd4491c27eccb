"""Packed varlen batches with real values, for the gate.

A batch packs documents of the given lengths into one row: ``input_ids`` and
``position_ids`` ``[1, T]`` int64 (positions restart at 0 in every document),
``cu_seq_lens_q/k`` ``[N + 1]`` int32 and ``max_length_q/k`` ints, every input but
the token ids valued by its row of :data:`graphcheck.varlen.INPUTS`. Token ids are
drawn from a seeded generator, so a (lengths, vocabulary, seed) triple always
gives the same batch. The exact isolation tests (:mod:`graphcheck.gate.exact`) derive
two kinds of batch from it: :meth:`PackedBatch.perturbed` (one document kept, every
other document's tokens redrawn, lengths kept) and :meth:`PackedBatch.shifted` (every
document moved by one whole tile of the row).

>>> batch = PackedBatch.random((3, 2), vocab_size=11, seed=0)
>>> batch.position_ids.tolist(), batch.cu_seq_lens.tolist(), batch.locate(4)
([[0, 1, 2, 0, 1]], [0, 3, 5], (1, 1))
>>> alone = batch.document(1)
>>> alone.docs, torch.equal(alone.input_ids, batch.input_ids[:, 3:])
((2,), True)
>>> other = batch.perturbed(1, seed=0)
>>> other.docs, torch.equal(other.input_ids[:, 3:], batch.input_ids[:, 3:])
((3, 2), True)
>>> first, moved, tile = batch.shifted(seed=0)
>>> tile, first.docs, moved.docs, torch.equal(moved.input_ids[:, 64:69], batch.input_ids)
(64, (3, 2, 59, 64), (64, 3, 2, 59), True)
>>> parse_docs("40,7")
(40, 7)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from graphcheck.errors import UsageError
from graphcheck.options import GATE_DOCS, parse_docs
from graphcheck.varlen import BY_NAME, Structure, VarlenInput

__all__ = ["DEFAULT_DOCS", "PackedBatch", "parse_docs"]

DEFAULT_DOCS = GATE_DOCS  # T = 256 tokens in N = 6 documents (declared with --docs)
FILLER = 64  # the longest filler document of a shifted batch (positions stay small)


@dataclass(frozen=True)
class PackedBatch:
    docs: tuple[int, ...]
    input_ids: torch.Tensor
    vocab_size: int | None = None  # what the token ids were drawn from

    @classmethod
    def random(cls, docs, vocab_size: int, seed: int = 0) -> PackedBatch:
        docs = tuple(int(n) for n in docs)
        if not docs or min(docs) < 1:
            raise UsageError(f"documents must have at least one token, got {list(docs)}")
        generator = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, vocab_size, (1, sum(docs)), generator=generator)
        return cls(docs, ids, vocab_size)

    @property
    def tokens(self) -> int:
        return sum(self.docs)

    @property
    def spans(self) -> list[tuple[int, int]]:
        """``(start, end)`` of every document in the packed row."""
        return list(itertools.pairwise(itertools.accumulate(self.docs, initial=0)))

    @property
    def position_ids(self) -> torch.Tensor:
        return BY_NAME["position_ids"].value(self.docs)

    @property
    def cu_seq_lens(self) -> torch.Tensor:
        return BY_NAME["cu_seq_lens_q"].value(self.docs)

    def inputs(self, names) -> dict[str, object]:
        """Values for the varlen inputs in ``names``: the batch's token ids for a token
        input, the value the table (:data:`graphcheck.varlen.INPUTS`) gives the
        documents for the others."""
        return {name: self._value(BY_NAME[name]) for name in names}

    def _value(self, row: VarlenInput):
        if row.structure is Structure.TOKENS:
            return self.input_ids
        return row.value(self.docs)

    def document(self, index: int) -> PackedBatch:
        """Document ``index`` as a batch of its own (same tokens)."""
        start, end = self.spans[index]
        return PackedBatch((end - start,), self.input_ids[:, start:end].clone(), self.vocab_size)

    def perturbed(self, keep: int, seed: int) -> PackedBatch:
        """The same lengths, document ``keep``'s tokens kept, every other document's
        tokens redrawn (seeded by ``seed`` and ``keep``)."""
        vocab = self.vocab_size or int(self.input_ids.max()) + 1
        generator = torch.Generator().manual_seed(seed * 1000 + 7919 + keep)
        ids = torch.randint(0, vocab, tuple(self.input_ids.shape), generator=generator)
        start, end = self.spans[keep]
        ids[:, start:end] = self.input_ids[:, start:end]
        return PackedBatch(self.docs, ids, self.vocab_size)

    def shifted(self, seed: int) -> tuple[PackedBatch, PackedBatch, int]:
        """Two batches of the same length that differ only by where the documents sit:
        this batch padded with filler documents (seeded tokens, at most
        :data:`FILLER` each) to a whole number of tiles plus one, and the same row rolled
        by one tile (the last tile's fillers go first). Also the tile: 64 tokens, 512
        for a row of 512 or more, the row tiles CPU kernels reduce over (SDPA's query
        and key blocks), so a position-free model reduces every row in the same order."""
        tile = 64 if _whole(self.tokens, 64) + 64 < 512 else 512
        total = _whole(self.tokens, tile) + tile
        pad, last = _fillers(total - self.tokens - tile), _fillers(tile)
        vocab = self.vocab_size or int(self.input_ids.max()) + 1
        generator = torch.Generator().manual_seed(seed * 1000 + 104729)
        fill = torch.randint(0, vocab, (1, total - self.tokens), generator=generator)
        ids = torch.cat([self.input_ids, fill], dim=1)
        first = PackedBatch((*self.docs, *pad, *last), ids, self.vocab_size)
        rolled = PackedBatch((*last, *self.docs, *pad), ids.roll(tile, 1), self.vocab_size)
        return first, rolled, tile

    def locate(self, token: int) -> tuple[int, int]:
        """``(document, position)`` of packed token index ``token``."""
        for index, (start, end) in enumerate(self.spans):
            if start <= token < end:
                return index, token - start
        raise IndexError(token)


def _whole(tokens: int, tile: int) -> int:
    """``tokens`` rounded up to a whole number of tiles."""
    return -(-tokens // tile) * tile


def _fillers(tokens: int) -> tuple[int, ...]:
    """Filler document lengths summing to ``tokens``, at most :data:`FILLER` each."""
    return (FILLER,) * (tokens // FILLER) + ((tokens % FILLER,) if tokens % FILLER else ())
