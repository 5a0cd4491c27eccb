"""Group sizes as row provenance: MoE dispatch by ``split`` with data-dependent sizes.

transformers' JetMoE (and ScatterMoE / MegaBlocks-style code) dispatches rows to
experts without a grouped matmul: the flattened top-k expert ids are sorted, the
tokens per expert are counted (a one-hot map of the ``topk`` indices summed over the
tokens) and read out as Python ints (``counts.tolist()``: one ``item`` per expert),
the rows gathered in sorted order (``x[perm // k]``) are ``split`` by those counts,
each expert's linear runs on its piece, and the pieces are concatenated back:

* ``counts[i].item()`` is the size of group ``i`` (:attr:`Kind.GROUPSIZE`):
  bookkeeping for a split. Any other use (a value, or a size a value is computed
  from, such as ``arange(u_i)``: a row's position inside its group) carries the
  counts' leak: the counts hold every document's routing;
* ``split_with_sizes`` of rows in the order of an ascending sort, by *all* the
  counts of that sort's keys in expert order, gives pieces whose rows keep their
  labels: row ``r`` of piece ``i`` is sorted row ``off_i + r``, and it is in piece
  ``i`` because its own key is ``i``. A piece's token axis is
  ``S:<rows>|<counts>|<i>|<E>``; the analysis records that the sizes sum to the rows'
  length (they partition the ``k*T`` rows), the fact that discharges export's
  runtime assert of it (GC403);
* ``cat`` of all ``E`` pieces of one split family, in order, restores the sorted rows'
  labels; out of order or a subset is a leak (a row's place then depends on other
  tokens' groups);
* ``index_add`` of sorted rows at their permutation into a fresh tensor that holds no
  token data (``zeros(k*T, H)``, whatever the sizes make of its labels) puts every row
  back at its top-k slot.

The group sizes are row labels of :mod:`graphcheck.analysis.locality.rows`; ``cat`` and
``index_add`` of :mod:`~graphcheck.analysis.locality.concat` and
:mod:`~graphcheck.analysis.locality.scatter` are refined here (:data:`REFINES`, applied
by the dispatch).
"""

from __future__ import annotations

import sympy
import torch
import torch.fx

from graphcheck.analysis.fx import op_name
from graphcheck.analysis.locality import concat, scatter
from graphcheck.analysis.locality.domain import (
    Dep,
    Interp,
    Kind,
    Tok,
    Val,
    bind,
    carry,
    norm_dim,
    shape_of,
    union,
    unknown,
)
from graphcheck.analysis.locality.registry import register
from graphcheck.analysis.locality.rows import PIECE, groups_of_sort, piece
from graphcheck.analysis.locality.scatter import _scatter_rows

__all__ = [
    "REFINES",
    "cat",
    "cat_of_pieces",
    "counted",
    "index_add",
    "item",
    "proven",
    "rounds_down",
    "slot_destination",
    "split_by_groups",
]

aten = torch.ops.aten


def _count_entry(arg) -> tuple[torch.fx.Node, int] | None:
    """``(counts, i)`` when ``arg`` is entry ``i`` of the 1-D ``counts``: a ``getitem`` of
    its ``unbind`` (``tolist``) or a ``select`` along dim 0."""
    if not isinstance(arg, torch.fx.Node):
        return None
    name = op_name(arg.target)
    if name == "getitem" and isinstance(arg.args[0], torch.fx.Node):
        parts, i = arg.args
        if op_name(parts.target) == "aten.unbind.int" and bind(parts).get("dim", 0) in (0, -1):
            return (parts.args[0], i) if isinstance(i, int) else None
    if name == "aten.select.int" and norm_dim(arg.args[1], 1) == 0 and isinstance(arg.args[2], int):
        return arg.args[0], arg.args[2]
    return None


@register(aten.item.default, aten._local_scalar_dense.default)
def item(interp: Interp, node: torch.fx.Node) -> Val:
    """``counts[i].item()`` of counts of sorted keys: the size of group ``i``, holding the
    counts' dependence on every document (a finding if used as a value). Any other
    ``item`` is not followed: fail closed when it touches tokens."""
    entry = _count_entry(node.args[0] if node.args else None)
    counts = interp.val(entry[0]) if entry else None
    shape = shape_of(entry[0]) if entry else None
    if counts is None or counts.kind != Kind.COUNTS or shape is None or len(shape) != 1:
        return unknown(interp, node)
    total = shape[0]
    if not isinstance(total, int) or not 0 <= entry[1] < total:
        return unknown(interp, node)
    extra = (entry[0], entry[1], total, counts.extra)
    val = Val((), counts.dep, leaks=counts.leaks, kind=Kind.GROUPSIZE, ref=counts.ref, extra=extra)
    size = node.meta.get("val")
    expr = size.node.expr if isinstance(size, torch.SymInt) else None
    if isinstance(expr, sympy.Symbol):
        interp.group_sizes[str(expr)] = val
    return val


