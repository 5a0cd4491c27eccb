"""GC101 stage-plan-invalid

What it checks
    The stage plan: every cut lies in 0..L, cuts strictly increase (no empty
    middle stage), and the model's layers run in index order, so that each
    stage's layers form one contiguous block of the dataflow.

Why it matters
    A pipeline stage receives one hand-off from the stage before it. If layer
    5 feeds layer 3, or a cut is out of range, no assignment of layers to
    stages reproduces the uncut program.

Example
    ``--cuts 99`` on an 8-layer model; ``--cuts 4,4``; a model whose forward
    runs ``for layer in reversed(self.layers)``.

Fix
    Pick cuts in 0..L that strictly increase; run layers in the order of
    their global index (renumber the container if the order is intended).

Malformed plans are bad arguments: graphcheck stops with exit status 2 and a
GC101 line before exporting. Dataflow against the layer order is a finding.
"""

from __future__ import annotations

from graphcheck.diagnostics import Diagnostic

CODE = "GC101"
NAME = "stage-plan-invalid"
SEVERITY = "error"
SUMMARY = "cut out of range, empty middle stage (exit 2); layers that do not run in index order"


def check(ctx) -> list[Diagnostic]:
    program = ctx.program
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
