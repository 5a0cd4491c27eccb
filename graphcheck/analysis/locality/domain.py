"""The abstract domain of token locality.

Every tensor value of the exported program gets a :class:`Val` that says, for
each of its dimensions, whether it runs over the packed tokens (and how), and
which tokens each element may depend on, relative to the element's own token
coordinates:

* ``NONE``  - on no token's data (weights, constants, structural metadata);
* ``POINT`` - only on the tokens at its own coordinates (token-wise work, and
  the pairwise ``[T, T]`` tensors that attention builds);
* ``DOC``   - only on tokens of the documents its coordinates belong to;
* ``SPAN``  - on the tokens between its two coordinates (a prefix sum masked
  to a triangle); a same-document guard turns it into ``DOC``;
* ``LEAK``  - on tokens of other documents: the packed run differs from each
  document run alone.

A pairwise value may carry a **guard**: the constant its elements hold where
the two coordinates lie in different documents (``0``, ``-inf``, ``True``),
proven from document ids compared on both sides; and a **triangle**: the
constant it holds outside ``row - col >= k``. Structural values carry a
**kind** (the real ``cu_seq_lens``, document ids, an ``arange`` over T, a sort
permutation and its inverse, ...) through which the mixing ops that are
document-aware by construction are admitted.

>>> v = Val((Tok("T"), None), Dep.POINT)
>>> v.token_dims, join_dep(Dep.POINT, Dep.DOC)
((0,), <Dep.DOC: 2>)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum, StrEnum

import torch
import torch.fx

from graphcheck.analysis.fx import op_name

__all__ = [
    "Interp",
    "align",
    "bind",
    "moved_pairs",
    "carry",
    "has_tokens",
    "is_length",
    "is_wildcard",
    "is_one",
    "meta_toks",
    "ndim_of",
    "norm_dim",
    "node_vals",
    "shape_of",
    "symbols",
    "union",
    "Dep",
    "Fill",
    "Kind",
    "Pair",
    "Tok",
    "Tokens",
    "Val",
    "join_dep",
    "unknown",
    "unknown_or_leak",
]


class Dep(IntEnum):
    """Which tokens an element depends on (ordered: a join is the maximum)."""

    NONE = 0
    POINT = 1
    DOC = 2
    SPAN = 3
    LEAK = 4


def join_dep(*deps: Dep) -> Dep:
    return Dep(max(deps, default=Dep.NONE))


class Fill(StrEnum):
    """A constant held by the elements a guard or a triangle excludes."""

    ZERO = "0"  # 0 or False
    NEGINF = "-inf"
    TRUE = "true"


class Kind(StrEnum):
    """What a structural value is, proven from its construction."""

    POS = "position_ids"
    CU = "cu_seq_lens"
    CU_INNER = "cu_seq_lens without its first or last entry"
    DOCSTART = "document starts"
    DOCID = "document ids"
    DOCSEP = "values equal only inside one document"  # ref: the prefix sum that made them
    DOCOFFSETS = "document starts by document id"
    INDEX = "token index"  # arange over the token axis
    PERM = "sort permutation"
    PERMDIV = "sort permutation // k"
    SORTED = "sorted keys"
    COUNTS = "counts of sorted keys"
    ONEHOT = "one-hot map of top-k indices"
    OFFSETS = "group offsets of sorted keys"
    GROUPSIZE = "size of one group of sorted keys"  # counts[i].item(), for a split
    INVERSE = "inverse permutation"
    SELECT = "token-wise selection"  # nonzero of a per-token predicate
    LENGTH = "packed length"
    LAYOUT = "a function of the batch layout"  # extra: its term (layout_terms)


@dataclass(frozen=True, slots=True, repr=False)
class Tok:
    """A token dimension: ``axis`` ``"T"`` (packed order), ``"P:<sort>"`` (rows in the
    order of a sort) or ``"G:<nonzero>"`` (rows a selection picked); ``inner`` elements
    per token (``None``: the mapping to tokens is unknown).

    ``"T+"`` is T padded behind (element ``t`` is token ``t`` for ``t < T``, a fill
    after); a split of an axis into chunks tags the chunk index ``<axis>@0/2`` and the
    place in the chunk ``<axis>@1/2``. ``rep``: on a chunk index, the element stands for
    the token at place ``rep`` of its chunk (one place picked out of every chunk: its
    first or last token), which is what its dependency is relative to."""

    axis: str
    inner: int | None = 1
    rep: int | None = None

    def __repr__(self) -> str:
        rep = "" if self.rep is None else f", rep={self.rep}"
        return f"Tok(axis={self.axis!r}, inner={self.inner!r}{rep})"


@dataclass(frozen=True, slots=True)
class Pair:
    """A relation between two token dimensions: ``fill`` outside it. For a guard the
    relation is "same document"; for a triangle it is ``row - col >= k``. ``rep`` (a
    guard only): ``col`` is a chunk index and the relation is with the token at place
    ``rep`` of the chunk, ``row`` a place in the same chunk."""

    row: int
    col: int
    fill: Fill
    k: int = 0
    rep: int | None = None

    def moved(self, mapping: dict[int, int]) -> Pair | None:
        if self.row not in mapping or self.col not in mapping:
            return None
        return replace(self, row=mapping[self.row], col=mapping[self.col])


@dataclass(frozen=True, slots=True)
class Val:
    """The abstract value of one tensor (or SymInt: no dims)."""

    toks: tuple[Tok | None, ...]
    dep: Dep = Dep.NONE
    guard: Pair | None = None
    tri: Pair | None = None
    kind: Kind | None = None
    ref: object = None  # the sort / nonzero node a permutation kind belongs to
    extra: object = None  # kind-specific detail (the sorted axis, k of a PERMDIV)
    leaks: frozenset = field(default_factory=frozenset)  # origins of cross-document mixing
    absolute: frozenset = field(default_factory=frozenset)  # origins of absolute indices
    shift: tuple | None = None  # (dim, k, origin): element t reads token t - k of dim

    @property
    def token_dims(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.toks) if t is not None)

    def with_(self, **changes) -> Val:
        return replace(self, **changes)


# --- the interpreter's state and shape helpers ------------------------------------


class Interp:
    """The state the transfer functions read and write."""

    def __init__(self, root: torch.nn.Module, tokens: set[str], transfer=None) -> None:
        self.root = root
        self.tokens = tokens
        self.transfer = transfer  # (interp, node) -> value: the op table's dispatch
        self.vals: dict[torch.fx.Node, object] = {}
        self.reasons: dict[torch.fx.Node, str] = {}
        self.writes: list[torch.fx.Node] = []
        self.facts: list = []  # size relations the analysis proved (sympy Eq), for GC403
        self.group_sizes: dict[str, Val] = {}  # unbacked symbol -> the group size it is
        self.validated: dict[str, object] = {}  # custom op -> its OpCheck (kernels/validation)
        self.token_local: frozenset[str] = frozenset()  # custom ops declared token-local
        self.length_branches: dict[torch.fx.Node, str] = {}  # control flow on T (GC403)
        # plain sums of every token into a value with no token dim (a weight's gradient):
        # the backward proof admits them where a parameter's gradient is accumulated
        self.sums: set[torch.fx.Node] = set()

    def val(self, arg) -> Val | None:
        """The abstract value of an argument; ``None`` for Python constants."""
        if isinstance(arg, torch.fx.Node):
            found = self.vals.get(arg)
            return found if isinstance(found, Val) else _opaque(found)
        return None

    def leak(self, node: torch.fx.Node, reason: str, toks=None, inputs=None) -> Val:
        """``node`` itself mixes tokens across documents: a new origin, joined with
        the leaks of what it reads (``inputs``, all its operands by default)."""
        if toks is None:
            val = node.meta.get("val")
            val = val[0] if isinstance(val, tuple | list) and val else val
            toks = meta_toks(val, self.tokens)
        if inputs is None:
            inputs = [self.val(a) for a in node.all_input_nodes]
        upstream = union(v.leaks for v in inputs if v is not None and v.dep == Dep.LEAK)
        self.reasons.setdefault(node, reason)
        return Val(toks, Dep.LEAK, leaks=upstream | {node})

    def passed_on(self, node: torch.fx.Node, inputs) -> Val | None:
        """When an operand already leaks, a mixing op cannot be judged on its own: the
        result carries the earlier leak (``None`` when nothing leaks yet)."""
        leaking = [v for v in inputs if v is not None and v.dep == Dep.LEAK]
        if not leaking:
            return None
        toks = meta_toks(node.meta.get("val"), self.tokens)
        return Val(toks, Dep.LEAK, leaks=union(v.leaks for v in leaking))

    def fabricate(self, node: torch.fx.Node, reason: str) -> frozenset:
        self.reasons.setdefault(node, reason)
        return frozenset({node})


def _opaque(found) -> Val | None:
    """A tuple-valued node read whole (before ``getitem``): the join of its parts."""
    parts = [v for v in (found or ()) if isinstance(v, Val)] if isinstance(found, tuple) else []
    if not parts:
        return None
    return Val((), join_dep(*(p.dep for p in parts)), leaks=union(p.leaks for p in parts))


def union(sets) -> frozenset:
    out: frozenset = frozenset()
    for s in sets:
        out = out | s
    return out


# --- shapes and token dimensions ------------------------------------------------------


def _expr(size):
    return size.node.expr if isinstance(size, torch.SymInt) else size


def symbols(size) -> set[str]:
    expr = _expr(size)
    return {str(s) for s in getattr(expr, "free_symbols", ())}


class Tokens(frozenset):
    """The names of the symbols the packed length T is built from (``symbols(size) &
    tokens``: the size involves T) and ``length``, T's own expressions: ``s0``, or
    ``4*s0`` when T is exported as a multiple of 4 (``s0`` is then T/4, not T)."""

    length: frozenset[str]

    def __new__(cls, names, length=None) -> Tokens:
        self = super().__new__(cls, names)
        self.length = frozenset(self if length is None else length)
        return self


def is_length(size, tokens: set[str]) -> bool:
    """``size`` is the packed length T itself."""
    return str(_expr(size)) in getattr(tokens, "length", tokens)


def meta_toks(val, tokens: set[str]) -> tuple[Tok | None, ...]:
    """Token dimensions read from a recorded shape: sizes that involve T."""
    if not isinstance(val, torch.Tensor):
        return ()
    toks = []
    for size in val.shape:
        syms = symbols(size)
        if not syms & tokens:
            toks.append(None)
        else:
            exact = len(syms) == 1 and is_length(size, tokens)
            toks.append(Tok("T", 1 if exact else None))
    return tuple(toks)


def is_one(size) -> bool:
    """``size == 1`` without asking the shape environment (no guard on unbacked sizes)."""
    return _expr(size) == 1


def shape_of(node) -> tuple | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) else None


def ndim_of(node) -> int:
    shape = shape_of(node)
    return len(shape) if shape is not None else 0


def norm_dim(d: int, ndim: int) -> int:
    return d + ndim if d < 0 else d


def bind(node: torch.fx.Node) -> dict[str, object]:
    """Arguments by schema name (positional and keyword)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return {f"arg{i}": a for i, a in enumerate(node.args)} | dict(node.kwargs)
    bound = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            bound[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            bound[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
    return bound


def carry(vals) -> dict:
    vals = [v for v in vals if v is not None]
    return {
        "dep": join_dep(*(v.dep for v in vals)),
        "leaks": union(v.leaks for v in vals),
        "absolute": union(v.absolute for v in vals),
    }


def has_tokens(vals) -> bool:
    return any(v is not None and (v.token_dims or v.dep > Dep.NONE or v.leaks) for v in vals)


def node_vals(interp: Interp, node: torch.fx.Node) -> list[Val]:
    return [v for a in node.all_input_nodes if (v := interp.val(a)) is not None]


def align(interp: Interp, node: torch.fx.Node, operands, skip=()) -> tuple | None:
    """Output token dims of a broadcasting op; ``None`` when two operands put different
    token dimensions on one output dimension (tokens would meet other tokens). The
    operands in ``skip`` (:func:`is_wildcard`) place no token dim."""
    out = shape_of(node)
    if out is None:
        return None
    toks: list[Tok | None] = [None] * len(out)
    for arg in operands:
        if any(arg is s for s in skip):
            continue
        val, shape = interp.val(arg), shape_of(arg)
        if val is None or shape is None or len(val.toks) != len(shape):
            continue
        offset = len(out) - len(shape)
        for i, tok in enumerate(val.toks):
            if tok is None or (is_one(shape[i]) and not is_one(out[i + offset])):
                continue
            here = toks[i + offset]
            if here is not None and here != tok:
                return None
            toks[i + offset] = tok
    return tuple(toks)


def is_wildcard(val: Val | None) -> bool:
    """A value that holds no token's data and whose dims over sizes computed from T
    have no known mapping to tokens (``arange(ceil(T / C))``, a constant mask expanded
    to ``[T // C, C, C]``): it reads no token, so it lines up with any token dim."""
    if val is None or val.dep != Dep.NONE or val.leaks or val.guard is not None:
        return False
    if val.kind not in (None, Kind.INDEX) or val.shift is not None:
        return False
    return bool(val.token_dims) and all(t.inner is None for t in val.toks if t is not None)


def moved_pairs(val: Val, mapping: dict[int, int]) -> dict:
    """``val``'s guard and triangle with dimensions renumbered (dropped when lost)."""
    shift = val.shift
    if shift is not None:
        shift = (mapping[shift[0]], *shift[1:]) if shift[0] in mapping else None
    return {
        "guard": val.guard.moved(mapping) if val.guard else None,
        "tri": val.tri.moved(mapping) if val.tri else None,
        "shift": shift,
    }


def unknown(interp: Interp, node: torch.fx.Node) -> Val | tuple:
    """Not in the table: fail closed when it touches tokens."""
    reason = f"`{op_name(node.target)}` is not in graphcheck's op table and touches"
    return unknown_or_leak(interp, node, reason + " the token dimension (fail closed)")


def unknown_or_leak(interp: Interp, node: torch.fx.Node, reason: str) -> Val | tuple:
    """A leak of ``reason`` when ``node`` touches tokens. An op with several outputs
    gets one value per output, all of one origin: one finding at the op, not one more
    where each output is taken apart."""
    vals = node_vals(interp, node)
    outputs = node.meta.get("val")
    many = isinstance(outputs, tuple | list)
    toks = [meta_toks(out, interp.tokens) for out in (outputs if many else [outputs])]
    if has_tokens(vals) or any(any(t) for t in toks):
        leak = interp.leak(node, reason, toks=toks[0] if toks else ())
        results = [leak.with_(toks=t) for t in toks]
    else:
        results = [Val(t, **carry(vals)) for t in toks]
    return tuple(results) if many else results[0]


def _src(interp: Interp, node: torch.fx.Node, index: int = 0) -> Val | None:
    """The value of ``node``'s positional argument ``index`` (``None``: none known)."""
    arg = node.args[index] if len(node.args) > index else None
    return interp.val(arg)
