"""The phases of a run, announced as they run: the hook the pipeline calls.

:func:`phase` is a context manager that does nothing unless a display watches, and
yields a ``tick(done)`` callback for a loop of ``total`` steps. ``api`` and ``gate``
call it; ``analysis`` and ``stages`` never import it: their loops take the callback
as an argument. It imports nothing heavy. The displays live with the entry points
(:mod:`graphcheck.console.progress`), which install one with :func:`watched`.

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
from typing import Any, Protocol

__all__ = ["Display", "Phase", "Running", "Tick", "phase", "watched"]

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
class Running:
    """A phase being shown: its name, steps (``total`` ``None``: not counted) and start."""

    name: str
    total: int | None
    done: int = 0
    start: float = field(default_factory=time.perf_counter)
    task: Any = None  # the live display's row

    @property
    def count(self) -> str:
        return f"{self.done}/{self.total}" if self.total is not None else ""


class Display(Protocol):
    """What shows the phases (:mod:`graphcheck.console.progress`)."""

    def begin(self, running: Running) -> None: ...

    def advance(self, running: Running) -> None: ...

    def end(self, running: Running, finished: bool) -> None: ...


_DISPLAY: ContextVar[Display | None] = ContextVar("graphcheck_progress", default=None)


def _ignore(done: int) -> None:
    """The tick of a phase nobody is watching."""


def _tick(display: Display, running: Running, done: int) -> None:
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
    running = Running(str(name), total)
    display.begin(running)
    try:
        yield functools.partial(_tick, display, running)
    except BaseException:  # failed or interrupted: no line saying it ended
        display.end(running, finished=False)
        raise
    display.end(running, finished=True)


@contextlib.contextmanager
def watched(display: Display) -> Iterator[None]:
    """Show the phases of what runs inside on ``display``."""
    token = _DISPLAY.set(display)
    try:
        yield
    finally:
        _DISPLAY.reset(token)
