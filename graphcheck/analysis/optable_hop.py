"""Higher-order ops in the op table: inline wrappers, flex attention, control flow.

* ``wrap_with_set_grad_enabled`` / ``wrap_with_autocast`` run their subgraph
  once, in place: the subgraph is interpreted with the operands' values.
* ``flex_attention`` is document-local when its ``mask_mod`` is proven to
  compare the document ids of the query and the key token (``doc[q] ==
  doc[kv]``, possibly and-ed with more conditions). The ``BlockMask`` block
  tables are trusted to come from ``create_block_mask`` over that same
  ``mask_mod`` (see ``docs/soundness.md``).
* Any other higher-order op (``cond``, ``while_loop``, ``map``, ``scan``) that
  touches token data cannot be followed: fail closed.
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.fx import op_name
from graphcheck.analysis.locality import Dep, Interp, Kind, Val, carry, has_tokens, meta_toks

__all__ = ["run_higher_order"]

_INLINE = {"wrap_with_set_grad_enabled", "wrap_with_autocast", "invoke_subgraph"}


def run_higher_order(interp: Interp, node: torch.fx.Node):
    name = op_name(node.target)
    if name == "flex_attention":
        return _flex(interp, node)
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
    operands = list(node.args[position + 1 :])
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
    proven = mask_mod is not None and _same_document(interp, mask_mod, list(buffers))
    if proven and _full_blocks(block_mask):
        why = "flex attention with full blocks, where the mask_mod is not applied"
        return _leaked(interp, node, why, data)
    val = node.meta.get("val")
    if not proven or any(d is not None and (d.dep > Dep.DOC or d.leaks) for d in data):
        why = "flex attention whose mask_mod does not compare document ids of both tokens"
        toks = meta_toks(val[0], interp.tokens)
        result = interp.leak(node, why, toks, inputs=data) if not proven else None
        result = result or Val(meta_toks(val[0], interp.tokens), **carry(data))
    else:
        qkv = [interp.val(a) for a in (q, k, v)]  # the proven mask only compares its buffers
        absolute = carry(qkv)["absolute"]
        deps = {**carry(data), "dep": Dep.DOC, "absolute": absolute}
        result = Val(meta_toks(val[0], interp.tokens), **deps)
    return tuple(result for _ in val) if isinstance(val, tuple | list) else result


def _full_blocks(block_mask) -> bool:
    """The ``BlockMask`` lists blocks taken whole, skipping the ``mask_mod`` there
    (``full_kv_num_blocks`` / ``full_kv_indices``): the proof of the mask_mod does not
    cover them. graphcheck's ``create_block_mask`` stand-in makes none."""
    return len(block_mask) > 5 and any(b is not None for b in block_mask[4:6])


def _leaked(interp: Interp, node: torch.fx.Node, why: str, data):
    val = node.meta.get("val")
    result = interp.leak(node, why, meta_toks(val[0], interp.tokens), inputs=data)
    return tuple(result for _ in val) if isinstance(val, tuple | list) else result


def _same_document(interp: Interp, mask_mod: torch.fx.GraphModule, buffers: list) -> bool:
    """``mask_mod(b, h, q, kv)`` is false whenever ``q`` and ``kv`` lie in different
    documents: it is ``doc[q] == doc[kv]`` and-ed with anything."""
    placeholders = [n for n in mask_mod.graph.nodes if n.op == "placeholder"]
    facts: dict[torch.fx.Node, tuple] = {}
    if len(placeholders) >= 4:
        facts[placeholders[2]] = ("index", "q")
        facts[placeholders[3]] = ("index", "kv")
    for ph, buf in zip(placeholders[4:], buffers, strict=False):
        val = interp.val(buf)
        if val is not None and val.kind == Kind.DOCID:
            facts[ph] = ("docid",)
    for inner in mask_mod.graph.nodes:
        if inner.op == "call_function":
            fact = _mask_fact(inner, facts)
            if fact is not None:
                facts[inner] = fact
        elif inner.op == "output":
            out = inner.args[0]
            out = out[0] if isinstance(out, tuple | list) else out
            return facts.get(out) == ("same",)
    return False


def _mask_fact(node: torch.fx.Node, facts: dict) -> tuple | None:
    name = op_name(node.target)
    args = [facts.get(a) if isinstance(a, torch.fx.Node) else None for a in node.args]
    if name == "flat_apply" and len(args) >= 5 and args[3] == ("docid",):
        return ("doc", args[4][1]) if args[4] and args[4][0] == "index" else None
    if name == "aten.index.Tensor" and args[0] == ("docid",):
        idx = [facts.get(i) for i in node.args[1] if isinstance(i, torch.fx.Node)]
        return ("doc", idx[0][1]) if len(idx) == 1 and idx[0] and idx[0][0] == "index" else None
    if name in ("aten.eq.Tensor",) and {args[0], args[1]} == {("doc", "q"), ("doc", "kv")}:
        return ("same",)
    if name in ("aten.__and__.Tensor", "aten.bitwise_and.Tensor", "aten.logical_and.default"):
        return ("same",) if ("same",) in args else None
    if name in ("aten.__or__.Tensor", "aten.bitwise_or.Tensor", "aten.logical_or.default"):
        return ("same",) if args[:2] == [("same",), ("same",)] else None
    if name in ("aten.to.dtype", "aten._to_copy.default", "aten.clone.default"):
        return args[0]
    return None
