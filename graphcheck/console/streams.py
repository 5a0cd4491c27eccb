"""The terminal plumbing of a run: stdout carries the report alone, what the model code
prints goes to stderr, torch's logging and warnings stay quiet, Ctrl-C is one line, and
under ``--format json`` or ``sarif`` an error is a document on stdout too.

>>> asked_format(["map", "m.py:f", "--format", "json"]), asked_format(["--format=sarif"])
('json', 'sarif')
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import sys
import threading
import warnings

__all__ = ["CtrlC", "asked_format", "error_document", "fresh", "prints_to_stderr", "quiet"]


@contextlib.contextmanager
def quiet():
    """Keep torch's own logging and warnings off the terminal (one line or a report),
    and the warning filters and the torch log level as they were afterwards."""
    logger = logging.getLogger("torch")
    level = logger.level
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        logger.setLevel(logging.CRITICAL)
        try:
            yield
        finally:
            logger.setLevel(level)


@contextlib.contextmanager
def prints_to_stderr():
    """What the model code prints while it is built, exported or run goes to stderr
    (Python's ``print`` and anything written to file descriptor 1, child processes
    included): stdout carries the report alone, so ``--format json`` stays parseable."""
    sys.stdout.flush()
    saved = _dup_stdout()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _dup_stdout() -> int | None:
    """File descriptor 1 pointed at stderr; a copy of the original (``None`` when there is
    no descriptor 1 to move)."""
    try:
        saved = os.dup(1)
    except OSError:
        return None
    sys.stderr.flush()
    os.dup2(2, 1)
    return saved


class CtrlC:
    """The SIGINT handler of a run: raises :class:`KeyboardInterrupt` as Python's own does,
    and remembers the press, so that a library catching and dropping the interrupt (a
    broad ``except`` inside a tracer) cannot turn Ctrl-C into a finished run."""

    def __init__(self) -> None:
        self.pressed = False

    def __call__(self, signum, frame) -> None:
        self.pressed = True
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self):
        """Handle SIGINT while the block runs (in the main thread, where handlers live)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGINT, self)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


def error_document(argv: list[str], message: str, detail: tuple[str, ...] = ()) -> None:
    """Under ``--format json`` (or ``sarif``) an error is also a document on stdout, so a
    consumer that parses stdout reads why there is no report."""
    fmt = asked_format(argv)
    if fmt == "json":
        from graphcheck.reporters.json import error_document

        sys.stdout.write(error_document(message, detail) + "\n")
    elif fmt == "sarif":
        from graphcheck.reporters.sarif import error_log

        sys.stdout.write(error_log(message, detail))


def asked_format(argv: list[str]) -> str | None:
    """The value of ``--format`` in ``argv`` (``--format json``, ``--format=json``)."""
    for index, arg in enumerate(argv):
        if arg == "--format" and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--format="):
            return arg.partition("=")[2]
    return None


@contextlib.contextmanager
def fresh(progress: bool | None):
    """Around a run that builds models: its phases shown, what the model code prints on
    stderr, torch's logging and warnings quiet (cache notes go outside it: they are seen)."""
    from graphcheck.console.progress import shown

    with shown(sys.stderr, progress), prints_to_stderr(), quiet():
        yield