def counted(interp: Interp, node: torch.fx.Node) -> Val | None:
    """A size (or a tensor an ``arange`` makes) whose value involves group sizes: the
    counts' leak, carried as data (``None``: no group size is involved)."""
    val = node.meta.get("val")
    sizes = [val] if not isinstance(val, torch.Tensor) else list(val.shape)
    found = [g for size in sizes for s in _free(size) if (g := interp.group_sizes.get(s))]
    if not found:
        return None
    toks = tuple(None for _ in sizes) if isinstance(val, torch.Tensor) else ()
    if toks:  # positions inside a group: where the other rows of its expert are
        why = "positions inside a group of rows (an arange over a group size) used as data: "
        why += "a row's place in its expert's group depends on the other tokens' routing; "
        why += "keep every routed row (no capacity by position in the group)"
        return interp.leak(node, why, toks=toks, inputs=[])
    return Val((), Dep.LEAK, leaks=union(g.leaks for g in found))


def _free(size) -> set[str]:
    """The symbols of a size, a symbolic float or a symbolic bool."""
    node = getattr(size, "node", None)
    return {str(s) for s in getattr(getattr(node, "expr", None), "free_symbols", ())}


def rounds_down(node: torch.fx.Node, base: str) -> bool:
    """``div(x, k, rounding_mode="trunc" | "floor")``: ``x // k`` for the non-negative
    entries of a permutation."""
    return base == "div" and node.kwargs.get("rounding_mode") in ("trunc", "floor")


def split_by_groups(interp: Interp, node: torch.fx.Node) -> tuple | None:
    """``rows.split(sizes)`` with group sizes along a token dim: the pieces of the sort's
    groups when proven (see the module), a leak naming what differs otherwise; ``None``
    when no size is a group size (the plain split's rule applies)."""
    if op_name(node.target) != "aten.split_with_sizes.default":
        return None
    bound = bind(node)
    rows, sizes = interp.val(bound.get("self")), list(bound.get("split_sizes") or ())
    vals = [interp.val(s) for s in sizes]
    if rows is None or not any(v is not None and v.kind == Kind.GROUPSIZE for v in vals):
        return None
    dim = norm_dim(bound.get("dim", 0), len(rows.toks))
    outs = node.meta.get("val") or ()
    if rows.toks[dim] is None:
        return None
    why = _not_the_groups(node, rows.toks[dim], vals)
    if why is not None:
        return tuple(interp.leak(node, why) for _ in outs)
    counts, _, total, extra = vals[0].extra
    if extra == "one-hot":  # k ones per token: the counts partition the k*T rows
        _record_partition(interp, node, sizes, dim)
    pieces = []
    for i in range(total):
        toks = list(rows.toks)
        toks[dim] = Tok(f"{PIECE}{rows.toks[dim].axis}|{counts.name}|{i}|{total}")
        pieces.append(rows.with_(toks=tuple(toks), kind=None, guard=None, tri=None))
    return tuple(pieces)


_FIX = "; split by the counts per expert of the keys that sorted the rows, every expert in order"


def _not_the_groups(node: torch.fx.Node, tok: Tok, vals: list) -> str | None:
    """Why ``vals`` are not all the groups, in order, of the sort that ordered the rows
    of token dim ``tok`` (``None``: they are)."""
    first = vals[0]
    if any(v is None or v.kind != Kind.GROUPSIZE for v in vals) or first is None:
        return (
            "splits the token dimension by sizes that are not all group sizes of one count" + _FIX
        )
    counts, _, total, extra = first.extra
    order = [v.extra[1] for v in vals]
    if any(v.extra[0] is not counts for v in vals) or order != list(range(total)):
        return "splits rows by group sizes that are not every count of one sort, in order" + _FIX
    offs = Val((None,), kind=Kind.OFFSETS, ref=first.ref, extra=extra)
    if tok.inner != 1 or not groups_of_sort(node, offs, tok.axis):
        return "splits rows by group sizes that are not the counts of their sort's keys" + _FIX
    return None


