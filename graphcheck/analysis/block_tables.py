"""FlexAttention's full blocks, proven from the values that compute them.

A ``BlockMask`` lists, per query block, the key blocks taken *whole*
(``full_kv_num_blocks`` / ``full_kv_indices``, and their transpose ``full_q_*`` for
the backward): there the kernel attends every pair and never calls the ``mask_mod``.
The proof of the mask_mod (:mod:`graphcheck.analysis.locality.obligations`) covers them only
when every pair of a full block is a pair the mask_mod allows.

:func:`full_block_mask` follows the tables back through the program, op by op, to the
dense mask they are counted from, and proves only by the semantics of those ops:

* a table pair is ``(sum(F, -1), argsort(F, stable, descending))`` of one 0/1 matrix
  ``F`` (casts of a boolean keep 0/1): the kernel visits ``indices[i, :num[i]]``, the
  columns where ``F[i] == 1``;
* ``F = (S == BQ * BK)`` with ``S`` the tile sums of ``pad(M)`` viewed as
  ``[.., nq, BQ, nk, BK]`` (the two block dims permuted last), ``BQ``/``BK`` the block
  sizes the kernel reads and ``pad`` adding zeros: a tile is full only when ``M`` is true
  on every one of its pairs;
* ``F`` may also be the transpose of a matrix, or the dense matrix scattered back from
  a table pair (``index_put_`` of ones at ``indices[i, c]`` for ``c < num[i]``, the dump
  column sliced away), under batch-size-1 ``vmap`` levels: ``create_block_mask``'s
  ``full_q_*``;
* ``M`` is the ``vmap`` of a mask body over ``arange`` indices of ``(b, h, q, kv)``,
  the four ``_remove_batch_dim`` levels in that order: its body is extracted as a mask
  graph over the values it reads.

The mask of the full blocks is handed back as a graph for the solver, which must prove
it implies the mask_mod. Anything else (a table from another source, an op outside
these) is a reason, in words: the attention stays a finding.
"""

from __future__ import annotations

import sympy
import torch
import torch.fx

from graphcheck.analysis.fx import op_name
from graphcheck.analysis.passes.link_mutations_pass import storage_root, written_arguments

__all__ = ["FullBlocks", "full_block_mask", "mask_body"]

_INT_CASTS = {"aten.to.dtype", "aten._to_copy.default", "aten.to.dtype_layout"}
_INT_CASTS |= {"aten.alias.default", "aten.clone.default", "aten.contiguous.default"}
_ZERO_ONE = {torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8}
_INDICES = {torch.int32, torch.int64}  # block numbers and counts: no wrap-around
_ROLES = ("b", "h", "q", "kv")


class FullBlocks(Exception):
    """The full-block tables are not proven to come from a mask: why."""


def full_block_mask(block_mask: tuple) -> tuple[torch.fx.Node, list[torch.fx.Node]] | None:
    """``None`` when the ``BlockMask`` has no full blocks; else the dense mask node ``M``
    they are counted from and its four index nodes (b, h, q, kv batch dims). Raises
    :class:`FullBlocks` with the reason when the tables do not follow from one mask."""
    if len(block_mask) < 13:
        raise FullBlocks("a BlockMask tuple of an unknown layout")
    sizes = (block_mask[-3], block_mask[-2])
    pairs = [(block_mask[4], block_mask[5], False), (block_mask[8], block_mask[9], True)]
    found = None
    for num, idx, transposed in pairs:
        if num is None and idx is None:
            continue
        if num is None or idx is None:
            raise FullBlocks("a full-block table without its counts or its indices")
        dense, flipped = _ordered(num, idx, sizes)
        _unwritten([num, idx], dense)
        if flipped != transposed:
            raise FullBlocks("full-block tables transposed against the blocks they index")
        if found is not None and dense is not found:
            raise FullBlocks("the kv and q full-block tables come from two different masks")
        found = dense
    return None if found is None else (found, _vmap_indices(found))


