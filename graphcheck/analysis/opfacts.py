"""The op fact sheet: what kind of work an op does, as its family module registered it
(``register(..., work=Work.MATMUL)`` in :mod:`graphcheck.analysis.locality`), read by the
cost model (:mod:`graphcheck.analysis.cost`) and the cut explorer's layer kinds
(:mod:`graphcheck.analysis.kinds`), keyed by the op's qualified name
(:func:`graphcheck.analysis.fx.op_name`). An op the registry does not hold does no
counted work (its locality fails closed anyway).

>>> Work.MATMUL in work_of("aten.mm.default"), work_of("aten.add.Tensor")
(True, frozenset())
>>> sorted(ops(Work.ROUTED))
['aten._grouped_mm.default', 'aten.topk.default']
>>> attention_window("torch_attn._varlen_attn.default", {"window_size": [16, 0]})
(16, 0)
"""

from __future__ import annotations

import functools

from graphcheck.analysis.locality import registry, transfer
from graphcheck.analysis.locality.registry import Work

__all__ = ["Work", "attention_window", "ops", "work_of"]

assert transfer.FAMILIES  # every family module imported: the registry is complete


def work_of(name: str) -> frozenset[Work]:
    """The work op ``name`` (``aten.mm.default``) does, as registered."""
    entry = registry.find_name(name)
    return entry.work if entry is not None else frozenset()


@functools.cache
def ops(work: Work) -> frozenset[str]:
    """Every registered op doing ``work``, by name."""
    return frozenset(e.name for e in registry.entries() if work in e.work)


def attention_window(name: str, bound: dict) -> tuple[int, int]:
    """The keys a query of attention op ``name`` (its arguments ``bound``) attends to:
    ``(left, right)`` keys before and after it, -1 unbounded. Varlen kernels read theirs
    from their arguments; any other attention is causal within a document (SDPA and flex
    attention: the packed-varlen convention)."""
    if name == "torch_attn._varlen_attn.default":
        window = bound.get("window_size") or [-1, -1]
        return int(window[0]), 0 if bound.get("is_causal") else int(window[1])
    if name == "graphcheck.varlen_attention.default":
        return int(bound.get("window_left", -1)), 0 if bound.get("causal") else -1
    return -1, 0
