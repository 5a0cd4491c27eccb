"""GC203 boundary-not-materialized

What it checks
    The residual crossing each cut is a materialized compute result: not a
    view of a larger tensor (a slice of a concatenation), and not accompanied
    by a higher-precision twin of the same value (the fp32 value it was
    rounded from, or an fp32 cast of it) also crossing.

Why it matters
    A view hands over bytes that alias something larger, whose other part the
    right side silently lacks. A twin means the right side computes from the
    unrounded value: the bf16 wire is not the real boundary.

Example
    A layer returning ``torch.cat([x, aux], -1)[..., :H]``; a loop that passes
    ``y.to(bf16)`` to the next layer but also keeps the fp32 ``y`` for later.

Fix
    Return a fresh tensor (``.contiguous()`` or the compute result itself);
    drop the fp32 copy or keep its consumers on the producing stage.
"""

from __future__ import annotations

from graphcheck.analysis.residual import view_base
from graphcheck.diagnostics import Diagnostic

__all__ = ["CODE", "NAME", "EXAMPLE", "SEVERITY", "SUMMARY", "check"]

CODE = "GC203"
NAME = "boundary-not-materialized"
SEVERITY = "error"
SUMMARY = "the crossing value is a view / has a higher-precision twin"
# The documentation's example, run by tests/rules/test_rule_table.py: the code fires
# at the cut on the violating model and not on its passing twin.
EXAMPLE = {
    "violating": "fixtures/violations.py:fp32_twin",
    "passing": "fixtures/violations.py:cast_in_loop",
    "cut": 4,
}


def check(ctx) -> list[Diagnostic]:
    found = []
    for cut in ctx.cuts:
        wire = ctx.wire(cut)
        where = {"cut": cut.position, "stage": ctx.right_stage(cut)}
        for twin in wire.twins:
            message = (
                f"{twin.name} ({ctx.program.dtype(twin)}) crosses cut {cut.position} next to "
                f"{wire.residual.name} ({ctx.program.dtype(wire.residual)}), the same value in "
                "another precision; hand over one bf16 tensor only"
            )
            found.append(Diagnostic.at(CODE, NAME, message, node=twin, **where))
        node = wire.boundary
        base = view_base(node) if node is not None else None
        if base is not None:
            message = (
                f"{node.name} crossing cut {cut.position} is a view of {base.name} "
                f"{ctx.program.shape(base)}; hand over a materialized tensor"
            )
            found.append(Diagnostic.at(CODE, NAME, message, node=node, **where))
    return found
