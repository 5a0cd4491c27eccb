"""Deprecated: moved to :mod:`graphcheck.analysis.locality.hop`.

This module re-exports the moved names for one release and warns on import.
"""

from __future__ import annotations

import warnings

from graphcheck.analysis.locality.hop import run_higher_order

__all__ = ["run_higher_order"]

warnings.warn(
    "graphcheck.analysis.optable_hop is deprecated; import from graphcheck.analysis.locality",
    DeprecationWarning,
    stacklevel=2,
)
