"""GC201 extra-activation-crosses-cut

What it checks
    Exactly one activation (a value computed from the tokens through the
    weights) crosses each cut, under the best placement of model-level glue.

Why it matters
    The pipeline wire carries one tensor: the residual stream. A second
    activation (a (hidden, residual) pair, a skip connection from an earlier
    layer, per-layer outputs collected for the head) is either dropped by the
    runtime or sent through a side channel the byte contract does not cover.

Example
    Layers that return ``(hidden, residual)`` and add them in the next layer;
    every layer reading the embedding output ``x0``.

Fix
    Fold the pair into the residual inside the layer (``return hidden +
    residual``); recompute or drop the skip input; keep collected outputs on
    the stage that produced them.
"""

from __future__ import annotations

from graphcheck.diagnostics import Diagnostic

CODE = "GC201"
NAME = "extra-activation-crosses-cut"
SUMMARY = "more than one activation crosses a cut"


def check(ctx) -> list[Diagnostic]:
    found = []
    for cut in ctx.cuts:
        wire = ctx.wire(cut)
        count = len(cut.activations)
        extras = wire.extras if wire.residual is not None else wire.extras[1:]
        for node in extras:
            found.append(
                Diagnostic.at(
                    CODE,
                    NAME,
                    f"{count} activations cross cut {cut.position}; besides the residual, "
                    f"{node.name} from {ctx.program.label(node)} ({ctx.program.dtype(node)}) is "
                    "needed on the right; fold it into the residual stream or keep its "
                    "consumers on the left",
                    node=node,
                    cut=cut.position,
                    stage=ctx.right_stage(cut),
                )
            )
    return found