def _record_partition(interp: Interp, node: torch.fx.Node, sizes: list, dim: int) -> None:
    """The fact ``sum(sizes) == rows.shape[dim]`` (export asserts it at run time)."""
    shape = shape_of(bind(node).get("self"))
    exprs = [s.meta.get("val") if isinstance(s, torch.fx.Node) else s for s in sizes]
    exprs = [e.node.expr if isinstance(e, torch.SymInt) else e for e in exprs]
    length = shape[dim].node.expr if isinstance(shape[dim], torch.SymInt) else shape[dim]
    total = sympy.Add(*exprs)
    if sympy.expand(total - length) != 0:  # not the same expression already
        interp.facts.append(sympy.Eq(total, length, evaluate=False))


def cat_of_pieces(interp: Interp, node: torch.fx.Node) -> Val | None:
    """``cat`` of pieces along their token dim: every piece of one split family, in
    order, is the sorted rows again; anything else is a leak. ``None`` when no piece is
    concatenated along its token dim."""
    tensors = list(node.args[0])
    vals = [interp.val(t) for t in tensors]
    n = len(shape_of(node) or ())
    dim = norm_dim(node.args[1] if len(node.args) > 1 else 0, n)
    parts = [piece(v.toks[dim]) if v is not None and len(v.toks) == n else None for v in vals]
    if not any(parts):
        return None
    families = {p[:2] + p[3:] for p in parts if p is not None}
    order = [p[2] if p is not None else None for p in parts]
    rest = {tuple(t for i, t in enumerate(v.toks) if i != dim) for v in vals if v is not None}
    if None in parts or len(families) != 1 or len(rest) != 1:
        why = "concatenates pieces of rows grouped by expert with other rows; concatenate "
        return interp.leak(node, why + "the pieces of one split only, all of them, in order")
    base, _, total = families.pop()
    if order != list(range(total)):
        why = "concatenates pieces of rows grouped by expert out of order or not all of them "
        why += "(a row's place depends on other tokens' groups); concatenate every expert's "
        return interp.leak(node, why + "piece, in expert order")
    toks = list(vals[0].toks)
    toks[dim] = Tok(base)
    return Val(tuple(toks), **carry(vals))


def cat(interp: Interp, node: torch.fx.Node) -> Val:
    """The op table's ``cat``, pieces of a split by group sizes judged first."""
    whole = cat_of_pieces(interp, node)
    return whole if whole is not None else concat.cat(interp, node)


def index_add(interp: Interp, node: torch.fx.Node) -> Val:
    """The op table's ``index_add``, a destination of top-k slots recognised first."""
    bound = bind(node)
    dst, idx = interp.val(bound.get("self")), interp.val(bound.get("index"))
    rows = interp.val(bound.get("source"))
    if dst is None or idx is None or rows is None:
        return scatter.index_add(interp, node)
    dim = norm_dim(bound.get("dim", 0), len(dst.toks))
    slots = slot_destination(interp, node, dst, dim, idx, rows)
    if slots is dst:
        return scatter.index_add(interp, node)
    return _scatter_rows(interp, node, slots, dim, idx, rows)


def slot_destination(interp, node, dst: Val, dim: int, idx: Val, rows: Val) -> Val:
    """``zeros(k*T, H).index_add(0, perm, sorted_rows)``: a destination holding no token
    data, as long as the permutation, takes the labels of the rows the sort read (each
    slot gets the one sorted row that came from it). Any other destination as it is."""
    expected = Tok(f"P:{idx.ref.name}") if idx.kind == Kind.PERM else None
    row_tok = rows.toks[dim] if dim < len(rows.toks) else None
    if expected is None or row_tok != expected or dst.toks[dim] == idx.extra:
        return dst
    if dst.dep != Dep.NONE or dst.leaks or dst.absolute or idx.extra is None:
        return dst
    shape, perm = shape_of(bind(node).get("self")), shape_of(bind(node).get("index"))
    if shape is None or perm is None or len(perm) != 1 or str(shape[dim]) != str(perm[0]):
        return dst
    toks = list(dst.toks)
    toks[dim] = idx.extra
    return dst.with_(toks=tuple(toks))


def proven(facts: list, expr) -> bool:
    """``expr`` (an ``Eq``) is one of the recorded ``facts``, up to the order of terms
    and the side each term is on."""
    if not isinstance(expr, sympy.Eq):
        return False
    diff = sympy.expand(expr.lhs - expr.rhs)
    for fact in facts:
        known = sympy.expand(fact.lhs - fact.rhs)
        if sympy.expand(diff - known) == 0 or sympy.expand(diff + known) == 0:
            return True
    return False


REFINES = {concat.cat: cat, scatter.index_add: index_add}
