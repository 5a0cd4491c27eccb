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

from collections.abc import Mapping

from graphcheck.cache.entry import Entry
from graphcheck.cache.store import Store, resolve_folder

__all__ = ["COMMANDS", "cacheable", "report_of", "report_record", "result_entry"]

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


def result_entry(
    options: Mapping[str, object],
    *,
    cache_dir: str | None = None,
    no_cache: bool = False,
    environ: Mapping[str, str] | None = None,
) -> Entry | None:
    """The entry of a run of ``options`` (command-line option names), ``None`` when
    the cache is off or the run is not cacheable; a bad ``cache_dir`` is a
    :class:`~graphcheck.errors.UsageError` either way."""
    folder = resolve_folder(cache_dir, no_cache=no_cache, environ=environ)
    if folder is None or not cacheable(options):
        return None
    keyed = {k: v for k, v in options.items() if k not in _OFF_KEY}
    return Entry(Store(folder, "results"), keyed)


def report_record(output: str, exit_code: int, headline: str) -> dict:
    """A command's result as the entry's record: the rendered report, the exit status
    and the verdict in one line."""
    return {"output": output, "exit_code": exit_code, "headline": headline}


def report_of(record: object) -> tuple[str, int, str]:
    """:func:`report_record` read back; :class:`ValueError` when it is not one."""
    if not isinstance(record, dict):
        raise ValueError("malformed")
    output, code, line = record.get("output"), record.get("exit_code"), record.get("headline")
    if not (isinstance(output, str) and code in (0, 1) and isinstance(line, str)):
        raise ValueError("malformed")
    return output, code, line
