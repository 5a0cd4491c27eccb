"""What a cache entry is keyed by: content hashes of files, versions, options.

Two halves, as ccache's direct mode has them:

* the **lookup key** (:func:`lookup_key`) is computed before anything is built, from
  what is known then: the command and every one of its options, the working
  directory (reports print source paths relative to it), ``PYTHONPATH`` (where imports
  look), the content of every file an option names (the model's ``file.py``, an ``hf:``
  ``config.json``, the kernels file, a stage builder's file), the Python, graphcheck,
  torch, transformers and torchtitan versions, and a hash of graphcheck's own source files
  (:func:`source_hash`: the version string does not change while graphcheck is
  developed);
* the **dependencies** (:func:`dependencies`) are recorded after the run, with each
  file's content hash: every Python file imported that lies outside the standard
  library, site-packages and graphcheck itself (the model's files and whatever they
  import), the modules of the spec's installed package, and for ``hf:`` models the
  transformers modeling and configuration files. A hit needs every recorded file to
  hash the same still (:func:`unchanged`).

Nothing here imports torch or transformers: versions are read from package metadata.

>>> digest(b"graphcheck")[:12]
'b43236efdeaa'
>>> len(lookup_key({"command": "verify"}, cwd="/tmp"))
64
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import site
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from pathlib import Path

from graphcheck._version import __version__

__all__ = [
    "SCHEMA",
    "dependencies",
    "digest",
    "file_digest",
    "lookup_key",
    "named_files",
    "source_hash",
    "unchanged",
    "versions",
]

SCHEMA = 1  # bump when an entry's layout or meaning changes
PACKAGE = Path(__file__).resolve().parent.parent  # graphcheck's own source tree
_NOT_FILES = ("output", "html", "model_explorer")  # options naming files graphcheck writes


def digest(data: bytes) -> str:
    """The SHA-256 of ``data``, hex."""
    return hashlib.sha256(data).hexdigest()


def file_digest(path: str | os.PathLike) -> str | None:
    """The SHA-256 of a file's content; ``None`` when it cannot be read (gone, a folder)."""
    try:
        return digest(Path(path).read_bytes())
    except OSError:
        return None


@functools.cache
def source_hash() -> str:
    """One hash of every file of graphcheck's source tree (paths and contents): an entry
    written by other graphcheck code is never served."""
    sha = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            sha.update(str(path.relative_to(PACKAGE)).encode() + b"\0")
            sha.update(path.read_bytes() + b"\0")
    return sha.hexdigest()


@functools.cache
def versions() -> dict[str, str]:
    """Python, graphcheck, torch, transformers and torchtitan versions (``"none"``: not
    installed),
    read from package metadata, without importing the packages."""
    from importlib import metadata

    found = {"python": sys.version, "graphcheck": __version__, "source": source_hash()}
    for name in ("torch", "transformers", "torchtitan"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "none"
    return found


def _candidates(value: str) -> Iterable[str]:
    """The paths an option's value may name: ``file.py:factory``, ``hf:path``, a path."""
    yield value
    yield value.removeprefix("hf:")
    yield value.rpartition(":")[0]


def _named(text: str) -> Path | None:
    """The file ``text`` names (a folder: its ``config.json``), if it exists; a value that
    cannot be a path (too long, a NUL byte: a JSON option) names none."""
    try:
        path = Path(text)
        if text and path.is_dir():
            path = path / "config.json"
        return path.resolve() if text and path.is_file() else None
    except (OSError, ValueError):
        return None


def named_files(options: Mapping[str, object]) -> dict[str, str | None]:
    """The content hash of every existing file an option's value names (a folder holding
    a ``config.json`` names that file), by absolute path.

    >>> named_files({"boundary_state": '{"rank": 4}' * 1000, "cuts": None})
    {}
    """
    found: dict[str, str | None] = {}
    for name, value in options.items():
        if name in _NOT_FILES:
            continue
        for item in value if isinstance(value, list | tuple) else [value]:
            for text in _candidates(item) if isinstance(item, str) else ():
                path = _named(text)
                if path is not None:
                    found[str(path)] = file_digest(path)
    return found


def lookup_key(options: Mapping[str, object], cwd: str | None = None) -> str:
    """The key of a run of ``options`` (the command and every option), known before any
    build: options, working directory, versions and the content of named files."""
    material = {
        "schema": SCHEMA,
        "options": dict(options),
        "cwd": os.path.realpath(cwd or os.getcwd()),
        "pythonpath": os.environ.get("PYTHONPATH", ""),  # which files imports find
        "versions": versions(),
        "files": named_files(options),
    }
    return digest(json.dumps(material, sort_keys=True, default=repr).encode())


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    """The standard library and site-packages folders (their files are versioned)."""
    paths = sysconfig.get_paths()
    dirs = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs |= set(site.getsitepackages()) | {site.getusersitepackages()}
    return tuple(os.path.realpath(d) + os.sep for d in dirs if d)


def _followed(name: str, path: str, packages: tuple[str, ...]) -> bool:
    """Whether module ``name`` at ``path`` is a dependency: outside the libraries and
    graphcheck, or inside a package ``packages`` names (prefixes of module names)."""
    if any(name == p or name.startswith(p + ".") for p in packages):
        return True
    if path.startswith(str(PACKAGE) + os.sep):
        return False
    return not path.startswith(_library_dirs())


def dependencies(spec: str | None = None) -> dict[str, str | None]:
    """The file of every imported module the run may have read model code from, with its
    content hash: outside the libraries and graphcheck, the spec's own package (``pkg.mod:f``),
    and for an ``hf:`` spec transformers' model files (``transformers.models``)."""
    packages: tuple[str, ...] = ()
    if spec is not None and spec.startswith("hf:"):
        packages = ("transformers.models",)
    elif spec is not None and not spec.rpartition(":")[0].endswith(".py"):
        packages = (spec.rpartition(":")[0].partition(".")[0],)
    found: dict[str, str | None] = {}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        # a .py, or an extension module beside it; torch.ops and torch.classes name a
        # relative file that is no file of theirs
        if isinstance(file, str) and os.path.isabs(file):
            path = os.path.realpath(file)
            if _followed(name, path, packages):
                found[path] = file_digest(path)
    return found


def unchanged(recorded: Mapping[str, str | None]) -> str | None:
    """``None`` when every recorded file hashes as recorded; else the first that differs.

    >>> unchanged({}) is None
    True
    """
    for path, sha in recorded.items():
        if file_digest(path) != sha:
            return path
    return None
