"""GC101 stage-plan-invalid

What it checks
    The stage plan: every cut lies in 0..L, cuts strictly increase (no empty
    middle stage), and the model's layers run in index order, so that each
    stage's layers form one contiguous block of the dataflow. A model that declares
    the layer ranges its own state allows (``get_pp_module_config()
    ["pipeline_layer_ranges"]``) gets exactly those ranges for the stages that hold
    layers (``verify`` without ``--cuts``/``--stages`` proves that plan).

Why it matters
    A pipeline stage receives one hand-off from the stage before it. If layer
    5 feeds layer 3, or a cut is out of range, no assignment of layers to
    stages reproduces the uncut program.

Example
    ``--cuts 99`` on an 8-layer model; ``--cuts 4,4``; a model whose forward
    runs ``for layer in reversed(self.layers)``; ``--cuts 2`` for a model that
    declares ``pipeline_layer_ranges`` ``[(0, 3), (3, 6)]``.

Fix
    Pick cuts in 0..L that strictly increase; run layers in the order of
    their global index (renumber the container if the order is intended); cut at
    the starts of the declared layer ranges.

Malformed plans are bad arguments: the plan language (:mod:`graphcheck.planning.syntax`)
stops with exit status 2 and a GC101 line before exporting. Dataflow against the layer
order is a finding.
"""

from __future__ import annotations

from graphcheck.diagnostics import Diagnostic

__all__ = [
    "CODE",
    "NAME",
    "EXAMPLE",
    "SEVERITY",
    "SUMMARY",
    "check",
]

CODE = "GC101"
NAME = "stage-plan-invalid"
SEVERITY = "error"
SUMMARY = (
    "cut out of range, empty middle stage (exit 2); layers that do not run in index order; "
    "stages off the declared layer ranges"
)
# The documentation's example, run by tests/rules/test_rule_table.py: the code fires
# at the cut on the violating model and not on its passing twin.
EXAMPLE = {
    "violating": "fixtures/violations.py:reversed_layers",
    "passing": "fixtures/reference.py:reference",
    "cut": 4,
}


def check(ctx) -> list[Diagnostic]:
    return _out_of_order(ctx.program) + _off_declared_ranges(ctx)


def _off_declared_ranges(ctx) -> list[Diagnostic]:
    """The plan's layer ranges against the ``pipeline_layer_ranges`` the model declares."""
    declared = ctx.program.layout.layer_ranges
    if ctx.plan is None or declared is None:
        return []
    actual = tuple((s.layers[0], s.layers[1] + 1) for s in ctx.plan.stages if s.layers)
    if actual == declared:
        return []
    cuts = ",".join(str(start) for start, _ in declared[1:]) or "none"
    return [
        Diagnostic.at(
            CODE,
            NAME,
            f"the plan gives its stages the layer ranges {list(actual)}, but the model "
            f"declares pipeline_layer_ranges {list(declared)} (the ranges its own state "
            f"allows); cut at {cuts} (--cuts {cuts}), or omit --cuts to prove the declared plan",
        )
    ]


def _out_of_order(program) -> list[Diagnostic]:
    seen: set[tuple[str, str]] = set()
    found = []
    for producer, consumer in program.backward:
        pair = (str(program.region[producer]), str(program.region[consumer]))
        if pair in seen:
            continue
        seen.add(pair)
        found.append(
            Diagnostic.at(
                CODE,
                NAME,
                f"{pair[0]} feeds {pair[1]}: layers do not run in index order, so no stage "
                "split reproduces the uncut program; run layers in global-index order",
                node=consumer,
            )
        )
    return found
