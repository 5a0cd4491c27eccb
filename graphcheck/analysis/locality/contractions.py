"""Contractions: matmuls, einsums and grouped matmuls.

Assumes the einsum letters of each op (``mm``, ``bmm``, ``matmul`` with broadcast batch
dims, ``linear``, ``addmm``, ``baddbmm``, ``einsum`` without ``...``): a contraction over
a token dim is document-local only when an operand is ``0`` wherever the summed token
and a kept token lie in different documents. A grouped matmul is token-wise when its
group offsets are the counts of the sort that ordered its rows.
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.fx import op_name
from graphcheck.analysis.locality import chunks
from graphcheck.analysis.locality.domain import (
    Dep,
    Fill,
    Interp,
    Kind,
    Pair,
    Tok,
    Val,
    bind,
    carry,
    has_tokens,
    is_wildcard,
    meta_toks,
    ndim_of,
    unknown,
)
from graphcheck.analysis.locality.registry import Work, register
from graphcheck.analysis.locality.rows import groups_of_sort

__all__ = ["contract", "grouped_mm"]

aten = torch.ops.aten


def _letters(n: int, start: int) -> str:
    return "".join(chr(ord("a") + start + i) for i in range(n))


def _matmul_spec(a_nd: int, b_nd: int, out_nd: int) -> tuple[str, str, str] | None:
    """Einsum letters of ``matmul`` with broadcast batch dims (``z`` is contracted)."""
    if a_nd == 1 and b_nd == 1:
        return "z", "z", ""
    if a_nd == 1:
        batch = _letters(b_nd - 2, 0)
        return "z", batch + "zy", batch + "y"
    if b_nd == 1:
        batch = _letters(a_nd - 2, 0)
        return batch + "xz", "z", batch + "x"
    out_batch = _letters(out_nd - 2, 0)
    a_batch, b_batch = (
        out_batch[len(out_batch) - (a_nd - 2) :],
        out_batch[len(out_batch) - (b_nd - 2) :],
    )
    return a_batch + "xz", b_batch + "zy", out_batch + "xy"


@register(aten.baddbmm.default, aten.einsum.default)
@register(
    aten.mm.default,
    aten.bmm.default,
    aten.matmul.default,
    aten.linear.default,
    aten.addmm.default,
    work=Work.MATMUL,
)
def contract(interp: Interp, node: torch.fx.Node) -> Val:
    spec = _contraction(node)
    if spec is None:
        return unknown(interp, node)
    operands, letters, out = spec
    vals = [interp.val(a) for a in operands]
    if any(v is None or len(v.toks) != len(ls) for v, ls in zip(vals, letters, strict=True)):
        vals = [v for v in vals if v is not None]
        if has_tokens(vals):
            return interp.leak(node, f"`{op_name(node.target)}` on operands of unexpected rank")
        return Val(meta_toks(node.meta.get("val"), interp.tokens))
    result = _einsum(interp, node, vals, letters, out)
    bias = [interp.val(a) for a in _bias(node)]
    if bias and result.dep < Dep.LEAK:
        result = result.with_(**carry([result, *bias]))
    return result


def _contraction(node: torch.fx.Node):
    name = op_name(node.target).split(".")[1]
    args = node.args
    if name == "einsum":
        equation, tensors = args[0], list(args[1])
        if "..." in equation or "->" not in equation:
            return None
        ins, out = equation.replace(" ", "").split("->")
        return tensors, ins.split(","), out
    if name == "linear":
        n = ndim_of(args[0])
        batch = _letters(n - 1, 0)
        return [args[0], args[1]], [batch + "z", "yz"], batch + "y"
    pairs = {"mm": (0, 1), "bmm": (0, 1), "matmul": (0, 1), "addmm": (1, 2), "baddbmm": (1, 2)}
    if name not in pairs:
        return None
    ia, ib = pairs[name]
    spec = _matmul_spec(ndim_of(args[ia]), ndim_of(args[ib]), ndim_of(node))
    return ([args[ia], args[ib]], list(spec[:2]), spec[2]) if spec else None


def _bias(node: torch.fx.Node) -> list:
    name = op_name(node.target).split(".")[1]
    if name in ("addmm", "baddbmm"):
        return [node.args[0]]
    if name == "linear" and len(node.args) > 2 and isinstance(node.args[2], torch.fx.Node):
        return [node.args[2]]
    return []


def _lined_up(vals: list[Val], letters: list[str], skip_wildcards: bool) -> dict | None:
    """The token dim of each letter (``None``: two operands disagree on one)."""
    tok_of: dict[str, Tok] = {}
    for val, ls in zip(vals, letters, strict=True):
        if skip_wildcards and is_wildcard(val):
            continue  # reads no token: lines up with any token dim
        for letter, tok in zip(ls, val.toks, strict=True):
            if tok is not None and tok_of.setdefault(letter, tok) != tok:
                return None
    return tok_of


def _einsum(interp, node, vals: list[Val], letters: list[str], out: str) -> Val:
    tok_of = _lined_up(vals, letters, False) or _lined_up(vals, letters, True)
    if tok_of is None:
        if (earlier := interp.passed_on(node, vals)) is not None:
            return earlier
        return interp.leak(node, "contracts tensors whose token dimensions do not line up")
    summed = [letter for letter in tok_of if letter not in out]
    toks = tuple(tok_of.get(letter) for letter in out)
    if summed and (earlier := interp.passed_on(node, vals)) is not None:
        return earlier.with_(toks=toks)
    if not summed:
        return Val(toks, **carry(vals), guard=_kept_guard(vals, letters, out))
    if len(summed) == 1 and _masked(vals, letters, summed[0], out):
        return Val(toks, **{**carry(vals), "dep": Dep.DOC})
    if all(t is None for t in toks) and not _bias(
        node
    ):  # a bias would count once, not per document
        interp.sums.add(node)
    what = f"`{op_name(node.target)}` sums over the token dimension"
    return interp.leak(node, what + " without a document mask (tokens of all documents meet)")


def _masked(vals: list[Val], letters: list[str], summed: str, out: str) -> bool:
    """Some operand is 0 wherever the summed token and a kept token lie in different
    documents, and no operand reaches beyond its documents."""
    if any(v.dep > Dep.DOC for v in vals):
        return False
    for val, ls in zip(vals, letters, strict=True):
        g = val.guard
        if g is None or g.fill != Fill.ZERO or chunks.place_guard(val):
            continue
        pair = {ls[g.row], ls[g.col]}
        if summed in pair and (pair - {summed}) <= set(out) and _one_chunk(vals, letters, val, ls):
            return True
    return False


def _one_chunk(vals: list[Val], letters: list[str], guarded: Val, ls: str) -> bool:
    """A guard between two in-chunk dims holds at one chunk index (its other token dims):
    every operand's token dims must be indexed by the guarded operand's letters (the same
    chunk), and the chunk stays in the output."""
    own = {ls[d] for d in guarded.token_dims}
    if own == {ls[guarded.guard.row], ls[guarded.guard.col]}:
        return True  # a guard between whole tokens
    return all({lv[d] for d in v.token_dims} <= own for v, lv in zip(vals, letters, strict=True))


def _kept_guard(vals: list[Val], letters: list[str], out: str) -> Pair | None:
    for val, ls in zip(vals, letters, strict=True):
        g = val.guard
        if g is None or g.fill != Fill.ZERO or ls[g.row] not in out or ls[g.col] not in out:
            continue
        if chunks.place_guard(val):
            continue
        if _one_chunk(vals, letters, val, ls) and {ls[d] for d in val.token_dims} <= set(out):
            return Pair(out.index(ls[g.row]), out.index(ls[g.col]), Fill.ZERO)
    return None


@register(aten._grouped_mm.default, work=(Work.MATMUL, Work.ROUTED))
def grouped_mm(interp: Interp, node: torch.fx.Node) -> Val:
    """Rows grouped by expert: row ``r`` uses the weight of the group ``offs`` puts it
    in. Token-wise when ``offs`` counts the sorted keys that ordered the rows."""
    bound = bind(node)
    rows, weight, offs = (interp.val(bound.get(k)) for k in ("self", "mat2", "offs"))
    if rows is None or not rows.token_dims:
        return Val(meta_toks(node.meta.get("val"), interp.tokens), **carry([rows, weight]))
    if rows.toks[0] is None and len(rows.toks) == 2 and rows.toks[1] is not None:
        return _grouped_sum(interp, node, (rows, weight, offs))
    axis = rows.toks[0].axis if rows.toks[0] is not None else ""
    if offs is None or offs.kind != Kind.OFFSETS or not groups_of_sort(node, offs, axis):
        return interp.leak(node, "grouped matmul whose groups are not those of its rows' sort")
    return Val((rows.toks[0], None), **carry([rows, weight]))


def _grouped_sum(interp: Interp, node: torch.fx.Node, vals: tuple) -> Val:
    """``_grouped_mm(x.T, g, offs)``: each group's rows summed (an expert weight's
    gradient, ``[E, H, H']``): a plain sum of every token into its own group's result
    when the groups are those of the rows' sort (a leak the backward proof admits where
    it is a parameter's gradient)."""
    rows, weight, offs = vals
    axis = rows.toks[1].axis
    if offs is None or offs.kind != Kind.OFFSETS or not groups_of_sort(node, offs, axis):
        return interp.leak(node, "grouped matmul whose groups are not those of its rows' sort")
    if (earlier := interp.passed_on(node, [rows, weight])) is not None:
        return earlier.with_(toks=meta_toks(node.meta.get("val"), interp.tokens))
    interp.sums.add(node)
    why = "`_grouped_mm` sums the tokens of each group (an expert weight's gradient)"
    return interp.leak(node, why, inputs=[rows, weight])
