"""The one op table and its dispatch: the abstract value of a node.

:data:`TABLE` joins the families of :mod:`graphcheck.analysis.optable` (token-wise
ops, views, reductions, norms, softmaxes, factories, sizes) and
:mod:`graphcheck.analysis.optable_mixers` (contractions, scans, sorts, indexing,
attention) and :mod:`graphcheck.analysis.optable_onehot` (one-hot maps, repeats,
inverse permutations) and :mod:`graphcheck.analysis.optable_conv` (convolutions along
the tokens, as sums of token shifts). An op that is not in the table and touches a
token dimension makes its result ``LEAK``: the proof fails closed. Custom ops and higher-order ops
(:mod:`graphcheck.analysis.optable_hop`) have their own fallbacks;
:mod:`graphcheck.analysis.optable_groups` adds ``item`` and refines ``cat`` and
``index_add`` for rows split by group sizes.

>>> "aten.add.Tensor" in TABLE, "aten.cumsum.default" in TABLE, "aten.frobnicate" in TABLE
(True, True, False)
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis import (
    optable,
    optable_conv,
    optable_groups,
    optable_mixers,
    optable_onehot,
)
from graphcheck.analysis.fx import op_name
from graphcheck.analysis.locality import Interp, Val, carry, unknown, unknown_or_leak

__all__ = ["FAMILIES", "TABLE", "table_markdown", "transfer"]

FAMILIES = [
    *optable.FAMILIES,
    *optable_mixers.FAMILIES,
    *optable_onehot.FAMILIES,
    *optable_groups.FAMILIES,
    *optable_conv.FAMILIES,
]


def _table() -> dict:
    table: dict = {}
    for names, fn in FAMILIES:
        for name in names.split():
            table[name if not name.startswith("op:") else name[3:]] = fn
    return table


def table_markdown() -> str:
    """The op table as Markdown, one row per family (``docs/soundness.md`` holds it)."""
    rows = ["| family | ops |", "|---|---|"]
    for names, fn in FAMILIES:
        ops = ", ".join(f"`{n.removeprefix('op:')}`" for n in sorted(names.split()))
        rows.append(f"| `{fn.__name__.strip('_')}` | {ops} |")
    return "\n".join(rows) + "\n"


TABLE = _table()


def transfer(interp: Interp, node: torch.fx.Node):
    """The abstract value of ``node``; an in-place op also updates what it writes."""
    name = op_name(node.target)
    fn = TABLE.get(name)
    written = None
    if fn is None and "_." in name:  # aten.add_.Tensor computes aten.add.Tensor in place
        fn = TABLE.get(name.replace("_.", ".", 1))
        written = node.args[0] if node.args else None
    if fn is None:
        fn = _fallback(node)
    fn = optable_groups.REFINES.get(fn, fn)  # pieces of rows split by group sizes
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
        return optable_mixers.higher_order
    if isinstance(target, torch._ops.OpOverload) and target.namespace not in ("aten", "prims"):
        return optable_mixers.custom
    return unknown
