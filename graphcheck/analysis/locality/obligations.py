"""Proof obligations on FlexAttention masks, discharged by an SMT solver.

A ``mask_mod(b, h, q_idx, kv_idx, *buffers)`` subgraph is translated into one z3
boolean term over the query token ``q``, the key token ``kv`` and the buffers it reads.
A buffer means what its abstract value proves it holds (:class:`~graphcheck.analysis.
locality.Kind`), in terms of the packed-varlen layout of ``T`` tokens in ``N``
documents:

* ``cu(d)``: the first token of document ``d``; ``cu(0) = 0 < cu(1) < ... < cu(N) = T``
  (``N >= 1``);
* ``doc(i) = d`` iff ``cu(d) <= i < cu(d + 1)``, for ``0 <= i < T``;
* a document-id buffer holds ``doc(i) + k`` (``k`` the constant its construction
  proves, or any constant), a position buffer ``pos(i) = i - cu(doc(i))``, a
  ``cu_seq_lens`` buffer ``cu(d)`` (or a slice of it), a document-offsets buffer
  ``cu(d - k)`` at its ``k <= d < N + k``;
* any other buffer, and any index outside the range the meaning covers, is an
  unconstrained function of its index.

The obligation is ``0 <= q, kv < T and doc(q) != doc(kv) => not mask(q, kv)``: the
solver is asked for a model of its negation. None: the mask is document-local
(:attr:`Verdict.PROVEN`); a model is a counterexample, the documents and the two tokens
(:attr:`Verdict.REFUTED`); an op outside the translation fails closed
(:attr:`Verdict.UNKNOWN`). A mask that keeps documents apart must also take the same
pairs of a document wherever it sits: over the packed row and over a row of that
document alone (``N = 1``, the tokens moved by ``cu(d)``), the mask agrees
(:attr:`Verdict.MOVES` with the counterexample when not: chunks of the packed row,
whose boundaries move with the document's offset). Verdicts are cached by the
translated term, so the identical
masks of many layers are solved once. z3 is imported only when a mask is judged.

Integer arithmetic is unbounded (no int32 overflow) and the axioms are instantiated at
the terms the formula names, which is complete for these axioms (the model's values at
those points extend to a whole strictly increasing ``cu``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import StrEnum

import torch
import torch.fx

from graphcheck.analysis.fx import op_name
from graphcheck.analysis.locality.domain import Kind

__all__ = ["Buffer", "Judgement", "Verdict", "judge_mask", "judge_within", "new_layout"]


class Verdict(StrEnum):
    PROVEN = "proven"
    REFUTED = "refuted"
    UNKNOWN = "not understood"
    MOVES = "documents apart, but a document's mask moves with its offset"


@dataclass(frozen=True, slots=True)
class Buffer:
    """What a captured buffer holds: its kind and the kind's detail (``Val.kind`` /
    ``Val.extra``), and its shape (``None``: unknown)."""

    kind: Kind | None = None
    extra: object = None
    shape: tuple | None = None


@dataclass(frozen=True, slots=True)
class Judgement:
    """``detail``: the counterexample in words (refuted) or the op not understood."""

    verdict: Verdict
    detail: str = ""


class NotUnderstood(Exception):
    """An op of the mask the translation does not follow."""


_CACHE: dict[str, Judgement] = {}

_COMPARE = {"eq": "__eq__", "ne": "__ne__", "ge": "__ge__", "gt": "__gt__"}
_COMPARE |= {"le": "__le__", "lt": "__lt__"}
_AND = {"__and__", "bitwise_and", "logical_and"}
_OR = {"__or__", "bitwise_or", "logical_or"}
_NOT = {"bitwise_not", "logical_not", "__invert__"}
_COPY = {"clone", "alias", "detach", "lift_fresh_copy", "contiguous"}
_FACTORIES = {"new_ones": 1, "new_zeros": 0, "ones": 1, "zeros": 0, "ones_like": 1}
_FACTORIES |= {"zeros_like": 0, "new_full": None, "full": None, "full_like": None}
_FACTORIES |= {"scalar_tensor": None}
_INT_DTYPES = {torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8}


def judge_mask(
    mask_mod: torch.fx.GraphModule, buffers: list[Buffer], batch: int | None = None
) -> Judgement:
    """Whether ``mask_mod`` is false for every query and key of different documents;
    ``batch`` the attention's batch size when it is known (the packed row's ``1``: the
    mask's batch index is then ``0``)."""
    import z3

    layout = _Layout(z3)
    try:
        term = _Translation(z3, layout, buffers).run(mask_mod)
    except NotUnderstood as err:
        return Judgement(Verdict.UNKNOWN, str(err))
    if batch is not None:
        b = z3.Int("b")
        term = z3.And(term, b >= 0, b < batch)  # the batch index ranges over the batch
    key = term.sexpr()
    if key not in _CACHE:
        judged = layout.judge(term)
        if judged.verdict == Verdict.PROVEN:
            judged = _alone(z3, mask_mod, buffers, batch)
        _CACHE[key] = judged
    return _CACHE[key]


