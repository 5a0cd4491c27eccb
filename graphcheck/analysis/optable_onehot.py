"""Deprecated: moved to :mod:`graphcheck.analysis.locality.onehot`,
:mod:`~graphcheck.analysis.locality.rows` (copy axes) and
:mod:`~graphcheck.analysis.locality.sorting` (``argsort``).

This module re-exports the moved names for one release and warns on import.
"""

from __future__ import annotations

import warnings

from graphcheck.analysis.locality.onehot import copy_view, one_hot, repeat, view
from graphcheck.analysis.locality.rows import copies, copy_axis
from graphcheck.analysis.locality.sorting import argsort
from graphcheck.analysis.locality.transfer import families_of

__all__ = ["FAMILIES", "argsort", "copies", "copy_axis", "copy_view", "one_hot", "repeat", "view"]

warnings.warn(
    "graphcheck.analysis.optable_onehot is deprecated; import from graphcheck.analysis.locality",
    DeprecationWarning,
    stacklevel=2,
)

FAMILIES = families_of(view, one_hot, repeat, argsort)
