"""The dispatch: the abstract value of a node, from the transfer function its op has.

The op table is the registry (:mod:`graphcheck.analysis.locality.registry`) once every
family module of :data:`FAMILIES` is imported, which this module does. An op that is
not registered and touches a token dimension makes its result ``LEAK``: the proof fails
closed. An in-place op (``aten.add_.Tensor``) computes its out-of-place twin's value and
also updates what it writes. Higher-order ops (:mod:`~graphcheck.analysis.locality.hop`)
and custom ops outside ``aten`` / ``prims`` (:mod:`~graphcheck.analysis.locality.custom`)
have their own fallbacks; :mod:`~graphcheck.analysis.locality.groups` refines ``cat``
and ``index_add`` for rows split by group sizes (:data:`~graphcheck.analysis.locality.
groups.REFINES`). Convolutions along the tokens are sums of token shifts
(:mod:`~graphcheck.analysis.locality.conv`).

>>> import operator, torch
>>> aten = torch.ops.aten
>>> [lookup(op) is not None for op in (aten.add.Tensor, aten.cumsum.default, operator.getitem)]
[True, True, True]
>>> lookup(aten.frac.default) is None, lookup(aten.add_.Tensor) is None
(True, True)
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.fx import op_name
from graphcheck.analysis.locality import (
    attention,
    concat,
    contractions,
    conv,
    custom,
    factories,
    gradients,
    groups,
    hop,
    indexing,
    onehot,
    pointwise,
    reductions,
    scans,
    scatter,
    shifts,
    sorting,
    views,
)
from graphcheck.analysis.locality.domain import Interp, Val, carry, unknown, unknown_or_leak
from graphcheck.analysis.locality.registry import Entry, Transfer, entries, find, find_name

__all__ = ["FAMILIES", "families_of", "lookup", "table", "table_markdown", "transfer"]

# The family modules, in the order of the op table in docs/soundness.md.
FAMILIES = (
    pointwise,
    factories,
    views,
    onehot,
    reductions,
    contractions,
    scans,
    sorting,
    indexing,
    scatter,
    groups,
    concat,
    shifts,
    conv,
    attention,
    gradients,
    custom,
)


def lookup(target) -> Transfer | None:
    """The transfer function registered for the FX target ``target``, exactly (``None``:
    not registered; the in-place twin and the fallbacks are :func:`transfer`'s)."""
    entry = find(target)
    return entry.fn if entry is not None else None


def transfer(interp: Interp, node: torch.fx.Node):
    """The abstract value of ``node``; an in-place op also updates what it writes."""
    name = op_name(node.target)
    fn = lookup(node.target)
    written = None
    if fn is None and "_." in name:  # aten.add_.Tensor computes aten.add.Tensor in place
        twin = find_name(name.replace("_.", ".", 1))
        fn = twin.fn if twin is not None else None
        written = node.args[0] if node.args else None
    if fn is None:
        fn = _fallback(node)
    fn = groups.REFINES.get(fn, fn)  # pieces of rows split by group sizes
    try:
        result = fn(interp, node)
    except (IndexError, KeyError, TypeError, ValueError, AttributeError) as err:
        reason = f"graphcheck could not follow `{name}` ({type(err).__name__}: {err}; fail closed)"
        result = unknown_or_leak(interp, node, reason)
    if isinstance(written, torch.fx.Node) and isinstance(result, Val):
        old = interp.val(written)
        merged = result if old is None else old.with_(**carry([old, result]), kind=None)
        interp.vals[written] = merged
        interp.writes.append(written)
    return result


def _fallback(node: torch.fx.Node):
    target = node.target
    if isinstance(target, torch._ops.HigherOrderOperator):
        return hop.higher_order
    if isinstance(target, torch._ops.OpOverload) and target.namespace not in ("aten", "prims"):
        return custom.custom
    return unknown


def table() -> dict[str, Transfer]:
    """Every registered op by its ``aten.add.Tensor`` style name (``getitem``, ``add``
    for the Python callables), with its transfer function."""
    return {entry.name: entry.fn for entry in entries()}


def families_of(*fns: Transfer) -> list[tuple[str, Transfer]]:
    """``(names, fn)`` per transfer function, the names space-separated and a Python
    callable's prefixed ``op:``: the shape of the op table before the registry."""
    names: dict[Transfer, list[str]] = {fn: [] for fn in fns}
    for entry in entries():
        if entry.fn in names:
            prefix = "" if isinstance(entry.key, str | torch._ops.OpOverload) else "op:"
            names[entry.fn].append(prefix + entry.name)
    return [(" ".join(found), fn) for fn, found in names.items()]


def table_markdown() -> str:
    """The op table as Markdown, one row per family module (``docs/soundness.md`` holds
    it; ``tests/analysis/test_optable.py`` checks it is current)."""
    rows = ["| family | transfer functions | ops |", "|---|---|---|"]
    for module in FAMILIES:
        family = module.__name__.rpartition(".")[2]
        found = [entry for entry in entries() if entry.family == family]
        fns = ", ".join(f"`{name}`" for name in sorted({entry.fn.__name__ for entry in found}))
        ops = ", ".join(f"`{label}`" for label in sorted(map(_label, found)))
        rows.append(f"| `{family}` | {fns} | {ops} |")
    return "\n".join(rows) + "\n"


def _label(entry: Entry) -> str:
    """``aten.add.Tensor``; a Python callable by where it lives (``operator.add``,
    ``torch.sym_max``)."""
    if isinstance(entry.key, str | torch._ops.OpOverload):
        return entry.name
    module = getattr(entry.key, "__module__", None) or ""
    return f"{module.removeprefix('_')}.{entry.name}" if module else entry.name
