"""Deprecated: moved to :mod:`graphcheck.analysis.locality.transfer` (the dispatch) and
:mod:`graphcheck.analysis.locality.registry` (the op table, keyed by op).

This module re-exports the moved names for one release and warns on import;
:data:`TABLE` is the registry by op name, :data:`FAMILIES` its ``(names, fn)`` pairs.
"""

from __future__ import annotations

import warnings

from graphcheck.analysis.locality.registry import entries
from graphcheck.analysis.locality.transfer import families_of, table, table_markdown, transfer

__all__ = ["FAMILIES", "TABLE", "table_markdown", "transfer"]

warnings.warn(
    "graphcheck.analysis.transfer is deprecated; import from graphcheck.analysis.locality",
    DeprecationWarning,
    stacklevel=2,
)

FAMILIES = families_of(*dict.fromkeys(entry.fn for entry in entries()))
TABLE = table()
