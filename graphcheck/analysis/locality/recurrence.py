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

:func:`while_loop` proves the same recurrence written as a loop over a token counter:
``while i < T: x_i = x.index_select(0, i); c = f(c, x_i); ys = ys.index_copy(0, i,
c)``. The counter (carried from 0, ``+ 1`` each step, compared with the packed length
by the condition) plays the token index; operands over the tokens may be read at its
row only and carried results over the tokens written there only; the other carries are
held to the obligation above. The counter used as a value is the absolute token index
(a fabricated position).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from graphcheck.analysis.layout_terms import (
    TOKEN,
    combined,
    document_id_shift,
    resets_at_starts,
    term_of,
)
from graphcheck.analysis.locality.domain import (
    Dep,
    Interp,
    Tok,
    Val,
    carry,
    has_tokens,
    is_length,
    meta_toks,
)
from graphcheck.analysis.locality.pointwise import _base

__all__ = ["scan", "while_loop"]

_PRODUCTS = {"mul", "__and__", "bitwise_and", "logical_and"}
_SAME = {
    "view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "expand", "clone", "alias",
    "_to_copy", "to", "neg", "contiguous", "permute", "transpose", "t", "mT", "getitem",
    "select",
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
    holders = [n for n in body.graph.nodes if n.op == "placeholder"]
    steps: dict[torch.fx.Node, _Step] = {}
    for index, holder in enumerate(holders):
        if index < carries:
            steps[holder] = _Step(reads_carry=True, free=False)
        elif index < carries + len(xs):
            steps[holder] = _Step(term=term_of(xs[index - carries]))
        else:
            steps[holder] = _Step()
    return _judged(body, steps, lambda node: None)


def _judged(body: torch.fx.GraphModule, steps: dict, own) -> str | None:
    """Interpret ``body`` from the placeholders' ``steps`` (``own(node)``: a step, an
    error string, or ``None`` for the common rules); ``None`` when every result is
    carry-free at starts."""
    for inner in body.graph.nodes:
        if inner.op == "call_function":
            found = own(inner)
            if isinstance(found, str):
                return found
            steps[inner] = found if found is not None else _step(inner, steps)
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


@dataclass
class _Loop:
    """A ``while_loop`` read as a walk over the tokens: the carried ``counter`` (0, then
    ``+ 1``, while ``< T``) is the token index, ``tables`` (operands over the tokens)
    are read at row ``counter`` only, ``outputs`` (carried) are written at row
    ``counter`` only; the other carries are the recurrence's state."""

    counter: torch.fx.Node
    tables: dict[torch.fx.Node, Val]
    outputs: set[torch.fx.Node]
    at_counter: set[torch.fx.Node]  # the counter, viewed as an index


def while_loop(interp: Interp, node: torch.fx.Node, cond, body) -> tuple | None:
    """The values of ``while_loop``'s results, proven as a recurrence over the tokens
    (see :class:`_Loop`: the results written row by row are document-local when every
    state is reset at document starts); a leak naming what was not proven; ``None``
    when no token data enters the loop."""
    _, _, carried, extra = node.args[:4]
    inits, extras = [interp.val(a) for a in carried], [interp.val(a) for a in extra]
    outs = node.meta.get("val")
    if not has_tokens([*inits, *extras]) or not isinstance(outs, tuple | list):
        return None
    loop, why = _walk(interp, node, cond, body)
    if loop is not None:
        why = _judged(body, _seeded(body, loop, len(carried)), lambda n: _loop_step(n, loop))
    if why is not None:
        reason = f"`while_loop` over the tokens not proven document-local: {why}"
        return tuple(interp.leak(node, reason, meta_toks(o, interp.tokens)) for o in outs)
    holders = [n for n in body.graph.nodes if n.op == "placeholder"]
    read = [v for h, v in zip(holders, [*inits, *extras], strict=False) if h.users]
    data = carry(read)  # the loop's bound (T), read by the condition only, is not data
    if _counter_as_data(loop):
        origin = interp.fabricate(node, "the loop's counter (the absolute token index) "
                                  "used as a value")  # fmt: skip
        data["absolute"] = data["absolute"] | origin
    final = interp.leak(node, "the final state of a loop over the tokens (the last "
                        "document's) read as data", ())  # fmt: skip
    results = []
    for index, out in enumerate(outs):
        holder, toks = holders[index], meta_toks(out, interp.tokens)
        if holder is loop.counter:
            results.append(Val(toks))
        elif holder in loop.outputs:
            results.append(Val(toks, **{**data, "dep": Dep.DOC}))
        else:
            results.append(final.with_(toks=toks))
    return tuple(results)


def _walk(interp: Interp, node: torch.fx.Node, cond, body) -> tuple[_Loop | None, str | None]:
    """The loop's shape (:class:`_Loop`), or why it is not a walk over the tokens."""
    if cond is None or body is None:
        return None, "its condition or body is not a graph"
    _, _, carried, extra = node.args[:4]
    operands = [*carried, *extra]
    holders = [n for n in body.graph.nodes if n.op == "placeholder"]
    counter = _counter(interp, cond, body, operands, len(carried))
    if counter is None:
        return None, ("no carried counter runs over the tokens (from 0, `+ 1` each step, "
                      "while `< T`)")  # fmt: skip
    at = _aliases(body, counter)
    tables, outputs = {}, set()
    for index, holder in enumerate(holders):
        val = interp.val(operands[index]) if isinstance(operands[index], torch.fx.Node) else None
        if holder is counter or val is None or not val.token_dims:
            continue
        if val.leaks or val.dep > Dep.DOC:
            return None, f"operand `{operands[index]}` already mixes documents"
        if val.toks[:1] != (Tok("T", 1),):
            return None, f"operand `{operands[index]}` does not run over the tokens on dim 0"
        if any(t is not None for t in val.toks[1:]):
            return None, f"operand `{operands[index]}` runs over the tokens on another dim"
        if index < len(carried):
            outputs.add(holder)
        else:
            tables[holder] = val
    return _Loop(counter, tables, outputs, at), None


def _counter_as_data(loop: _Loop) -> bool:
    """The counter is used as more than the row the step reads and writes."""
    for alias in loop.at_counter:
        for user in alias.users:
            base, args = _base(user), list(user.args)
            index = user in loop.at_counter or (base == "add" and args == [loop.counter, 1])
            row = base in ("index_select", "index_copy") and args[2:3] == [alias]
            if not (index or row or user.op == "output"):
                return True
    return False


def _counter(interp: Interp, cond, body, operands: list, carries: int):
    """The body's placeholder of the carried token counter, or ``None``."""
    cond_in = [n for n in cond.graph.nodes if n.op == "placeholder"]
    body_in = [n for n in body.graph.nodes if n.op == "placeholder"]
    body_out = next(n for n in body.graph.nodes if n.op == "output").args[0]
    test = next(n for n in cond.graph.nodes if n.op == "output").args[0]
    if not isinstance(test, torch.fx.Node) or _base(test) != "lt" or len(test.args) != 2:
        return None
    left, right = test.args
    if left not in cond_in[:carries] or right not in cond_in:
        return None
    index, bound = cond_in.index(left), operands[cond_in.index(right)]
    length = bound.meta.get("val") if isinstance(bound, torch.fx.Node) else bound
    if not is_length(length, interp.tokens) or not _zero_init(operands[index]):
        return None
    step = body_out[index]
    holder = body_in[index]
    ok = isinstance(step, torch.fx.Node) and _base(step) == "add" and list(step.args) == [holder, 1]
    return holder if ok else None


def _zero_init(arg) -> bool:
    """``arg`` is the integer 0 (a literal, or a tensor of zeros made here)."""
    if isinstance(arg, int) and not isinstance(arg, bool):
        return arg == 0
    if not isinstance(arg, torch.fx.Node) or arg.op != "call_function":
        return False
    base, args = _base(arg), list(arg.args)
    fill = {"zeros": 0, "full": args[1] if len(args) > 1 else None,
            "scalar_tensor": args[0] if args else None}.get(base)  # fmt: skip
    val = arg.meta.get("val")
    integer = isinstance(val, torch.Tensor) and not val.is_floating_point() and val.numel() == 1
    return integer and fill == 0


def _aliases(body, counter: torch.fx.Node) -> set[torch.fx.Node]:
    """The counter and its reshapes to one element (an index of one row)."""
    found = {counter}
    for node in body.graph.nodes:
        if node.op == "call_function" and _base(node) in _INDEX_VIEWS and node.args[0] in found:
            found.add(node)
    return found


_INDEX_VIEWS = {"reshape", "view", "unsqueeze", "_unsafe_view", "clone", "alias"}


def _seeded(body, loop: _Loop, carries: int) -> dict:
    steps = {}
    for index, holder in enumerate(n for n in body.graph.nodes if n.op == "placeholder"):
        if holder is loop.counter:
            steps[holder] = _Step(term=TOKEN)
        elif holder in loop.outputs or holder in loop.tables:
            steps[holder] = _Step()  # read only through _loop_step
        else:
            steps[holder] = _Step(reads_carry=index < carries, free=index >= carries)
    return steps


def _loop_step(node: torch.fx.Node, loop: _Loop):
    """The loop's own reads and writes: a table's row at the counter (its layout term),
    an output written at the counter (free when the value is); any other use of a
    table or an output reads other tokens: an error."""
    base, args = _base(node), list(node.args)
    if node in loop.at_counter:
        return _Step(term=TOKEN)
    if (
        base in ("index_select", "select")
        and args[0] in loop.tables
        and args[1:3]
        and (args[1] == 0 and args[2] in loop.at_counter)
    ):
        return _Step(term=term_of(loop.tables[args[0]]))
    if (
        base == "index_copy"
        and args[0] in loop.outputs
        and args[1] == 0
        and (args[2] in loop.at_counter)
    ):
        return None  # judged as the value written: see below
    touched = [a for a in node.all_input_nodes if a in loop.tables or a in loop.outputs]
    if touched:
        return (f"`{node.name}` reads an operand over the tokens other than at the counter's "
                "row (another token's row)")  # fmt: skip
    return None


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
    if base == "index_copy" and len(inputs) == 4 and isinstance(inputs[3], _Step):
        return _Step(reads, inputs[3].free, False, None)  # the row written
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
