"""Values computed from the batch layout alone, as terms over the token index, proven
equal to document ids by the SMT solver.

transformers finds the documents of a packed row from its positions::

    first = position_ids[:, :1] - 1
    diff = torch.diff(position_ids, prepend=first, dim=-1)
    packed_sequence_mask = (diff != 1).cumsum(-1)

Nothing in it names a document; what it computes is the document id. Every value on
the way is a function of the layout only (positions, document ids, token indices,
constants), so graphcheck keeps it as a :data:`Term`: the value of the element at
token ``i``, built from

* ``("tok",)`` (the token index ``i``), ``("int", k)``;
* ``("pos", t)``, ``("doc", t)``: the position and the document of token ``t``;
* ``("add" | "sub" | "mul", a, b)``, ``("mod", a, ("int", k))`` (``k > 0``: ``torch.remainder``),
  ``("ite", c, a, b)``, ``("bool", c)``
  (``True``/``False`` as ``1``/``0``);
* ``("eq" | "ne" | "lt" | "le" | "gt" | "ge", a, b)``, ``("and" | "or", a, b)``,
  ``("not", a)``.

A prefix sum over the tokens is not an element-wise function, so it is not a term;
one fact about it is known instead, proven once by induction over ``i``: the prefix
sum of "``i`` starts a document and ``i > 0``" is ``doc(i)`` (of "``i`` starts a
document", ``doc(i) + 1``). :func:`document_id_shift` asks the solver whether a term
*is* one of those indicators, for every ``0 <= i < T`` under the packed-varlen axioms
(:mod:`graphcheck.analysis.locality.obligations`), and so which document id the prefix sum
computes. The answers are cached by the term: identical layers ask once.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphcheck.analysis.locality import Kind, Val

__all__ = [
    "TOKEN",
    "Counted",
    "Term",
    "combined",
    "covers_shift",
    "document_id_shift",
    "is_position",
    "is_window",
    "layout_diff",
    "resets_at_starts",
    "shift_counterexample",
    "substitute",
    "term_of",
]

Term = tuple

TOKEN: Term = ("tok",)
_ARITH = {"add", "sub", "mul"}
_COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}
_LOGIC = {"and", "or"}
_CACHE: dict[Term, Counted] = {}


def term_of(val: Val | None) -> Term | None:
    """The term of ``val``'s element at token ``i`` when its value is a function of the
    layout proven from its construction (``None``: not known to be one). Such a value
    has at most one token dim, the one ``i`` runs along."""
    if val is None or len(val.token_dims) > 1 or val.leaks:
        return None
    if any(t is not None and (t.axis, t.inner) != ("T", 1) for t in val.toks):
        return None  # rows in another order, or several elements per token
    if val.kind == Kind.LAYOUT:
        return val.extra
    if not val.token_dims:
        return None
    if val.kind == Kind.POS:
        return ("pos", TOKEN)
    if val.kind == Kind.INDEX:
        return TOKEN
    if val.kind == Kind.DOCID and type(val.extra) is int:
        return ("add", ("doc", TOKEN), ("int", val.extra))
    if val.kind == Kind.DOCSTART:
        return ("eq", ("pos", TOKEN), ("int", 0))
    return None


def substitute(term: Term, index: Term) -> Term:
    """``term`` at token ``index`` instead of ``i``."""
    if term == TOKEN:
        return index
    if term[0] == "int":
        return term
    return (term[0], *(substitute(t, index) for t in term[1:]))


@dataclass(frozen=True, slots=True)
class Counted:
    """What a prefix sum over the tokens of a term counts: ``doc(i) + shift``; or, with
    ``shift`` ``None`` and ``separates``, values that are equal only inside one document
    (the term is never negative and at least 1 wherever a later document starts, so
    the sum grows across every boundary); or neither, ``why`` (a token where the term
    misses a start or is negative, found by the solver; empty when the term is
    outside the translation)."""

    shift: int | None
    separates: bool = False
    why: str = ""


def document_id_shift(term: Term) -> Counted:
    """Whether the prefix sum over the tokens of ``term`` is ``doc(i) + k``: ``k = 0``
    when ``term`` holds exactly where a document other than the first starts, ``k = 1``
    where any document starts."""
    if term not in _CACHE:
        _CACHE[term] = _counted(term)
    return _CACHE[term]


def _counted(term: Term) -> Counted:
    import z3

    from graphcheck.analysis.locality.obligations import new_layout

    why = ""
    for k, indicator in ((1, _start), (0, _later_start)):
        lay = new_layout(z3)
        i = lay.q  # 0 <= q < T among the axioms
        try:
            value = _Z3(z3, lay, i).integer(term)
        except _Outside:
            return Counted(None)
        expected = z3.If(indicator(z3, lay, i), 1, 0)
        solver = z3.Optimize()
        solver.set("timeout", 5000)
        solver.add(*lay.axioms(), value != expected)
        solver.minimize(lay.T)
        found = solver.check()
        if found == z3.unsat:
            return Counted(k)
        if found == z3.sat:
            why = _why(solver.model(), lay, i, value, expected)
    return _separating(z3, term) or Counted(None, why=why)


_POSITIONS: dict[Term, bool] = {}


def is_position(term: Term) -> bool:
    """Whether ``term`` is the position of token ``i`` in its document, ``pos(i) = i -
    cu(doc(i))``, for every ``0 <= i < T`` under the packed-varlen axioms (proven by the
    solver; cached): positions rebuilt from the boundaries (``i - cu[doc(i)]``) are
    positions, not an absolute index.

    >>> is_position(("sub", TOKEN, ("sub", TOKEN, ("pos", TOKEN))))
    True
    >>> is_position(("add", ("pos", TOKEN), ("int", 1)))
    False
    """
    if term not in _POSITIONS:
        _POSITIONS[term] = _proven_position(term)
    return _POSITIONS[term]


def _proven_position(term: Term) -> bool:
    import z3

    from graphcheck.analysis.locality.obligations import new_layout

    lay = new_layout(z3)
    i = lay.q  # 0 <= q < T among the axioms
    try:
        value = _Z3(z3, lay, i).integer(term)
        expected = _Z3(z3, lay, i).integer(("pos", TOKEN))
    except _Outside:
        return False
    solver = z3.Solver()
    solver.set("timeout", 5000)
    solver.add(*lay.axioms(), value != expected)
    return solver.check() == z3.unsat


def _separating(z3, term: Term) -> Counted | None:
    """``Counted(None, separates=True)`` when the term is ``>= 0`` everywhere and ``>= 1``
    at every later document start: ``sum(q) == sum(kv)`` then puts ``q`` and ``kv``
    in one document (between two documents lies a start, adding at least 1)."""
    from graphcheck.analysis.locality.obligations import new_layout

    lay = new_layout(z3)
    i = lay.q
    value = _Z3(z3, lay, i).integer(term)
    solver = z3.Optimize()
    solver.set("timeout", 5000)
    solver.add(*lay.axioms(), z3.Or(value < 0, z3.And(_later_start(z3, lay, i), value < 1)))
    solver.minimize(lay.T)
    found = solver.check()
    if found == z3.unsat:
        return Counted(None, separates=True)
    if found != z3.sat:
        return None
    expected = z3.If(value < 0, 0, 1)
    return Counted(None, why=_why(solver.model(), lay, i, value, expected, "at least"))


def _why(model, lay, i, value, expected, needs: str = "") -> str:
    def num(term) -> int:
        return model.eval(term, model_completion=True).as_long()

    token, doc = num(i), num(lay.doc(i))
    start = num(lay.cu(lay.doc(i)))
    where = "starts" if token == start else f"is inside (it starts at token {start})"
    docs, tokens = num(lay.N), num(lay.T)
    counts = f"{docs} document{'s' * (docs != 1)} in {tokens} token{'s' * (tokens != 1)}"
    return (f"with {counts}, token {token} is in document "
            f"{doc}, which it {where}; the counted value there is {num(value)}, a count of "
            f"document starts needs {needs + ' ' if needs else ''}{num(expected)}")  # fmt: skip


def _start(z3, lay, i):
    """Token ``i`` starts a document."""
    return i == lay.cu_at(lay.doc_of(i))


def _later_start(z3, lay, i):
    """Token ``i`` starts a document other than the first."""
    return z3.And(i > 0, _start(z3, lay, i))


class _Outside(Exception):
    """A term the translation does not cover."""


class _Z3:
    """A term at token ``i`` as a z3 term; positions and document ids outside
    ``0 <= t < T`` are unconstrained."""

    def __init__(self, z3, lay, i) -> None:
        self.z3, self.lay, self.i = z3, lay, i

    def integer(self, term: Term):
        t = self.of(term)
        return self.z3.If(t, 1, 0) if self.z3.is_bool(t) else t

    def boolean(self, term: Term):
        t = self.of(term)
        return t if self.z3.is_bool(t) else t != 0

    def of(self, term: Term):
        z, head = self.z3, term[0]
        if head == "tok":
            return self.i
        if head == "int" and type(term[1]) is int:
            return z.IntVal(term[1])
        if head in ("pos", "doc"):
            return self.read(head, self.integer(term[1]))
        if head in _ARITH:
            a, b = self.integer(term[1]), self.integer(term[2])
            return a + b if head == "add" else a - b if head == "sub" else a * b
        if head in _COMPARE:
            return _compare(head, self.integer(term[1]), self.integer(term[2]))
        if head in _LOGIC:
            return (z.And if head == "and" else z.Or)(self.boolean(term[1]), self.boolean(term[2]))
        if head == "not":
            return z.Not(self.boolean(term[1]))
        if head == "bool":
            return self.boolean(term[1])
        if head == "ite":
            return z.If(self.boolean(term[1]), self.integer(term[2]), self.integer(term[3]))
        if head == "mod" and term[2][0] == "int" and type(term[2][1]) is int and term[2][1] > 0:
            return self.integer(term[1]) % term[2][1]  # floor modulo, as torch.remainder
        raise _Outside(head)

    def read(self, head: str, t):
        z, lay = self.z3, self.lay
        inside = z.And(t >= 0, t < lay.T)
        free = lay.free(f"{head}_outside")(t)
        doc = lay.doc_of(t)
        value = t - lay.cu_at(doc) if head == "pos" else doc
        return z.If(inside, value, free)


def _compare(head: str, a, b):
    if head == "eq":
        return a == b
    if head == "ne":
        return a != b
    if head == "lt":
        return a < b
    if head == "le":
        return a <= b
    return a > b if head == "gt" else a >= b


_HEADS = {"add": "add", "sub": "sub", "mul": "mul", "where": "ite", "remainder": "mod"}
_HEADS |= {c: c for c in _COMPARE}
_HEADS |= {"__and__": "and", "bitwise_and": "and", "logical_and": "and"}
_HEADS |= {"__or__": "or", "bitwise_or": "or", "logical_or": "or"}
_HEADS |= {"bitwise_not": "not", "logical_not": "not", "__invert__": "not"}
_ARITY = {"ite": 3, "not": 1}


def combined(base: str, operands: list) -> Term | None:
    """The term of an element-wise op ``base`` over ``operands`` (terms, or Python
    ints and bools), or ``None`` outside the term language."""
    head = _HEADS.get(base)
    if head is None or len(operands) != _ARITY.get(head, 2):
        return None
    terms = []
    for operand in operands:
        if isinstance(operand, bool | int) and not isinstance(operand, float):
            terms.append(("int", int(operand)))
        elif isinstance(operand, tuple):
            terms.append(operand)
        else:
            return None
    return (head, *terms)


def layout_diff(term: Term, before: Term) -> Term:
    """``diff`` along the token dim with ``before`` prepended: at token ``i``,
    ``x(i) - x(i - 1)``, and ``x(0) - before`` at the first token."""
    first = ("sub", substitute(term, ("int", 0)), before)
    rest = ("sub", term, substitute(term, ("sub", TOKEN, ("int", 1))))
    return ("ite", ("eq", TOKEN, ("int", 0)), first, rest)


_COVERS: dict[tuple[Term, int], bool] = {}


def covers_shift(term: Term, amount: int) -> bool:
    """Whether ``term`` holds wherever the token ``amount`` before lies in another
    document or before the row (``pos(i) < amount``), for every ``0 <= i < T``: a
    mask that makes a shift by ``amount`` stay inside documents."""
    key = (term, amount)
    if key not in _COVERS:
        _COVERS[key] = _covers(term, amount)
    return _COVERS[key]


def _covers(term: Term, amount: int) -> bool:
    return _uncovered(term, amount) is None


def shift_counterexample(term: Term, amount: int) -> str:
    """Where the mask ``term`` does not cover a shift by ``amount`` (the smallest layout
    the solver finds), in words; ``""`` when it covers or the solver cannot say."""
    found = _uncovered(term, amount)
    if not found:
        return ""
    model, lay, i = found
    num = lambda t: model.eval(t, model_completion=True).as_long()  # noqa: E731
    token, docs, tokens = num(i), num(lay.N), num(lay.T)
    doc, start = num(lay.doc(i)), num(lay.cu(lay.doc(i)))
    read = token - amount
    other = f"token {read}, before its document's first token {start}" if read >= 0 else "nothing"
    return (f"with {docs} document{'s' * (docs != 1)} in {tokens} tokens, token {token} "
            f"(position {token - start} of document {doc}) reads {other}, where the mask "
            "does not hold")  # fmt: skip


def is_window(zero: Term, amount: int) -> bool:
    """Whether ``zero`` holds exactly where ``pos(i) < amount``, for every ``0 <= i < T``:
    a mask ``1 - zero`` that is a function of the positions alone (the same in the
    packed row and in each document alone), whatever it is computed from."""
    return _always(zero, lambda z3, lay, i, held: held != (i - lay.cu_at(lay.doc_of(i)) < amount))


_RESETS: dict[Term, bool] = {}


def resets_at_starts(term: Term) -> bool:
    """Whether ``term`` holds at every token that starts a document (but token 0) and
    reads nothing but the token's position: a reset of a recurrence at the same tokens
    of a document packed or alone (at its start, and wherever else its positions say:
    ``pos % 8 == 0``)."""
    if term not in _RESETS:
        _RESETS[term] = _of_positions(term) and _holds_at_starts(term)
    return _RESETS[term]


def _of_positions(term: Term) -> bool:
    """``term`` reads the position of its own token and constants only."""
    if term[0] == "int":
        return True
    if term[0] == "pos":
        return term[1] == TOKEN
    if term[0] in ("tok", "doc"):
        return False
    return all(_of_positions(t) for t in term[1:])


def _holds_at_starts(term: Term) -> bool:
    return _always(term, lambda z3, lay, i, held: z3.And(_later_start(z3, lay, i), z3.Not(held)))


def _always(term: Term, violated) -> bool:
    """No token ``0 <= i < T`` of any layout where ``violated(z3, layout, i, held)`` (``held``:
    ``term`` at ``i``, a boolean) is satisfiable; ``False`` outside the translation."""
    import z3

    from graphcheck.analysis.locality.obligations import new_layout

    lay = new_layout(z3)
    i = lay.q
    try:
        held = _Z3(z3, lay, i).boolean(term)
    except _Outside:
        return False
    solver = z3.Solver()
    solver.set("timeout", 5000)
    solver.add(*lay.axioms(), violated(z3, lay, i, held))
    return solver.check() == z3.unsat


def _uncovered(term: Term, amount: int, reading: bool = True):
    """``None`` when ``term`` holds wherever ``pos(i) < amount``; else ``(model, layout,
    i)`` of a token where it does not (``()`` when outside the translation or unknown),
    one that reads a token of the row (``i >= amount``) when there is one."""
    import z3

    from graphcheck.analysis.locality.obligations import new_layout

    lay = new_layout(z3)
    i = lay.q
    try:
        held = _Z3(z3, lay, i).boolean(term)
    except _Outside:
        return ()
    crossing = i - lay.cu_at(lay.doc_of(i)) < amount
    solver = z3.Optimize()
    solver.set("timeout", 5000)
    solver.add(*lay.axioms(), crossing, z3.Not(held), *([i >= amount] if reading else []))
    solver.minimize(lay.T)
    found = solver.check()
    if found == z3.unsat:
        return _uncovered(term, amount, reading=False) if reading else None
    return (solver.model(), lay, i) if found == z3.sat else ()
