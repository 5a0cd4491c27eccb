"""GC403 shape-specialized

What it checks
    The export stays generic in the packed length T, the document count N and
    the max lengths: no input dim became a constant, and export added no guard
    on them (``T % 64 == 0``, ``T >= 17``, a runtime assert).

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
from torch.utils._sympy.numbers import int_oo

from graphcheck.diagnostics import Diagnostic

CODE = "GC403"
NAME = "shape-specialized"
SUMMARY = "export specialised or guarded T / N"

_DIMS = {"input_ids": 1, "hidden": 1, "position_ids": 1, "cu_seq_lens_q": 0, "cu_seq_lens_k": 0}


def check(ctx) -> list[Diagnostic]:
    program = ctx.program
    found = [_diag(f"export guarded the varlen inputs: {g}") for g in program.exported.guards]
    for name, node in program.user_inputs.items():
        problem = _specialised(program, name, node)
        if problem:
            found.append(_diag(problem, node))
    for node in program.graph.nodes:
        if node.op == "call_function" and "_assert_scalar" in str(node.target):
            found.append(_diag(f"export added a runtime assert on sizes: {node.args[1:2]}", node))
    return found


def _diag(message: str, node=None) -> Diagnostic:
    fix = "; the proof would hold for some lengths only (use a shape-generic kernel)"
    return Diagnostic.at(CODE, NAME, message + fix, node=node)


def _specialised(program, name: str, node) -> str | None:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        size = val.shape[_DIMS[name]] if name in _DIMS else None
    else:
        size = val
    if size is None:
        return None
    if not isinstance(size, (torch.SymInt, torch.SymFloat)):
        return f"{name} was specialised to the constant {size}"
    expr = size.node.expr
    if not isinstance(expr, sympy.Symbol):
        return f"{name} became {program.readable(expr)}, a guarded expression"
    bounds = program.exported.program.range_constraints.get(expr)
    if bounds is not None and (bounds.lower > 2 or bounds.upper != int_oo):
        return f"{name} is limited to {bounds.lower}..{bounds.upper}"
    return None
