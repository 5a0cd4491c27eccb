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
    "FreshProcessError",
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


class FreshProcessError(GraphcheckError):
    """A fresh process (a stage built alone, a gate rank) died before it returned (a
    crash, a signal, out of memory)."""


class GateError(GraphcheckError):
    """The gate could not run: an op without a CPU implementation, a model that
    raises on real weights."""


def reworded(err: GraphcheckError, message: str) -> GraphcheckError:
    """An error of ``err``'s type with ``message`` and ``err``'s detail."""
    new = type(err)(message)
    new.detail = err.detail
    return new


def one_line(
    err: BaseException,
    *,
    typed: bool = True,
    last: bool = False,
    sentence: bool = False,
    cut: str = "",
    limit: int = 300,
) -> str:
    """One line of ``err``'s message, for a finding or an error line: its first
    non-empty line (``last``: its last), up to ``cut`` (torch's bookkeeping, such as
    ``" (unhinted:"``), its first sentence only (``sentence``), after ``Type: ``
    (``typed``), shortened to ``limit`` characters (``0``: not shortened). Every
    condensed error of graphcheck goes through here.

    >>> one_line(KeyError("boom"))
    "KeyError: 'boom'"
    >>> one_line(ValueError("first. second\\nlast"), typed=False, sentence=True)
    'first'
    >>> one_line(ValueError("a\\nb"), typed=False, last=True)
    'b'
    """
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    head = (lines[-1] if last else lines[0]) if lines else ""
    if cut:
        head = head.split(cut)[0]
    if sentence:
        head = head.split(". ")[0]
    name = type(err).__name__
    text = f"{name}: {head}".rstrip(": ") if typed else head or name
    return text if not limit or len(text) <= limit else text[: limit - 3] + "..."
