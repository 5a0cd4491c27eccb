"""GC403 shape-specialized

What it checks
    The export stays generic in the packed length T, the document count N and
    the max lengths: no input dim became a constant, and export added no guard
    on them (``T % 64 == 0``, ``T >= 17``, a runtime assert).

    Code that branches on T is exported once per branch (length cases); the range
    each program holds for is no finding when the ranges cover every T and the
    programs agree op by op but for flex attention's block tables
    (``graphcheck.analysis.agreement``): a document alone and the same document
    packed with others would otherwise run different code.

    A guard export could not simplify but that holds for every length is not a
    finding: Llama 4's MoE makes export guard ``T*min(64, 64*T) == 64*T``, and the SMT
    solver proves it for every T in the declared range, so the program is generic
    (``graphcheck.analysis.guards``). A guard the solver cannot prove (``T <= 4096``,
    ``T % 64 == 0``, an expression outside its translation) stays a finding.

    With ``--token-multiple K`` T is declared a multiple of K: the guard
    ``T % K == 0`` (and what it implies) is not a finding, an input dim of
    ``K*Tk`` is not a guarded expression; any other guard on T still is.

    Control flow on T is the same hazard: a ``torch.cond`` whose predicate reads the
    packed length (``x.shape[1] > 64``) is a finding at the ``cond``.

    Data-dependent sizes are not specialisation. ``torch.where``/``nonzero``
    (MoE dispatch, ``cu_seqlens`` derived from ``position_ids == 0``) and
    ``.item()`` create *unbacked* sizes ``u0, u1, ...``, and export asserts their
    ranges at run time. Such an assert is a finding only when it *relates* an
    unbacked size to T, N or a max length in a way that can fail for some data at
    some length (``Eq(u0, T)``, ``u0 >= T``, ``Mod(u0, T)``): the program then holds
    only for batches that satisfy it, and the finding shows the model line that
    made the size. Not findings: asserts on unbacked sizes alone (``u0 >= 0``), and
    upper bounds of an unbacked size by a non-negative combination of the input
    sizes (``u0 <= 2*T``: a count of selected elements never exceeds the elements it
    selects from), which hold for every T and every batch; nor an equality the locality
    analysis proved (``Eq(u0 + u1 + u2 + u3, 2*T)`` when ``u_i`` are the counts per
    expert of a top-2 routing of T tokens, by which the ``2*T`` sorted rows are split:
    the counts partition the rows, see :mod:`graphcheck.analysis.locality.groups`).

Why it matters
    A proof about a program specialised to some lengths holds for those
    lengths only; training batches have every length.

Example
    A torch fallback kernel that loops over 64-token chunks in Python; a
    ``if x.shape[1] > 16:`` branch.

Fix
    Use a kernel (or a ``torch.library`` stand-in with a fake implementation)
    that takes ``cu_seqlens`` and works for any T; replace Python branches on
    sizes with tensor ops.
"""

from __future__ import annotations

import sympy
import torch
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.utils._sympy.numbers import int_oo

from graphcheck.analysis.lengths import first_gap
from graphcheck.analysis.locality.groups import proven
from graphcheck.analysis.token_multiple import multiple_of
from graphcheck.diagnostics import Diagnostic

__all__ = ["CODE", "NAME", "EXAMPLE", "SEVERITY", "SUMMARY", "check"]

CODE = "GC403"
NAME = "shape-specialized"
SEVERITY = "error"
SUMMARY = "export specialised or guarded T / N"
# The documentation's example, run by tests/rules/test_rule_table.py: the code fires
# at the cut on the violating model and not on its passing twin.
EXAMPLE = {
    "violating": "fixtures/violations.py:length_guard",
    "passing": "fixtures/reference.py:reference",
    "cut": 4,
}


def check(ctx) -> list[Diagnostic]:
    program = ctx.program
    found = [_diag(f"export guarded the varlen inputs: {g}") for g in program.exported.guards]
    for name, node in program.user_inputs.items():
        problem = _specialised(program, name, node, ctx.lengths)
        if problem:
            found.append(_diag(problem + _uncovered(ctx.lengths), node))
    for node, why in program.length_branches.items():
        why += ": a document alone (T its own length) may run the other branch; choose by "
        found.append(_diag(why + "a setting or by data each document holds", node))
    for node in program.graph.nodes:
        if node.op == "call_function" and "_assert_scalar" in str(node.target):
            problem = _assert_problem(program, node)
            if problem:
                found.append(_diag(problem, node))
    return found