def _strip(node, what: str, dtypes=frozenset(_ZERO_ONE)) -> torch.fx.Node:
    """``node`` past value-preserving casts (to ``dtypes``: of a 0/1 matrix, any integer)."""
    while isinstance(node, torch.fx.Node) and op_name(node.target) in _INT_CASTS:
        dtype = node.kwargs.get("dtype", next(iter(node.args[1:2]), None))
        if isinstance(dtype, torch.dtype) and dtype not in dtypes:
            raise FullBlocks(f"{what} cast to {dtype}")
        node = node.args[0]
    if not isinstance(node, torch.fx.Node):
        raise FullBlocks(f"{what} is a constant, not computed from a mask")
    return node


def _ordered(num, idx, sizes) -> tuple[torch.fx.Node, bool]:
    """The mask ``M`` of ``F`` where ``(num, idx) = (sum(F, -1), argsort(F))``, and
    whether the tables index ``F`` transposed."""
    counts = _strip(num, "the full-block counts", _INDICES)
    order = _strip(idx, "the full-block indices", _INDICES)
    if op_name(counts.target) != "aten.sum.dim_IntList" or list(counts.args[1]) != [-1]:
        raise FullBlocks(f"full-block counts from `{op_name(counts.target)}`, not a row sum "
                         "of a block matrix (a table given from elsewhere)")  # fmt: skip
    if counts.kwargs.get("keepdim", counts.args[2] if len(counts.args) > 2 else False):
        raise FullBlocks("full-block counts summed with keepdim")
    if op_name(order.target) != "aten.argsort.stable" or not _descending(order):
        raise FullBlocks(
            f"full-block indices from `{op_name(order.target)}`, not the stable "
            "descending argsort of a block matrix (a table given from elsewhere)"
        )
    matrix = _strip(counts.args[0], "the block matrix")
    if matrix is not _strip(order.args[0], "the block matrix"):
        raise FullBlocks("full-block counts and indices from two different block matrices")
    return _matrix(matrix, sizes)


def _unwritten(tables: list[torch.fx.Node], mask: torch.fx.Node) -> None:
    """No value from ``mask`` to ``tables`` is written in place after it is made, but
    the scatter of ones into fresh zeros that rebuilds a block matrix."""
    writers: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for node in mask.graph.nodes:
        for target in written_arguments(node):
            writers.setdefault(storage_root(target), []).append(node)
    seen, stack = set(), list(tables)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for writer in writers.get(storage_root(node), ()):
            fresh = op_name(writer.target) == "aten.index_put_.default" and (
                op_name(writer.args[0].target) == "aten.new_zeros.default"
                and set(writer.args[0].users) <= {writer, *writer.args[2:3]}
            )
            if not fresh:
                raise FullBlocks(f"a block table written in place by `{op_name(writer.target)}`")
        if node is not mask:
            stack.extend(node.all_input_nodes)


def _descending(order: torch.fx.Node) -> bool:
    """``argsort(x, stable=True, descending=True)`` over the last dim."""
    kw = order.kwargs
    plain = order.args[1:] == () and kw.get("dim", -1) == -1
    return plain and kw.get("stable") is True and kw.get("descending") is True


def _matrix(node: torch.fx.Node, sizes) -> tuple[torch.fx.Node, bool]:
    """The mask ``M`` whose full tiles the 0/1 matrix ``node`` marks, and whether
    ``node`` is their transpose."""
    node = _strip(node, "the block matrix")
    name = op_name(node.target)
    if name == "aten.transpose.int" and _last_two(node):
        dense, flipped = _matrix(node.args[0], sizes)
        return dense, not flipped
    if name == "aten.eq.Scalar":
        return _full_tiles(node, sizes), False
    if name == "_remove_batch_dim":
        return _scattered(node, sizes)
    raise FullBlocks(f"a block matrix from `{name}`, not the full tiles of a mask")


