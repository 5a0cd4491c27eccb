"""Run a function in a fresh process, as a pipeline rank would.

A rank builds only its own stage: it has imported the model code, but no state
left by building, running or exporting the uncut model or another stage
(class-level counters, caches filled by a first caller, module-level flags set
at trace time). :func:`run_fresh` gives each call such a process: a child of a
fork server that has imported torch and graphcheck and nothing else, used for
one call only. The fork server also exports a toy module of its own once, so
each child starts with torch.export's lazy imports and first-call caches done
(about 2 s a stage otherwise); no model code runs there.

``fn`` and its arguments must pickle by reference (a module-level function,
plain data); the result comes back pickled. An exception raised in the child
is raised again in the caller with its type and message.
:func:`run_fresh_many` runs several such calls side by side (one fresh child
each, at most one per CPU) and returns their results in order.

Ctrl-C is the parent's to handle: the fork server and its children ignore SIGINT
(a terminal sends it to every process of the job), the parent holds it back while
it starts children (one half started when the parent exits fails with a traceback
of its own) and stops the children it waits for, so an interrupted run prints no
traceback from a child.

>>> run_fresh(pow, 2, 10)
1024
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from graphcheck.errors import FreshProcessError  # kept importable from here

__all__ = ["FreshProcessError", "run_fresh", "run_fresh_many", "start"]

# This module first: it makes the fork server ignore Ctrl-C before the long imports.
_PRELOAD = ["graphcheck.stages.fresh", "torch", "graphcheck.api"]
_context = None


def _in_fork_server() -> bool:
    """Whether this import runs while the fork server preloads its modules."""
    frame = sys._getframe()
    while frame is not None:
        code = frame.f_code
        if code.co_name == "main" and code.co_filename.endswith("forkserver.py"):
            return True
        frame = frame.f_back
    return False


def _warm_up() -> None:
    """Export a toy varlen stage once (best effort: a failure only costs time)."""
    import torch
    from torch import nn
    from torch.nn.attention.varlen import varlen_attn

    from graphcheck.analysis.export import export_model
    from graphcheck.model.load import default_dtype, fake_mode

    class Toy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x, position_ids, cu_q, cu_k, max_q, max_k):
            t = x.shape[1]
            q = self.proj(x).view(t, 2, 4)
            return varlen_attn(q, q, q, cu_q, cu_k, max_q, max_k).reshape(1, t, 8)

    mode = fake_mode()
    try:
        with mode, default_dtype(torch.bfloat16):
            toy = Toy()
        export_model(toy, mode, stage_input="hidden", hidden_size=8)
    except Exception:  # the children then warm up on their own
        pass


# The resource tracker (started with the fork server, from this interpreter's -W flags)
# removes the semaphores of a process pool that Ctrl-C stopped, and warns that it did: the
# clean-up is its job, the warning only noise after "graphcheck: interrupted".
_QUIET_TRACKER = "ignore::UserWarning:multiprocessing.resource_tracker"


def _fork_server():
    global _context
    if _context is None:
        if _QUIET_TRACKER not in sys.warnoptions:
            sys.warnoptions.append(_QUIET_TRACKER)
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(_PRELOAD)
    return _context


def start() -> None:
    """Start the fork server in the background, so its preloading (a few seconds)
    overlaps other work; :func:`run_fresh` waits for it."""
    _fork_server()
    threading.Thread(target=multiprocessing.forkserver.ensure_running, daemon=True).start()


def _leave_interrupt_to_parent() -> None:
    """Ignore SIGINT here: the parent handles Ctrl-C and stops this process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def _pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """Fresh children, one call each; on Ctrl-C in the parent they are stopped rather
    than waited for (they ignore SIGINT themselves)."""
    pool = ProcessPoolExecutor(
        workers,
        mp_context=_fork_server(),
        max_tasks_per_child=1,
        initializer=_leave_interrupt_to_parent,
    )
    try:
        yield pool
    except KeyboardInterrupt:
        # the executor's own record of its children (public only from Python 3.14 on)
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@contextlib.contextmanager
def _starting() -> Iterator[None]:
    """Ctrl-C held back while children start, raised once they have (on the main
    thread, the only one that handles signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
    if pressed and callable(previous):
        previous(signal.SIGINT, None)  # the default handler raises KeyboardInterrupt


def run_fresh(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a fresh child of the fork server; its result."""
    with _pool(1) as pool:
        try:
            with _starting():
                future = pool.submit(fn, *args, **kwargs)
            return future.result()
        except BrokenProcessPool as err:
            name = getattr(fn, "__qualname__", repr(fn))
            raise FreshProcessError(f"the process running {name} died: {err}") from None


def run_fresh_many(
    fn: Callable,
    calls: Sequence[tuple],
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> list:
    """``[fn(*args) for args in calls]``, each call in its own fresh child, up to
    ``workers`` (default: the CPU count) at a time. The first call to fail (in the
    order of ``calls``) raises; the calls not yet started are cancelled.
    ``progress(done)`` is called as results come back, in order."""
    if not calls:
        return []
    workers = max(1, min(len(calls), workers or os.cpu_count() or 1))
    with _pool(workers) as pool:
        try:
            with _starting():
                futures = [pool.submit(fn, *args) for args in calls]
            results = []
            for future in futures:
                results.append(future.result())
                if progress is not None:
                    progress(len(results))
            return results
        except BrokenProcessPool as err:
            name = getattr(fn, "__qualname__", repr(fn))
            raise FreshProcessError(f"a process running {name} died: {err}") from None


if _in_fork_server():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's (see above)
    _warm_up()