def _alone(z3, mask_mod: torch.fx.GraphModule, buffers: list[Buffer], batch) -> Judgement:
    """Whether the mask takes the same pairs of one document packed and alone: for
    ``q``, ``kv`` of document ``d`` starting at ``cu(d)``, the mask over the packed row
    equals the mask over a row of that one document at ``q - cu(d)``, ``kv - cu(d)``
    (:attr:`Verdict.MOVES` with the counterexample when it does not: chunks of the
    packed row, ``q // C == kv // C``)."""
    packed, alone = _Layout(z3), _Layout(z3, prefix="alone_")
    try:
        there = _Translation(z3, packed, buffers).run(mask_mod)
        here = _Translation(z3, alone, buffers).run(mask_mod)
    except NotUnderstood as err:
        return Judgement(Verdict.UNKNOWN, str(err))
    d = packed.doc_of(packed.q)
    start, end = packed.cu_at(d), packed.cu_at(d + 1)
    facts = [d == packed.doc_of(packed.kv), alone.N == 1, end - start == alone.T]
    facts += [alone.q == packed.q - start, alone.kv == packed.kv - start, there != here]
    if batch is not None:
        b = z3.Int("b")
        facts += [b >= 0, b < batch]
    facts += [*packed.axioms(), *alone.axioms()]
    return _solved(z3, facts, packed.T, Verdict.MOVES, lambda m: packed.moved(m, there))


def _solved(z3, facts: list, size, refuted: Verdict, said) -> Judgement:
    """``facts`` unsatisfiable: proven; a model (the smallest ``size``): ``refuted`` with
    ``said(model)``; anything else from the solver: not understood."""
    solver = z3.Optimize()
    solver.add(*facts)
    solver.minimize(size)
    found = solver.check()
    if found == z3.unsat:
        return Judgement(Verdict.PROVEN)
    if found != z3.sat:
        return Judgement(Verdict.UNKNOWN, f"the solver answered {found}")
    return Judgement(refuted, said(solver.model()))


def new_layout(z3) -> _Layout:
    """The packed layout's symbols (``T``, ``N``, ``cu``, ``doc``, tokens ``q`` and ``kv``);
    its :meth:`~_Layout.axioms`, taken after the terms are built, are instantiated at
    the terms used."""
    return _Layout(z3)


def judge_within(
    inner: torch.fx.GraphModule, outer: torch.fx.GraphModule, buffers: list[Buffer]
) -> Judgement:
    """Whether ``inner`` implies ``outer`` for every query and key ``0 <= q, kv < T``
    (FlexAttention's full blocks: every pair the mask of the full blocks takes, the
    mask_mod takes too). Both masks read ``buffers`` by position, as one set of values."""
    import z3

    layout = _Layout(z3)
    try:
        taken = _Translation(z3, layout, buffers).run(inner)
        allowed = _Translation(z3, layout, buffers).run(outer)
    except NotUnderstood as err:
        return Judgement(Verdict.UNKNOWN, str(err))
    violated = z3.And(taken, z3.Not(allowed))
    key = "within " + violated.sexpr()
    if key not in _CACHE:
        _CACHE[key] = layout.judge(violated, across=False)
    return _CACHE[key]