def _last_two(node: torch.fx.Node) -> bool:
    """A transpose of the last two dims."""
    dims = sorted(d % len(_shape(node)) for d in node.args[1:3])
    return dims == [len(_shape(node)) - 2, len(_shape(node)) - 1]


def _shape(node: torch.fx.Node) -> list:
    """The recorded shape of ``node``."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise FullBlocks(f"`{node.name}` has no recorded shape")
    return list(val.shape)


def _full_tiles(node: torch.fx.Node, sizes) -> torch.fx.Node:
    """``(S == BQ * BK)``, ``S`` the tile sums of a zero-padded boolean mask: its mask."""
    tiles, full = node.args[0], node.args[1]
    bq, bk = sizes
    if not (isinstance(bq, int) and isinstance(bk, int)) or full != bq * bk:
        raise FullBlocks(f"full blocks where a tile sum equals {full!r}, not the "
                         f"{bq!r} x {bk!r} pairs of a block")  # fmt: skip
    summed = _strip(tiles, "the tile sums")
    if op_name(summed.target) != "aten.sum.dim_IntList" or list(summed.args[1]) != [-2, -1]:
        raise FullBlocks("a full-block test on something other than tile sums")
    permuted = summed.args[0]
    if op_name(permuted.target) != "aten.permute.default":
        raise FullBlocks("tile sums of a matrix not permuted into tiles")
    rank = len(permuted.args[1])
    if list(permuted.args[1]) != [*range(rank - 4), rank - 4, rank - 2, rank - 3, rank - 1]:
        raise FullBlocks("tiles permuted across other dims")
    return _tiled(permuted.args[0], bq, bk)


def _tiled(view: torch.fx.Node, bq: int, bk: int) -> torch.fx.Node:
    """The boolean mask that ``view`` splits into ``bq x bk`` tiles after zero padding."""
    if op_name(view.target) not in ("aten.view.default", "aten.reshape.default"):
        raise FullBlocks("tiles not viewed from one padded matrix")
    padded, out = view.args[0], _shape(view)
    inner = _shape(padded)
    if len(out) != len(inner) + 2 or out[:-4] != inner[:-2] or [out[-3], out[-1]] != [bq, bk]:
        raise FullBlocks("tiles that are not the block sizes the kernel reads")
    if not (_same(out[-4] * bq, inner[-2]) and _same(out[-2] * bk, inner[-1])):
        raise FullBlocks("tiles that do not split the padded rows and columns")
    mask = padded
    if op_name(padded.target) in ("aten.pad.default", "aten.constant_pad_nd.default"):
        mode = padded.args[2] if len(padded.args) > 2 else "constant"
        value = padded.args[3] if len(padded.args) > 3 else padded.kwargs.get("value")
        if mode != "constant" or value not in (None, 0, False):
            raise FullBlocks("a mask padded with a value other than false")
        widths = list(padded.args[1])
        if len(widths) != 4 or widths[0] != 0 or widths[2] != 0:
            raise FullBlocks("a mask padded before its first query or key (tiles shifted)")
        mask = padded.args[0]
    val = mask.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dtype != torch.bool or val.dim() != 4:
        raise FullBlocks("tiles of a matrix that is not a boolean [B, H, Q, KV] mask")
    return mask


def _same(a, b) -> bool:
    """Two sizes equal for every value of their symbols."""
    return sympy.simplify(sympy.sympify(_sym(a)) - sympy.sympify(_sym(b))) == 0


def _scattered(node: torch.fx.Node, sizes) -> tuple[torch.fx.Node, bool]:
    """A 0/1 matrix scattered back from a table pair under size-1 vmap levels: the
    matrix of that pair."""
    levels, body = _unbatched(node)
    if len(levels) > 2 or any(size != 1 for _, size in levels):
        raise FullBlocks("a block matrix scattered under vmap levels other than batch and head")
    sliced = _strip(body, "the scattered block matrix")
    if op_name(sliced.target) != "aten.slice.Tensor" or sliced.args[1] != 1:
        raise FullBlocks("a scattered block matrix without its dump column sliced away")
    put = sliced.args[0]
    if op_name(put.target) != "aten.index_put_.default" or len(put.args) > 3 or put.kwargs:
        raise FullBlocks(f"a block matrix from `{op_name(put.target)}`")
    zeros, (rows, cols), ones = put.args
    return _from_pair(zeros, rows, cols, ones, sliced.args[3], levels, sizes)


def _from_pair(zeros, rows, cols, ones, end, levels, sizes):
    """``zeros[rows, cols] = ones`` with ``cols = where(c < num[i], idx[i, c], K)``."""
    if op_name(zeros.target) != "aten.new_zeros.default" or op_name(ones.target) not in (
        "aten.new_ones.default", "aten.ones_like.default"
    ):  # fmt: skip
        raise FullBlocks("a scattered block matrix not of ones into zeros")
    height, width = zeros.args[1]
    where = cols
    if op_name(where.target) != "aten.where.ScalarOther" or not _same(where.args[2], end):
        raise FullBlocks("scattered columns without the dump column")
    if not _same(width, _plus_one(end)):
        raise FullBlocks("a scattered block matrix whose dump column is not the last")
    below = where.args[0]
    if op_name(below.target) != "aten.lt.Tensor" or not _arange(below.args[0], end):
        raise FullBlocks("scattered columns not cut at the counts")
    rows_of = rows
    if op_name(rows_of.target) != "aten.unsqueeze.default" or not _arange(rows_of.args[0], height):
        raise FullBlocks("scattered rows that are not every block row")
    num = _unsqueezed(below.args[1])
    return _ordered(_batched(num, levels), _batched(where.args[1], levels), sizes)


def _plus_one(end):
    """The size ``end + 1``."""
    return sympy.sympify(_sym(end)) + 1


def _unsqueezed(node):
    """The counts ``num`` of ``num.unsqueeze(-1)``."""
    if op_name(node.target) != "aten.unsqueeze.default" or node.args[1] != -1:
        raise FullBlocks("scattered columns cut at something other than the counts")
    return node.args[0]


def _arange(node, length) -> bool:
    """``node`` is ``arange(length)`` (start 0, step 1)."""
    name = op_name(node.target)
    if name == "aten.arange.default":
        return _same(_sym(node.args[0]), _sym(length))
    if name == "aten.arange.start" and node.args[0] == 0 and len(node.args) == 2:
        return _same(_sym(node.args[1]), _sym(length))
    return False


def _sym(value):
    """A size argument as a number or a symbol expression."""
    if isinstance(value, torch.fx.Node):
        value = value.meta.get("val")
    return getattr(getattr(value, "node", None), "expr", value)


def _unbatched(node: torch.fx.Node) -> tuple[list[tuple[int, object]], torch.fx.Node]:
    """The ``(level, size)`` of the ``_remove_batch_dim`` chain at ``node`` (outermost
    first) and the body inside it; each level's batch dim comes back at dim 0."""
    levels = []
    while isinstance(node, torch.fx.Node) and op_name(node.target) == "_remove_batch_dim":
        _, level, size, out_dim = node.args[:4]
        if out_dim != 0:
            raise FullBlocks("a vmap level put back at another dim")
        levels.append((level, size))
        node = node.args[0]
    return levels, node