def _uncovered(lengths) -> str:
    """Where the length cases stopped, for a finding on a range of T: the first lengths
    no program holds for and why (the model fails to export there, or branches more
    ways than graphcheck exports)."""
    if lengths is None or lengths.complete:
        return ""
    if lengths.differs is not None:
        return (
            f"; {lengths.differs}: a document's values would depend on the packed length "
            "(the lengths of the other documents), so no program is a proof for every T"
        )
    gap = first_gap(lengths.spans, lengths.lowest)
    why = f" ({lengths.uncovered})" if lengths.uncovered else ""
    return f"; no program holds for T {gap}{why}"


def _assert_problem(program, node) -> str | None:
    """Why a runtime assert is a finding, or ``None`` (see the rule's docstring)."""
    cond = node.args[0] if node.args else None
    val = cond.meta.get("val") if hasattr(cond, "meta") else None
    expr = getattr(getattr(val, "node", None), "expr", None)
    if expr is None:  # not a symbolic condition graphcheck can read: fail closed
        return f"export added a runtime assert on sizes: {node.args[1:2]}"
    sizes = {s for s in expr.free_symbols if str(s) in program.exported.symbols}
    unbacked = free_unbacked_symbols(expr)
    text = program.readable(expr)
    if not sizes:
        return None
    if not unbacked:
        return f"export added a runtime assert on sizes: {text}"
    if _upper_bound(expr, unbacked) or proven(program.facts, expr):
        return None
    return (
        f"export asserts {text}, tying a data-dependent size to the varlen lengths: the "
        "program holds only for batches that satisfy it (see the source line); compute the "
        "size so that no relation to T, N or the max lengths has to hold"
    )


def _upper_bound(expr, unbacked) -> bool:
    """``u <= f(T, N)`` with ``f`` a non-negative combination of sizes (export's own range
    assert for ``nonzero``/``where``): true for every length and every batch."""
    if isinstance(expr, (sympy.GreaterThan, sympy.StrictGreaterThan)):
        small, big = expr.rhs, expr.lhs
    elif isinstance(expr, (sympy.LessThan, sympy.StrictLessThan)):
        small, big = expr.lhs, expr.rhs
    else:
        return False
    if small not in unbacked or free_unbacked_symbols(big):
        return False
    poly = sympy.Poly(big, *sorted(big.free_symbols, key=str)) if big.free_symbols else None
    return poly is not None and all(c >= 0 for c in poly.coeffs())


def _diag(message: str, node=None) -> Diagnostic:
    if "tying a data-dependent size" not in message:
        message += "; the proof would hold for some lengths only (use a shape-generic kernel)"
    return Diagnostic.at(CODE, NAME, message, node=node)


def _declared(program, name: str, expr):
    """``Tk`` when ``expr`` is ``K*Tk``, T declared a multiple of K; else ``expr``."""
    multiple = program.exported.batch.multiple
    row = program.exported.rows.get(name)
    root = multiple_of(expr, multiple) if multiple > 1 and row and row.dim_name == "T" else None
    return expr if root is None else root


def _specialised(program, name: str, node, lengths=None) -> str | None:
    """Why input ``name`` is not generic, or ``None``. A range of T is not a finding when
    the programs of the length cases (``lengths``) cover every other T, each proven on its
    own range; when they do not, the finding names the ranges they hold for (the same
    words from every program, so the report keeps it once)."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        row = program.exported.rows.get(name)
        size = val.shape[row.dim] if row is not None and row.dim is not None else None
    else:
        size = val
    if size is None:
        return None
    if not isinstance(size, (torch.SymInt, torch.SymFloat)):
        return f"{name} was specialised to the constant {size}"
    expr = _declared(program, name, size.node.expr)
    if not isinstance(expr, sympy.Symbol):
        return f"{name} became {program.readable(expr)}, a guarded expression"
    bounds = program.exported.program.range_constraints.get(expr)
    if bounds is None or (bounds.lower <= 2 and bounds.upper == int_oo):
        return None
    row = program.exported.rows.get(name)
    if lengths is None or row is None or row.dim_name != "T":
        return f"{name} is limited to {bounds.lower}..{bounds.upper}"
    if lengths.complete:
        return None
    if not lengths.split:
        return f"{name} is limited to {bounds.lower}..{bounds.upper}"
    spans = ", ".join(str(span) for span in lengths.spans)
    return f"{name} is limited to T {spans} ({len(lengths.spans)} programs, one per branch on T)"
