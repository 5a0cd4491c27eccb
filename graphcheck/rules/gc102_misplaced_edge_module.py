"""GC102 misplaced-edge-module

What it checks
    The input modules (embedding) run only on the first stage, and the output
    modules (final norm and head) run together on the last stage: no
    embedding applied to a layer's output after the first cut, no final norm
    or head whose result a layer before the last cut reads.

Why it matters
    A pipeline runtime places the edge modules on the edge stages. A model that
    also calls them mid-stack needs their weights on two stages and computes a
    different program once split.

Example
    ``if i == 1: x = self.norm(x)`` inside the layer loop, with a cut after
    layer 1: the final norm runs on stage 0 and on the last stage.

Fix
    Give the mid-stack use its own module (its own weights), or move the cut so
    the use lands on the edge stage.
"""

from __future__ import annotations

from graphcheck.analysis.regions import INPUT
from graphcheck.diagnostics import Diagnostic

__all__ = ["CODE", "NAME", "EXAMPLE", "SEVERITY", "SUMMARY", "check"]

CODE = "GC102"
NAME = "misplaced-edge-module"
SEVERITY = "error"
SUMMARY = "input modules not only on stage 0; norm and head not together on the last stage"
# The documentation's example, run by tests/rules/test_rule_table.py: the code fires
# at the cut on the violating model and not on its passing twin.
EXAMPLE = {
    "violating": "fixtures/violations.py:norm_mid_stack",
    "passing": "fixtures/violations.py:norm_mid_stack_own",
    "cut": 4,
}


def check(ctx) -> list[Diagnostic]:
    found = []
    for cut in ctx.cuts:
        for node, early, late in ctx.program.misplaced:
            if ctx.program.region[node] == INPUT and ctx.is_first(cut) and early >= cut.position:
                where = "the first stage"
                detail = f"it reads the output of layer {early}"
            elif ctx.program.region[node] != INPUT and ctx.is_last(cut) and late < cut.position:
                where = "the last stage"
                detail = f"layer {late} reads its result"
            else:
                continue
            found.append(
                Diagnostic.at(
                    CODE,
                    NAME,
                    f"{ctx.program.label(node)} cannot run on {where} with a cut at "
                    f"{cut.position}: {detail}; give the mid-stack use its own module or move "
                    "the cut",
                    node=node,
                    cut=cut.position,
                    stage=ctx.right_stage(cut),
                )
            )
    return found
