"""The op table's token mixers: contractions, scans, sorts, indexing, attention.

These are the ops that *can* move data between tokens. Each is admitted only
where the mixing is proven to stay inside documents:

* a contraction or reduction over a token dim whose pairwise operand is ``0``
  (``-inf`` for a max or softmax) wherever the two tokens lie in different
  documents (a guard made by comparing document ids of both sides);
* varlen attention (and graphcheck's own stand-in kernels) reading the real
  ``cu_seq_lens`` (``seq_idx``); SDPA with a guarded mask; flex attention whose
  ``mask_mod`` is proven to compare document ids;
* a prefix sum masked to a triangle and then to the same document;
* gather -> per-row work -> scatter-back where the gather is a sort permutation
  and the scatter its inverse, or a selection by a per-token predicate
  scattered back at the same positions (token-choice MoE);
* a grouped matmul whose group offsets are the counts of the sort that ordered
  its rows (``histc`` of the sorted keys, or a one-hot map of the ``topk`` indices
  the sort flattened, summed over the tokens);
* ``torchtitan::deterministic_scatter_add`` with a row index expanded over the
  features: the scatter-back of rows.

Everything else that mixes tokens is a leak.
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis import optable_conv
from graphcheck.analysis.fx import op_name
from graphcheck.analysis.layout_terms import document_id_shift, layout_diff, term_of
from graphcheck.analysis.locality import (
    Dep,
    Fill,
    Interp,
    Kind,
    Pair,
    Tok,
    Val,
    align,
    bind,
    carry,
    has_tokens,
    is_length,
    is_one,
    meta_toks,
    ndim_of,
    node_vals,
    norm_dim,
    shape_of,
    union,
    unknown,
)

__all__ = ["FAMILIES", "custom", "higher_order"]


def _src(interp: Interp, node: torch.fx.Node, index: int = 0) -> Val | None:
    arg = node.args[index] if len(node.args) > index else None
    return interp.val(arg)


# --- contractions -------------------------------------------------------------------------


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


def _einsum(interp, node, vals: list[Val], letters: list[str], out: str) -> Val:
    tok_of: dict[str, Tok] = {}
    for val, ls in zip(vals, letters, strict=True):
        for letter, tok in zip(ls, val.toks, strict=True):
            if tok is None:
                continue
            if tok_of.setdefault(letter, tok) != tok:
                return interp.leak(node, "contracts tensors whose token dimensions do not line up")
    summed = [letter for letter in tok_of if letter not in out]
    toks = tuple(tok_of.get(letter) for letter in out)
    if summed and (earlier := interp.passed_on(node, vals)) is not None:
        return earlier.with_(toks=toks)
    if not summed:
        return Val(toks, **carry(vals), guard=_kept_guard(vals, letters, out))
    if len(summed) == 1 and _masked(vals, letters, summed[0], out):
        return Val(toks, **{**carry(vals), "dep": Dep.DOC})
    what = f"`{op_name(node.target)}` sums over the token dimension"
    return interp.leak(node, what + " without a document mask (tokens of all documents meet)")


def _masked(vals: list[Val], letters: list[str], summed: str, out: str) -> bool:
    """Some operand is 0 wherever the summed token and a kept token lie in different
    documents, and no operand reaches beyond its documents."""
    if any(v.dep > Dep.DOC for v in vals):
        return False
    for val, ls in zip(vals, letters, strict=True):
        g = val.guard
        if g is None or g.fill != Fill.ZERO:
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
        if _one_chunk(vals, letters, val, ls) and {ls[d] for d in val.token_dims} <= set(out):
            return Pair(out.index(ls[g.row]), out.index(ls[g.col]), Fill.ZERO)
    return None


def grouped_mm(interp: Interp, node: torch.fx.Node) -> Val:
    """Rows grouped by expert: row ``r`` uses the weight of the group ``offs`` puts it
    in. Token-wise when ``offs`` counts the sorted keys that ordered the rows."""
    bound = bind(node)
    rows, weight, offs = (interp.val(bound.get(k)) for k in ("self", "mat2", "offs"))
    if rows is None or not rows.token_dims:
        return Val(meta_toks(node.meta.get("val"), interp.tokens), **carry([rows, weight]))
    axis = rows.toks[0].axis if rows.toks[0] is not None else ""
    if offs is None or offs.kind != Kind.OFFSETS or not _groups_of_sort(node, offs, axis):
        return interp.leak(node, "grouped matmul whose groups are not those of its rows' sort")
    return Val((rows.toks[0], None), **carry([rows, weight]))


_VIEWS = {
    "aten.view.default",
    "aten.reshape.default",
    "aten._unsafe_view.default",
    "aten.view_copy.default",
    "aten.flatten.using_ints",
}


def _written(node: torch.fx.Node) -> bool:
    """Some user of ``node`` writes into it in place (its values may differ from the op's)."""
    for user in node.users:
        schema = getattr(user.target, "_schema", None)
        args = schema.arguments if schema is not None else []
        for arg, value in zip(args, user.args, strict=False):
            if value is node and arg.alias_info is not None and arg.alias_info.is_write:
                return True
    return False


def _topk_indices(node) -> torch.fx.Node | None:
    """The ``topk`` whose indices ``node`` is (through views, none written in place),
    along its last dim."""
    while isinstance(node, torch.fx.Node) and op_name(node.target) in _VIEWS:
        if _written(node):
            return None
        node = node.args[0]
    if not isinstance(node, torch.fx.Node) or op_name(node.target) != "getitem" or _written(node):
        return None
    top, which = node.args[0], node.args[1]
    if not isinstance(top, torch.fx.Node) or op_name(top.target) != "aten.topk.default":
        return None
    n = ndim_of(top.args[0])
    last = n > 0 and norm_dim(bind(top).get("dim", -1), n) == n - 1
    return top if which == 1 and last else None


def _groups_of_sort(node: torch.fx.Node, offs: Val, axis: str) -> bool:
    """``offs`` are the group boundaries of the rows' ascending sort: the offsets of the
    sort's own counts, or the counts of a one-hot map of the ``topk`` indices that sort
    flattened (top-k indices are distinct per token, so both count the same keys)."""
    if axis == f"P:{offs.ref.name}":
        return True
    if offs.extra != "one-hot" or not axis.startswith("P:"):
        return False
    sorts = [n for n in node.graph.nodes if n.name == axis[2:]]
    if len(sorts) != 1 or not op_name(sorts[0].target).startswith(("aten.sort", "aten.argsort")):
        return False
    keys = sorts[0].args[0]
    ascending = not bind(sorts[0]).get("descending", False)
    return ascending and ndim_of(keys) == 1 and _topk_indices(keys) is offs.ref


# --- scans, sorts, selections -----------------------------------------------------------------


def scan(interp: Interp, node: torch.fx.Node) -> Val:
    """``cumsum``: over a feature dim token-wise; over T a prefix over other documents,
    unless it counts document starts (document ids) or runs inside a triangle."""
    src = _src(interp, node)
    if src is None:
        return unknown(interp, node)
    dim = norm_dim(node.args[1], len(src.toks))
    if src.toks[dim] is None:
        kind = Kind.OFFSETS if src.kind == Kind.COUNTS else None
        return src.with_(kind=kind, guard=None)
    if (earlier := interp.passed_on(node, [src])) is not None:
        return earlier
    if src.kind == Kind.ONEHOT:  # a capacity: each token's place in its expert's queue
        return interp.leak(node, "ranks every token among the earlier tokens of all documents "
                           "that chose its expert (an expert capacity over the packed row); "
                           "count per document, or drop no tokens")  # fmt: skip
    if (ids := _counted_documents(interp, node, src, dim)) is not None:
        return ids
    tri = src.tri
    if tri is not None and tri.row == dim and tri.k >= 0 and src.dep <= Dep.DOC:
        return src.with_(dep=Dep.SPAN if src.dep else Dep.NONE, guard=None, kind=None)
    if src.dep == Dep.NONE and not src.leaks:
        origin = interp.fabricate(node, "positions counted over the packed row (cumsum over T)")
        return Val(src.toks, absolute=src.absolute | origin)
    return interp.leak(node, "prefix sum over the token dimension crosses document boundaries")


def _counted_documents(interp, node, src: Val, dim: int) -> Val | None:
    """A prefix sum over T of an indicator the solver proves is "a document starts
    here" (``(position_ids == 0)``, transformers' ``diff(positions) != 1``): the document
    ids (:func:`~graphcheck.analysis.layout_terms.document_id_shift`)."""
    term = term_of(src)
    out = node.meta.get("val")
    exact = isinstance(out, torch.Tensor) and not out.dtype.is_floating_point
    if term is None or src.toks[dim] is None or not exact:
        return None
    counted = document_id_shift(term)
    if counted.separates:
        origin = interp.fabricate(node, "document separators counted over the packed row")
        return Val(src.toks, kind=Kind.DOCSEP, ref=node, absolute=origin)
    if counted.shift is None:
        if counted.why:
            why = "a prefix sum over T of a function of the positions that is not the "
            why += f"document id ({counted.why})"
            return interp.leak(node, why)
        return None
    origin = interp.fabricate(node, "document ids counted over the packed row")
    return Val(src.toks, kind=Kind.DOCID, absolute=origin, extra=counted.shift)


def diff(interp: Interp, node: torch.fx.Node) -> Val:
    """``diff``: over a feature dim token-wise; over T each token minus its neighbour,
    which at a document start is the previous document's last token. Of a function of
    the layout (positions), with a ``prepend`` that is one too, the result is one too
    (its term); any other ``prepend`` or ``append`` is not followed (fails closed)."""
    src = _src(interp, node)
    bound = bind(node)
    if src is None:
        return unknown(interp, node)
    dim = norm_dim(bound.get("dim", -1), len(src.toks))
    before, after = interp.val(bound.get("prepend")), bound.get("append")
    term, first = term_of(src), term_of(before)
    simple = bound.get("n", 1) == 1 and after is None and src.toks[dim] is not None
    if simple and term is not None and first is not None and not before.token_dims:
        shape = shape_of(bound.get("prepend"))
        if shape is not None and len(shape) == len(src.toks) and is_one(shape[dim]):
            return src.with_(kind=Kind.LAYOUT, extra=layout_diff(term, first), guard=None,
                             tri=None, **carry([src, before]))  # fmt: skip
    if bound.get("prepend") is not None or after is not None:
        return unknown(interp, node)
    if src.toks[dim] is None:
        return src.with_(kind=None, guard=None, tri=None)
    return interp.leak(node, "difference of neighbouring tokens (diff over T) crosses documents")


def sort(interp: Interp, node: torch.fx.Node):
    """Sorting along T reorders rows: the values keep their dependence in the sort's
    row order; the permutation is bookkeeping, to be inverted."""
    src = _src(interp, node)
    bound = bind(node)
    if src is None:
        return unknown(interp, node)
    dim = norm_dim(bound.get("dim", -1), len(src.toks))
    if src.toks[dim] is None:
        plain = src.with_(kind=None, guard=None, tri=None)
        return plain if op_name(node.target).startswith("aten.argsort") else (plain, plain)
    toks = list(src.toks)
    toks[dim] = Tok(f"P:{node.name}")
    values = src.with_(toks=tuple(toks), kind=Kind.SORTED, ref=node, extra=src.toks[dim])
    interp.reasons.setdefault(node, "the sort order of tokens used as data")
    perm = Val(tuple(toks), Dep.LEAK, kind=Kind.PERM, ref=node, extra=src.toks[dim])
    perm = perm.with_(leaks=frozenset({node}))
    return perm if op_name(node.target).startswith("aten.argsort") else (values, perm)


def topk(interp: Interp, node: torch.fx.Node):
    """Top-k over T keeps the tokens other tokens outrank (expert-choice routing)."""
    src = _src(interp, node)
    bound = bind(node)
    if src is None:
        return unknown(interp, node)
    dim = norm_dim(bound.get("dim", -1), len(src.toks))
    if src.toks[dim] is not None:
        one = interp.leak(node, "top-k over the token dimension (which tokens are kept depends "
                          "on other documents)")  # fmt: skip
        return (one, one)
    plain = src.with_(kind=None, guard=None, tri=None)
    return (plain, plain)


def nonzero(interp: Interp, node: torch.fx.Node) -> Val:
    """Positions where a per-token predicate holds: a selection of tokens."""
    src = _src(interp, node)
    if src is None or not src.token_dims:
        return Val(meta_toks(node.meta.get("val"), interp.tokens), **carry([src]))
    if src.kind == Kind.DOCSTART and len(src.toks) == 1:  # the positions of the starts
        return Val((None, None), kind=Kind.CU_INNER, extra="starts")
    if src.dep > Dep.DOC or src.leaks:
        return interp.passed_on(node, [src]) or interp.leak(
            node, "selects tokens by a predicate that mixes documents"
        )
    interp.reasons.setdefault(node, "positions of selected tokens used as data")
    toks = (Tok(f"G:{node.name}"), None)
    return Val(toks, Dep.LEAK, leaks=frozenset({node}), kind=Kind.SELECT, ref=node, extra=src.toks)


def where_indices(interp: Interp, node: torch.fx.Node) -> tuple:
    """``torch.where(cond)``: one index tensor per dim of ``cond``; the token dim's is a
    selection of tokens by a per-token predicate."""
    src = _src(interp, node)
    outs = node.meta.get("val") or ()
    if src is None or not src.token_dims:
        return tuple(Val((None,), **carry([src])) for _ in outs)
    if src.dep > Dep.DOC or src.leaks:
        one = interp.passed_on(node, [src]) or interp.leak(
            node, "selects tokens by a predicate that mixes documents"
        )
        return tuple(one for _ in outs)
    interp.reasons.setdefault(node, "positions of selected tokens used as data")
    tok = Tok(f"G:{node.name}")
    return tuple(
        Val((tok,), Dep.LEAK, leaks=frozenset({node}), kind=Kind.SELECT, ref=node, extra=comp)
        for comp in src.toks
    )


def index_fill(interp: Interp, node: torch.fx.Node) -> Val:
    """``zeros(T).index_fill(0, cu[:-1], True)`` marks the document starts."""
    bound = bind(node)
    src, idx = interp.val(bound.get("self")), interp.val(bound.get("index"))
    if src is None or idx is None:
        return unknown(interp, node)
    dim = norm_dim(bound.get("dim", 0), len(src.toks))
    if src.toks[dim] is None:
        return Val(src.toks, **carry([src, idx]))
    starts = idx.kind == Kind.CU_INNER and idx.extra == "starts" and src.dep == Dep.NONE
    if starts and not isinstance(bound.get("value"), torch.fx.Node) and len(src.toks) == 1:
        return Val(src.toks, Dep.POINT, kind=Kind.DOCSTART)
    return interp.leak(node, "writes at token positions chosen by data")


def histc(interp: Interp, node: torch.fx.Node) -> Val:
    """Counts of the sorted keys (the expert sizes) are bookkeeping for a grouped matmul."""
    src = _src(interp, node)
    if src is not None and src.kind == Kind.SORTED:
        interp.reasons.setdefault(node, "counts over tokens used as data")
        return Val((None,), Dep.LEAK, leaks=frozenset({node}), kind=Kind.COUNTS, ref=src.ref)
    if src is not None and (src.token_dims or src.dep):
        return interp.leak(node, "counts values over the token dimension")
    return Val((None,), **carry([src]))


def searchsorted(interp: Interp, node: torch.fx.Node) -> Val:
    """``searchsorted(cu_seq_lens, arange(T), right=True)`` is the document id of each
    token."""
    bound = bind(node)
    name = op_name(node.target)
    seq_key, in_key = ("boundaries", "self") if "bucketize" in name else ("sorted_sequence", "self")
    seq, index = interp.val(bound.get(seq_key)), interp.val(bound.get(in_key))
    structural = seq is not None and index is not None and bound.get("right")
    if structural and seq.kind in (Kind.CU, Kind.CU_INNER) and index.kind == Kind.INDEX:
        origin = interp.fabricate(node, "document ids used as values")
        shift = 1 if seq.kind == Kind.CU or seq.extra == "starts" else 0  # doc + shift
        return Val(index.toks, kind=Kind.DOCID, absolute=origin, extra=shift)
    vals = [v for v in (seq, index) if v is not None]
    if any(v.dep > Dep.POINT or v.leaks for v in vals) or (seq is not None and seq.token_dims):
        return interp.leak(node, "searches values across the token dimension")
    return Val(index.toks if index else (), **carry(vals))


# --- indexing -------------------------------------------------------------------------------


_BOOKKEEPING = {Kind.PERM, Kind.PERMDIV, Kind.INVERSE, Kind.SELECT, Kind.INDEX}


def _as_index(index: Val) -> Val:
    """An index used only to pick rows: bookkeeping kinds carry no data of their own."""
    if index.kind in _BOOKKEEPING:
        return index.with_(dep=Dep.NONE, leaks=frozenset(), absolute=frozenset())
    return index


def _row_tok(src_tok: Tok, index: Val) -> Tok | None:
    """The token dim of rows gathered from a token dim ``src_tok`` with ``index``, when
    the index is bookkeeping (a permutation, its inverse, a selection, the identity)."""
    if index.kind == Kind.PERM and index.extra == src_tok:
        return Tok(f"P:{index.ref.name}")
    if index.kind == Kind.PERMDIV:
        sorted_tok, q = index.extra
        if sorted_tok is not None and sorted_tok.axis == src_tok.axis and sorted_tok.inner == q:
            return Tok(f"P:{index.ref.name}") if src_tok.inner == 1 else None
    if index.kind == Kind.INVERSE and src_tok.axis == f"P:{index.ref.name}":
        return index.extra
    if index.kind == Kind.SELECT and index.extra == src_tok:
        return Tok(f"G:{index.ref.name}")
    if index.kind == Kind.INDEX and index.toks and index.toks[0] == src_tok:
        return src_tok
    if index.kind == Kind.DOCID and src_tok.axis == f"D{index.extra}" and index.toks:
        return index.toks[0]  # each token reads its own document's row
    return None


def _gather_rows(interp, node, src: Val, dim: int, index: Val) -> Val:
    """``src`` indexed along ``dim`` by ``index`` (one index tensor)."""
    n = len(src.toks)
    before, after = list(src.toks[:dim]), list(src.toks[dim + 1 :])
    if src.toks[dim] is None:  # a table lookup: rows follow the index
        absolute = src.absolute | index.absolute
        deps = carry([src, _as_index(index)])
        return Val(tuple(before + list(index.toks) + after), **{**deps, "absolute": absolute})
    tok = _row_tok(src.toks[dim], index)
    if tok is None or len(index.toks) != 1:  # a permutation misused: the leak is here
        inputs = [src, _as_index(index)]
        earlier = interp.passed_on(node, inputs)
        return earlier or interp.leak(node, "indexes the token dimension with data-dependent "
                                      "positions", inputs=inputs)  # fmt: skip
    _ = n
    return src.with_(toks=tuple([*before, tok, *after]), guard=None, tri=None, kind=None)


def index(interp: Interp, node: torch.fx.Node) -> Val:
    src = _src(interp, node)
    indices = node.args[1]
    if src is None:
        return unknown(interp, node)
    used = [(d, i) for d, i in enumerate(indices) if i is not None]
    if (same := _by_token_index(interp, node, src, used)) is not None:
        return same
    if len(used) == 1:
        d, idx = used[0]
        value = interp.val(idx)
        if value is not None:
            return _gather_rows(interp, node, src, d, value)
    return _multi_index(interp, node, src, used)


def _by_token_index(interp, node, src: Val, used) -> Val | None:
    """``x[b, q_idx]`` with each token dim of ``x`` indexed by the token index itself
    (``arange(T)``, viewed to any shape) and its other indexed dims of size 1: every
    element reads the token it stands for, so ``x``'s value (and what it is) moves to
    the dims the index broadcasts to (``None``: not such an index)."""
    shape, out = shape_of(node.args[0]), shape_of(node)
    if shape is None or out is None or not used:
        return None
    lanes = max(len(shape_of(i) or ()) for _, i in used)
    placed: list = [None] * lanes
    for d, idx in used:
        value, ishape = interp.val(idx), shape_of(idx)
        if value is None or ishape is None:
            return None
        if src.toks[d] is None:
            if not is_one(shape[d]) or value.token_dims:
                return None
            continue
        if value.kind != Kind.INDEX or [value.toks[i] for i in value.token_dims] != [src.toks[d]]:
            return None
        lane = lanes - len(ishape) + value.token_dims[0]
        if placed[lane] not in (None, src.toks[d]):
            return None
        placed[lane] = src.toks[d]
    dims = [d for d, _ in used]
    kept = [src.toks[d] for d in range(len(src.toks)) if d not in dims]
    first = dims[0]
    adjacent = dims == list(range(first, first + len(dims)))
    toks = [*kept[:first], *placed, *kept[first:]] if adjacent else [*placed, *kept]
    if len(toks) != len(out):
        return None
    return src.with_(toks=tuple(toks), guard=None, tri=None, shift=None)


def _multi_index(interp, node, src: Val, used) -> Val:
    """Several index tensors (``x[rows, cols]``): each token dim must be indexed by
    bookkeeping, all landing on one row dim."""
    toks, others = set(), []
    for d, idx in used:
        value = interp.val(idx)
        if value is None:
            continue
        if src.toks[d] is None:
            others.append(_as_index(value))
            continue
        tok = _row_tok(src.toks[d], value)
        if tok is None:
            earlier = interp.passed_on(node, [src, value])
            return earlier or interp.leak(node, "indexes the token dimension with "
                                          "data-dependent positions")  # fmt: skip
        toks.add(tok)
    out = shape_of(node)
    if len(toks) > 1 or out is None:
        return interp.leak(node, "indexes the token dimension with data-dependent positions")
    first = min(d for d, _ in used)
    rest = [src.toks[d] for d in range(len(src.toks)) if d > max(d for d, _ in used)]
    row = next(iter(toks)) if toks else None
    lead = list(src.toks[:first]) if _adjacent(used) else []
    result = [*lead, row, *rest]
    if len(result) != len(out):
        return interp.leak(node, "indexes the token dimension in a way graphcheck cannot follow")
    return Val(tuple(result), **carry([src.with_(leaks=src.leaks), *others]))


def _adjacent(used) -> bool:
    dims = [d for d, _ in used]
    return dims == list(range(dims[0], dims[0] + len(dims)))


def index_select(interp: Interp, node: torch.fx.Node) -> Val:
    src, idx = _src(interp, node), interp.val(node.args[2])
    if src is None or idx is None:
        return unknown(interp, node)
    return _gather_rows(interp, node, src, norm_dim(node.args[1], len(src.toks)), idx)


def embedding(interp: Interp, node: torch.fx.Node) -> Val:
    """A table lookup: row ``t`` of the result is the table row ``ids[t]`` names."""
    weight, ids = interp.val(node.args[0]), interp.val(node.args[1])
    if ids is None:
        return Val(meta_toks(node.meta.get("val"), interp.tokens), **carry([weight]))
    deps = carry([weight, ids])
    return Val((*ids.toks, None), **deps)


def gather(interp: Interp, node: torch.fx.Node) -> Val:
    src, idx = _src(interp, node), interp.val(node.args[2])
    if src is None:
        return unknown(interp, node)
    dim = norm_dim(node.args[1], len(src.toks))
    if src.toks[dim] is not None:
        return interp.leak(node, "gathers along the token dimension")
    toks = align(interp, node, [node.args[0], node.args[2]])
    if toks is None:
        return interp.leak(node, "gathers with an index whose token dimensions do not line up")
    return Val(toks, **carry([src, idx]))


def scatter(interp: Interp, node: torch.fx.Node) -> Val:
    """``scatter`` / ``scatter_add`` along a feature dim: element-aligned on the rest."""
    src = _src(interp, node)
    if src is None:
        return unknown(interp, node)
    dim = norm_dim(node.args[1], len(src.toks))
    operands = [a for a in node.args[2:] if isinstance(a, torch.fx.Node)]
    if (offsets := _doc_offsets(interp, node, src, dim)) is not None:
        return offsets
    if src.toks[dim] is not None:
        return interp.leak(node, "scatters along the token dimension")
    vals = [interp.val(a) for a in operands]
    if (top := _onehot(node, dim)) is not None:
        return Val(src.toks, **carry([src, *vals]), kind=Kind.ONEHOT, ref=top)
    return Val(src.toks, **carry([src, *vals]))


_CASTS = {"aten.to.dtype", "aten._to_copy.default", "aten.clone.default"}


def _doc_offsets(interp: Interp, node: torch.fx.Node, dst: Val, dim: int) -> Val | None:
    """``dst.scatter(0, where(starts, doc, T), where(starts, arange(T), _))``: each
    document start ``t`` of document ``d`` writes ``t`` at ``d``, every other token
    writes at ``T``, past the last document id: element ``d < N`` is the first token of
    document ``d`` (:attr:`Kind.DOCOFFSETS`; torchtitan's packed-document mask)."""
    plain = op_name(node.target) in ("aten.scatter.src", "aten.scatter_.src")
    if not plain or node.kwargs or len(node.args) != 4 or dim != 0 or len(dst.toks) != 1:
        return None
    index, value = (_at_starts(interp, a) for a in node.args[2:4])
    if index is None or value is None or dst.dep != Dep.NONE or dst.leaks:
        return None
    (doc, rest), (tokens, _) = index, value
    ids = interp.val(doc)
    exact_ids = ids is not None and ids.kind == Kind.DOCID and ids.extra == 0
    arange = interp.val(tokens)
    if not exact_ids or arange is None or arange.kind != Kind.INDEX or not _is_T(interp, rest):
        return None
    origin = interp.fabricate(node, "document offsets used as values")
    return Val((None,), kind=Kind.DOCOFFSETS, extra=0, absolute=origin | arange.absolute)


def _at_starts(interp: Interp, arg) -> tuple | None:
    """``(a, b)`` of ``where(starts, a, b)`` (through casts), ``starts`` the document
    starts of the packed row."""
    while isinstance(arg, torch.fx.Node) and op_name(arg.target) in _CASTS:
        arg = arg.args[0]
    if not isinstance(arg, torch.fx.Node) or op_name(arg.target) != "aten.where.self":
        return None
    cond = interp.val(arg.args[0])
    if cond is None or cond.kind != Kind.DOCSTART or len(cond.toks) != 1:
        return None
    return arg.args[1], arg.args[2]


def _is_T(interp: Interp, arg) -> bool:
    """The packed length ``T``: a number, or ``full_like(x, T)``."""
    if isinstance(arg, torch.fx.Node) and op_name(arg.target) == "aten.full_like.default":
        arg = bind(arg).get("fill_value")
    size = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    return isinstance(size, torch.SymInt) and is_length(size, interp.tokens)


_ZEROS = {"aten.zeros_like.default", "aten.zeros.default", "aten.new_zeros.default"}


def _onehot(node: torch.fx.Node, dim: int) -> torch.fx.Node | None:
    """``zeros.scatter(-1, topk_indices, True)``: the one-hot map of the chosen indices
    (the ``topk`` node), each row holding exactly ``k`` ones."""
    if op_name(node.target) not in ("aten.scatter.value", "aten.scatter_.value"):
        return None
    dst, index, value = node.args[0], node.args[2], node.args[3]
    n = ndim_of(node)
    fresh = isinstance(dst, torch.fx.Node) and len(dst.users) == 1  # no other write to it
    if not fresh or op_name(dst.target) not in _ZEROS:
        return None
    direct = isinstance(index, torch.fx.Node) and op_name(index.target) == "getitem"
    top = _topk_indices(index) if direct else None
    if top is None or ndim_of(index) != n or dim != n - 1 or (value is not True and value != 1):
        return None
    pairs = zip(shape_of(index)[:-1], shape_of(node)[:-1], strict=True)
    lead = [_same_size(a, b) for a, b in pairs]
    return top if all(lead) else None


def _same_size(a, b) -> bool:
    return str(a) == str(b)


def index_add(interp: Interp, node: torch.fx.Node) -> Val:
    """Scatter rows back into the token dim they were gathered from."""
    bound = bind(node)
    dst, idx = interp.val(bound.get("self")), interp.val(bound.get("index"))
    rows = interp.val(bound.get("source"))
    if dst is None or idx is None or rows is None:
        return unknown(interp, node)
    dim = norm_dim(bound.get("dim", 0), len(dst.toks))
    return _scatter_rows(interp, node, dst, dim, idx, rows)


def _scatter_rows(interp, node, dst: Val, dim: int, idx: Val, rows: Val) -> Val:
    if dst.toks[dim] is None and (summary := _per_document(dst, dim, idx, rows)) is not None:
        return summary
    if dst.toks[dim] is None:
        if rows.token_dims and not dst.token_dims:
            return interp.leak(node, "accumulates tokens into positions that are not tokens")
        return Val(dst.toks, **carry([dst, rows, _as_index(idx)]))
    tok = _row_tok(dst.toks[dim], idx)
    row_tok = rows.toks[dim] if dim < len(rows.toks) else None
    if tok is None or row_tok != tok:
        if (earlier := interp.passed_on(node, [dst, idx, rows])) is not None:
            return earlier.with_(toks=dst.toks)
        return interp.leak(node, "scatters rows into the token dimension at positions other than "
                           "those they were gathered from")  # fmt: skip
    return Val(dst.toks, **carry([dst, rows]))


def _per_document(dst: Val, dim: int, idx: Val, rows: Val) -> Val | None:
    """Rows added at their document id into a fresh tensor (``zeros(N, H).index_add(0,
    doc, x)``): one row per document, each summing its own document's tokens, on a
    document axis ``D<k>`` (row ``d + k`` holds document ``d``); ``None`` otherwise."""
    shift = idx.extra if idx.kind == Kind.DOCID and type(idx.extra) is int else None
    tok = rows.toks[dim] if dim < len(rows.toks) else None
    if shift is None or tok != Tok("T") or [idx.toks[d] for d in idx.token_dims] != [tok]:
        return None
    if dst.token_dims or dst.dep > Dep.NONE or dst.leaks or rows.leaks:
        return None
    toks = list(dst.toks)
    toks[dim] = Tok(f"D{shift}")
    others = [t for i, t in enumerate(rows.toks) if i != dim and t is not None]
    if others:
        return None
    return Val(tuple(toks), **{**carry([dst, rows]), "dep": Dep.DOC})


def row_scatter_add(interp: Interp, node: torch.fx.Node) -> Val:
    """``out.scatter_add(0, index, src)`` (``torchtitan::deterministic_scatter_add``,
    whose kernel is exactly that): with ``index`` a column of row positions expanded
    over the features, each row ``i`` of ``src`` is added to row ``index[i]`` of
    ``out`` -- an ``index_add`` of rows, proven like one. Any other index scatters
    elements along the token dim: a leak."""
    bound = bind(node)
    dst, rows = interp.val(bound.get("out")), interp.val(bound.get("src"))
    column = _expanded_column(bound.get("index"))
    idx = interp.val(column)
    if dst is None or rows is None or len(dst.toks) != 2:
        return unknown(interp, node)
    if idx is None:
        if dst.toks[0] is None and not rows.token_dims:
            return Val(dst.toks, **carry([dst, rows, interp.val(bound.get("index"))]))
        return interp.leak(node, "scatters elements along the token dimension at positions "
                           "that are not whole rows")  # fmt: skip
    return _scatter_rows(interp, node, dst, 0, idx, rows)


def _expanded_column(index) -> torch.fx.Node | None:
    """``col.reshape(-1, 1).expand(-1, D)``: the 1-D ``col`` every column repeats."""
    if not isinstance(index, torch.fx.Node) or op_name(index.target) != "aten.expand.default":
        return None
    base, shape = index.args[0], shape_of(index)
    base_shape = shape_of(base)
    if shape is None or base_shape is None or len(shape) != 2 or len(base_shape) != 2:
        return None
    if not is_one(base_shape[1]) or op_name(base.target) not in (*_VIEWS, "aten.unsqueeze.default"):
        return None
    col = base.args[0]
    rows_kept = _same_size(shape[0], base_shape[0])  # only the feature dim is stretched
    return col if rows_kept and ndim_of(col) == 1 else None


def index_put(interp: Interp, node: torch.fx.Node) -> Val:
    """``inv[perm] = arange(n)`` builds the inverse permutation; ``x[sel] = rows`` puts
    selected rows back where they came from."""
    dst, indices, values = _src(interp, node), node.args[1], interp.val(node.args[2])
    used = [(d, interp.val(i)) for d, i in enumerate(indices) if i is not None]
    if dst is None or values is None or len(used) != 1 or used[0][1] is None:
        return unknown(interp, node)
    d, idx = used[0]
    if idx.kind == Kind.PERM and values.kind == Kind.INDEX and dst.dep == Dep.NONE:
        interp.reasons.setdefault(node, "an inverse permutation of tokens used as data")
        extra = idx.extra
        return Val((extra,), Dep.LEAK, leaks=frozenset({node}), kind=Kind.INVERSE, ref=idx.ref,
                   extra=extra)  # fmt: skip
    return _scatter_rows(interp, node, dst, d, idx, values)


# --- shape-changing ops -----------------------------------------------------------------------


def cat(interp: Interp, node: torch.fx.Node) -> Val:
    tensors = list(node.args[0])
    kinds = [(v.kind, v.extra) if (v := interp.val(t)) is not None else None for t in tensors]
    if kinds == [(Kind.CU_INNER, "starts"), (Kind.LENGTH, "T")]:  # cat([starts, [T]])
        origin = interp.fabricate(node, "cu_seq_lens offsets used as a value")
        return Val((None,), kind=Kind.CU, absolute=origin)
    n = ndim_of(node)
    dim = norm_dim(node.args[1] if len(node.args) > 1 else 0, n)
    vals = [interp.val(t) for t in tensors]
    toks = meta_toks(node.meta.get("val"), interp.tokens)
    joined = [None] * n
    for val in vals:
        if val is None or len(val.toks) != n:
            continue
        for i, tok in enumerate(val.toks):
            if tok is not None and joined[i] not in (None, tok):
                return interp.leak(node, "concatenates tensors whose token dims do not line up")
            joined[i] = joined[i] or tok
    if joined[dim] is not None or toks[dim] is not None:
        if has_tokens(vals):
            return interp.leak(node, "concatenates along the token dimension")
        return Val(toks, **carry(vals))
    return Val(tuple(joined), **carry(vals))


def stack(interp: Interp, node: torch.fx.Node) -> Val:
    vals = [interp.val(t) for t in node.args[0]]
    if len(vals) == 1 and vals[0] is not None and vals[0].kind == Kind.LENGTH:
        return vals[0].with_(toks=(None,))
    n = ndim_of(node)
    dim = norm_dim(node.args[1] if len(node.args) > 1 else 0, n)
    base = next((v.toks for v in vals if v is not None and len(v.toks) == n - 1), None)
    if base is None:
        return Val(meta_toks(node.meta.get("val"), interp.tokens), **carry(vals))
    if any(v is not None and v.toks != base and v.token_dims for v in vals):
        return interp.leak(node, "stacks tensors whose token dims do not line up")
    return Val((*base[:dim], None, *base[dim:]), **carry(vals))


def shift(interp: Interp, node: torch.fx.Node) -> Val:
    """``roll`` / ``flip`` / padding of T move tokens onto other tokens' positions."""
    src = _src(interp, node)
    if src is None:
        return unknown(interp, node)
    dims = [d for d in _shifted_dims(node, len(src.toks)) if src.toks[d] is not None]
    clean = src.shift is None and src.dep <= Dep.DOC and not src.leaks
    amount = _shift_amount(node, dims[0], len(src.toks)) if len(dims) == 1 else None
    if clean and type(amount) is int and amount >= 1:
        back = "the previous token" if amount == 1 else f"the token {amount} back"
        fix = "== 0" if amount == 1 else f"< {amount}"
        interp.reasons.setdefault(node, f"`{op_name(node.target)}` shifts tokens by {amount} "
                                  f"along the token dimension and reads {back} where it lies in "
                                  f"another document (zero the shifted value where position_ids "
                                  f"{fix})")  # fmt: skip
        pending = frozenset({node})
        return src.with_(dep=Dep.SPAN, leaks=pending, shift=(dims[0], amount, node), kind=None,
                         guard=None, tri=None)  # fmt: skip
    if len(dims) == 1 and _pad_widths(node) is not None:
        padded = optable_conv.pad(interp, node, src, dims[0])  # in front by an int, or behind
        if padded is not None:
            return padded
    if dims and _symbolic_pad(node, dims, len(src.toks)):
        return interp.leak(node, f"`{op_name(node.target)}` pads the token dimension by a "
                           "width computed from sizes, which graphcheck does not follow "
                           "(fail closed)")  # fmt: skip
    if dims:
        return interp.leak(node, f"`{op_name(node.target)}` moves tokens along the token "
                           "dimension onto other tokens' positions")  # fmt: skip
    return Val(meta_toks(node.meta.get("val"), interp.tokens), **carry([src]))


def _pad_widths(node: torch.fx.Node) -> list | None:
    """The ``pad`` argument of a pad op (entries an int or a size node), else ``None``."""
    if op_name(node.target).split(".")[1] not in ("constant_pad_nd", "pad"):
        return None
    return list(bind(node).get("pad") or [])


def _symbolic_pad(node: torch.fx.Node, dims: list[int], n: int) -> bool:
    """A pad of one of ``dims`` by a width that is not a Python int (a size of the graph)."""
    pad = _pad_widths(node)
    sides = [pad[2 * (n - 1 - d) + j] for d in dims for j in (0, 1)] if pad is not None else []
    return any(type(width) is not int for width in sides)


def _shift_amount(node: torch.fx.Node, dim: int, n: int) -> int | None:
    """By how many tokens a ``roll`` or a pad-and-crop moves dimension ``dim``."""
    name = op_name(node.target).split(".")[1]
    bound = bind(node)
    if name == "roll":
        shifts, dims = bound.get("shifts"), bound.get("dims")
        shifts = [shifts] if isinstance(shifts, int) else list(shifts or [])
        dims = [dims] if isinstance(dims, int) else list(dims or [])
        if len(shifts) == 1 and len(dims) == 1 and norm_dim(dims[0], n) == dim:
            return shifts[0]
        return None
    if name in ("constant_pad_nd", "pad"):
        pad = list(bound.get("pad") or [])
        i = n - 1 - dim
        before, after = pad[2 * i], pad[2 * i + 1]
        if type(before) is not int or type(after) is not int:  # a symbolic width
            return None
        return before if before == -after else None
    return None


def _shifted_dims(node: torch.fx.Node, n: int) -> list[int]:
    name = op_name(node.target).split(".")[1]
    bound = bind(node)
    if name in ("constant_pad_nd", "pad"):
        pad = list(bound.get("pad") or [])
        nonzero = [not (type(w) is int and w == 0) for w in pad]  # a symbolic width may not be 0
        return [n - 1 - i for i in range(len(pad) // 2) if nonzero[2 * i] or nonzero[2 * i + 1]]
    dims = bound.get("dims")
    if dims is None or dims == []:
        return list(range(n))
    dims = [dims] if isinstance(dims, int) else list(dims)
    return [norm_dim(d, n) for d in dims]


def repeat_interleave(interp: Interp, node: torch.fx.Node) -> Val:
    src = _src(interp, node)
    bound = bind(node)
    dim = bound.get("dim")
    if src is None or dim is None:
        return unknown(interp, node)
    d = norm_dim(dim, len(src.toks))
    if src.toks[d] is not None:
        return interp.leak(node, "repeats elements along the token dimension")
    return Val(src.toks, **carry([src]))


def triangle(interp: Interp, node: torch.fx.Node) -> Val:
    """``tril`` / ``triu`` of a pairwise tensor: 0 outside a triangle."""
    src = _src(interp, node)
    if src is None:
        return unknown(interp, node)
    n = len(src.toks)
    row, col = n - 2, n - 1
    diagonal = node.args[1] if len(node.args) > 1 else 0
    if n < 2 or src.toks[row] is None or src.toks[col] is None:
        return src.with_(kind=None)
    if "tril" in op_name(node.target):
        tri = Pair(row, col, Fill.ZERO, -diagonal)
    else:
        tri = Pair(col, row, Fill.ZERO, diagonal)
    return src.with_(tri=tri, kind=None)


# --- attention ------------------------------------------------------------------------------


def _doc_attention(interp, node, data: list, proven: bool, why: str):
    """Each output of an attention kernel (the output, a log-sum-exp ``[N, T]``) with the
    token dims of its own shape, of one origin: document-local when ``proven``."""
    vals = [interp.val(a) for a in data if isinstance(a, torch.fx.Node)]
    if not proven or any(v is not None and (v.dep > Dep.DOC or v.leaks) for v in vals):
        leak = interp.leak(node, why) if not proven else None
        result = leak or Val(meta_toks(_first(node), interp.tokens), **carry(vals))
    else:
        result = Val(meta_toks(_first(node), interp.tokens), **{**carry(vals), "dep": Dep.DOC})
        result = result.with_(absolute=union(v.absolute for v in vals if v is not None))
    val = node.meta.get("val")
    if not isinstance(val, tuple | list):
        return result
    return tuple(result.with_(toks=meta_toks(out, interp.tokens)) for out in val)


def _first(node):
    val = node.meta.get("val")
    return val[0] if isinstance(val, tuple | list) else val


def sdpa(interp: Interp, node: torch.fx.Node):
    """SDPA isolates documents only through a mask that is false (or ``-inf``) across
    documents."""
    bound = bind(node)
    mask = interp.val(bound.get("attn_mask"))
    g = mask.guard if mask is not None else None
    n = len(mask.toks) if mask is not None else 0
    proven = (
        g is not None and g.fill in (Fill.ZERO, Fill.NEGINF) and {g.row, g.col} == {n - 2, n - 1}
    )
    why = "attention without a document mask (is_causal, or a mask that does not separate "
    why += "documents)"
    data = [bound.get("query"), bound.get("key"), bound.get("value"), bound.get("attn_mask")]
    return _doc_attention(interp, node, data, proven, why)


def varlen(interp: Interp, node: torch.fx.Node):
    """Varlen attention reads the document boundaries themselves."""
    bound = bind(node)
    cus = [interp.val(bound.get(k)) for k in ("cu_seq_q", "cu_seq_k")]
    proven = all(c is not None and c.kind == Kind.CU for c in cus)
    why = "varlen attention whose cu_seq_lens are not the batch's document boundaries"
    data = [bound.get("query"), bound.get("key"), bound.get("value")]
    return _doc_attention(interp, node, data, proven, why)


_STRUCTURE = (Kind.CU, Kind.DOCID)


def _integer_metadata(arg) -> bool:
    """An integer tensor that is not a scalar: an argument through which a kernel could
    be told where documents begin (boundaries, lengths, ids, a block table)."""
    val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or val.dtype.is_floating_point or val.dim() == 0:
        return False
    return val.dtype != torch.bool and not val.is_complex()


def _described(interp: Interp, bound: dict) -> tuple[list[str], list[str]]:
    """The arguments whose values are the batch's document structure (``cu_seq_lens``,
    document ids), and the other integer tensors a kernel is given (positions are
    per-token data: a rotary kernel reads them)."""
    structure, other = [], []
    for name, arg in bound.items():
        val = interp.val(arg)
        if val is not None and val.kind in _STRUCTURE:
            structure.append(name)
        elif _integer_metadata(arg) and not (val is not None and val.kind == Kind.POS):
            other.append(name)
    return structure, other


def custom(interp: Interp, node: torch.fx.Node):
    """A custom kernel (graphcheck's stand-ins, a ``--kernels`` file, any namespace) is
    trusted to keep documents apart when an argument's *value* is the batch's document
    structure (the real ``cu_seq_lens`` or document ids, whatever the argument is
    called) and every other integer tensor it is given is that structure too; its
    scalar arguments are sizes (``max_seqlen``). One given other boundaries is a leak;
    one given none, touching tokens, is unknown."""
    bound = bind(node)
    structure, other = _described(interp, bound)
    name = f"`{op_name(node.target)}`"
    if other:
        given = ", ".join(f"`{k}`" for k in other)
        verb = "is" if len(other) == 1 else "are"
        why = f"{name} is given {given}, which {verb} not the batch's document structure "
        why += "(cu_seq_lens or document ids), so it is not trusted to keep documents apart"
        return _doc_attention(interp, node, [], False, why)
    if not structure:
        return unknown(interp, node)
    data = [v for k, v in bound.items() if k not in structure and not _scalar(v)]
    return _doc_attention(interp, node, data, True, "")


def _scalar(arg) -> bool:
    """A SymInt or number: a trusted kernel's sizes (``max_seqlen``), not its data."""
    val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg
    return not isinstance(val, torch.Tensor)


# --- higher-order ops ------------------------------------------------------------------------


def higher_order(interp: Interp, node: torch.fx.Node):
    from graphcheck.analysis.optable_hop import run_higher_order

    return run_higher_order(interp, node)


FAMILIES = [
    (
        "aten.mm.default aten.bmm.default aten.matmul.default aten.linear.default "
        "aten.addmm.default aten.baddbmm.default aten.einsum.default",
        contract,
    ),
    ("aten._grouped_mm.default", grouped_mm),
    ("aten.cumsum.default aten.cumprod.default aten.logcumsumexp.default", scan),
    ("aten.diff.default", diff),
    ("aten.sort.default aten.sort.stable", sort),  # argsort: optable_onehot
    ("aten.topk.default aten.kthvalue.default", topk),
    ("aten.nonzero.default aten.argwhere.default", nonzero),
    ("aten.histc.default aten.bincount.default", histc),
    ("aten.where.default", where_indices),
    ("aten.index_fill.int_Scalar aten.index_fill.int_Tensor", index_fill),
    ("aten.searchsorted.Tensor aten.bucketize.Tensor", searchsorted),
    ("aten.index.Tensor aten._unsafe_index.Tensor", index),
    ("aten.index_select.default", index_select),
    ("aten.embedding.default", embedding),
    ("aten.gather.default", gather),
    (
        "aten.scatter.src aten.scatter.value aten.scatter_add.default "
        "aten.scatter_reduce.two aten.scatter.reduce aten.scatter.value_reduce",
        scatter,
    ),
    ("aten.index_add.default aten.index_copy.default", index_add),
    ("torchtitan.deterministic_scatter_add.default", row_scatter_add),
    ("aten.index_put.default aten._unsafe_index_put.default", index_put),
    ("aten.cat.default aten.concat.default", cat),
    ("aten.stack.default", stack),
    (
        "aten.roll.default aten.flip.default aten.constant_pad_nd.default aten.pad.default",
        shift,
    ),
    ("aten.repeat_interleave.self_int aten.repeat_interleave.self_Tensor", repeat_interleave),
    ("aten.tril.default aten.triu.default", triangle),
    (
        "aten.scaled_dot_product_attention.default "
        "aten._scaled_dot_product_flash_attention_for_cpu.default "
        "aten._scaled_dot_product_efficient_attention.default "
        "aten._scaled_dot_product_cudnn_attention.default "
        "aten._scaled_dot_product_flash_attention.default",
        sdpa,
    ),
    ("torch_attn._varlen_attn.default", varlen),
    (
        "graphcheck.varlen_attention.default graphcheck.chunk_gated_delta_rule.default "
        "graphcheck.causal_conv1d.default",
        custom,
    ),
]

_ = (node_vals,)
