"""The exceptions graphcheck raises when it cannot do its job.

Findings about the user's model are never raised: they are
:class:`graphcheck.diagnostics.Diagnostic` values, collected in a report. An
exception means graphcheck could not verify at all; the command line turns
each one into a single line on stderr and exit status 2. An :class:`ExportError`
also carries ``detail`` lines (the failing line of the user's model, the guard,
a hint), printed indented below that line.

Hierarchy::

    GraphcheckError
    ├── UsageError        bad arguments: cut list, flags, model spec syntax
    ├── ModelLoadError    file or factory missing, factory raised, not a module
    ├── LayoutError       layer container / edge modules not found
    ├── ExportError       torch.export failed
    ├── AnalysisError     the graph holds something graphcheck cannot analyse
    └── GateError         the byte gate could not run (no CPU kernel, model raised)
"""

from __future__ import annotations

__all__ = [
    "AnalysisError",
    "ExportError",
    "GateError",
    "GraphcheckError",
    "LayoutError",
    "ModelLoadError",
    "UsageError",
    "one_line",
    "reworded",
]


class GraphcheckError(Exception):
    """Base class: graphcheck could not verify. ``str(err)`` is one line; ``detail``
    is empty but for an :class:`ExportError`."""

    detail: tuple[str, ...] = ()


class UsageError(GraphcheckError):
    """The arguments are malformed (``--cuts 4,x``, a cut out of range, ...)."""


class ModelLoadError(GraphcheckError):
    """The model spec does not resolve to a factory, or the factory failed."""


class LayoutError(GraphcheckError):
    """The layer container or the edge modules could not be found."""


class ExportError(GraphcheckError):
    """``torch.export`` failed; the message condenses torch's own error to one line,
    ``detail`` holds the lines that locate it (unindented; a source line under its
    frame is indented two spaces)."""

    def __init__(self, message: str, detail: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.detail = tuple(detail)


class AnalysisError(GraphcheckError):
    """The exported graph holds something graphcheck cannot analyse."""


class GateError(GraphcheckError):
    """The gate could not run: an op without a CPU implementation, a model that
    raises on real weights."""


def reworded(err: GraphcheckError, message: str) -> GraphcheckError:
    """An error of ``err``'s type with ``message`` and ``err``'s detail."""
    new = type(err)(message)
    new.detail = err.detail
    return new


def one_line(err: BaseException) -> str:
    """``Type: first line`` of an exception from user code, shortened to one line.

    >>> one_line(KeyError("boom"))
    "KeyError: 'boom'"
    """
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    text = f"{type(err).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= 300 else text[:297] + "..."
