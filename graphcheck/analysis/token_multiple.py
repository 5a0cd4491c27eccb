"""T exported as a multiple of K (``--token-multiple K``), and the guards export left on it.

With ``Dim("Tk", min=1) * K`` as the dim of T, the input sizes read ``K*s0``. torch
does not raise a constraint violation for a guard on the root ``s0`` of a derived
dim: it keeps the guard in the exported program (``_guards_code``, checked when the
program runs) and exports anyway. So graphcheck reads those guards itself: each
guard on T is evaluated with T = K * (u + 2), every other size a symbol in its range
(u, n, m >= 0 whole numbers). What the declaration implies (``T % 4 == 0``, ``T // 4
!= 1``) simplifies to true and is dropped; any other guard (``T % 8 != 0``, ``T <=
4096``), or one graphcheck cannot read, is found for GC403. One such guard usually
brings a dozen that follow from it, each slow to decide: the first is enough.

>>> guards = ["L['input_ids'].size()[1] % 4 == 0", "(L['input_ids'].size()[1] % 8) != 0"]
>>> list(undeclared(guards, {"input_ids": "input_ids"}, 4))
['(T % 8) != 0']
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator, Mapping

import sympy

from graphcheck.varlen import rows

__all__ = ["multiple_of", "undeclared"]

_SIZE = re.compile(r"L\['(\w+)'\]\.size\(\)\[(\d+)\]")
_SCALAR = re.compile(r"L\['(\w+)'\]")
_COMPARE = {
    ast.Eq: sympy.Eq, ast.NotEq: sympy.Ne, ast.Lt: sympy.Lt,
    ast.LtE: sympy.Le, ast.Gt: sympy.Gt, ast.GtE: sympy.Ge,
}  # fmt: skip
_ARITHMETIC = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: sympy.floor(a / b),
    ast.Mod: sympy.Mod,
}


def multiple_of(expr, multiple: int):
    """The symbol ``s`` when ``expr`` is ``multiple * s``, else ``None``."""
    coeff, rest = expr.as_coeff_Mul()
    return rest if coeff == multiple and getattr(rest, "is_Symbol", False) else None


def undeclared(
    guards, inputs: Mapping[str, str], multiple: int, hidden_dim: int = 1
) -> Iterator[str]:
    """The guards on T that T being a multiple of ``multiple`` does not imply, readable
    (``T``, ``N+1``), one by one; ``inputs`` maps the forward's argument names to varlen
    inputs."""
    for guard in guards:
        sizes = {inputs.get(name): int(dim) for name, dim in _SIZE.findall(guard)}
        if not any(_is_tokens(name, dim, hidden_dim) for name, dim in sizes.items()):
            continue  # not on T: export raised for those (the other dims are plain)
        if not _implied(guard, tuple(sorted(inputs.items())), multiple, hidden_dim):
            yield _readable(guard, inputs, hidden_dim)


def _is_tokens(name: str | None, dim: int, hidden_dim: int = 1) -> bool:
    row = rows(hidden_dim).get(name or "")
    return row is not None and row.dim_name == "T" and row.dim == dim


@functools.cache
def _implied(
    guard: str, inputs: tuple[tuple[str, str], ...], multiple: int, hidden_dim: int = 1
) -> bool:
    try:
        value = _value(ast.parse(guard, mode="eval").body, dict(inputs), multiple, hidden_dim)
        return bool(sympy.simplify(value) is sympy.true)
    except Exception:  # not a guard graphcheck can read or decide (sympy raised): report it
        return False


def _value(node: ast.AST, inputs: dict[str, str], multiple: int, hidden_dim: int = 1):
    """``node`` as a sympy expression (``KeyError``/``ValueError``: not readable)."""
    recurse = functools.partial(_value, inputs=inputs, multiple=multiple, hidden_dim=hidden_dim)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return sympy.Integer(node.value)
    if isinstance(node, ast.BinOp):
        return _ARITHMETIC[type(node.op)](recurse(node.left), recurse(node.right))
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        return _COMPARE[type(node.ops[0])](recurse(node.left), recurse(node.comparators[0]))
    if isinstance(node, ast.BoolOp):
        join = sympy.And if isinstance(node.op, ast.And) else sympy.Or
        return join(*map(recurse, node.values))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return sympy.Not(recurse(node.operand))
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("min", "max"):
        return (sympy.Min if node.func.id == "min" else sympy.Max)(*map(recurse, node.args))
    return _size(ast.unparse(node), inputs, multiple, hidden_dim)


def _size(text: str, inputs: dict[str, str], multiple: int, hidden_dim: int = 1):
    """An input size as a symbol over its range: T = K * (u + 2), N + 1 = n + 2, a max
    length m >= 0."""
    match = _SIZE.fullmatch(text.replace('"', "'"))
    name = inputs[(match or _SCALAR.fullmatch(text.replace('"', "'"))).group(1)]
    row = rows(hidden_dim)[name]
    if match is not None and (row.dim is None or int(match.group(2)) != row.dim):
        raise ValueError(text)  # a size that is not the input's varlen dim
    if match is None and row.dim is not None:
        raise ValueError(text)  # a tensor used as a number
    free = sympy.Symbol(row.dim_name or name, integer=True, nonnegative=True)
    if row.dim_name == "T":
        return multiple * (free + 2)
    return free + 2 if row.dim_name is not None else free


def _readable(guard: str, inputs: Mapping[str, str], hidden_dim: int = 1) -> str:
    """``guard`` with the varlen sizes by their symbols (``T``, ``N+1``, ``max_q``)."""
    table = rows(hidden_dim)

    def size(match: re.Match) -> str:
        row = table.get(inputs.get(match.group(1), ""))
        varlen = row is not None and row.dim == int(match.group(2))
        return row.symbol if varlen else match.group(0)

    def scalar(match: re.Match) -> str:
        row = table.get(inputs.get(match.group(1), ""))
        return row.symbol if row is not None and row.dim is None else match.group(0)

    return _SCALAR.sub(scalar, _SIZE.sub(size, guard))
