"""Live progress on stderr: the phases of a run (build, export, analyse, cuts n/L,
stages k/S, the gate's own) with the time each took.

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
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TextIO

__all__ = ["Phase", "Tick", "phase", "shown", "wanted"]

Tick = Callable[[int], None]  # tick(done): ``done`` of the phase's ``total`` steps are done


class Phase(StrEnum):
    """The phases of a static run, in the order they run."""

    BUILD = "build"
    EXPORT = "export"
    ANALYSE = "analyse"
    CUTS = "cuts"
    STAGES = "stages"
    GATE = "gate"  # the byte gate's phases: "gate uncut", "gate staged", ...


@dataclass
class _Running:
    """A phase being shown: its name, steps (``total`` ``None``: not counted) and start."""

    name: str
    total: int | None
    done: int = 0
    start: float = field(default_factory=time.perf_counter)
    task: Any = None  # the live display's row

    @property
    def count(self) -> str:
        return f"{self.done}/{self.total}" if self.total is not None else ""


class _Lines:
    """One line when a phase starts, one when it ends: for a stream that is not a
    terminal (a CI log), where a live display would be escape codes."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def begin(self, running: _Running) -> None:
        self._write(f"graphcheck: {running.name} ...")

    def advance(self, running: _Running) -> None:
        pass

    def end(self, running: _Running, finished: bool) -> None:
        if finished:
            label = f"{running.name} {running.count}".rstrip()
            self._write(f"graphcheck: {label} {time.perf_counter() - running.start:.1f} s")

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

    def begin(self, running: _Running) -> None:
        description = "  " * self.depth + running.name
        self.depth += 1
        running.task = self.progress.add_task(
            description, total=running.total or 1, count=running.count
        )

    def advance(self, running: _Running) -> None:
        self.progress.update(running.task, completed=running.done, count=running.count)

    def end(self, running: _Running, finished: bool) -> None:
        self.depth -= 1
        if finished:  # every step done (a phase of no steps too)
            self.progress.update(running.task, completed=running.total or 1)
        self.progress.stop_task(running.task)

    def close(self) -> None:
        self.progress.stop()


_DISPLAY: ContextVar[_Lines | _Live | None] = ContextVar("graphcheck_progress", default=None)


def _ignore(done: int) -> None:
    """The tick of a phase nobody is watching."""


def _tick(display: _Lines | _Live, running: _Running, done: int) -> None:
    running.done = done
    display.advance(running)


@contextlib.contextmanager
def phase(name: str, total: int | None = None) -> Iterator[Tick]:
    """Announce the phase ``name`` (of ``total`` steps, if it counts them) to the display
    shown, if any; yields ``tick(done)`` for the steps."""
    display = _DISPLAY.get()
    if display is None:
        yield _ignore
        return
    running = _Running(str(name), total)
    display.begin(running)
    try:
        yield functools.partial(_tick, display, running)
    except BaseException:  # failed or interrupted: no line saying it ended
        display.end(running, finished=False)
        raise
    display.end(running, finished=True)


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
