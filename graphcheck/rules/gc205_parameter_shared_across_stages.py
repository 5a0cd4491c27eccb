"""GC205 parameter-shared-across-stages

What it checks
    No parameter, and no value computed from parameters alone, is read on both
    sides of a cut.

Why it matters
    A weight used by two stages must be replicated and kept identical: its
    gradients are reduced across stages and any drift changes the bytes.
    Tied embeddings are the classic case: the embedding lives on the first
    stage, the head on the last.

Example
    ``model.lm_head.weight = model.model.embed_tokens.weight``.

Fix
    Untie the weights for pipelined training (separate head weight), or keep
    the sharing modules on one stage.
"""

from __future__ import annotations

from graphcheck.diagnostics import Diagnostic

CODE = "GC205"
NAME = "parameter-shared-across-stages"
SUMMARY = "a parameter (tied embeddings) is used by two stages"


def check(ctx) -> list[Diagnostic]:
    found = []
    for cut in ctx.cuts:
        for crossing in cut.crossing:
            if crossing.role == "parameter":
                found.append(_diagnostic(ctx, cut, crossing))
    return found


def _diagnostic(ctx, cut, crossing) -> Diagnostic:
    program, node = ctx.program, crossing.node
    fqn = program.owner.get(node, node.name)
    tied = program.aliases.get(fqn, ())
    name = fqn + (f" (tied to {', '.join(tied)})" if tied else "")
    left = {program.label(u) for u in node.users if u in program.interval}
    left = sorted(left - set(crossing.consumers))
    return Diagnostic.at(
        CODE,
        NAME,
        f"parameter {name} is read on both sides of cut {cut.position}: by "
        f"{', '.join(left[:2]) or 'the left side'} and by {', '.join(crossing.consumers[:2])}; "
        "untie it or keep its users on one stage",
        node=node,
        module=fqn,
        cut=cut.position,
        stage=ctx.right_stage(cut),
    )
