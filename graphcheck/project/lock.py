"""``graphcheck.lock``: what a model-code change can alter, recorded per model.

Per model (keyed by its check's name):

* ``layers``: per layer ``[index, fingerprint, kind]``; the fingerprint hashes the
  layer's labelled program (:mod:`graphcheck.stages.fingerprint`: the parts stage
  equivalence compares, its Weisfeiler-Lehman hash and its op list), the kind is the
  cut explorer's label (:mod:`graphcheck.reporters.view.kinds`);
* ``edges``: ``[part, fingerprint]`` of the parts outside the layers, the same way: the
  ``input`` modules (embedding), the model-level code between modules (``glue``: the
  prelude, the loop's own ops) and the ``output`` modules (final norm, head);
* ``programs``: each distinct layer or edge program once, keyed by fingerprint: its ops in
  graph order, each ``[op, result, "arg=value", ...]`` (the non-tensor arguments), so a
  later run can say in words what changed; 126 identical layers cost one entry;
* ``boundaries``: per boundary 0..L ``[position, verdict, [codes], [crossing]]``, the
  crossing set as ``role dtype[shape]`` (the map's sweep, one export);
* ``findings``: codes of whole-program findings (no cut of their own);
* ``plans``: per plan ``[name, verdict, [codes]]``;
* ``sources``: a hash of each file the model's code comes from (the files defining its
  module classes, the kernels file, the spec's file or config.json): its path relative to
  the lock, a module name for an installed one (transformers' model files);

and once, the ``versions`` of graphcheck, torch and transformers.

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
>>> compact_op("torch_attn._varlen_attn.default", "(FakeTensor, FakeTensor)",
...            [("query", "%"), ("window_size", "[8, 0]")])
['torch_attn._varlen_attn', '(Tensor, Tensor)', 'window_size=[8, 0]']
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import torch

from graphcheck._version import __version__
from graphcheck.analysis.regions import Region, RegionKind
from graphcheck.errors import UsageError
from graphcheck.report import Report
from graphcheck.reporters.view.kinds import layer_kinds
from graphcheck.stages.fingerprint import NodeRecord, Provenance, part_of

__all__ = [
    "EDGES",
    "FORMAT",
    "ModelState",
    "compact_op",
    "dumps",
    "model_state",
    "read_lock",
    "source_hashes",
    "versions",
    "write_lock",
]

FORMAT = 1  # the lock's "lock" field: bumped when its layout changes
EDGES = (RegionKind.INPUT, RegionKind.GLUE, RegionKind.OUTPUT)  # the parts outside the layers
_TORCH_DIR = Path(torch.__file__).resolve().parent


@dataclass
class ModelState:
    """One model's lock entry, and the current run's op records per layer (their stack
    traces locate a change; the lock keeps no line numbers, so a comment moves nothing)."""

    entry: dict
    records: dict[int | str, list[NodeRecord]] = field(default_factory=dict)  # layer or edge


def versions() -> dict[str, str]:
    """graphcheck's, torch's and transformers' versions (``none``: not installed)."""
    try:
        transformers = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        transformers = "none"
    return {"graphcheck": __version__, "torch": torch.__version__, "transformers": transformers}


def compact_op(op: str, value: str, args) -> list[str]:
    """An op as the lock stores it: name, result, then ``arg=value`` for each non-tensor
    argument (``%`` stands for a tensor)."""
    name = op.removesuffix(".default")
    result = value.replace("FakeTensor", "Tensor").replace("'", "")
    return [name, result, *(f"{k}={v}" for k, v in args if v != "%")]


def _fingerprint(part_hash: str, ops: list[list[str]]) -> str:
    text = part_hash + "\n" + json.dumps(ops)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _crossing(crossing) -> list[str]:
    return [f"{c.role} {c.dtype or ''}[{', '.join(c.shape or [])}]" for c in crossing]


def _file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _source_key(path: Path, module: str, folder: Path) -> str:
    """An installed file by its module name (the same on every machine), any other by its
    path relative to the lock's folder."""
    if {"site-packages", "dist-packages"} & set(path.parts):
        return module
    return Path(os.path.relpath(path, folder)).as_posix()


