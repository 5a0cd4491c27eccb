"""Deprecated: the gate's result is plain data in :mod:`graphcheck.results.gate`, beside
the other results the reporters render. This alias stays for a release."""

from __future__ import annotations

import importlib
import warnings

_MOVED = (
    "ISOLATION_TOLERANCE",
    "AloneCheck",
    "ByteCheck",
    "ByteStatus",
    "Crossing",
    "ExactCheck",
    "GateReport",
    "GradientCheck",
    "IsolationCheck",
    "IsolationStatus",
    "IsolationTest",
    "RunMode",
    "TrainCheck",
    "TrainStatus",
)
__all__ = list(_MOVED)  # every name resolves through __getattr__ below

_HOME = "graphcheck.results.gate"


def __getattr__(name: str):
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} moved to {_HOME}.{name}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(_HOME), name)
