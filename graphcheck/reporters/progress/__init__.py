"""Deprecated: the progress hook is :mod:`graphcheck.phases`, the displays are
:mod:`graphcheck.console.progress`. This alias stays for a release."""

from __future__ import annotations

import importlib
import warnings

__all__ = ["Phase", "Tick", "phase", "shown", "wanted"]

_HOOK, _DISPLAYS = "graphcheck.phases", "graphcheck.console.progress"
_HOME = {"Phase": _HOOK, "Tick": _HOOK, "phase": _HOOK, "shown": _DISPLAYS, "wanted": _DISPLAYS}


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"graphcheck.reporters.progress.{name} moved to {_HOME[name]}.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(_HOME[name]), name)