def source_hashes(module: torch.nn.Module, files: list[str], folder: Path) -> dict[str, str]:
    """Hashes of the files ``module``'s classes are defined in (torch's own left out: its
    version is recorded) and of ``files`` (the spec's file, the kernels file)."""
    found: dict[Path, str] = {}
    for sub in module.modules():
        cls = type(sub)
        try:
            path = Path(inspect.getsourcefile(cls) or "").resolve()
        except TypeError:
            continue
        if path.is_file() and not path.is_relative_to(_TORCH_DIR):
            found[path] = cls.__module__
    for name in files:
        found.setdefault(Path(name).resolve(), Path(name).name)
    return {_source_key(p, m, folder): _file_hash(p) for p, m in sorted(found.items())}


def _spec_files(spec: str, options: dict) -> list[str]:
    target = spec.removeprefix("hf:") if spec.startswith("hf:") else spec.rpartition(":")[0]
    files = [target] if target.endswith((".py", ".json")) and Path(target).is_file() else []
    return files + ([options["kernels"]] if options.get("kernels") else [])


def _portable(spec: str, folder: Path) -> str:
    """``spec`` with its file path relative to the lock's folder (the same lock wherever
    graphcheck runs from).

    >>> _portable("/p/models/m.py:f", Path("/p")), _portable("hf:llama", Path("/p"))
    ('models/m.py:f', 'hf:llama')
    """
    prefix = "hf:" if spec.startswith("hf:") else ""
    rest = spec.removeprefix(prefix)
    target, sep, name = rest.rpartition(":") if not prefix else (rest, "", "")
    if not target.endswith((".py", ".json")):
        return spec
    relative = Path(os.path.relpath(Path(target).absolute(), folder)).as_posix()
    return f"{prefix}{relative}{sep}{name}"


def _part(program, region: Region, provenance: Provenance, programs: dict) -> tuple[str, list]:
    """The fingerprint of ``region``'s part (its ops stored in ``programs``) and its records."""
    part = part_of(program, region, provenance)
    ops = [compact_op(r.op, r.value, r.args) for r in part.ops]
    fingerprint = _fingerprint(part.hash, ops)
    programs[fingerprint] = ops
    return fingerprint, part.ops


def model_state(explorer, spec: str, options: dict, plans: dict[str, Report], folder: Path):
    """The lock entry of one model: its layers, its edges (input modules, model-level code,
    output modules) and their programs, its boundaries (the map, from ``explorer``'s
    export), its ``plans`` (name -> verify report) and sources."""
    program = explorer.program
    provenance = Provenance(program)
    cut_map = explorer.map()
    layers, edges, programs, records = [], [], {}, {}
    for i, kind in enumerate(layer_kinds(program)):
        fingerprint, records[i] = _part(program, Region(RegionKind.LAYER, i), provenance, programs)
        layers.append([i, fingerprint, kind.label])
    for edge in EDGES:
        fingerprint, records[edge] = _part(program, Region(edge), provenance, programs)
        edges.append([str(edge), fingerprint])
    entry = {
        "model": _portable(spec, folder),
        "layers": layers,
        "edges": edges,
        "programs": programs,
        "boundaries": [
            [c.position, c.verdict, sorted(set(c.codes)), _crossing(c.crossing)]
            for c in cut_map.cuts
        ],
        "findings": sorted({d.code for d in cut_map.errors if d.cut is None}),
        "plans": [
            [name, r.verdict, sorted({d.code for d in r.errors})] for name, r in plans.items()
        ],
        "sources": source_hashes(explorer.session.module, _spec_files(spec, options), folder),
    }
    return ModelState(entry, records)


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
        f"{name}.{key}"
        for name, entry in (models.items() if isinstance(models, dict) else [("models", {})])
        for key, kind in _SHAPE.items()
        if not isinstance(entry, dict) or not isinstance(entry.get(key), kind)
    ]
    if broken or not isinstance(data.get("versions"), dict):
        what = broken[0] if broken else "versions"
        raise UsageError(f"{path}: {what} is missing or malformed; run graphcheck lock")
    return data


_SHAPE = {
    "layers": list, "edges": list, "programs": dict, "boundaries": list, "findings": list,
    "plans": list, "sources": dict,
}  # fmt: skip
