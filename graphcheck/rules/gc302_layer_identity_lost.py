"""GC302 layer-identity-lost

What it checks
    A stage module keeps the global identity of its layers: its layer
    container is keyed by global index (a pruned ``ModuleList`` with ``None``
    holes, or a ``ModuleDict`` keyed by index), and every layer's ``layer_idx``
    / ``layer_id`` attribute equals its global index. Requires ``--stage-builder``.

Why it matters
    Renumbered layers are how kernel choices flip (GC301). When graphcheck
    proves every stage program equal to the uncut one the renumbering is
    harmless today, so this is a warning; the next model change that keys on
    the index makes it a silent drift.

Example
    ``rebuild``: a fresh model with ``num_hidden_layers`` = the stage's layer
    count; global layers 4-7 become ``layers.0`` to ``layers.3``.

Fix
    Prune instead of rebuilding (``keep-index`` / ``moduledict``), or pass the
    global index into each layer.
"""

from __future__ import annotations

from graphcheck.diagnostics import Diagnostic

__all__ = ["CODE", "NAME", "EXAMPLE", "SEVERITY", "SUMMARY", "check"]

CODE = "GC302"
NAME = "layer-identity-lost"
SEVERITY = "warning"
SUMMARY = "a stage's layers lost their global indices"
# The documentation's example, run by tests/rules/test_rule_table.py: the code fires
# at the cut on the violating model and not on its passing twin.
EXAMPLE = {
    "violating": "fixtures/reference.py:reference",
    "passing": "fixtures/reference.py:reference",
    "cut": 4,
    "stage_builder": "rebuild",
    "passing_stage_builder": "keep-index",
}


def check(ctx) -> list[Diagnostic]:
    found = []
    for stage in ctx.stages or ():
        problems = []
        if stage.renumbered:
            keys = ", ".join(sorted(stage.keys, key=stage.keys.__getitem__))
            problems.append(f"its layer container holds keys {keys or 'none'}")
        wrong = {g: i for g, i in stage.layer_ids.items() if i != g}
        if wrong:
            pairs = ", ".join(f"global {g} has layer_idx {i}" for g, i in sorted(wrong.items()))
            problems.append(pairs)
        if problems:
            found.append(
                Diagnostic(
                    CODE,
                    NAME,
                    f"stage {stage.index} runs global layers {_span(stage.layers)} but "
                    f"{'; '.join(problems)}; keep global indices (keep-index, moduledict)",
                    stage=stage.index,
                )
            )
    return found


def _span(layers: list[int]) -> str:
    return f"{layers[0]}-{layers[-1]}" if layers else "none"
