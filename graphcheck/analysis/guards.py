"""Export's guards on the varlen sizes, discharged by an SMT solver when they always hold.

``torch.export`` refuses a dim marked dynamic when tracing added a guard it cannot
show holds for every value in the dim's range. Some of those guards hold for every
length all the same; torch's own simplifier only did not see it. Llama 4's MoE
reshapes its expert outputs with ``min(64, 64*T)`` rows per block, and export
reports::

    Not all values of T = L['x'].size()[1] in the specified range satisfy the
    generated guard (L['x'].size()[1]*min(64, 64*L['x'].size()[1])) == (64*L['x'].size()[1])

which is true for every ``T >= 1``. Such a guard is not a specialisation: the
program holds for every length. :func:`discharged` proves that, or returns ``None``:

* the message is read line by line; each violation it lists must be a "generated
  guard" whose expression translates (integer ``+ - *``, ``//`` and ``%`` by a positive
  constant, ``min``/``max``, comparisons, ``and``/``or``/``not``) into z3 over the
  input sizes it names (``L['name'].size()[i]``);
* a size of a varlen input is that input's dim, shared by the inputs that share the
  dim (``T`` for ``input_ids`` and ``position_ids``), ranging over the dim's declared
  range (``>= 2``; ``K * Tk`` with ``Tk >= 1`` when T is declared a multiple of K);
  any other size is any integer ``>= 0`` (more values than it can take: still sound);
* the guard must hold for every value: the solver finds no model of its negation.

Anything else (a dim specialised to a constant, a line the reader does not know, an
expression outside the translation, a solver ``unknown``) is not discharged: the
guard stays a GC403 finding. z3 is imported only when a guard is judged.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["SizeRange", "discharged"]

_GUARD = re.compile(r"satisfy the generated guard (?P<expr>.+?)\.?$")
_SOURCE = re.compile(r"L\[['\"](?P<name>\w+)['\"]\]\.size\(\)\[(?P<dim>\d+)\]")
_SPECIALISED = re.compile(r"specializ|specialis|constant|inferred|equal to", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class SizeRange:
    """Where an input size ranges: any multiple of ``step`` from ``lowest`` on (``step``
    1: any integer from ``lowest``), up to ``highest`` (``None``: unbounded); sizes of one
    ``dim`` are one value."""

    dim: str
    lowest: int
    step: int = 1
    highest: int | None = None


def discharged(message: str, sizes: Mapping[tuple[str, int], SizeRange]) -> list[str] | None:
    """The guards of export's constraint-violation ``message`` if every one of them holds
    for every size in ``sizes`` (``(input name, dim) -> SizeRange``), else ``None``."""
    bullets = [ln.strip()[2:] for ln in message.splitlines() if ln.strip().startswith("- ")]
    if not bullets:
        return None
    guards: list[str] = []
    for bullet in bullets:
        found = _GUARD.search(bullet)
        if found is None or _SPECIALISED.search(bullet[: found.start()]):
            return None
        expr = found.group("expr")
        if not _always(expr, sizes):
            return None
        guards.append(expr)
    return guards


def _always(expr: str, sizes: Mapping[tuple[str, int], SizeRange]) -> bool:
    """``expr`` (Python syntax over ``L['name'].size()[i]``) holds for every size."""
    import z3

    names: dict[str, tuple[str, int]] = {}

    def rename(match: re.Match) -> str:
        key = (match.group("name"), int(match.group("dim")))
        var = f"size_{key[0]}_{key[1]}"
        names[var] = key
        return var

    try:
        tree = ast.parse(_SOURCE.sub(rename, expr), mode="eval")
    except SyntaxError:
        return False
    solver = z3.Solver()
    solver.set("timeout", 2000)
    env = _sizes(z3, solver, names, sizes)
    translate = _Term(z3, env)
    term = translate.of(tree.body)
    if term is None or not z3.is_bool(term):
        return False
    solver.add(z3.Not(z3.And(*translate.defined, term)))  # defined where it is read, and true
    return solver.check() == z3.unsat


def _sizes(z3, solver, names: dict[str, tuple[str, int]], sizes) -> dict[str, object]:
    """A z3 integer per size the guard names, constrained to its range; sizes sharing a
    dim are one variable."""
    dims: dict[str, object] = {}
    env: dict[str, object] = {}
    for var, key in names.items():
        size = sizes.get(key)
        if size is None:
            env[var] = z3.Int(var)
            solver.add(env[var] >= 0)
            continue
        if size.dim not in dims:
            k = z3.Int(f"dim_{size.dim}")
            solver.add(k * size.step >= size.lowest)
            if size.highest is not None:
                solver.add(k * size.step <= size.highest)
            dims[size.dim] = k * size.step
        env[var] = dims[size.dim]
    return env


_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt}
_COMPARE |= {ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}


_INFINITY = object()  # export's IntInfinity(): the unbounded end of a range


class _Term:
    """A Python expression's AST as a z3 term; ``None`` for anything outside the
    translation."""

    def __init__(self, z3, env: dict[str, object]) -> None:
        self.z3, self.env = z3, env
        self.defined: list = []  # what makes the translation exact: divisors are positive

    def of(self, node: ast.AST):
        method = getattr(self, f"_{type(node).__name__.lower()}", None)
        return None if method is None else method(node)

    def _constant(self, node: ast.Constant):
        if type(node.value) is bool:
            return self.z3.BoolVal(node.value)
        return self.z3.IntVal(node.value) if type(node.value) is int else None

    def _name(self, node: ast.Name):
        return self.env.get(node.id)

    def _unaryop(self, node: ast.UnaryOp):
        operand = self.of(node.operand)
        if operand is None:
            return None
        if isinstance(node.op, ast.USub) and self.z3.is_int(operand):
            return -operand
        if isinstance(node.op, ast.Not) and self.z3.is_bool(operand):
            return self.z3.Not(operand)
        return None

    def _binop(self, node: ast.BinOp):
        left, right = self.of(node.left), self.of(node.right)
        if left is None or right is None or not (self.z3.is_int(left) and self.z3.is_int(right)):
            return None
        if type(node.op) in _ARITH:
            return _ARITH[type(node.op)](left, right)
        if not isinstance(node.op, ast.FloorDiv | ast.Mod):
            return None
        # z3's integer division and remainder are Python's for a positive divisor only:
        # a divisor that is not a positive constant must be proven positive as well
        self.defined.append(right > 0)
        return left / right if isinstance(node.op, ast.FloorDiv) else left % right

    def _compare(self, node: ast.Compare):
        terms = [self.of(node.left), *(self.of(c) for c in node.comparators)]
        if any(t is None for t in terms) or any(type(op) not in _COMPARE for op in node.ops):
            return None
        pairs = zip(node.ops, terms, terms[1:], strict=False)
        parts = [self._related(op, a, b) for op, a, b in pairs]
        if any(p is None for p in parts):
            return None
        return parts[0] if len(parts) == 1 else self.z3.And(*parts)

    def _related(self, op: ast.cmpop, a, b):
        """``a op b``; a side that is :data:`_INFINITY` (export's unbounded upper end) is
        larger than every integer."""
        if a is _INFINITY or b is _INFINITY:
            if a is b:
                return None
            above = isinstance(op, ast.Lt | ast.LtE | ast.NotEq) if b is _INFINITY else None
            above = isinstance(op, ast.Gt | ast.GtE | ast.NotEq) if a is _INFINITY else above
            return self.z3.BoolVal(above)
        ints = self.z3.is_int(a) and self.z3.is_int(b)
        bools = self.z3.is_bool(a) and self.z3.is_bool(b) and type(op) in (ast.Eq, ast.NotEq)
        return _COMPARE[type(op)](a, b) if ints or bools else None

    def _boolop(self, node: ast.BoolOp):
        terms = [self.of(v) for v in node.values]
        if any(t is None or not self.z3.is_bool(t) for t in terms):
            return None
        return (self.z3.And if isinstance(node.op, ast.And) else self.z3.Or)(*terms)

    def _call(self, node: ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name == "IntInfinity" and not node.args and not node.keywords:
            return _INFINITY
        terms = [self.of(a) for a in node.args]
        if name not in ("min", "max") or len(terms) < 2 or node.keywords:
            return None
        if any(t is None or not self.z3.is_int(t) for t in terms):
            return None
        result = terms[0]
        for t in terms[1:]:
            keep = result <= t if name == "min" else result >= t
            result = self.z3.If(keep, result, t)
        return result
