"""GC402 positions-fabricated

What it checks
    Positions come from ``position_ids``, document structure from
    ``cu_seq_lens``: no absolute token or document index reaches the model's
    values as data. Absolute indices are an ``arange`` over the packed length
    T, a prefix count over T (``ones(T).cumsum(0)``), the packed length itself,
    ``cu_seq_lens`` offsets and document ids. They may only be index
    bookkeeping (a permutation and its inverse, a selection) or be compared
    across two tokens where the comparison is translation invariant: both
    sides the index plus a constant (a causal mask ``i >= j``, a window
    ``i - j < W``) or both one labelling of the documents (``doc[i] ==
    doc[j]``). Chunks of the packed row (``i // C == j // C``) are not: a
    document's chunk boundaries move with its offset. A FlexAttention
    ``mask_mod`` is proven the same for a document packed and alone by the
    solver, with the counterexample when it is not.

Why it matters
    In a packed batch, token ``t`` of the row is not at position ``t`` of its
    document. Rotary tables or learned positions from ``arange(T)`` give every
    document after the first the wrong positions: the trainer computes other
    bytes than the sampler, which sees each document from position 0.

Example
    ``cos, sin = rope(torch.arange(input_ids.shape[1]))`` with
    ``position_ids`` unused; ``pos_embed(torch.arange(T))``;
    ``torch.arange(T) + offset``. Not an example: positions rebuilt from the
    boundaries, ``arange(T) - cu_seq_lens[doc]`` (``doc`` by ``searchsorted``),
    which the solver proves equal to ``position_ids`` for every packing (a term
    of the layout equal to ``i - cu(doc(i))``): they are positions.

Fix
    Build rotary tables and learned positions from ``position_ids``; build
    masks by comparing positions or document ids of the two tokens.
"""

from __future__ import annotations

from graphcheck.diagnostics import Diagnostic

__all__ = ["CODE", "NAME", "EXAMPLE", "SEVERITY", "SUMMARY", "check"]

CODE = "GC402"
NAME = "positions-fabricated"
SEVERITY = "error"
SUMMARY = "an absolute token index reaches values instead of `position_ids`"
# The documentation's example, run by tests/rules/test_rule_table.py: the code fires
# at the cut on the violating model and not on its passing twin.
EXAMPLE = {
    "violating": "fixtures/violations.py:arange_positions",
    "passing": "fixtures/reference.py:reference",
    "cut": 4,
}


def check(ctx) -> list[Diagnostic]:
    program = ctx.program
    order = {n: i for i, n in enumerate(program.graph.nodes)}
    found = []
    for node, reason in sorted(program.fabricated.items(), key=lambda kv: order.get(kv[0], -1)):
        message = (
            f"{reason} reaches the model's values as data, not as index bookkeeping; "
            "derive positions from position_ids and masks by comparing two tokens"
        )
        found.append(Diagnostic.at(CODE, NAME, message, node=node))
    return found
