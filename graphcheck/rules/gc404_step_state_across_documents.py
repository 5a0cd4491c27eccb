"""GC404 step-state-across-documents

What it checks
    Which buffers the forward only accumulates into (``tokens_per_expert.add_(counts)``:
    the old value is read by nothing but the writes into it) with values that depend
    on tokens of several documents. Such a buffer is no output of the call and no
    forward reads it: it is state handed to what runs between steps (an optimizer
    hook, a logger), as the gradients are. A buffer the forward also reads (last
    step's counts added to this step's router scores) is not this rule's: the next
    forward computes with other documents' tokens there, and GC401 reports it.

Why it matters
    graphcheck proves the bytes of the forward, the ones the serving sampler
    recomputes per document. A statistic over all documents kept for the optimizer
    does not change those bytes, so it does not fail the verdict; but how the next
    step uses it (an expert bias updated from the counts) is outside the proof, and
    the PASS says so.

Example
    torchtitan's MoE in ``model.train()``: the tokens routed to each expert,
    summed over the whole packed batch, added into ``tokens_per_expert_E`` for the
    auxiliary-loss-free load balancing the optimizer hook applies.

Fix
    Nothing, when the state is only read between steps (the update is then part of
    the optimizer, like a gradient step). When a forward is meant to read it, compute
    it per document, or keep that use out of the exact lane.
"""

from __future__ import annotations

from graphcheck.analysis.fx import op_name
from graphcheck.diagnostics import Diagnostic

__all__ = ["CODE", "NAME", "EXAMPLE", "SEVERITY", "SUMMARY", "check"]

CODE = "GC404"
NAME = "step-state-across-documents"
SEVERITY = "warning"
SUMMARY = "a buffer only accumulated into holds values over several documents"
# The documentation's example, run by tests/rules/test_rule_table.py: the code fires
# at the cut on the violating model and not on its passing twin.
EXAMPLE = {
    "violating": "fixtures/moe_rows.py:titan_moe_load_counts",
    "passing": "fixtures/moe_rows.py:titan_moe",
    "cut": 1,
}


def check(ctx) -> list[Diagnostic]:
    """One finding per buffer, at the op where its values first mix documents."""
    program = ctx.program
    found = []
    for buffer, origins in program.step_state.items():
        fqn = program.owner.get(buffer, buffer.name)
        origin = next(iter(origins))
        op = op_name(origin.target)
        found.append(
            Diagnostic.at(
                CODE,
                NAME,
                f"buffer {fqn} accumulates a value over several documents (`{op}` here); "
                "no output of this forward and no forward reads it (state for what "
                "runs between steps, as gradients are), so the verdict stands, but how the "
                "next step uses it is not proven; if a forward is meant to read it, compute "
                "it per document",
                node=origin,
            )
        )
    return found
