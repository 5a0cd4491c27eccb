"""One cache entry, whatever it holds: a command's result (:mod:`graphcheck.cache.results`)
or one check of a project (:mod:`graphcheck.cache.records`).

An entry is keyed by the run's options (:mod:`graphcheck.cache.key`) and holds a record
(plain data), the run's exit status and the files the run depended on with their
hashes. Only exit 0 and 1 are stored, never a run during which a dependency changed
(its modification time is after the run started: the record may describe the old
file), and a damaged entry is a note and a fresh run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from graphcheck.cache.key import dependencies, lookup_key, named_files, unchanged
from graphcheck.cache.store import Store, note

__all__ = ["Entry"]

T = TypeVar("T")


class Entry:
    """One cached run (a command's result, or one check of a project): :meth:`load`
    before it, :meth:`depend` right after it, :meth:`save` once its record is known.
    The record is plain data (JSON-ready); ``parse`` reads it back."""

    def __init__(self, store: Store, options: Mapping[str, object]) -> None:
        self.store = store
        self.spec = str(options["model"])
        self.key = lookup_key(options)
        self.named = named_files(options)
        self.started = time.time()
        self.files: dict[str, str | None] | None = None

    def load(self, parse: Callable[[object], T | None], what: str) -> T | None:
        """``parse(record)`` of the stored record when every dependency is unchanged;
        ``parse`` raises :class:`ValueError` on a malformed record (a note, then a fresh
        run) and returns ``None`` for one this run cannot use (a fresh run)."""
        entry = self.store.read(self.key)
        if entry is None:
            return None
        code, deps = entry.get("exit_code"), entry.get("files")
        if code not in (0, 1) or not _mapping_of_hashes(deps) or "record" not in entry:
            return self._damaged("malformed")
        if unchanged(deps) is not None:
            return None  # a model file changed: run afresh (and overwrite the entry)
        try:
            value = parse(entry["record"])
        except ValueError as err:
            return self._damaged(str(err))
        if value is not None:
            note(f"{what} from the cache ({self.store.path(self.key)}); --no-cache runs it afresh")
        return value

    def _damaged(self, why: str) -> None:
        note(f"ignoring cache entry {self.store.path(self.key)}: {why}; re-exporting")

    def depend(self) -> None:
        """Record the files the run imported (call it right after the run, before other
        checks import theirs)."""
        self.files = {**self.named, **dependencies(self.spec)}

    def save(self, record: object, exit_code: int) -> bool:
        """Store a finished check's record (JSON-ready); not an error (exit 2), not a run
        whose dependencies are unknown or changed during it."""
        if exit_code not in (0, 1) or self.files is None:
            return False
        if any(_modified_since(path, self.started) for path in self.files):
            return False
        entry = {"record": record, "exit_code": exit_code, "files": self.files}
        return self.store.write(self.key, entry)


def _mapping_of_hashes(value: object) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in value.items()
    )


def _modified_since(path: str, started: float) -> bool:
    try:
        return os.stat(Path(path)).st_mtime > started
    except OSError:
        return False
