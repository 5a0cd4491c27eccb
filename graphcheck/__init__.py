"""graphcheck: static verification of pipeline-parallel cuts of language models.

Export the model with symbolic packed-varlen inputs on fake weights,
partition the FX graph at the proposed cuts and prove from dataflow that each
cut carries exactly one materialized bf16 residual between decoder layers.

``import graphcheck`` is instant: the public names below, and the subpackages
(``graphcheck.api.Explorer``), are imported on first use (PEP 562), so torch loads
only when a model is built or a result type is needed.

>>> import graphcheck
>>> "verify" in dir(graphcheck), graphcheck.UsageError.__module__
(True, 'graphcheck.errors')
>>> graphcheck.api.Explorer.__name__
'Explorer'
"""

from __future__ import annotations

import sys
import types
from importlib import import_module
from importlib.util import find_spec

from graphcheck._version import __version__
from graphcheck.errors import (
    AnalysisError,
    ExportError,
    GraphcheckError,
    LayoutError,
    ModelLoadError,
    UsageError,
)

__all__ = [
    "AnalysisError",
    "Diagnostic",
    "ExportError",
    "GateReport",
    "GraphcheckError",
    "LayoutError",
    "ModelLoadError",
    "Report",
    "UsageError",
    "__version__",
    "cut_map",
    "explore",
    "gate",
    "verify",
]

# The names imported on first use, and the module each comes from.
_LAZY = {
    "Diagnostic": "graphcheck.diagnostics",
    "GateReport": "graphcheck.results.gate",
    "Report": "graphcheck.report",
    "cut_map": "graphcheck.api",
    "explore": "graphcheck.api",
    "gate": "graphcheck.gate",
    "verify": "graphcheck.api",
}


def __getattr__(name: str):
    """A public name or a submodule (``graphcheck.api``), imported on first use, then kept."""
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
    elif not name.startswith("__") and find_spec(f"{__name__}.{name}") is not None:
        value = import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


class _Package(types.ModuleType):
    """``graphcheck.gate`` stays the function: importing the ``graphcheck.gate`` package
    sets it as an attribute of this one, which would hide the function of that name."""

    def __setattr__(self, name: str, value) -> None:
        if name == "gate" and isinstance(value, types.ModuleType):
            value = getattr(value, "gate", value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
