"""An export failure as the user needs it: the line of their model that failed.

:func:`export_error` turns a ``torch.export`` exception into an :class:`ExportError`:
torch's first line as the message, and as ``detail`` the innermost frame of the
user's model code with its source line, the guard or data-dependent expression
when there is one, and a hint where one applies.

A frame is the user's when its file is outside torch, graphcheck and the standard
library. Frames of other installed packages count only when no such frame exists,
except transformers' ``modeling_*.py`` files, which are model code. Frames come from
the tracebacks of the error and of every ``__cause__`` / ``__context__`` behind it,
then from torch's own text: ``Caused by: (file:line in fn)`` and the ``File "...",
line N, in fn`` blocks of "The following call raised this error", "from user code"
and "User stack". Torch shortens its own paths there (``_export/...py``); a path
that is not a file is never the user's.
"""

from __future__ import annotations

import functools
import os
import re
import sysconfig
import traceback
from pathlib import Path

import torch
from torch._dynamo.exc import Unsupported, UserErrorType
from torch._subclasses.fake_tensor import DataDependentOutputException
from torch.fx.experimental.symbolic_shapes import (
    ConstraintViolationError,
    GuardOnDataDependentSymNode,
)

from graphcheck.errors import ExportError, one_line

__all__ = ["export_error", "is_constraint_violation", "user_frame"]

_OWN = tuple(
    os.path.realpath(p) + os.sep
    for p in (Path(torch.__file__).parent, Path(__file__).resolve().parents[1])
)  # torch, graphcheck
_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep
_NON_STRICT_TRACER = os.path.realpath(Path(torch.__file__).parent / "_export/non_strict_utils.py")
_FRAME = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>[\w<>.]+)'
    r"|(?P<sfile>[^\s()\"']+\.py):(?P<sline>\d+) in (?P<sname>[\w<>.]+)"
)
_EXPRESSIONS = (
    ("expression", re.compile(r"data-dependent expression (.+?) \(unhinted")),
    ("guard", re.compile(r"satisfy the generated guard (.+?)\.?$", re.MULTILINE)),
)


def is_constraint_violation(err: BaseException) -> bool:
    """Export specialised or guarded a dim marked dynamic."""
    if isinstance(err, ConstraintViolationError):
        return True
    return getattr(err, "error_type", None) is UserErrorType.CONSTRAINT_VIOLATION


def export_error(err: BaseException, strict: bool) -> ExportError:
    """``err`` from ``torch.export`` as a one-line message and its detail lines."""
    chain = _chain(err)
    detail: list[str] = []
    frame = user_frame(err)
    if frame is not None:
        detail.append(f"at {_shown(frame.filename)}:{frame.lineno} in {frame.name}")
        if frame.line:
            detail.append(f"  {frame.line.strip()}")
    text = "\n".join(str(exc) for exc in chain)
    for label, pattern in _EXPRESSIONS:
        found = pattern.search(text)
        if found:
            detail.append(f"{label}: {found.group(1)}")
            break
    hint = _hint(chain, strict)
    if hint:
        detail.append(f"hint: {hint}")
    return ExportError(f"torch.export failed: {_first_line(err)}", tuple(detail))


def user_frame(err: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of the user's model code that ``err`` names, or None."""
    frames = [f for exc in _chain(err) for f in traceback.extract_tb(exc.__traceback__)]
    for exc in _chain(err):
        frames += _text_frames(str(exc))
    best: tuple[int, int, traceback.FrameSummary] | None = None
    for index, frame in enumerate(frames):
        rank = _rank(frame.filename)
        if rank and (best is None or (rank, index) > best[:2]):
            best = (rank, index, frame)
    return None if best is None else best[2]


def _chain(err: BaseException) -> list[BaseException]:
    """``err`` and the exceptions behind it (``__cause__``, else ``__context__``)."""
    chain: list[BaseException] = []
    current: BaseException | None = err
    while current is not None and all(current is not e for e in chain) and len(chain) < 8:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _text_frames(text: str) -> list[traceback.FrameSummary]:
    """The frames torch's message names, in the order it names them."""
    frames = []
    for found in _FRAME.finditer(text):
        file = found.group("file") or found.group("sfile")
        line = found.group("line") or found.group("sline")
        name = found.group("name") or found.group("sname")
        frames.append(traceback.FrameSummary(file, int(line), name))
    return frames


@functools.cache
def _rank(filename: str) -> int:
    """2 for the user's model code, 1 for another installed package, 0 for torch,
    graphcheck, the standard library and anything that is not a file."""
    path = os.path.realpath(filename)
    if not os.path.isfile(path) or path.startswith(_OWN):
        return 0
    parts = Path(path).parts
    if "site-packages" in parts or "dist-packages" in parts:
        return 2 if re.fullmatch(r"modeling_\w+\.py", parts[-1]) else 1
    return 0 if path.startswith(_STDLIB) else 2


def _shown(filename: str) -> str:
    """The path relative to the working directory when it is below it."""
    path = os.path.realpath(filename)
    cwd = os.getcwd() + os.sep
    return path[len(cwd) :] if path.startswith(cwd) else path


def _hint(chain: list[BaseException], strict: bool) -> str | None:
    """One clause, for the failures it helps with only."""
    if any(_data_dependent(exc) for exc in chain):
        return "torch.export.draft_export lists every data-dependent failure at once"
    if any(is_constraint_violation(exc) for exc in chain):
        return "torch.export.draft_export lists every guard at once"
    if strict and isinstance(chain[0], Unsupported) and not _raised_by_model(chain[0]):
        return "dynamo cannot trace this; try without --strict"
    if not strict and _raised_in_non_strict_tracer(chain[0]):
        return "the non-strict tracer cannot run this; try --strict"
    if any(_raised_in_triton(exc) for exc in chain):
        return ("a Triton kernel does not run on a CPU or export: give its function a "
                "stand-in in torch ops (a kernels file's STAND_INS, --kernels)")  # fmt: skip
    return None


def _raised_in_triton(err: BaseException) -> bool:
    """The error was raised inside Triton (launching a kernel)."""
    frames = traceback.extract_tb(err.__traceback__) if err.__traceback__ else []
    return any(f"{os.sep}triton{os.sep}" in frame.filename for frame in frames)


def _data_dependent(err: BaseException) -> bool:
    if isinstance(err, (GuardOnDataDependentSymNode, DataDependentOutputException)):
        return True
    return "data-dependent" in _first_line(err).lower()


def _raised_by_model(err: Unsupported) -> bool:
    """Dynamo traced a ``raise`` of the model's own: export without it raises too."""
    return _first_line(err).endswith(": Observed exception")


def _raised_in_non_strict_tracer(err: BaseException) -> bool:
    """Raised by a torch function the non-strict tracer ran on fake tensors (``.numpy()``,
    ``data_ptr()``): dynamo traces such calls differently."""
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and os.path.realpath(frames[-1].filename) == _NON_STRICT_TRACER


def _first_line(err: BaseException) -> str:
    """``Type: first line`` of torch's message, without its bookkeeping, shortened."""
    return one_line(err, cut=" (unhinted:")
