"""GC204 boundary-not-layer-output

What it checks
    The activation crossing cut ``k`` is the residual between layer ``k - 1``
    and layer ``k``: produced by layer ``k - 1`` (or model-level glue right
    after it; the embedding for cut 0) and read by layer ``k`` (the final
    norm and head for cut L). A cut that nothing crosses fails too.

Why it matters
    Pipeline runtimes hand the previous stage's output to the next stage's
    first layer. When the value the next layer reads comes from an earlier
    layer, or the crossing value feeds something else, the staged program is
    not the uncut program.

Example
    A loop that feeds every layer the embedding output and discards the
    layer outputs of odd layers; layers whose outputs only the head reads.

Fix
    Make layer ``k`` read exactly layer ``k - 1``'s output, or cut elsewhere.
"""

from __future__ import annotations

from graphcheck.diagnostics import Diagnostic
from graphcheck.rules.gc201_extra_activation_crosses_cut import made_and_read

__all__ = ["CODE", "NAME", "EXAMPLE", "SEVERITY", "SUMMARY", "check"]

CODE = "GC204"
NAME = "boundary-not-layer-output"
SEVERITY = "error"
SUMMARY = "the crossing activation is not the residual between the two layers"
# The documentation's example, run by tests/rules/test_rule_table.py: the code fires
# at the cut on the violating model and not on its passing twin.
EXAMPLE = {
    "violating": "fixtures/violations.py:not_layer_output",
    "passing": "fixtures/reference.py:reference",
    "cut": 4,
}


def check(ctx) -> list[Diagnostic]:
    found = []
    for cut in ctx.cuts:
        wire = ctx.wire(cut)
        if wire.residual is not None:
            continue
        k = cut.position
        prev, nxt = ctx.program.neighbours(k)
        before = f"layer {prev}" if prev >= 0 else "the input modules"
        after = f"layer {nxt}" if nxt is not None else "the output modules"
        node = wire.extras[0] if wire.extras else None
        if node is None:
            what = "no activation crosses"
        else:
            read = made_and_read(ctx.program, cut, node)
            what = f"{node.name} from {ctx.program.label(node)}{read} crosses"
        found.append(
            Diagnostic.at(
                CODE,
                NAME,
                f"{what} cut {k}, but no crossing value is the residual from {before} to "
                f"{after}; make {after} read {before}'s output",
                node=node,
                cut=k,
                stage=ctx.right_stage(cut),
            )
        )
    return found
