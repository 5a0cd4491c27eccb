"""``scan`` over the tokens: a recurrence is document-local when its carry is reset
wherever a document starts.

``torch.ops.higher_order.scan(combine, init, xs, additional)`` runs ``combine(carry,
x_t, *additional) -> (carry', y_t)`` along dim 0 of ``xs``. Over the token dim, ``y_t``
reads every earlier token through the carry; it keeps to its document exactly when,
at every token that starts a document, neither ``carry'`` nor ``y_t`` depends on the
incoming carry (token 0 reads ``init``, a value of no token). :func:`scan` proves that
obligation over the body, value by value:

* a value is *carry-free at starts* when its inputs are, or when it is a product with
  a factor that is zero at every start (``carry * (1 - start)``, ``carry * pos``), or
  a ``where`` whose condition holds at every start and whose chosen branch is
  carry-free (``where(start, x_t, carry * a + x_t)``), or a ``masked_fill`` by such a
  condition; anything else computed from the carry is not;
* *holds at every start* and *is zero at every start* are facts of the layout: the
  slices of ``xs`` that are functions of the layout keep their term
  (:mod:`graphcheck.analysis.layout_terms`), the body's element-wise ops combine them,
  and the SMT solver decides whether a term is the document-start indicator (or is
  zero exactly there), whatever it was written as.

``xs`` must hold tokens on dim 0 only and leak nothing; ``init`` and the additional
operands must not be token data. The results ``ys`` are then document-local; the
final carry (the state after the last token) is one origin, a leak wherever it is
read as data. Any other scan over tokens fails closed, naming what was not proven.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from graphcheck.analysis.layout_terms import (
    combined,
    document_id_shift,
    resets_at_starts,
    term_of,
)
from graphcheck.analysis.locality.domain import Dep, Interp, Tok, Val, carry, meta_toks
from graphcheck.analysis.locality.pointwise import _base

__all__ = ["scan"]

_PRODUCTS = {"mul", "__and__", "bitwise_and", "logical_and"}
_SAME = {
    "view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "expand", "clone", "alias",
    "_to_copy", "to", "neg", "contiguous", "permute", "transpose", "t", "getitem",
}  # fmt: skip


@dataclass(frozen=True)
class _Step:
    """A value of the body: whether it reads the carry, whether it is carry-free at
    every document start, and its layout term (``None``: not a function of the layout)."""

    reads_carry: bool = False
    free: bool = True
    zero: bool = False  # zero (False) at every document start
    term: tuple | None = None


def scan(interp: Interp, node: torch.fx.Node, body: torch.fx.GraphModule | None):
    """The values of ``scan``'s results (carries, then ``ys``), or a leak at the scan
    naming what was not proven."""
    _, init, xs, extra = node.args[:4]
    inits, xs_vals = [interp.val(a) for a in init], [interp.val(a) for a in xs]
    extras = [interp.val(a) for a in extra]
    outs = node.meta.get("val")
    if body is None:
        return None
    why = _operands(interp, inits, xs_vals, extras)
    if why is None:
        why = _obligation(body, len(init), xs_vals, extras)
    if why is not None:
        reason = f"`scan` over the tokens whose carry is not proven reset at document starts: {why}"
        results = [interp.leak(node, reason, meta_toks(o, interp.tokens)) for o in outs]
        return tuple(results)
    data = carry([*xs_vals, *inits, *extras])
    final = interp.leak(node, "the final state of a scan over the tokens (the last document's) "
                        "read as data", ())  # fmt: skip
    finals = [final.with_(toks=meta_toks(o, interp.tokens)) for o in outs[: len(init)]]
    ys = [Val(meta_toks(o, interp.tokens), **{**data, "dep": Dep.DOC}) for o in outs[len(init) :]]
    return tuple(finals + ys)


def _operands(interp: Interp, inits: list, xs: list, extras: list) -> str | None:
    """Why the operands do not fit the proof (``None``: they do)."""
    if any(v is None or v.token_dims or v.leaks for v in (*inits, *extras)):
        return "its initial carry or extra operands hold token data"
    for val in xs:
        if val is None or val.leaks or val.dep > Dep.DOC:
            return "a scanned operand already mixes documents"
        if val.toks[:1] != (Tok("T", 1),) or any(t is not None for t in val.toks[1:]):
            return "a scanned operand does not run over the tokens on dim 0 alone"
    return None


def _obligation(body: torch.fx.GraphModule, carries: int, xs: list, extras: list) -> str | None:
    """Interpret the body; ``None`` when every result is carry-free at starts."""
    steps: dict[torch.fx.Node, _Step] = {}
    holders = [n for n in body.graph.nodes if n.op == "placeholder"]
    for index, holder in enumerate(holders):
        if index < carries:
            steps[holder] = _Step(reads_carry=True, free=False)
        elif index < carries + len(xs):
            steps[holder] = _Step(term=term_of(xs[index - carries]))
        else:
            steps[holder] = _Step()
    for inner in body.graph.nodes:
        if inner.op == "call_function":
            steps[inner] = _step(inner, steps)
        elif inner.op == "get_attr":
            steps[inner] = _Step()
        elif inner.op == "output":
            results = [r for r in _flat_args(inner.args[0]) if isinstance(r, torch.fx.Node)]
            bad = [r.name for r in results if not steps.get(r, _Step()).free]
            if bad:
                return (f"at a document start, `{bad[0]}` still reads the carry (reset it "
                        "there: `where(start, x, ...)` or a factor zero at starts)")  # fmt: skip
            return None
    return "its body has no output"


def _step(node: torch.fx.Node, steps: dict) -> _Step:
    base = _base(node)
    args = list(node.args)
    inputs = [steps.get(a, _Step()) if isinstance(a, torch.fx.Node) else a for a in args]
    nodes = [s for s in inputs if isinstance(s, _Step)]
    reads = any(s.reads_carry for s in nodes)
    terms = [_term_of(s) for s in inputs]
    if base == "rsub" and len(terms) == 2:  # rsub(a, b) = b - a
        base, terms = "sub", terms[::-1]
    term = combined(base, terms) if base not in _SAME else None
    if base in _SAME and nodes:
        return nodes[0] if len(nodes) == 1 else _Step(reads, all(s.free for s in nodes))
    if base in _PRODUCTS:
        zero = any(_zero(s) for s in nodes)
        return _Step(reads, zero or all(s.free for s in nodes), zero, term)
    if base == "where" and len(nodes) >= 1 and isinstance(inputs[0], _Step):
        cond, then, other = [*inputs, None, None][:3]
        chosen = then if _start(cond) else other if _zero(cond) else None
        free = _free(chosen) if chosen is not None else all(s.free for s in nodes)
        return _Step(reads, free, False, term)
    if base == "masked_fill" and isinstance(inputs[1], _Step) and _start(inputs[1]):
        return _Step(reads, _free(inputs[2]), False, term)
    step = _Step(reads, all(s.free for s in nodes), False, term)
    return _Step(reads, step.free, _zero(step), term)


def _term_of(value):
    if isinstance(value, _Step):
        return value.term
    return value if isinstance(value, bool | int) else None


def _free(value) -> bool:
    return value.free if isinstance(value, _Step) else True


def _start(step) -> bool:
    """Holds at every token that starts a document (token 0 may go either way: it
    reads ``init``), and elsewhere only where the token's position says: the same
    tokens of a document packed or alone."""
    if not isinstance(step, _Step) or step.term is None:
        return False
    return document_id_shift(step.term).shift in (0, 1) or resets_at_starts(step.term)


def _zero(step) -> bool:
    """Zero (or False) at every token that starts a document (but token 0)."""
    if not isinstance(step, _Step):
        return step == 0
    if step.zero:
        return True
    return step.term is not None and _start(_Step(term=("eq", step.term, ("int", 0))))


def _flat_args(value) -> list:
    if isinstance(value, tuple | list):
        return [x for item in value for x in _flat_args(item)]
    return [value]
