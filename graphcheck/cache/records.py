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

from collections.abc import Mapping
from pathlib import Path

from graphcheck.cache.entry import Entry
from graphcheck.cache.store import Store

__all__ = ["RecordCache", "check_entry"]


def check_entry(folder: Path, options: Mapping[str, object]) -> Entry:
    """The entry of one check of options ``options`` in the cache ``folder``."""
    return Entry(Store(folder, "records"), options)


RecordCache = check_entry  # its earlier name
