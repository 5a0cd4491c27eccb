"""GC401 varlen-metadata-not-consumed

What it checks
    No op mixes tokens of different packed documents. Token locality is proven
    per op by an abstract interpretation over the whole graph
    (:mod:`graphcheck.analysis.passes.propagate_locality_pass`, the op table
    :mod:`graphcheck.analysis.locality`): for every tensor it knows which dimensions run
    over the tokens, and for every element which tokens it may depend on. The
    only ops admitted to mix tokens are document-aware by construction: varlen
    attention reading the real ``cu_seq_lens``, attention whose mask is proven
    false (or ``-inf``) across documents by comparing document ids of both
    sides, kernels given ``cu_seqlens`` / ``seq_idx``, and gather -> per-token
    work -> scatter-back through a permutation and its inverse (token-choice
    MoE). A finding names the op where the mixing starts and why. An op the
    table does not know that touches a token dimension is a finding too (fail
    closed), and so is a program whose export fixed T to the example's length: no
    dimension is then known to run over the tokens, and the finding names the first
    op over that length ("documents cannot be tracked"; GC403 reports the
    specialisation itself).

Why it matters
    Packed batches hold several documents in one row. An op that lets a token
    see another document (attention without document boundaries, a token
    shift, a prefix sum or a softmax over T, expert-choice routing, a mask
    built from position values) makes the trainer compute bytes the serving
    sampler, which runs documents separately, never does.

Example
    ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` on a packed
    batch; ``torch.roll(x, 1, dims=1)``; ``x.cumsum(1)``; a mask
    ``pos[:, None] >= pos[None, :]``; ``cu_seq_lens`` collapsed to one document.

Fix
    Call a varlen kernel with ``cu_seq_lens_q/k``, or build the mask from
    document ids of both sides (``doc[:, None] == doc[None, :]``, with
    ``doc = cumsum(position_ids == 0)``); give scans and convolutions the
    ``cu_seqlens``; route tokens by their own scores. For a custom kernel
    graphcheck does not know, register a ``torch.library`` stand-in that takes
    ``cu_seqlens`` (``--kernels``).
"""

from __future__ import annotations

from dataclasses import replace

from graphcheck.diagnostics import Diagnostic, module_path

__all__ = ["CODE", "NAME", "EXAMPLE", "SEVERITY", "SUMMARY", "check"]

CODE = "GC401"
NAME = "varlen-metadata-not-consumed"
SEVERITY = "error"
SUMMARY = "an op mixes tokens across packed documents"
# The documentation's example, run by tests/rules/test_rule_table.py: the code fires
# at the cut on the violating model and not on its passing twin.
EXAMPLE = {
    "violating": "fixtures/violations.py:ignores_cu_seqlens",
    "passing": "fixtures/violations.py:sdpa_doc_mask",
    "cut": 4,
}


def check(ctx) -> list[Diagnostic]:
    """One finding per module and reason (a loop unrolled by export repeats an op), after
    the one for a T the export fixed (when it did)."""
    program = ctx.program
    found = [
        Diagnostic.at(CODE, NAME, reason, node=node)
        for node, reason in getattr(program, "untracked", {}).items()
    ]
    order = {n: i for i, n in enumerate(program.graph.nodes)}
    leaks = sorted(program.leaks.items(), key=lambda kv: order.get(kv[0], -1))
    for reason, nodes in _grouped(leaks):
        message = (
            f"{reason}: packed documents leak into each other; keep every token-mixing "
            "op inside documents (varlen kernels with cu_seq_lens, masks from document ids)"
        )
        found.append(Diagnostic.at(CODE, NAME, message, node=nodes[0]))
    return found + _backward(program.gradients, program.layout)


def _function(name: str, check) -> Diagnostic:
    """A ``torch.autograd.Function`` whose own backward was not shown token-local."""
    ran = f" Run alone, {check.detail}." if check is not None and check.detail else ""
    return Diagnostic(CODE, NAME, (
        f"backward not proven: `{name}` is a torch.autograd.Function, and the export keeps "
        f"its forward only, so its own backward is checked by running it, as a per-token "
        f"op.{ran} Write it as a torch.library.custom_op with register_autograd (its "
        "backward is then traced and proven)"
    ))  # fmt: skip


def _backward(proof, layout) -> list[Diagnostic]:
    """``--backward``: the backward program's leaks, one per module and reason, and the
    ``autograd.Function`` backwards it could not hold."""
    if proof is None:
        return []
    found = [_function(name, proof.executed.get(name)) for name in proof.functions]
    if proof.refused:
        found.append(Diagnostic(CODE, NAME, f"backward not proven: {proof.refused}; the "
                                "backward of some op depends on the packed length"))  # fmt: skip
    for reason, nodes in _grouped(proof.leaks.items()):
        message = (
            f"in the backward program: {reason}: the training step's gradients of one "
            "document depend on the others; give the op a gradient that keeps to each "
            "token's (or document's) rows"
        )
        at = Diagnostic.at(CODE, NAME, message, node=nodes[0])  # its name: of the joint graph
        layer = layout.layer_of(at.module) if at.module else None
        found.append(replace(at, node=f"{at.node} (backward)", layer=layer))
    return found


def _grouped(leaks) -> list[tuple[str, list]]:
    """One group per module and reason (a loop unrolled by export repeats an op): the
    reason, counting the ops when more than one, and the ops in the given order."""
    groups: dict[tuple[str, str], list] = {}
    for node, reason in leaks:
        groups.setdefault((module_path(node) or "", reason), []).append(node)
    return [
        (reason + (f" ({len(nodes)} such ops here)" if len(nodes) > 1 else ""), nodes)
        for (_, reason), nodes in groups.items()
    ]
