"""GC402 positions-fabricated

What it checks
    Positions and masks come from the ``position_ids`` / ``cu_seq_lens``
    inputs, not from the packed length T: no index ramp (``arange(T)``, a
    table sliced to its first T rows) that lacks the document metadata
    reaches an activation or an attention op's mask, directly or through a
    learned position table.

Why it matters
    In a packed batch, token ``t`` of the row is not at position ``t`` of its
    document. Rotary tables or masks built from ``arange(T)`` give every
    document after the first the wrong positions: the trainer computes other
    bytes than the sampler, which sees each document from position 0.

Example
    ``cos, sin = rope(torch.arange(input_ids.shape[1]))`` with
    ``position_ids`` unused.

Fix
    Build rotary tables from ``position_ids`` and masks from ``position_ids``
    or ``cu_seq_lens``.
"""

from __future__ import annotations

import torch

from graphcheck.diagnostics import Diagnostic
from graphcheck.ops import index_operands
from graphcheck.taint import ARANGE, DOCS

CODE = "GC402"
NAME = "positions-fabricated"
SUMMARY = "positions or masks derived from T instead of position_ids"


def check(ctx) -> list[Diagnostic]:
    program = ctx.program
    found, seen = [], set()
    for node in program.graph.nodes:
        if program.role.get(node) != "activation" or _integer(node):
            continue  # integer results are index bookkeeping (a permutation), not positions
        rows = index_operands(node)
        for arg in node.all_input_nodes:
            if arg in seen or arg in rows or program.role.get(arg) not in _SIDE:
                continue
            bits = program.taint.get(arg, 0)
            if bits & ARANGE and not bits & DOCS:
                seen.add(arg)
                found.append(
                    Diagnostic.at(
                        CODE,
                        NAME,
                        f"{arg.name} {program.shape(arg)} is built from an arange over the "
                        f"packed length, not from position_ids, and feeds {program.label(node)}; "
                        "derive positions and masks from position_ids or cu_seq_lens",
                        node=arg,
                    )
                )
    return found


_SIDE = ("replicated", "parameter")  # a position table is a weight looked up by index


def _integer(node) -> bool:
    val = node.meta.get("val")
    return (
        isinstance(val, torch.Tensor)
        and not val.dtype.is_floating_point
        and val.dtype != torch.bool
    )
