"""``graphcheck.lock``: what a model-code change can alter, recorded per model.

Per model (keyed by its check's name):

* ``layers``: per layer ``[index, fingerprint, kind]``; the fingerprint hashes the
  layer's labelled program (:mod:`graphcheck.stages.fingerprint`: the parts stage
  equivalence compares, its Weisfeiler-Lehman hash and its op list), the kind is the
  cut explorer's label (:mod:`graphcheck.analysis.kinds`);
* ``edges``: ``[part, fingerprint]`` of the parts outside the layers, the same way: the
  ``input`` modules (embedding), the model-level code between modules (``glue``: the
  prelude, the loop's own ops) and the ``output`` modules (final norm, head);
* ``programs``: each distinct layer or edge program once, keyed by fingerprint: its ops in
  graph order, each ``[op, result, "arg=value", ...]`` (the non-tensor arguments), so a
  later run can say in words what changed; 126 identical layers cost one entry;
* ``boundaries``: per boundary 0..L ``[position, verdict, [codes], [crossing]]``, the
  crossing set as ``role dtype[shape]`` (the map's sweep, one export);
* ``residual``: the wire every cut hands over, as the model lays it out
  (``residual bfloat16 [T, 64]``, ``residual bfloat16 [1, T, 64]``; a declared
  boundary state by its name): a runtime sizes its receive buffers from it;
* ``findings``: codes of whole-program findings (no cut of their own);
* ``plans``: per plan ``[name, verdict, [codes]]``;
* ``sources``: a hash of each file the model's code comes from (the files defining its
  module classes, the kernels file, the spec's file or config.json): its path relative to
  the lock, a module name for an installed one (transformers' model files);

and once, the ``versions`` of graphcheck, torch and transformers.

The file's layout (JSON, one fact per line), reading and writing it:
:mod:`graphcheck.project.lockfile`, which imports no torch. This module computes an
entry from an export (a :class:`~graphcheck.project.lockfile.ModelState`: the entry and
each op's model source line, which locates a change in words).

>>> compact_op("torch_attn._varlen_attn.default", "(FakeTensor, FakeTensor)",
...            [("query", "%"), ("window_size", "[8, 0]")])
['torch_attn._varlen_attn', '(Tensor, Tensor)', 'window_size=[8, 0]']
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from pathlib import Path

import torch

from graphcheck.analysis.kinds import layer_kinds
from graphcheck.analysis.regions import Region, RegionKind
from graphcheck.analysis.residual import residual_layout
from graphcheck.diagnostics import source_line
from graphcheck.model.spec import ModelSpec
from graphcheck.project.lockfile import FORMAT, ModelState, dumps, read_lock, versions, write_lock
from graphcheck.project.record import PlanResult
from graphcheck.stages.fingerprint import Provenance, part_of

__all__ = [
    "EDGES",
    "FORMAT",
    "ModelState",
    "compact_op",
    "dumps",
    "model_state",
    "read_lock",
    "residual_record",
    "source_hashes",
    "versions",
    "write_lock",
]

EDGES = (RegionKind.INPUT, RegionKind.GLUE, RegionKind.OUTPUT)  # the parts outside the layers
_TORCH_DIR = Path(torch.__file__).resolve().parent


def compact_op(op: str, value: str, args) -> list[str]:
    """An op as the lock stores it: name, result, then ``arg=value`` for each non-tensor
    argument (``%`` stands for a tensor)."""
    name = op.removesuffix(".default")
    result = value.replace("FakeTensor", "Tensor").replace("'", "")
    return [name, result, *(f"{k}={v}" for k, v in args if v != "%")]


def _fingerprint(part_hash: str, ops: list[list[str]]) -> str:
    text = part_hash + "\n" + json.dumps(ops)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def residual_record(program) -> str:
    """The wire every cut carries, as the lock records it: a declared boundary state by
    its name and shape, else the residual in the model's layout (``[1, T, H]`` or the flat
    ``[T, H]``; ``layout unknown`` when the model's edges show both)."""
    state = program.layout.boundary_state
    if state is not None:
        return f"{state.state} {state.expected}"
    layout = residual_layout(program)
    return f"residual bfloat16 {layout.expected}" if layout else "residual layout unknown"


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
    target = ModelSpec.of(spec).file
    files = [target] if target is not None and Path(target).is_file() else []
    return files + ([options["kernels"]] if options.get("kernels") else [])


def _portable(spec: str, folder: Path) -> str:
    """``spec`` with its file path relative to the lock's folder (the same lock wherever
    graphcheck runs from).

    >>> _portable("/p/models/m.py:f", Path("/p")), _portable("hf:llama", Path("/p"))
    ('models/m.py:f', 'hf:llama')
    """
    model = ModelSpec.of(spec)
    if model.file is None:
        return spec
    return model.with_target(Path(os.path.relpath(Path(model.file).absolute(), folder)).as_posix())


def _part(program, region: Region, provenance: Provenance, programs: dict) -> tuple[str, list]:
    """The fingerprint of ``region``'s part (its ops stored in ``programs``) and the model
    source line of each of its ops."""
    part = part_of(program, region, provenance)
    ops = [compact_op(r.op, r.value, r.args) for r in part.ops]
    fingerprint = _fingerprint(part.hash, ops)
    programs[fingerprint] = ops
    return fingerprint, [source_line(r) for r in part.ops]


def model_state(
    explorer, spec: str, options: dict, plans: dict[str, PlanResult], folder: Path
) -> ModelState:
    """The lock entry of one model: its layers, its edges (input modules, model-level code,
    output modules) and their programs, its boundaries (the map, from ``explorer``'s
    export), its ``plans`` (name -> result) and sources."""
    program = explorer.program
    provenance = Provenance(program)
    cut_map = explorer.map()
    layers, edges, programs, lines = [], [], {}, {}
    for i, kind in enumerate(layer_kinds(program)):
        fingerprint, lines[i] = _part(program, Region(RegionKind.LAYER, i), provenance, programs)
        layers.append([i, fingerprint, kind.label])
    for edge in EDGES:
        fingerprint, lines[str(edge)] = _part(program, Region(edge), provenance, programs)
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
        "residual": residual_record(program),
        "findings": sorted({d.code for d in cut_map.errors if d.cut is None}),
        "plans": [[name, p.verdict, list(p.errors)] for name, p in plans.items()],
        "sources": source_hashes(explorer.session.module, _spec_files(spec, options), folder),
    }
    return ModelState(entry, lines)
