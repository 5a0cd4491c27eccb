"""Deprecated: moved to :mod:`graphcheck.analysis.locality.obligations`.

This module re-exports the moved names for one release and warns on import.
"""

from __future__ import annotations

import warnings

from graphcheck.analysis.locality.obligations import (
    Buffer,
    Judgement,
    Verdict,
    judge_mask,
    judge_within,
    new_layout,
)

__all__ = ["Buffer", "Judgement", "Verdict", "judge_mask", "judge_within", "new_layout"]

warnings.warn(
    "graphcheck.analysis.obligations is deprecated; import from graphcheck.analysis.locality",
    DeprecationWarning,
    stacklevel=2,
)
