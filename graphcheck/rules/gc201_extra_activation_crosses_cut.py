"""GC201 extra-activation-crosses-cut

What it checks
    Exactly one activation (a value computed from the tokens through the
    weights) crosses each cut, under the best placement of model-level glue.

Why it matters
    The pipeline wire carries one tensor: the residual stream. A second
    activation (a (hidden, residual) pair, a skip connection from an earlier
    layer, per-layer outputs collected for the head) is either dropped by the
    runtime or sent through a side channel the byte contract does not cover.

    In-place writes are dataflow: a buffer, parameter, input or shared table
    written in place on one side of a cut and read on the other (after the write,
    or in the next step, before the first write) crosses the cut like any other
    activation, and is reported here with the storage it writes.

Example
    Layers that return ``(hidden, residual)`` and add them in the next layer;
    every layer reading the embedding output ``x0``; a layer that edits
    ``position_ids`` or a model buffer in place for a later layer to read.

Fix
    Fold the pair into the residual inside the layer (``return hidden +
    residual``); recompute or drop the skip input; keep collected outputs on
    the stage that produced them; make in-place writes out of place and local to
    the layer (``pos = pos * 2``), or keep the writer and its readers on one stage.
"""

from __future__ import annotations

from graphcheck.diagnostics import Diagnostic, source_line

__all__ = ["CODE", "NAME", "EXAMPLE", "SEVERITY", "SUMMARY", "check", "made_and_read"]

CODE = "GC201"
NAME = "extra-activation-crosses-cut"
SEVERITY = "error"
SUMMARY = "more than one activation crosses a cut"
# The documentation's example, run by tests/rules/test_rule_table.py: the code fires
# at the cut on the violating model and not on its passing twin.
EXAMPLE = {
    "violating": "fixtures/violations.py:skip_connection",
    "passing": "fixtures/reference.py:reference",
    "cut": 4,
}


def check(ctx) -> list[Diagnostic]:
    found = []
    for cut in ctx.cuts:
        wire = ctx.wire(cut)
        count = len(cut.activations)
        extras = wire.extras if wire.residual is not None else wire.extras[1:]
        for node in extras:
            message = _mutation_message(ctx.program, cut, node) or (
                f"{count} activations cross cut {cut.position}; besides the residual, "
                f"{node.name} from {ctx.program.label(node)} ({ctx.program.dtype(node)}) is "
                f"needed on the right{made_and_read(ctx.program, cut, node)}; fold it into "
                "the residual stream or keep its consumers on the left"
            )
            where = {"cut": cut.position, "stage": ctx.right_stage(cut)}
            found.append(Diagnostic.at(CODE, NAME, message, node=node, **where))
    return found


def made_and_read(program, cut, node) -> str:
    """`` (made at file.py:12, read across the cut by mul_6 in model.layers.2 at
    file.py:40: x = layer(x) + x0)``: where a crossing value is made and the first place
    the right side reads it; empty when the export kept neither line."""
    readers = [u for u in node.users if u in program.interval and not cut.on_left(program, u)]
    reader = next((u for u in program.graph.nodes if u in set(readers)), None)
    made = source_line(node)
    read = source_line(reader) if reader is not None else None
    parts = [f"made at {made.split(': ', 1)[0]}"] if made else []
    if read:
        parts.append(f"read across the cut by {reader.name} in {program.label(reader)} at {read}")
    return f" ({', '.join(parts)})" if parts else ""


def _mutation_message(program, cut, node) -> str | None:
    """The message for an in-place write that crosses ``cut``, or ``None``."""
    root = program.writes.get(node)
    if root is None:
        return None
    what = program.owner.get(root) or program.label(root)
    wrote = f"{node.name} ({program.label(node)} writes {what} in place)"
    fix = (
        "make the write out of place and local to the layer, or keep the writer and its "
        "readers on one stage"
    )
    readers = next((c.consumers for c in cut.crossing if c.node is node), [])
    by = ", ".join(readers[:2]) or "the right side"
    if any(p.writer is node for p in program.persisted) and not _read_after(program, node):
        return (
            f"{wrote} persists to the next step, where {by} reads it on the other side of "
            f"cut {cut.position}; each stage keeps its own copy, so the split reads stale "
            f"state; {fix}"
        )
    return (
        f"{wrote} is read by {by} across cut {cut.position}; a stage that did not run the "
        f"write reads the unwritten value; {fix}"
    )


def _read_after(program, node) -> bool:
    """Whether anything reads ``node``'s write later in the same step."""
    return bool(node.users) or any(node in ws for ws in program.mutation_inputs.values())
