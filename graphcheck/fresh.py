"""Run a function in a fresh process, as a pipeline rank would.

A rank builds only its own stage: it has imported the model code, but no state
left by building, running or exporting the uncut model or another stage
(class-level counters, caches filled by a first caller, module-level flags set
at trace time). :func:`run_fresh` gives each call such a process: a child of a
fork server that has imported torch and graphcheck and nothing else, used for
one call only.

``fn`` and its arguments must pickle by reference (a module-level function,
plain data); the result comes back pickled. An exception raised in the child
is raised again in the caller with its type and message.

>>> run_fresh(pow, 2, 10)
1024
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from graphcheck.errors import GraphcheckError

__all__ = ["FreshProcessError", "run_fresh"]

_PRELOAD = ["torch", "graphcheck.api"]
_context = None


class FreshProcessError(GraphcheckError):
    """The fresh process died before it returned (a crash, a signal, out of memory)."""


def _fork_server():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(_PRELOAD)
    return _context


def run_fresh(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a fresh child of the fork server; its result."""
    with ProcessPoolExecutor(1, mp_context=_fork_server(), max_tasks_per_child=1) as pool:
        try:
            return pool.submit(fn, *args, **kwargs).result()
        except BrokenProcessPool as err:
            name = getattr(fn, "__qualname__", repr(fn))
            raise FreshProcessError(f"the process running {name} died: {err}") from None
