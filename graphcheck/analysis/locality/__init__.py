"""Token locality: the abstract domain, the op registry and its transfer functions.

* :mod:`~graphcheck.analysis.locality.domain` - the abstract values (:class:`Val`,
  :class:`Tok`, :class:`Dep`, :class:`Kind`, ...) and the interpreter state, all
  re-exported here;
* :mod:`~graphcheck.analysis.locality.registry` - transfer functions keyed by the op
  they describe (``OpOverload``, Python callable, or the qualified name of an op whose
  namespace may not be loaded), each registered next to its function;
* one module per op family (:mod:`~graphcheck.analysis.locality.pointwise`,
  :mod:`~graphcheck.analysis.locality.views`, ...), each saying what it assumes;
* :mod:`~graphcheck.analysis.locality.rows` - row labels (where gathered, sorted,
  split or repeated rows came from);
* :mod:`~graphcheck.analysis.locality.chunks` - chunked token axes (T padded behind,
  split into chunks, one token per chunk standing for it);
* :mod:`~graphcheck.analysis.locality.obligations` - the flex attention masks, proven
  by an SMT solver;
* :mod:`~graphcheck.analysis.locality.transfer` - the dispatch (the abstract value of
  a node) and the op table of ``docs/soundness.md``.

>>> v = Val((Tok("T"), None), Dep.POINT)
>>> v.token_dims, join_dep(Dep.POINT, Dep.DOC)
((0,), <Dep.DOC: 2>)
"""

from __future__ import annotations

from graphcheck.analysis.locality.domain import (
    Dep,
    Fill,
    Interp,
    Kind,
    Pair,
    Tok,
    Tokens,
    Val,
    align,
    bind,
    carry,
    has_tokens,
    is_length,
    is_one,
    join_dep,
    meta_toks,
    moved_pairs,
    ndim_of,
    node_vals,
    norm_dim,
    shape_of,
    symbols,
    union,
    unknown,
    unknown_or_leak,
)

__all__ = [
    "Dep",
    "Fill",
    "Interp",
    "Kind",
    "Pair",
    "Tok",
    "Tokens",
    "Val",
    "align",
    "bind",
    "carry",
    "has_tokens",
    "is_length",
    "is_one",
    "join_dep",
    "meta_toks",
    "moved_pairs",
    "ndim_of",
    "node_vals",
    "norm_dim",
    "shape_of",
    "symbols",
    "union",
    "unknown",
    "unknown_or_leak",
]
