"""Live progress on stderr: the phases of a run (build, export, analyse, cuts n/L,
stages k/S, the gate's own) with the time each took, as the pipeline announces them
(:mod:`graphcheck.phases`). The command line shows a display around the run with
:func:`shown`:

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
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TextIO

from graphcheck.phases import Phase, Running, phase, watched

__all__ = ["Phase", "phase", "shown", "wanted"]


class _Lines:
    """One line when a phase starts, one when it ends: for a stream that is not a
    terminal (a CI log), where a live display would be escape codes."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def begin(self, running: Running) -> None:
        self._write(f"graphcheck: {running.name} ...")

    def advance(self, running: Running) -> None:
        pass

    def end(self, running: Running, finished: bool) -> None:
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

    def begin(self, running: Running) -> None:
        description = "  " * self.depth + running.name
        self.depth += 1
        running.task = self.progress.add_task(
            description, total=running.total or 1, count=running.count
        )

    def advance(self, running: Running) -> None:
        self.progress.update(running.task, completed=running.done, count=running.count)

    def end(self, running: Running, finished: bool) -> None:
        self.depth -= 1
        if finished:  # every step done (a phase of no steps too)
            self.progress.update(running.task, completed=running.total or 1)
        self.progress.stop_task(running.task)

    def close(self) -> None:
        self.progress.stop()


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
    try:
        with watched(display):
            yield
    finally:
        display.close()