def _batched(node, levels) -> torch.fx.Node:
    """The table a vmap body reads: ``node`` past one ``_add_batch_dim`` per level, each
    at dim 0 and of the level its ``_remove_batch_dim`` restores (innermost first)."""
    for level, _size in reversed(levels):
        if op_name(node.target) != "_add_batch_dim" or tuple(node.args[1:3]) != (0, level):
            raise FullBlocks("a vmap body reading a table not batched at its levels")
        node = node.args[0]
    return node


def _vmap_indices(mask: torch.fx.Node) -> list[torch.fx.Node | None]:
    """The ``_add_batch_dim`` nodes of (b, h, q, kv) over which ``mask`` is the vmap of a
    body, each of an ``arange`` as long as its level (``None``: an index it never reads)."""
    levels, body = _unbatched(mask)
    if len(levels) != 4:
        raise FullBlocks("a mask not vmapped over (b, h, q_idx, kv_idx)")
    found: dict[int, torch.fx.Node] = {}
    stack, seen = [body], set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if op_name(node.target) == "_add_batch_dim":
            found.setdefault(node.args[2], node)
            continue
        stack.extend(node.all_input_nodes)
    indices = []
    for role, (level, size) in zip(_ROLES, levels, strict=True):
        node = found.pop(level, None)  # None: the body does not read this index
        if node is not None and (node.args[1] != 0 or not _arange(node.args[0], size)):
            raise FullBlocks(f"the mask's {role} index is not an arange over its vmap level")
        indices.append(node)
    if found:
        raise FullBlocks("a mask body reading values batched at other vmap levels")
    return indices