@dataclass
class _Layout:
    """The packed layout's symbols and the axioms instantiated at the terms used."""

    z3: object
    prefix: str = ""  # names the symbols apart from another layout's
    reads: dict = field(default_factory=dict)  # name -> z3 function

    def __post_init__(self) -> None:
        z, p = self.z3, self.prefix
        self.T, self.N = z.Int(f"{p}T"), z.Int(f"{p}N")
        self.q, self.kv = z.Int(f"{p}q"), z.Int(f"{p}kv")
        self.cu = z.Function(f"{p}cu", z.IntSort(), z.IntSort())
        self.doc = z.Function(f"{p}doc", z.IntSort(), z.IntSort())
        self.docs: list = []  # the token terms doc() is applied to
        self.points: list = []  # the document terms cu() is applied to

    def free(self, name: str):
        """An unconstrained function of an index (one per buffer and range)."""
        if name not in self.reads:
            self.reads[name] = self.z3.Function(
                f"{self.prefix}{name}", self.z3.IntSort(), self.z3.IntSort()
            )
        return self.reads[name]

    def cu_at(self, d):
        self.points.append(d)
        return self.cu(d)

    def doc_of(self, i):
        self.docs.append(i)
        return self.doc(i)

    def axioms(self) -> list:
        z, cu, T, N = self.z3, self.cu, self.T, self.N
        facts = [N >= 1, cu(0) == 0, cu(N) == T, self.q >= 0, self.q < T, self.kv >= 0]
        facts += [self.kv < T]
        points = [z.IntVal(0), N, *self.points]
        for i in self.docs:
            d = self.doc(i)
            inside = z.And(i >= 0, i < T)
            facts.append(z.Implies(inside, z.And(d >= 0, d < N, cu(d) <= i, i < cu(d + 1))))
            points += [d, d + 1]
        for a, b in itertools.combinations(points, 2):
            ranged = z.And(a >= 0, a <= N, b >= 0, b <= N)
            facts.append(z.Implies(ranged, z.Or(a == b, z.If(a < b, cu(b) - cu(a) >= b - a,
                                                             cu(a) - cu(b) >= a - b))))  # fmt: skip
        return facts

    def judge(self, mask, across: bool = True) -> Judgement:
        """No model of ``mask`` (``across``: for a query and key of different documents)
        under the layout's axioms: proven; a model: the counterexample."""
        z = self.z3
        different = self.doc_of(self.q) != self.doc_of(self.kv)
        violated = z.And(different, mask) if across else z.And(z.Or(different, True), mask)
        facts = [*self.axioms(), violated]
        return _solved(z, facts, self.T, Verdict.REFUTED, self.counterexample)

    def counterexample(self, model) -> str:
        def value(term) -> int:
            return model.eval(term, model_completion=True).as_long()

        def where(token) -> str:
            d = value(self.doc(token))
            start, end = value(self.cu(d)), value(self.cu(self.z3.IntVal(d) + 1))
            size = end - start
            return (f"token {value(token)}, in document {d} of {size} token{'s' * (size != 1)} "
                    f"(tokens {start}..{end - 1})")  # fmt: skip

        return (f"with {value(self.N)} documents in {value(self.T)} tokens, the query at "
                f"{where(self.q)} reads the key at {where(self.kv)}")  # fmt: skip

    def moved(self, model, packed) -> str:
        """The pair of one document the mask takes packed and not alone (or back)."""

        def value(term) -> int:
            return model.eval(term, model_completion=True).as_long()

        d = value(self.doc(self.q))
        start = value(self.cu(self.z3.IntVal(d)))
        size = value(self.cu(self.z3.IntVal(d + 1))) - start
        q, kv = value(self.q), value(self.kv)
        taken = self.z3.is_true(model.eval(packed, model_completion=True))
        said = ("takes", "does not") if taken else ("does not take", "does")
        return (f"with {value(self.N)} documents in {value(self.T)} tokens, document {d} of "
                f"{size} tokens starts at token {start}: packed, the mask {said[0]} the "
                f"query at token {q} and the key at token {kv}; the document alone "
                f"{said[1]} (query {q - start}, key {kv - start})")  # fmt: skip


