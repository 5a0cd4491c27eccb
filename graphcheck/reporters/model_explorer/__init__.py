"""Deprecated: the Model Explorer overlay is :mod:`graphcheck.interop.model_explorer` (an
artifact written from the program, not a report format). This alias stays for a release;
``python -m graphcheck.reporters.model_explorer DIR`` still opens an overlay."""

from __future__ import annotations

import importlib
import warnings

_HOME = "graphcheck.interop.model_explorer"
_MOVED = (
    "GRAPH_ID",
    "OverlayFile",
    "check_folder",
    "crossing_data",
    "custom_ops",
    "findings_data",
    "layer_data",
    "ranges",
    "save_program",
    "stage_data",
    "write_overlay",
)
__all__ = list(_MOVED)  # every name resolves through __getattr__ below


def __getattr__(name: str):
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} moved to {_HOME}.{name}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(_HOME), name)
