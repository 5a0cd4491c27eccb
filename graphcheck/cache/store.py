"""Where the cache lives, and reading and writing its entries safely.

The folder: ``--cache-dir DIR``, else ``$GRAPHCHECK_CACHE_DIR``, else
``$XDG_CACHE_HOME/graphcheck``, else ``~/.cache/graphcheck``; ``--no-cache`` or
``GRAPHCHECK_NO_CACHE=1`` turn it off (a command-line flag wins over the
environment). A folder given by flag or variable must have an existing parent:
otherwise a :class:`~graphcheck.errors.UsageError`, before anything is built.

An entry is one JSON file, ``<folder>/v<SCHEMA>/<kind>/<key>.json``, holding the key it
was written for. :meth:`Store.read` returns ``None`` for a missing entry and, with a
one-line note on stderr, for one that does not parse, is truncated, has the wrong
shape or holds another key (copied from another entry): the caller then runs afresh.
:meth:`Store.write` writes a temporary file in the same folder and ``os.replace``\\ s it
into place, so two processes writing one key leave one whole entry; a folder that
cannot be written is a note, never a failure.

>>> resolve_folder(None, no_cache=True, environ={}) is None
True
>>> str(resolve_folder(None, environ={"XDG_CACHE_HOME": "/c"}))
'/c/graphcheck'
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from graphcheck.cache.key import SCHEMA
from graphcheck.errors import UsageError

__all__ = ["Store", "add_options", "note", "resolve_folder"]


def add_options(parser, title: str) -> None:
    """``--no-cache`` and ``--cache-dir`` (one or the other) on an argparse ``parser``,
    under the group ``title`` (what a hit skips, in the command's words)."""
    group = parser.add_argument_group(title).add_mutually_exclusive_group()
    group.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    group.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="the cache folder (default $GRAPHCHECK_CACHE_DIR, else $XDG_CACHE_HOME/graphcheck "
        "or ~/.cache/graphcheck; GRAPHCHECK_NO_CACHE=1 turns it off)",
    )


def note(message: str) -> None:
    """One line on stderr, ``graphcheck: note: ...``."""
    print(f"graphcheck: note: {message}", file=sys.stderr)


def _off(environ: Mapping[str, str]) -> bool:
    return environ.get("GRAPHCHECK_NO_CACHE", "").strip() not in ("", "0")


def resolve_folder(
    flag: str | None, *, no_cache: bool = False, environ: Mapping[str, str] | None = None
) -> Path | None:
    """The cache folder (``None``: the cache is off), checked before any export."""
    environ = os.environ if environ is None else environ
    if no_cache or (flag is None and _off(environ)):
        return None
    given, source = flag, "--cache-dir"
    if given is None and environ.get("GRAPHCHECK_CACHE_DIR"):
        given, source = environ["GRAPHCHECK_CACHE_DIR"], "GRAPHCHECK_CACHE_DIR"
    if given is None:
        base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(base) / "graphcheck"
    folder = Path(given).expanduser().absolute()
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{source} {given}: not a folder; give a folder (or --no-cache)")
    if not folder.parent.is_dir():
        raise UsageError(
            f"{source} {given}: the folder {folder.parent} does not exist; create it first "
            "(or --no-cache)"
        )
    return folder


class Store:
    """The entries of one kind (``results``, ``exports``) in a cache folder."""

    def __init__(self, folder: Path, kind: str) -> None:
        self.folder = Path(folder) / f"v{SCHEMA}" / kind

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def read(self, key: str) -> dict | None:
        """The entry of ``key``; ``None`` (with a note when it is damaged) otherwise."""
        path = self.path(key)
        try:
            text = path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, UnicodeDecodeError) as err:
            note(f"ignoring cache entry {path}: unreadable ({type(err).__name__}); re-exporting")
            return None
        try:
            entry = json.loads(text)
        except ValueError:
            note(f"ignoring cache entry {path}: corrupt or truncated; re-exporting")
            return None
        if not isinstance(entry, dict) or entry.get("key") != key:
            note(f"ignoring cache entry {path}: written for another key; re-exporting")
            return None
        return entry

    def write(self, key: str, entry: dict) -> bool:
        """Write ``entry`` for ``key`` atomically; a note and ``False`` when it cannot."""
        data = json.dumps({**entry, "key": key}, sort_keys=True)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle, temp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=".json")
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as out:
                    out.write(data)
                os.replace(temp, self.path(key))
            except BaseException:
                os.unlink(temp)
                raise
        except OSError as err:
            note(f"cache folder {self.folder} is not writable ({err.strerror or err}); "
                 "running without the cache")  # fmt: skip
            return False
        return True
