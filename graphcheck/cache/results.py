"""The result cache: a command's rendered report and exit status, by its key.

A warm re-run of the same ``verify``, ``map`` or ``plan`` prints the stored report
and exits with the stored status without building or exporting the model, and
without importing torch: the key and the dependency hashes are all it computes
(:mod:`graphcheck.cache.key`). The report is stored rendered, in the format asked
for, so a hit prints the very bytes the cold run printed (its timings included);
another ``--format`` is another key.

Only outcomes 0 and 1 are stored (an error, exit 2, never is), only for a model
given as a spec, and only for runs that write nothing beside the report (no
``--html``, ``--model-explorer`` or ``--format html``). A run during which a
dependency changed (its modification time is after the run started) is not stored:
its report may describe the old file.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

from graphcheck.cache.key import dependencies, lookup_key, named_files, unchanged
from graphcheck.cache.store import Store, note, resolve_folder

__all__ = ["COMMANDS", "ResultCache", "cacheable"]

COMMANDS = ("verify", "map", "plan")  # the commands whose results are cached
# options that steer the cache or what goes to stderr, not the report or the exit status
_OFF_KEY = ("no_cache", "cache_dir", "progress")


def cacheable(options: Mapping[str, object]) -> bool:
    """Whether a run of ``options`` may be served from the cache.

    >>> cacheable({"command": "verify", "model": "m.py:f", "format": "text"})
    True
    >>> cacheable({"command": "map", "model": "m.py:f", "html": "page.html"})
    False
    """
    return (
        options.get("command") in COMMANDS
        and isinstance(options.get("model"), str)
        and options.get("format") != "html"
        and not options.get("html")
        and not options.get("model_explorer")
    )


class ResultCache:
    """The cache entry of one run: :meth:`load` before it, :meth:`save` after it."""

    def __init__(self, store: Store, options: Mapping[str, object]) -> None:
        self.store = store
        self.spec = str(options["model"])
        self.key = lookup_key(options)
        self.named = named_files(options)
        self.started = time.time()

    @classmethod
    def of(
        cls,
        options: Mapping[str, object],
        *,
        cache_dir: str | None = None,
        no_cache: bool = False,
        environ: Mapping[str, str] | None = None,
    ) -> ResultCache | None:
        """The cache of a run of ``options`` (command-line option names), ``None`` when
        the cache is off or the run is not cacheable; a bad ``cache_dir`` is a
        :class:`~graphcheck.errors.UsageError` either way."""
        folder = resolve_folder(cache_dir, no_cache=no_cache, environ=environ)
        if folder is None or not cacheable(options):
            return None
        keyed = {k: v for k, v in options.items() if k not in _OFF_KEY}
        return cls(Store(folder, "results"), keyed)

    def load(self) -> tuple[str, int, str] | None:
        """The stored report, exit status and verdict line, when every dependency is
        unchanged."""
        entry = self.store.read(self.key)
        if entry is None:
            return None
        output, code, deps = entry.get("output"), entry.get("exit_code"), entry.get("files")
        headline = entry.get("headline")
        if not (isinstance(output, str) and isinstance(headline, str) and code in (0, 1)
                and _mapping_of_hashes(deps)):  # fmt: skip
            note(f"ignoring cache entry {self.store.path(self.key)}: malformed; re-exporting")
            return None
        if unchanged(deps) is not None:
            return None  # a model file changed: run afresh (and overwrite the entry)
        note(f"report from the cache ({self.store.path(self.key)}); --no-cache runs afresh")
        return output, code, headline

    def save(self, output: str, exit_code: int, headline: str) -> bool:
        """Store a finished run's report (and its verdict line); not an error (exit 2),
        not a run during which a dependency changed."""
        if exit_code not in (0, 1):
            return False
        deps = {**self.named, **dependencies(self.spec)}
        if any(_modified_since(path, self.started) for path in deps):
            return False
        entry = {"output": output, "exit_code": exit_code, "headline": headline, "files": deps}
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
