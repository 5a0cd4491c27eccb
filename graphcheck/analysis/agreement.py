"""Whether the programs of two length cases compute the same thing.

Code that branches on the packed length T is exported as one program per branch
(:mod:`graphcheck.analysis.lengths`). Each program proven on its own range is not yet a
proof that documents are isolated: a document packed with others (T large) runs one
program, the same document alone (T its own length) may run the other. When the two
compute different values from the same tokens (a rope scaling chosen by ``T > 16``, a
SiLU below a block size and a tanh above it), a document's bytes depend on the lengths of
the other documents: the packed run and the run alone differ.

Two programs *agree* when their op sequences are equal, op by op, with every argument
(constants, sizes, which earlier value) the same, except for:

* the block structure of flex attention (the ``BlockMask`` tables, argument 4 of
  ``flex_attention``, and everything computed only for them): torch counts them from the
  ``mask_mod`` over a different number of blocks on each side of a block size; the full
  blocks are proven from the ``mask_mod`` in each program
  (:mod:`graphcheck.analysis.locality.hop`), and the partial blocks are assumed to hold
  every pair the ``mask_mod`` admits;
* runtime asserts and size constraints, which state each program's own range.

Anything else that differs (another op, another constant, a size computed another way,
one program simplifying a size the other keeps symbolic) is a difference: the length
cases then do not cover T (GC403 says which op differs).

>>> graph = torch.fx.Graph()
>>> x = graph.placeholder("x")
>>> _ = graph.output(graph.call_function(torch.ops.aten.relu.default, (x,)))
>>> first_difference(graph, graph) is None
True
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from graphcheck.analysis.fx import is_view_node, op_name

__all__ = ["first_difference"]

_BOOKKEEPING = (
    "aten._assert_tensor_metadata",
    "aten._assert_scalar",
    "aten.sym_constrain_range",
    "aten._assert_async",
    "aten._functional_assert_async",
)


def first_difference(a: torch.fx.Graph, b: torch.fx.Graph) -> str | None:
    """The first op where ``a`` and ``b`` compute differently (``None``: they agree)."""
    left, right = _lines(a), _lines(b)
    for i, (x, y) in enumerate(zip(left, right, strict=False)):
        if x[0] != y[0]:
            return f"{x[1]} (op {i}): `{_short(x[0])}` in one, `{_short(y[0])}` in the other"
    if len(left) != len(right):
        n = min(len(left), len(right))
        extra = (left if len(left) > len(right) else right)[n]
        return f"{extra[1]} (op {n}): `{_short(extra[0])}` in one only"
    return None


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _lines(graph: torch.fx.Graph) -> list[tuple[str, str]]:
    """Each op as ``(canonical text, module)``: its target and its arguments, an earlier
    value named by its place in the sequence, a constant by its value."""
    structure = _block_structure(graph)
    names: dict[torch.fx.Node, str] = {}
    lines = []
    for node in graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            names[node] = _Ref(f"{node.op}:{node.target}")
            continue
        if node.op != "call_function" or node in structure or _bookkeeping(node):
            continue
        if _identity(node):  # x[:, 0:]: the value itself (one side may elide it)
            names[node] = names.get(node.args[0], "?")
            continue
        names[node] = _Ref(f"%{len(lines)}")
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: names.get(n, "?"))
        text = ", ".join(
            [*(_text(a) for a in args), *(f"{k}={_text(v)}" for k, v in kwargs.items())]
        )
        lines.append((f"{op_name(node.target)}({text})", _module(node)))
    return lines


def _identity(node: torch.fx.Node) -> bool:
    """A view whose result is its input: same shape, strides and dtype."""
    if not is_view_node(node) or node.target is operator.getitem or not node.args:
        return False
    a, b = node.meta.get("val"), getattr(node.args[0], "meta", {}).get("val")
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    same = str(a.shape) == str(b.shape) and str(a.stride()) == str(b.stride())
    return same and a.dtype == b.dtype


class _Ref(str):
    """An earlier value, shown by its name."""

    def __repr__(self) -> str:
        return str(self)


def _text(value) -> str:
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        return str(value.node.expr)
    if isinstance(value, tuple | list):
        return "(" + ", ".join(_text(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_text(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _bookkeeping(node: torch.fx.Node) -> bool:
    return op_name(node.target).startswith(_BOOKKEEPING)


def _module(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    path = next(reversed(stack.values()))[0] if stack else ""
    return path or "the model's top level"


def _block_structure(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """The nodes computed only for the block tables of flex attention."""
    structure: set[torch.fx.Node] = set()
    for node in reversed(graph.nodes):
        if node.op != "call_function" or _bookkeeping(node):
            continue
        users = [u for u in node.users if not _bookkeeping(u)]
        if users and all(_only_as_blocks(node, user, structure) for user in users):
            structure.add(node)
    return structure


def _only_as_blocks(node: torch.fx.Node, user: torch.fx.Node, structure: set) -> bool:
    if user in structure:
        return True
    if op_name(user.target) != "flex_attention" or len(user.args) < 5:
        return False
    tables = user.args[4][:-1] if isinstance(user.args[4], tuple | list) else ()
    elsewhere = [*user.args[:4], *user.args[5:], *user.kwargs.values()]
    return any(t is node for t in tables) and not _mentions(elsewhere, node)


def _mentions(values, node: torch.fx.Node) -> bool:
    found = []
    torch.fx.node.map_arg(values, lambda n: found.append(n) or n)
    return any(n is node for n in found)