class _Translation:
    """The mask subgraph, node by node, as z3 terms (Int or Bool)."""

    def __init__(self, z3, layout: _Layout, buffers: list[Buffer]) -> None:
        self.z3, self.layout, self.buffers = z3, layout, buffers
        self.terms: dict[torch.fx.Node, object] = {}

    def run(self, mask_mod: torch.fx.GraphModule):
        placeholders = [n for n in mask_mod.graph.nodes if n.op == "placeholder"]
        if len(placeholders) < 4 or len(placeholders) - 4 > len(self.buffers):
            raise NotUnderstood("a mask_mod without (b, h, q_idx, kv_idx) and its buffers")
        z, lay = self.z3, self.layout
        names = (z.Int("b"), z.Int("h"), lay.q, lay.kv)
        self.terms.update(zip(placeholders[:4], names, strict=True))
        for i, (ph, buf) in enumerate(zip(placeholders[4:], self.buffers, strict=False)):
            self.terms[ph] = ("buffer", i, buf)
        for node in mask_mod.graph.nodes:
            if node.op == "call_function":
                self.terms[node] = self.op(node)
            elif node.op == "get_attr":
                self.terms[node] = ("attr", node)
            elif node.op == "output":
                out = node.args[0]
                out = out[0] if isinstance(out, tuple | list) else out
                return self.boolean(self.arg(out))
        raise NotUnderstood("a mask_mod without an output")

    def arg(self, a):
        if isinstance(a, torch.fx.Node):
            return self.terms[a]
        if isinstance(a, bool):
            return self.z3.BoolVal(a)
        if isinstance(a, int):
            return self.z3.IntVal(a)
        raise NotUnderstood(f"the constant {a!r}")

    def boolean(self, t):
        t = self.plain(t)
        return t if self.z3.is_bool(t) else t != 0

    def integer(self, t):
        t = self.plain(t)
        return self.z3.If(t, 1, 0) if self.z3.is_bool(t) else t

    def plain(self, t):
        if isinstance(t, tuple):
            raise NotUnderstood("a buffer used as a value without an index")
        return t

    def op(self, node: torch.fx.Node):
        name = op_name(node.target)
        base = name.removeprefix("aten.").split(".")[0]
        if name == "flat_apply" and len(node.args) >= 5 and _is_mod_index(node.args[2]):
            # buffer[index, ...], as dynamo traces an index into a captured tensor
            return self.lookup(self.arg(node.args[3]), [self.arg(i) for i in node.args[4:]])
        if name == "aten.index.Tensor":
            return self.lookup(self.arg(node.args[0]), [self.arg(i) for i in node.args[1]])
        if base in _FACTORIES:
            return self.constant(name, base, node)
        args = [self.arg(a) for a in node.args]
        if set(node.kwargs) - {"dtype", "alpha", "layout", "device", "memory_format"}:
            raise NotUnderstood(f"`{name}` with {sorted(node.kwargs)}")
        return self.compute(name, base, args, node)

    def compute(self, name: str, base: str, args: list, node: torch.fx.Node):
        z = self.z3
        if base in _COMPARE and len(args) == 2:
            a, b = self.integer(args[0]), self.integer(args[1])
            return getattr(a, _COMPARE[base])(b)
        if base in _AND | _OR and len(args) == 2 and all(z.is_bool(self.plain(a)) for a in args):
            return (z.And if base in _AND else z.Or)(*args)
        if base in _NOT and len(args) == 1 and z.is_bool(self.plain(args[0])):
            return z.Not(args[0])
        if base in ("add", "sub") and len(args) == 2 and node.kwargs.get("alpha", 1) == 1:
            a, b = self.integer(args[0]), self.integer(args[1])
            return a + b if base == "add" else a - b
        if base == "mul" and len(args) == 2 and any(z.is_int_value(self.plain(a)) for a in args):
            return self.integer(args[0]) * self.integer(args[1])
        if base == "neg" and len(args) == 1:
            return -self.integer(args[0])
        if base == "where" and len(args) == 3:
            return self.where(*args)
        if base in ("to", "_to_copy", "type") or base in _COPY:
            return self.cast(name, args[0], node)
        if base in ("floor_divide", "remainder") and len(args) == 2:
            return self.divided(name, base, args)
        raise NotUnderstood(f"`{name}`")

    def constant(self, name: str, base: str, node: torch.fx.Node):
        """A tensor filled with one number (its shape broadcasts away)."""
        fill = _FACTORIES[base]
        if fill is None:
            fill = node.args[-1] if base != "scalar_tensor" else node.args[0]
        dtype = node.kwargs.get("dtype")
        if dtype is None and not isinstance(fill, bool | int):
            raise NotUnderstood(f"`{name}` of an unknown dtype")
        if not isinstance(fill, bool | int | float) or (
            dtype is not None and dtype.is_floating_point
        ):
            raise NotUnderstood(f"`{name}` of {dtype or type(fill).__name__}")
        if dtype == torch.bool or (dtype is None and isinstance(fill, bool)):
            return self.z3.BoolVal(bool(fill))
        if fill != int(fill):
            raise NotUnderstood(f"`{name}` of {fill!r} cast to {dtype}")
        return self.z3.IntVal(int(fill))

    def where(self, cond, a, b):
        a, b = self.plain(a), self.plain(b)
        if self.z3.is_bool(a) and self.z3.is_bool(b):
            return self.z3.If(self.boolean(cond), a, b)
        return self.z3.If(self.boolean(cond), self.integer(a), self.integer(b))

    def cast(self, name: str, t, node: torch.fx.Node):
        dtype = node.kwargs.get(
            "dtype", next((a for a in node.args[1:] if isinstance(a, torch.dtype)), None)
        )
        if dtype is None:
            return self.plain(t)
        if dtype == torch.bool:
            return self.boolean(t)
        if dtype in _INT_DTYPES:
            return self.integer(t)
        raise NotUnderstood(f"`{name}` to {dtype}")

    def divided(self, name: str, base: str, args: list):
        divisor = self.plain(args[1])
        if not self.z3.is_int_value(divisor) or divisor.as_long() <= 0:
            raise NotUnderstood(f"`{name}` by anything but a positive constant")
        a = self.integer(args[0])  # Euclidean = floor division for a positive divisor
        return a / divisor if base == "floor_divide" else a % divisor

    def lookup(self, buf, indices: list):
        if not isinstance(buf, tuple) or buf[0] != "buffer":
            raise NotUnderstood("an index into a value that is not a captured buffer")
        _, number, meaning = buf
        shape = meaning.shape
        if shape is None or len(indices) != len(shape) or any(str(s) != "1" for s in shape[:-1]):
            raise NotUnderstood("an index into a buffer that is not one row")
        value = _read(self.layout, number, meaning, self.integer(indices[-1]))
        lead = [self.integer(i) == 0 for i in indices[:-1]]  # past a size-1 dim: anything
        free = self.layout.free(f"buffer{number}_lead")(self.integer(indices[-1]))
        return self.z3.If(self.z3.And(*lead), value, free) if lead else value


