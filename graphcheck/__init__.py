"""graphcheck: static verification of pipeline-parallel cuts of language models.

Export the model with symbolic packed-varlen inputs on fake weights,
partition the FX graph at the proposed cuts and prove from dataflow that each
cut carries exactly one materialized bf16 residual between decoder layers.
"""

from __future__ import annotations

from graphcheck._version import __version__
from graphcheck.api import cut_map, explore, verify
from graphcheck.diagnostics import Diagnostic
from graphcheck.errors import (
    AnalysisError,
    ExportError,
    GraphcheckError,
    LayoutError,
    ModelLoadError,
    UsageError,
)
from graphcheck.gate import gate
from graphcheck.gate.report import GateReport
from graphcheck.report import Report

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
