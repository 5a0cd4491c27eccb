"""Deprecated: moved to the op families :mod:`~graphcheck.analysis.locality.pointwise`,
:mod:`~graphcheck.analysis.locality.factories`,
:mod:`~graphcheck.analysis.locality.views` and
:mod:`~graphcheck.analysis.locality.reductions`.

This module re-exports the moved names for one release and warns on import.
"""

from __future__ import annotations

import warnings

from graphcheck.analysis.locality.factories import arange, factory, scalar_tensor, structural
from graphcheck.analysis.locality.pointwise import dropout, pointwise
from graphcheck.analysis.locality.reductions import norm, reduce, softmax
from graphcheck.analysis.locality.transfer import families_of
from graphcheck.analysis.locality.views import (
    bitcast,
    complex_view,
    expand,
    getitem,
    permute,
    select,
    slice_,
    split,
    squeeze,
    unbind,
    unsqueeze,
    view,
)

__all__ = [
    "FAMILIES",
    "arange",
    "bitcast",
    "complex_view",
    "dropout",
    "expand",
    "factory",
    "getitem",
    "norm",
    "permute",
    "pointwise",
    "reduce",
    "scalar_tensor",
    "select",
    "slice_",
    "softmax",
    "split",
    "squeeze",
    "structural",
    "unbind",
    "unsqueeze",
    "view",
]

warnings.warn(
    "graphcheck.analysis.optable is deprecated; import from graphcheck.analysis.locality",
    DeprecationWarning,
    stacklevel=2,
)

FAMILIES = families_of(
    pointwise,
    dropout,
    structural,
    factory,
    arange,
    scalar_tensor,
    getitem,
    permute,
    unsqueeze,
    squeeze,
    expand,
    select,
    bitcast,
    complex_view,
    slice_,
    split,
    unbind,
    reduce,
    norm,
    softmax,
)
