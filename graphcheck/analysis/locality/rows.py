"""Row labels: where each row of a gathered, sorted, split or repeated tensor came from.

A token dim's :class:`~graphcheck.analysis.locality.domain.Tok` axis names the rows it
holds: ``T`` the packed tokens, ``P:<sort>`` rows in a sort's order, ``G:<selection>``
rows a predicate selected, ``D<k>`` one row per document, ``CxT`` ``C`` copies of the
tokens (a copy axis), ``S:<rows>|<counts>|<i>|<E>`` piece ``i`` of rows split by group
sizes. The families that move rows (indexing, scatter, groups, one-hot) admit a move
only when these labels say each row lands back on its own token.

>>> copies(copy_axis(4, Tok("T", 1)))
(4, Tok(axis='T', inner=1))
>>> piece(Tok("S:P:sort|sum_1|2|4"))
('P:sort', 'sum_1', 2, 4)
"""

from __future__ import annotations

import re

import torch
import torch.fx

from graphcheck.analysis.fx import op_name
from graphcheck.analysis.locality.domain import Dep, Kind, Tok, Val, bind, carry, ndim_of, norm_dim

__all__ = [
    "PIECE",
    "VIEWS",
    "as_index",
    "copies",
    "copy_axis",
    "gather_rows",
    "groups_of_sort",
    "piece",
    "row_label",
    "topk_indices",
    "written_in_place",
]


VIEWS = {
    "aten.view.default",
    "aten.reshape.default",
    "aten._unsafe_view.default",
    "aten.view_copy.default",
    "aten.flatten.using_ints",
}


def written_in_place(node: torch.fx.Node) -> bool:
    """Some user of ``node`` writes into it in place (its values may differ from the op's)."""
    for user in node.users:
        schema = getattr(user.target, "_schema", None)
        args = schema.arguments if schema is not None else []
        for arg, value in zip(args, user.args, strict=False):
            if value is node and arg.alias_info is not None and arg.alias_info.is_write:
                return True
    return False


def topk_indices(node) -> torch.fx.Node | None:
    """The ``topk`` whose indices ``node`` is (through views, none written in place),
    along its last dim."""
    while isinstance(node, torch.fx.Node) and op_name(node.target) in VIEWS:
        if written_in_place(node):
            return None
        node = node.args[0]
    if (
        not isinstance(node, torch.fx.Node)
        or op_name(node.target) != "getitem"
        or written_in_place(node)
    ):
        return None
    top, which = node.args[0], node.args[1]
    if not isinstance(top, torch.fx.Node) or op_name(top.target) != "aten.topk.default":
        return None
    n = ndim_of(top.args[0])
    last = n > 0 and norm_dim(bind(top).get("dim", -1), n) == n - 1
    return top if which == 1 and last else None


def groups_of_sort(node: torch.fx.Node, offs: Val, axis: str) -> bool:
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
    return ascending and ndim_of(keys) == 1 and topk_indices(keys) is offs.ref


_BOOKKEEPING = {Kind.PERM, Kind.PERMDIV, Kind.INVERSE, Kind.SELECT, Kind.INDEX}


def as_index(index: Val) -> Val:
    """An index used only to pick rows: bookkeeping kinds carry no data of their own."""
    if index.kind in _BOOKKEEPING:
        return index.with_(dep=Dep.NONE, leaks=frozenset(), absolute=frozenset())
    return index


def row_label(src_tok: Tok, index: Val) -> Tok | None:
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


def gather_rows(interp, node, src: Val, dim: int, index: Val) -> Val:
    """``src`` indexed along ``dim`` by ``index`` (one index tensor)."""
    n = len(src.toks)
    before, after = list(src.toks[:dim]), list(src.toks[dim + 1 :])
    if src.toks[dim] is None:  # a table lookup: rows follow the index
        absolute = src.absolute | index.absolute
        deps = carry([src, as_index(index)])
        return Val(tuple(before + list(index.toks) + after), **{**deps, "absolute": absolute})
    tok = row_label(src.toks[dim], index)
    if tok is None or len(index.toks) != 1:  # a permutation misused: the leak is here
        inputs = [src, as_index(index)]
        earlier = interp.passed_on(node, inputs)
        return earlier or interp.leak(node, "indexes the token dimension with data-dependent "
                                      "positions", inputs=inputs)  # fmt: skip
    _ = n
    return src.with_(toks=tuple([*before, tok, *after]), guard=None, tri=None, kind=None)


_COPIES = re.compile(r"(\d+)x([^@]+)")


def copy_axis(count: int, tok: Tok) -> Tok:
    """``count`` copies of the token dim ``tok`` along one dim: element ``i`` is element
    ``i mod n`` of ``tok``'s dim (``n`` its size)."""
    return Tok(f"{count}x{tok.axis}", tok.inner)


def copies(tok: Tok | None) -> tuple[int, Tok] | None:
    """``(count, copied tok)`` of a whole copy axis; ``None`` for any other dim."""
    found = _COPIES.fullmatch(tok.axis) if tok is not None else None
    return (int(found[1]), Tok(found[2], tok.inner)) if found else None


PIECE = "S:"


def piece(tok: Tok | None) -> tuple[str, str, int, int] | None:
    """``(rows axis, counts node name, i, E)`` of a piece's token dim, else ``None``."""
    if tok is None or not tok.axis.startswith(PIECE):
        return None
    base, counts, i, total = tok.axis[len(PIECE) :].rsplit("|", 3)
    return base, counts, int(i), int(total)
