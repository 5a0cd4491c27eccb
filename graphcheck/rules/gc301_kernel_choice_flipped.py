"""GC301 kernel-choice-flipped

What it checks
    For every global layer ``g`` of every stage, the program the stage module
    runs for ``g`` is the uncut program's layer ``g``: the same ops with the
    same non-tensor arguments (window sizes, scales, eps), the same parameters
    (by FQN relative to the layer), the same non-persistent buffers and constant
    tensors by value (a rotary ``inv_freq`` its layer index chose) and the same
    side inputs (which mask, which rotary table). Requires ``--stage-builder``.

Why it matters
    Model code picks kernels by layer index (``config.layer_types[layer_idx]``,
    "layer 0 uses another norm", dense layers before MoE layers). A stage built
    by rebuilding or renumbering the model can make global layer 7 local layer 3
    and pick the other kernel. Nothing raises; the outputs just drift.

Example
    A stage rebuilt with ``num_hidden_layers=4`` for layers 4-7: its local layer
    0 (global 4) takes the layer-0 norm, and its sliding-window layers move; a
    stage rebuilt from layer 2 gives global layer 3 the rope base of layer 1.

Fix
    Build stages that keep global layer indices (prune the layer container, or
    key a ``ModuleDict`` by global index), or pass the global index to layers.
"""

from __future__ import annotations

from graphcheck.diagnostics import Diagnostic
from graphcheck.stages.compare import MismatchKind

__all__ = ["CODE", "NAME", "OWNS", "EXAMPLE", "SEVERITY", "SUMMARY", "check"]

CODE = "GC301"
NAME = "kernel-choice-flipped"
SEVERITY = "error"
SUMMARY = "a stage program's layer differs from the uncut program's layer"
# The documentation's example, run by tests/rules/test_rule_table.py: the code fires
# at the cut on the violating model and not on its passing twin.
EXAMPLE = {
    "violating": "fixtures/reference.py:reference",
    "passing": "fixtures/reference.py:window_only",
    "cut": 4,
    "stage_builder": "rebuild",
}
OWNS = frozenset({MismatchKind.LAYER, MismatchKind.SIDE_CHOICE})


def check(ctx) -> list[Diagnostic]:
    found = []
    for mismatch in ctx.mismatches:
        if mismatch.kind not in OWNS:
            continue
        message = mismatch.message
        found.append(
            Diagnostic.at(CODE, NAME, message + _FIX, node=mismatch.node, stage=mismatch.stage)
        )
    return found


_FIX = "; build the stage so layers keep their global index"