def mask_body(
    mask: torch.fx.Node, indices: list, buffers: list, root: torch.nn.Module
) -> tuple[torch.fx.GraphModule, list[torch.fx.Node]]:
    """The vmap body of ``mask`` as a ``mask_mod(b, h, q, kv, *buffers)`` graph: the
    values it reads from outside the vmap are its buffers, ``buffers`` (the flex
    call's) first in their order, then any other; the buffer nodes are returned."""
    _, body = _unbatched(mask)
    cone, stack, memo = set(), [body], {}
    while stack:
        node = stack.pop()
        if node in cone or node in indices:
            continue
        if not _reaches(node, indices, memo):
            continue
        cone.add(node)
        stack.extend(node.all_input_nodes)
    graph, env = torch.fx.Graph(), {}
    for role, index in zip(_ROLES, indices, strict=True):
        placeholder = graph.placeholder(role)
        if index is not None:
            env[index] = placeholder
    if not all(isinstance(b, torch.fx.Node) for b in buffers):
        raise FullBlocks("a mask_mod buffer that is a constant")
    outside = list(buffers)
    outside += [a for n in _ordered_nodes(cone) for a in n.all_input_nodes
                if a not in cone and a not in env and a not in outside
                and isinstance(a.meta.get("val"), torch.Tensor)]  # fmt: skip
    for i, node in enumerate(outside):
        env[node] = graph.placeholder(f"buffer{i}")
    for node in _ordered_nodes(cone):
        for arg in node.all_input_nodes:
            if arg not in env:
                if arg.op != "get_attr":
                    raise FullBlocks(f"a mask body reading `{arg.name}`, not a tensor")
                env[arg] = graph.get_attr(arg.target)
        env[node] = graph.node_copy(node, lambda a: env[a])
    if body not in env:
        raise FullBlocks("a mask that reads none of its indices")
    graph.output(env[body])
    return torch.fx.GraphModule(root, graph), outside


def _ordered_nodes(nodes: set) -> list[torch.fx.Node]:
    """``nodes`` in the order of their graph."""
    order = {n: i for i, n in enumerate(next(iter(nodes)).graph.nodes)} if nodes else {}
    return sorted(nodes, key=order.__getitem__)


def _reaches(node: torch.fx.Node, indices: list, memo: dict) -> bool:
    """Whether ``node`` depends on one of the vmap ``indices`` (``memo``: known answers)."""
    stack = [(node, False)]
    while stack:
        current, done = stack.pop()
        if current in memo:
            continue
        if current in indices:
            memo[current] = True
            continue
        inputs = current.all_input_nodes
        if done:
            memo[current] = any(memo.get(a, False) for a in inputs)
            continue
        stack.append((current, True))
        stack.extend((a, False) for a in inputs if a not in memo)
    return memo[node]
