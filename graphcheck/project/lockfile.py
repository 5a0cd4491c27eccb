"""The lock file itself: its layout on disk, reading and writing it, and a model's state.

What a model's entry holds is computed from an export in :mod:`graphcheck.project.lock`;
this module only knows its shape, so reading, comparing (:mod:`graphcheck.project.diff`)
and writing a lock import neither torch nor the API: a ``check --locked`` whose checks
all come from the cache (:mod:`graphcheck.project.record`) never loads them.

The format is JSON, written with one fact per line: a record (a list starting with a
scalar) on one line, every object key on its own line, keys sorted. JSON because both
reading and writing are in the standard library and round-trip exactly (``tomllib``
reads TOML but nothing writes it), and one fact per line because a reviewer reads the
lock's diff in the pull request: a changed window is one changed op line and the layer
lines that point at the new fingerprint.

>>> print(dumps({"b": [[0, "fp", "dense"]], "a": {"x": 1}}), end="")
{
  "a": {
    "x": 1
  },
  "b": [
    [0, "fp", "dense"]
  ]
}
>>> entry_problem({"layers": []})
'edges'
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from graphcheck.errors import UsageError

__all__ = [
    "FORMAT",
    "ModelState",
    "dumps",
    "entry_problem",
    "read_lock",
    "versions",
    "write_lock",
]

FORMAT = 1  # the lock's "lock" field: bumped when its layout changes
_SHAPE = {
    "layers": list, "edges": list, "programs": dict, "boundaries": list, "findings": list,
    "plans": list, "sources": dict,
}  # fmt: skip


@dataclass
class ModelState:
    """One model's lock entry, and the current run's model source line of each op of each
    layer (by index) and edge (by name), in the order of the entry's op lists: they locate
    a change (the lock keeps no line numbers, so a comment moves nothing)."""

    entry: dict
    lines: dict[int | str, list[str | None]] = field(default_factory=dict)


def versions() -> dict[str, str]:
    """graphcheck's, torch's and transformers' versions (``none``: not installed), read
    from package metadata without importing them (:func:`graphcheck.cache.key.versions`)."""
    from graphcheck.cache.key import versions as all_versions

    found = all_versions()
    return {name: found[name] for name in ("graphcheck", "torch", "transformers")}


def dumps(value, indent: int = 0) -> str:
    """``value`` as JSON with one fact per line (see the module doc), newline-terminated."""
    return _dump(value, indent) + "\n"


def _dump(value, indent: int) -> str:
    pad, inner = "  " * indent, "  " * (indent + 1)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{inner}{json.dumps(k)}: {_dump(value[k], indent + 1)}" for k in sorted(value)]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and value and isinstance(value[0], list | dict):
        items = [f"{inner}{_dump(v, indent + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return json.dumps(value, ensure_ascii=False)


def write_lock(path: Path, models: dict[str, dict]) -> None:
    """Write the lock of ``models`` (name -> entry) with the current versions."""
    data = {"lock": FORMAT, "versions": versions(), "models": models}
    path.write_text(dumps(data), encoding="utf-8")


def entry_problem(entry: object) -> str | None:
    """The first key a model entry lacks or holds malformed; ``None`` when it is whole."""
    entry = entry if isinstance(entry, dict) else {}
    return next((k for k, kind in _SHAPE.items() if not isinstance(entry.get(k), kind)), None)


def read_lock(path: Path) -> dict:
    """The lock at ``path``; a :class:`UsageError` (exit 2, one line) when it is missing
    or not a lock this graphcheck writes."""
    if not path.is_file():
        raise UsageError(f"no {path.name} next to {path.parent}: run graphcheck lock first")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UsageError(f"{path}: not a graphcheck lock ({err}); run graphcheck lock") from None
    if not isinstance(data, dict) or data.get("lock") != FORMAT or "models" not in data:
        raise UsageError(f"{path}: not a lock of this graphcheck's format; run graphcheck lock")
    models = data["models"]
    broken = [
        f"{name}.{problem}"
        for name, entry in (models.items() if isinstance(models, dict) else [("models", {})])
        for problem in [entry_problem(entry)]
        if problem is not None
    ]
    if broken or not isinstance(data.get("versions"), dict):
        what = broken[0] if broken else "versions"
        raise UsageError(f"{path}: {what} is missing or malformed; run graphcheck lock")
    return data
