"""Deprecated: moved to the op families of :mod:`graphcheck.analysis.locality`
(contractions, scans, sorting, indexing, scatter, concat, shifts, attention, custom,
hop).

This module re-exports the moved names for one release and warns on import.
"""

from __future__ import annotations

import warnings

from graphcheck.analysis.locality.attention import sdpa, varlen
from graphcheck.analysis.locality.concat import cat, repeat_interleave, stack
from graphcheck.analysis.locality.contractions import contract, grouped_mm
from graphcheck.analysis.locality.custom import custom
from graphcheck.analysis.locality.hop import higher_order
from graphcheck.analysis.locality.indexing import embedding, gather, index, index_fill, index_select
from graphcheck.analysis.locality.scans import diff, scan, triangle
from graphcheck.analysis.locality.scatter import index_add, index_put, row_scatter_add, scatter
from graphcheck.analysis.locality.shifts import shift
from graphcheck.analysis.locality.sorting import (
    histc,
    nonzero,
    searchsorted,
    sort,
    topk,
    where_indices,
)
from graphcheck.analysis.locality.transfer import families_of

__all__ = [
    "FAMILIES",
    "cat",
    "contract",
    "custom",
    "diff",
    "embedding",
    "gather",
    "grouped_mm",
    "higher_order",
    "histc",
    "index",
    "index_add",
    "index_fill",
    "index_put",
    "index_select",
    "nonzero",
    "repeat_interleave",
    "row_scatter_add",
    "scan",
    "scatter",
    "sdpa",
    "searchsorted",
    "shift",
    "sort",
    "stack",
    "topk",
    "triangle",
    "varlen",
    "where_indices",
]

warnings.warn(
    "graphcheck.analysis.optable_mixers is deprecated; import from graphcheck.analysis.locality",
    DeprecationWarning,
    stacklevel=2,
)

FAMILIES = families_of(
    contract,
    grouped_mm,
    scan,
    diff,
    sort,
    topk,
    nonzero,
    histc,
    where_indices,
    index_fill,
    searchsorted,
    index,
    index_select,
    embedding,
    gather,
    scatter,
    index_add,
    row_scatter_add,
    index_put,
    cat,
    stack,
    shift,
    repeat_interleave,
    triangle,
    sdpa,
    varlen,
    custom,
)
