"""GC303 stage-program-differs

What it checks
    Outside the layers, each stage runs what the uncut program runs: the
    embedding program on the first stage, the norm and head program on the
    last, side inputs (masks, rotary tables) computed as in the uncut
    prelude, every global layer of the stage present and no other, the same
    model-level work between layers (casts and adds in the model's own loop) as
    the uncut program runs on that stage, and each non-last stage
    returning the bf16 residual the next stage takes as ``x`` (``[1, T, H]``, or
    ``[T, H]`` for a flat residual).
    A buffer or constant compared by value whose value graphcheck cannot compute
    is reported here too (it is never taken as equal). Requires ``--stage-builder``.

Why it matters
    A stage module is a separate program. A stage that rebuilds its rotary
    table with another config, drops a layer, or hands over fp32 or logits
    computes other bytes than the uncut program.

Example
    A builder that keeps the final norm off the last stage; a stage whose
    forward returns ``h.float()``.

Fix
    Build stage modules from the same model code and config; keep edge
    modules on the edge stages; return the bf16 hidden states.
"""

from __future__ import annotations

from graphcheck.diagnostics import Diagnostic
from graphcheck.rules import gc301_kernel_choice_flipped
from graphcheck.stages.compare import MismatchKind

__all__ = ["CODE", "NAME", "OWNS", "EXAMPLE", "SEVERITY", "SUMMARY", "check"]

CODE = "GC303"
NAME = "stage-program-differs"
SEVERITY = "error"
SUMMARY = "embedding, prelude side inputs, norm+head or the stage hand-off differ"
# The documentation's example, run by tests/rules/test_rule_table.py: the code fires
# at the cut on the violating model and not on its passing twin.
EXAMPLE = {
    "violating": "fixtures/violations.py:none_layers",
    "passing": "fixtures/reference.py:reference",
    "cut": 4,
    "stage_builder": "rebuild",
}
OWNS = frozenset(
    {
        MismatchKind.EDGE,
        MismatchKind.SIDE_PRELUDE,
        MismatchKind.BOUNDARY,
        MismatchKind.MISSING,
        MismatchKind.EXTRA,
        MismatchKind.GLUE,
        MismatchKind.UNKNOWN_VALUE,
    }
)


def check(ctx) -> list[Diagnostic]:
    """Every mismatch GC301 does not own: this rule's kinds and, failing closed, any
    kind no rule owns yet (a difference is never dropped)."""
    return [
        Diagnostic.at(CODE, NAME, m.message, node=m.node, stage=m.stage)
        for m in ctx.mismatches
        if m.kind not in gc301_kernel_choice_flipped.OWNS
    ]
