"""Live progress on stderr: the phases of a run (build, export, analyse, cuts n/L,
stages k/S, check, the gate's own) with the time each took.

The pipeline announces its phases through a hook that imports nothing heavy:
:func:`phase` is a context manager that does nothing unless a display is shown, and
yields a ``tick(done)`` callback for a loop of ``total`` steps. ``api`` and ``gate``
call it; ``analysis`` and ``stages`` never import it: their loops take the callback
as an argument. The command line shows a display around the run with :func:`shown`
(held in a context variable):

* stderr a terminal - one live line per phase (rich), kept on screen when done;
* forced onto a stream that is not a terminal (``--progress`` into a CI log) - one
  line when a phase starts and one when it ends, with its time;
* otherwise nothing (``--no-progress`` forces that).

A display writes to the stream it was given (the real stderr, taken before the run
redirects ``sys.stderr``), never to stdout, which carries the report.

>>> import io
>>> log = io.StringIO()
>>> with shown(log, True):
...     with phase(Phase.CUTS, total=3) as tick:
...         for done in (1, 2, 3):
...             tick(done)
>>> [line.split(" ")[:3] for line in log.getvalue().splitlines()]
[['graphcheck:', 'cuts', '...'], ['graphcheck:', 'cuts', '3/3']]
>>> with phase(Phase.EXPORT) as tick:  # no display: nothing happens
...     tick(1)
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from enum import StrEnum
from typing import TextIO

__all__ = ["Phase", "Tick", "phase", "shown", "wanted"]

Tick = Callable[[int], None]  # tick(done): ``done`` of the phase's ``total`` steps are done


class Phase(StrEnum):
    """The phases of a static run, in the order they run."""

    BUILD = "build"
    EXPORT = "export"
    ANALYSE = "analyse"
    CUTS = "cuts"
    STAGES = "stages"
    CHECK = "check"
    GATE = "gate"


class _Lines:
    """One line when a phase starts, one when it ends: for a stream that is not a
    terminal (a CI log), where a live display would be escape codes."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def begin(self, name: str, total: int | None) -> list:
        self._write(f"graphcheck: {name} ...")
        return [name, total, 0, time.perf_counter()]

    def advance(self, handle: list, done: int) -> None:
        handle[2] = done

    def end(self, handle: list, finished: bool) -> None:
        name, total, done, start = handle
        if finished:
            count = f" {done}/{total}" if total is not None else ""
            self._write(f"graphcheck: {name}{count} {time.perf_counter() - start:.1f} s")

    def close(self) -> None:
        pass

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()


class _Live:
    """A live line per phase on a terminal (rich), nested phases indented, each with
    its steps and elapsed time; the lines stay on screen when the run ends."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn

        self.progress = Progress(
            SpinnerColumn(finished_text="[green]✓[/]"),
            TextColumn("{task.description}"),
            TextColumn("[dim]{task.fields[count]}"),
            TextColumn("{task.elapsed:.1f} s"),
            console=Console(file=stream),
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self.depth = 0
        self.progress.start()

    def begin(self, name: str, total: int | None) -> tuple:
        indent = "  " * self.depth
        self.depth += 1
        count = f"0/{total}" if total is not None else ""
        task = self.progress.add_task(f"{indent}{name}", total=total or 1, count=count)
        return task, total

    def advance(self, handle: tuple, done: int) -> None:
        task, total = handle
        self.progress.update(task, completed=done, count=f"{done}/{total}")

    def end(self, handle: tuple, finished: bool) -> None:
        task, total = handle
        self.depth -= 1
        if finished and total is None:
            self.progress.update(task, completed=1)
        self.progress.stop_task(task)

    def close(self) -> None:
        self.progress.stop()


_DISPLAY: ContextVar[_Lines | _Live | None] = ContextVar("graphcheck_progress", default=None)


def _ignore(done: int) -> None:
    """The tick of a phase nobody is watching."""


@contextlib.contextmanager
def phase(name: str, total: int | None = None) -> Iterator[Tick]:
    """Announce the phase ``name`` (of ``total`` steps, if it counts them) to the display
    shown, if any; yields ``tick(done)`` for the steps."""
    display = _DISPLAY.get()
    if display is None:
        yield _ignore
        return
    handle = display.begin(str(name), total)
    try:
        yield functools.partial(display.advance, handle)
    except BaseException:
        display.end(handle, finished=False)
        raise
    display.end(handle, finished=True)


def wanted(stream: TextIO, on: bool | None) -> bool:
    """Whether to show progress on ``stream``: ``on`` when given (``--progress``,
    ``--no-progress``), else whether ``stream`` is a terminal.

    >>> import io
    >>> wanted(io.StringIO(), None), wanted(io.StringIO(), True)
    (False, True)
    """
    return on if on is not None else _is_terminal(stream)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


@contextlib.contextmanager
def shown(stream: TextIO, on: bool | None = None) -> Iterator[None]:
    """Show the phases of what runs inside on ``stream`` (see :func:`wanted`): live on
    a terminal, a line per phase start and end otherwise."""
    if not wanted(stream, on):
        yield
        return
    display = _Live(stream) if _is_terminal(stream) else _Lines(stream)
    token = _DISPLAY.set(display)
    try:
        yield
    finally:
        _DISPLAY.reset(token)
        display.close()