def _is_mod_index(func) -> bool:
    """``flat_apply``'s function is dynamo's ``ModIndex`` (``tensor[index]``), as the
    class or, in a graph read back from the export cache, its qualified name."""
    from torch._dynamo._trace_wrapped_higher_order_op import ModIndex

    return func is ModIndex or func == f"{ModIndex.__module__}.{ModIndex.__qualname__}"


def _read(layout: _Layout, number: int, meaning: Buffer, i):
    """``buffer[i]`` by the buffer's meaning, free where the meaning does not reach."""
    z, N = layout.z3, layout.N
    free = layout.free(f"buffer{number}")(i)
    k = meaning.extra if isinstance(meaning.extra, int) else None
    if meaning.kind == Kind.DOCID:
        shift = z.IntVal(k) if k is not None else z.Int(f"buffer{number}_shift")
        return z.If(i >= 0, layout.doc_of(i) + shift, free)
    if meaning.kind == Kind.POS:
        return z.If(z.And(i >= 0, i < layout.T), i - layout.cu_at(layout.doc_of(i)), free)
    if meaning.kind == Kind.CU:
        return z.If(z.And(i >= 0, i <= N), layout.cu_at(i), free)
    if meaning.kind == Kind.CU_INNER and meaning.extra in ("starts", "ends", "interior"):
        first = 0 if meaning.extra == "starts" else 1
        last = N if meaning.extra == "ends" else N - 1
        return z.If(z.And(i >= 0, i + first <= last), layout.cu_at(i + first), free)
    if meaning.kind == Kind.DOCOFFSETS and k is not None:
        return z.If(z.And(k <= i, i < N + k, i >= 0), layout.cu_at(i - k), free)
    return free
