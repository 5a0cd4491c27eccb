"""Higher-order ops: inline wrappers, flex attention, control flow.

* ``wrap_with_set_grad_enabled`` / ``wrap_with_autocast`` / ``invoke_subgraph`` run
  their subgraph once, in place: the subgraph is interpreted with the operands' values.
* ``flex_attention`` is document-local when an SMT solver proves its ``mask_mod``
  false for every query and key of different documents
  (:mod:`graphcheck.analysis.locality.obligations`); a refuted mask is reported with its
  counterexample, a mask the translation does not follow fails closed. The
  ``BlockMask``'s full blocks, where the kernel skips the mask_mod, are followed back
  to the mask they are counted from (:mod:`graphcheck.analysis.block_tables`), which
  the solver must prove implies the mask_mod; the other block tables only choose
  blocks the mask_mod is applied on (see ``docs/soundness.md``).
* ``cond`` is the join of its two branches, each interpreted through its body with
  the operands, and of its predicate (a branch picked by a mean over every token
  mixes documents); a predicate on the packed length is GC403 (a document alone may
  take the other branch).
* ``scan`` over the tokens, and a ``while_loop`` that walks the tokens with a counter,
  are document-local when their carry is proven reset at every document start
  (:mod:`graphcheck.analysis.locality.recurrence`).
* Any other higher-order op (``map``, a ``while_loop`` that is not a walk over the
  tokens) that touches token data cannot be followed: fail closed.

No op is registered here: :func:`higher_order` is the dispatch's fallback for every
``HigherOrderOperator``.
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.block_tables import FullBlocks, full_block_mask, mask_body
from graphcheck.analysis.fx import op_name
from graphcheck.analysis.locality import recurrence
from graphcheck.analysis.locality.domain import (
    Dep,
    Interp,
    Kind,
    Val,
    carry,
    has_tokens,
    meta_toks,
    shape_of,
)
from graphcheck.analysis.locality.obligations import (
    Buffer,
    Judgement,
    Verdict,
    judge_mask,
    judge_within,
)

__all__ = ["higher_order", "run_higher_order"]


def higher_order(interp: Interp, node: torch.fx.Node):
    return run_higher_order(interp, node)


_INLINE = {"wrap_with_set_grad_enabled", "wrap_with_autocast", "invoke_subgraph"}


def run_higher_order(interp: Interp, node: torch.fx.Node):
    name = op_name(node.target)
    if name == "flex_attention":
        return _flex(interp, node)
    if name == "cond" and (joined := _cond(interp, node)) is not None:
        return joined
    if name == "scan" and (scanned := recurrence.scan(interp, node, _scan_body(interp, node))):
        return scanned
    if name == "while_loop":
        cond, body = (_module(interp, a) for a in node.args[:2])
        if (looped := recurrence.while_loop(interp, node, cond, body)) is not None:
            return looped
    if name in _INLINE:
        inlined = _inline(interp, node)
        if inlined is not None:
            return inlined
    vals = [interp.val(a) for a in node.all_input_nodes]
    if has_tokens(vals):
        return interp.leak(node, f"token data inside `{name}` (control flow graphcheck cannot "
                           "follow); move the token mixing out of it")  # fmt: skip
    val = node.meta.get("val")
    plain = Val(meta_toks(val, interp.tokens), **carry(vals))
    return tuple(plain for _ in val) if isinstance(val, tuple | list) else plain


def _scan_body(interp: Interp, node: torch.fx.Node) -> torch.fx.GraphModule | None:
    return _module(interp, node.args[0]) if node.args else None


def _module(interp: Interp, arg) -> torch.fx.GraphModule | None:
    if not isinstance(arg, torch.fx.Node) or arg.op != "get_attr":
        return None
    found = interp.root
    for part in str(arg.target).split("."):
        found = getattr(found, part, None)
    return found if isinstance(found, torch.fx.GraphModule) else None


def _inline(interp: Interp, node: torch.fx.Node):
    """Interpret the wrapped subgraph with the operands that follow it."""
    position = next((i for i, a in enumerate(node.args) if _module(interp, a)), None)
    if position is None:
        return None
    sub = _module(interp, node.args[position])
    return _body(interp, sub, list(node.args[position + 1 :]))


def _cond(interp: Interp, node: torch.fx.Node):
    """``cond(pred, true_fn, false_fn, operands)``: each branch interpreted with the
    operands, the result their join, joined with the predicate too (the branch taken
    depends on what the predicate reads: a mean over the tokens picks it for every
    document). A predicate on the packed length is a length case a document alone
    may not take (GC403, :attr:`Interp.length_branches`). ``None``: not followed."""
    pred, true_fn, false_fn, operands = node.args[:4]
    branches = [_body(interp, _module(interp, g), list(operands)) for g in (true_fn, false_fn)]
    if any(b is None for b in branches) or len(branches[0]) != len(branches[1]):
        return None
    chosen = [interp.val(pred)] if isinstance(pred, torch.fx.Node) else []
    if _reads_length(interp, pred):  # GC403's finding, not a value the branches read
        interp.length_branches.setdefault(node, f"`cond` chooses its branch by `{pred}`, "
                                          "which reads the packed length")  # fmt: skip
        chosen = []
    out = node.meta.get("val")
    outs = out if isinstance(out, tuple | list) else (out,)
    joined = tuple(
        Val(meta_toks(o, interp.tokens), **carry([a, b, *chosen]))
        for o, a, b in zip(outs, *branches, strict=False)
    )
    return joined if isinstance(out, tuple | list) else joined[0]


def _reads_length(interp: Interp, pred) -> bool:
    """A predicate computed from the packed length T (a SymBool over T's symbols, or a
    tensor holding the length)."""
    if not isinstance(pred, torch.fx.Node):
        return False
    val = pred.meta.get("val")
    if isinstance(val, torch.SymBool | torch.SymInt):
        return bool({str(s) for s in val.node.expr.free_symbols} & interp.tokens)
    found = interp.val(pred)
    return found is not None and found.kind == Kind.LENGTH


def _body(interp: Interp, sub: torch.fx.GraphModule | None, operands: list):
    """The values of ``sub``'s outputs, interpreted with ``operands``' values."""
    if sub is None:
        return None
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    for ph, arg in zip(placeholders, operands, strict=False):
        interp.vals[ph] = interp.val(arg) or Val(meta_toks(ph.meta.get("val"), interp.tokens))
    for inner in sub.graph.nodes:
        if inner.op == "call_function":
            interp.vals[inner] = interp.transfer(interp, inner)
        elif inner.op == "get_attr":
            interp.vals[inner] = Val(meta_toks(inner.meta.get("val"), interp.tokens))
        elif inner.op == "output":
            outs = inner.args[0]
            outs = outs if isinstance(outs, tuple | list) else (outs,)
            return tuple(interp.val(o) or Val(()) for o in outs)
    return None


def _flex(interp: Interp, node: torch.fx.Node):
    q, k, v, _score, block_mask = node.args[:5]
    buffers = node.args[8] if len(node.args) > 8 else ()
    mask_mod = _module(interp, block_mask[-1]) if block_mask else None
    data = [interp.val(a) for a in (q, k, v, *buffers) if isinstance(a, torch.fx.Node)]
    batch = (shape_of(q) or (None,))[0]
    judged = _judged(interp, mask_mod, list(buffers), batch if type(batch) is int else None)
    proven = judged.verdict in (Verdict.PROVEN, Verdict.MOVES)
    why = _full_blocks(interp, block_mask, mask_mod, list(buffers)) if proven else None
    if why is not None:
        return _leaked(interp, node, why, data)
    val = node.meta.get("val")
    if not proven or any(d is not None and (d.dep > Dep.DOC or d.leaks) for d in data):
        toks = meta_toks(val[0], interp.tokens)
        result = interp.leak(node, _why(judged), toks, inputs=data) if not proven else None
        result = result or Val(meta_toks(val[0], interp.tokens), **carry(data))
    else:
        qkv = [interp.val(a) for a in (q, k, v)]  # the proven mask only compares its buffers
        absolute = carry(qkv)["absolute"]
        if judged.verdict == Verdict.MOVES:  # apart, but not as the document alone
            absolute |= interp.fabricate(node, f"flex attention whose mask_mod takes other "
                                         f"pairs of a document packed than alone ("
                                         f"{judged.detail})")  # fmt: skip
        deps = {**carry(data), "dep": Dep.DOC, "absolute": absolute}
        result = Val(meta_toks(val[0], interp.tokens), **deps)
    return tuple(result for _ in val) if isinstance(val, tuple | list) else result


def _judged(interp: Interp, mask_mod, buffers: list, batch: int | None) -> Judgement:
    """The solver's verdict on the mask: false for every pair of tokens of different
    documents (the buffers mean what their abstract values prove)."""
    if mask_mod is None:
        return Judgement(Verdict.UNKNOWN, "no mask_mod subgraph")
    return judge_mask(mask_mod, _meanings(interp, buffers), batch)


def _meanings(interp: Interp, buffers: list) -> list[Buffer]:
    """What each captured buffer holds, by its abstract value and shape."""
    meanings = []
    for buf in buffers:
        val = interp.val(buf) if isinstance(buf, torch.fx.Node) else None
        shape = shape_of(buf) if isinstance(buf, torch.fx.Node) else None
        kind, extra = (val.kind, val.extra) if val is not None else (None, None)
        meanings.append(Buffer(kind, extra, tuple(shape) if shape is not None else None))
    return meanings


def _why(judged: Judgement) -> str:
    if judged.verdict == Verdict.REFUTED:
        return (f"flex attention whose mask_mod lets documents read each other: "
                f"{judged.detail}")  # fmt: skip
    return (f"flex attention with a mask_mod not understood: {judged.detail} (write the "
            "mask of comparisons, and/or/not, integer arithmetic and buffer lookups)")  # fmt: skip


def _full_blocks(interp: Interp, block_mask, mask_mod, buffers: list) -> str | None:
    """Why the ``BlockMask``'s full blocks (``full_kv_*`` / ``full_q_*``, attended
    whole without the ``mask_mod``) may hold a pair the proven mask_mod rejects, or
    ``None``: there are none, or the mask they are counted from implies the mask_mod."""
    head = "flex attention with full blocks, where the mask_mod is not applied"
    try:
        found = full_block_mask(tuple(block_mask))
        if found is None:
            return None
        inner, read = mask_body(*found, buffers, interp.root)
    except FullBlocks as err:
        return f"{head}, whose tables are not counted from a mask: {err}; {_FIX}"
    judged = judge_within(inner, mask_mod, _meanings(interp, read))
    if judged.verdict == Verdict.PROVEN:
        return None
    if judged.verdict == Verdict.REFUTED:
        return (f"{head}, counted from a different mask than the mask_mod: the full-block "
                f"mask takes a pair the mask_mod rejects ({judged.detail}); {_FIX}")  # fmt: skip
    return f"{head}, counted from a mask not understood: {judged.detail}; {_FIX}"


_FIX = "build the BlockMask with create_block_mask over the mask_mod itself"


def _leaked(interp: Interp, node: torch.fx.Node, why: str, data):
    val = node.meta.get("val")
    result = interp.leak(node, why, meta_toks(val[0], interp.tokens), inputs=data)
    return tuple(result for _ in val) if isinstance(val, tuple | list) else result
