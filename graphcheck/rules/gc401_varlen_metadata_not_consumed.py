"""GC401 varlen-metadata-not-consumed

What it checks
    Every sequence-mixing op on activations (attention: sdpa, ``varlen_attn``,
    flex attention, eager softmax attention, custom kernels; convolutions and
    scans over the token axis) receives the document boundaries
    (``cu_seq_lens_*`` or ``position_ids``) through its masking or
    segmentation argument: the mask, ``cu_seqlens``, a sequence index.
    Reaching the op through its values does not count: rotary positions carry
    ``position_ids`` into q and k in every model.

Why it matters
    Packed batches hold several documents in one row. An op that does not see
    their boundaries lets documents attend to (or convolve over) each other:
    the trainer computes something the serving sampler, which runs documents
    separately, never does.

Example
    ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` on a packed
    batch; a mask built from ``input_ids`` only; the torch fallback of a
    linear-attention kernel that scans across documents.

Fix
    Call a varlen kernel with ``cu_seq_lens_q/k`` (``varlen_attn``), or pass a
    mask built from ``position_ids`` / ``cu_seq_lens``.
"""

from __future__ import annotations

import torch.fx

from graphcheck.diagnostics import Diagnostic
from graphcheck.ops import custom_mixer, is_higher_order, op_name, sequence_mixer, subgraph_mixers
from graphcheck.taint import DOCS

CODE = "GC401"
NAME = "varlen-metadata-not-consumed"
SUMMARY = "a sequence-mixing op ignores document boundaries"

_MATMULS = {"aten.matmul.default", "aten.bmm.default", "aten.mm.default", "aten.einsum.default"}
_MATMULS |= {"aten.baddbmm.default", "aten.linear.default"}


def check(ctx) -> list[Diagnostic]:
    program = ctx.program
    found = []
    for node in program.graph.nodes:
        if node.op != "call_function" or program.role.get(node) != "activation":
            continue
        if is_higher_order(node) and op_name(node.target) != "flex_attention":
            found.extend(_opaque(program, node))
            continue
        mixer = sequence_mixer(node, program.is_token_axis) or custom_mixer(node)
        if mixer is None or not any(program.role.get(d) == "activation" for d in mixer.data):
            continue
        segments = mixer.segments
        if mixer.kind == "softmax":
            if not _after_scores(program, mixer.data[0]):
                continue  # a softmax over routing logits, not attention scores
            segments = tuple(_mask_operands(program, mixer.data[0]))
        if any(_carries_docs(program, s) for s in segments):
            continue
        found.append(Diagnostic.at(CODE, NAME, _message(program, mixer, segments), node=node))
    return found


def _opaque(program, node: torch.fx.Node) -> list[Diagnostic]:
    """Fail closed on sequence mixing hidden inside a higher-order op (``cond``, ...)."""
    root = program.exported.program.graph_module
    kinds = sorted(set(subgraph_mixers(node, root, program.is_token_axis)))
    if not kinds:
        return []
    message = (
        f"{', '.join(kinds)} inside {op_name(node.target)} cannot be checked for document "
        "boundaries; move the sequence mixing out of the control-flow op"
    )
    return [Diagnostic.at(CODE, NAME, message, node=node)]


def _message(program, mixer, segments) -> str:
    if not segments:
        why = "it has no mask or segmentation argument"
    else:
        why = "its mask/segmentation arguments do not depend on cu_seq_lens or position_ids"
    return (
        f"{mixer.kind} does not see document boundaries ({why}): packed documents leak into "
        "each other; call a varlen kernel with cu_seq_lens_q/k or pass a document mask built "
        "from position_ids"
    )


def _carries_docs(program, node: torch.fx.Node) -> bool:
    return program.role.get(node) != "activation" and bool(program.taint.get(node, 0) & DOCS)


def _mask_operands(program, start: torch.fx.Node):
    """Non-activation operands merged into attention scores before the softmax."""
    todo, seen = [start], set()
    while todo:
        node = todo.pop()
        if node in seen or not isinstance(node, torch.fx.Node) or node.op != "call_function":
            continue
        seen.add(node)
        if op_name(node.target) in _MATMULS:
            continue
        for arg in node.all_input_nodes:
            if program.role.get(arg) == "activation":
                todo.append(arg)
            elif program.role.get(arg) == "replicated":
                yield arg


def _after_scores(program, start: torch.fx.Node) -> bool:
    """The softmax input comes from a q·k product (an attention score), not a router."""
    todo, seen = [start], set()
    while todo:
        node = todo.pop()
        if node in seen or not isinstance(node, torch.fx.Node) or node.op != "call_function":
            continue
        seen.add(node)
        if op_name(node.target) in _MATMULS:
            return op_name(node.target) != "aten.linear.default"
        todo.extend(a for a in node.all_input_nodes if program.role.get(a) == "activation")
    return False
