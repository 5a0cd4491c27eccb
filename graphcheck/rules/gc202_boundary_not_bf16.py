"""GC202 boundary-not-bf16

What it checks
    The residual crossing each cut is a bfloat16 tensor.

Why it matters
    bf16 between decoder layers is the natural rounding boundary of the
    serving program. A float32 residual on the wire is rounded differently
    (or not at all) than in the uncut program, so the split computes other
    bytes.

Example
    A model that keeps its residual stream in float32 between layers
    (``x = x.float()`` after the embedding, layers adding fp32 deltas).

Fix
    Round the residual to bf16 at the end of each layer, as the serving
    program does, or cut only where the stream is bf16.
"""

from __future__ import annotations

from graphcheck.diagnostics import Diagnostic

__all__ = ["CODE", "NAME", "EXAMPLE", "SEVERITY", "SUMMARY", "check"]

CODE = "GC202"
NAME = "boundary-not-bf16"
SEVERITY = "error"
SUMMARY = "the crossing activation is not bf16"
# The documentation's example, run by tests/rules/test_rule_table.py: the code fires
# at the cut on the violating model and not on its passing twin.
EXAMPLE = {
    "violating": "fixtures/violations.py:fp32_residual",
    "passing": "fixtures/violations.py:cast_in_loop",
    "cut": 4,
}


def check(ctx) -> list[Diagnostic]:
    found = []
    for cut in ctx.cuts:
        node = ctx.wire(cut).boundary
        if node is None or ctx.program.dtype(node) == "bfloat16":
            continue
        found.append(
            Diagnostic.at(
                CODE,
                NAME,
                f"the activation crossing cut {cut.position} is {ctx.program.dtype(node)}, "
                "not bfloat16; round the residual stream to bf16 at the layer boundary",
                node=node,
                cut=cut.position,
                stage=ctx.right_stage(cut),
            )
        )
    return found
