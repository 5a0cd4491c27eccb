"""The record cache: what one check of a project configuration gave, by its key.

``graphcheck check`` and ``graphcheck lock`` run each check of the configuration (one
model, its options and its plans); the unit cached is one check, so an edit of one
check's table, or of one model's files, re-runs that check alone. The entry holds the
check's record as plain data (built and read back by :mod:`graphcheck.project.record`,
which validates it), its exit status and the dependencies with their hashes. It is
keyed as a ``verify`` is (:mod:`graphcheck.cache.key`): every option of the check (the
caller passes the check's own table, resolved; not the whole configuration file, so
editing another check keeps this one's entry), the working directory, ``PYTHONPATH``,
the content of the files the options name, versions and graphcheck's source hash; the
model's imported files are recorded after the run.

As for results (:mod:`graphcheck.cache.results`): only exit 0 and 1 are stored, never
a run during which a dependency changed, and a damaged entry is a note and a fresh run.

Checks run one after another in one process, so a check's recorded dependencies are the
model files imported up to its end: those of the checks before it too. Editing an
earlier check's model file therefore also re-runs the checks after it; the reverse
mistake (a file a check read left out) cannot happen.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from graphcheck.cache.key import dependencies, lookup_key, named_files, unchanged
from graphcheck.cache.results import _mapping_of_hashes, _modified_since
from graphcheck.cache.store import Store, note

__all__ = ["RecordCache"]

T = TypeVar("T")


class RecordCache:
    """The entry of one check: :meth:`load` before its run, :meth:`depend` right after
    it, :meth:`save` once its record is known."""

    def __init__(self, folder: Path, options: Mapping[str, object]) -> None:
        self.store = Store(folder, "records")
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
