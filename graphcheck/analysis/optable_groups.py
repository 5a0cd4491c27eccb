"""Deprecated: moved to :mod:`graphcheck.analysis.locality.groups`.

This module re-exports the moved names for one release and warns on import.
"""

from __future__ import annotations

import warnings

from graphcheck.analysis.locality.groups import (
    REFINES,
    cat,
    cat_of_pieces,
    counted,
    index_add,
    item,
    proven,
    rounds_down,
    slot_destination,
    split_by_groups,
)
from graphcheck.analysis.locality.transfer import families_of

__all__ = [
    "FAMILIES",
    "REFINES",
    "cat",
    "cat_of_pieces",
    "counted",
    "index_add",
    "item",
    "proven",
    "rounds_down",
    "slot_destination",
    "split_by_groups",
]

warnings.warn(
    "graphcheck.analysis.optable_groups is deprecated; import from graphcheck.analysis.locality",
    DeprecationWarning,
    stacklevel=2,
)

FAMILIES = families_of(item)
