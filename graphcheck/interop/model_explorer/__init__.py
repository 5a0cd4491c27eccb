"""The Model Explorer overlay: the exported program as a ``.pt2`` and node data on it.

``graphcheck verify|map MODEL --model-explorer DIR`` writes, next to its report:

* ``DIR/model.pt2``: the uncut program graphcheck proved (``torch.export.save``);
* ``DIR/stages.json`` (verify): each node's stage under the plan, as the proof placed it
  (a parameter, buffer or input: the stage of its readers; one read on several stages
  is left out and named in ``overlay.json``); ``DIR/layers.json`` (map): each node's
  layer (-1 the input modules, L the output modules);
* ``DIR/crossing.json``: each value crossing a cut (verify) or a boundary (map), with
  its role and where (``activation @ 4``, ``replicated @ 0-8``);
* ``DIR/findings.json``: each node a finding names, with its codes and cuts;
* ``DIR/overlay.json``: what was written, the verdict, the findings no node carries
  and the custom ops whose definitions opening the ``.pt2`` needs.

The node-data files are Model Explorer's ``ModelNodeData`` JSON (plain JSON: writing
them needs no extra package), keyed by the one graph id its PyTorch adapter builds
(``"graph"``) and the node ids it gives (the FX node names of ``ep.graph``).

Weights: graphcheck exports on fake weights, which neither ``torch.export.load`` (a
weights-only unpickler) nor the adapter can read. The saved copy holds, for each
parameter, buffer and constant, a real zero of its dtype expanded to its shape (one
element of storage: a 400B-parameter model's ``.pt2`` is the size of its graph).
Tied weights stay tied. The graph is a copy: the program graphcheck proved is left
as it was, and a copy whose node names differ from it is an error, not an overlay.
The example inputs are not saved (they are fake too): Model Explorer then shows no
constant values, which fake weights do not have.

Opening it: ``python -m graphcheck.interop.model_explorer DIR`` (the extra
``graphcheck[explorer]``) registers the custom ops graphcheck's export uses, builds the
graph with Model Explorer's PyTorch adapter and starts Model Explorer with the node
data (:mod:`graphcheck.interop.model_explorer.adapter`).

>>> ranges([0, 1, 2, 5, 7, 8])
'0-2, 5, 7-8'
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import warnings
from enum import StrEnum

import torch
import torch.fx

from graphcheck.analysis.regions import RegionKind
from graphcheck.errors import AnalysisError, UsageError

__all__ = [
    "GRAPH_ID",
    "OverlayFile",
    "check_folder",
    "crossing_data",
    "custom_ops",
    "findings_data",
    "layer_data",
    "ranges",
    "save_program",
    "stage_data",
    "write_overlay",
]

GRAPH_ID = "graph"  # the id Model Explorer's PyTorch adapter gives the one graph it builds
_BUILTIN_NAMESPACES = frozenset({"aten", "prims", "higher_order", "torch_attn", "graphcheck"})
_PALETTE = ("#8dd3c7", "#fdb462", "#bebada", "#80b1d3", "#b3de69", "#fccde5", "#ffffb3", "#d9d9d9")
_ROLE_COLOR = {"activation": "#fb8072", "replicated": "#80b1d3", "parameter": "#d9d9d9"}


class OverlayFile(StrEnum):
    """The files ``--model-explorer DIR`` writes."""

    PROGRAM = "model.pt2"
    STAGES = "stages.json"
    LAYERS = "layers.json"
    CROSSING = "crossing.json"
    FINDINGS = "findings.json"
    MANIFEST = "overlay.json"


def check_folder(folder: str) -> None:
    """``--model-explorer DIR``: DIR is a folder, or a new one whose parent exists
    (checked before any export)."""
    parent = os.path.dirname(os.path.abspath(folder))
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UsageError(f"--model-explorer {folder}: not a folder; give a folder to write into")
    if not os.path.isdir(parent):
        raise UsageError(f"--model-explorer {folder}: the folder {parent} does not exist")


def ranges(positions: list[int]) -> str:
    """Sorted positions as runs (``0-2, 5``)."""
    runs: list[list[int]] = []
    for k in sorted(set(positions)):
        if runs and k == runs[-1][1] + 1:
            runs[-1][1] = k
        else:
            runs.append([k, k])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def _graph_data(name: str, results: dict[str, dict], **options) -> dict:
    """One ``ModelNodeData`` document: ``GraphNodeData`` under :data:`GRAPH_ID`."""
    return {GRAPH_ID: {"name": name, "results": results, **options}}


def _placeholder_stages(ctx, node: torch.fx.Node) -> set[int]:
    stages: set[int] = set()
    for user in node.users:
        stage = ctx.stage_of(user)
        stages.update(() if stage is None else (stage,))
    return stages


def stage_data(ctx) -> tuple[dict, list[str]]:
    """Each node's stage under ``ctx.plan`` (the proof's placement); placeholders by
    their readers. Returns the node data and the placeholders read on several stages."""
    results: dict[str, dict] = {}
    several: list[str] = []
    for node in ctx.program.graph.nodes:
        stage = ctx.stage_of(node)
        if stage is None and node.op == "placeholder":
            stages = _placeholder_stages(ctx, node)
            if len(stages) > 1:
                several.append(node.name)
            stage = next(iter(stages)) if len(stages) == 1 else None
        if stage is not None:
            results[node.name] = {"value": stage, "bgColor": _PALETTE[stage % len(_PALETTE)]}
    return _graph_data("graphcheck stage", results), several


def layer_data(program) -> dict:
    """Each node's layer (-1 the input modules, L the output modules); glue, inputs
    and parameters have none."""
    results: dict[str, dict] = {}
    last = program.num_layers
    for node, region in program.region.items():
        if region.kind == RegionKind.LAYER:
            value = region.layer
        elif region.kind in (RegionKind.INPUT, RegionKind.OUTPUT):
            value = -1 if region.kind == RegionKind.INPUT else last
        else:
            continue
        results[node.name] = {"value": value, "bgColor": _PALETTE[(value + 1) % len(_PALETTE)]}
    return _graph_data("graphcheck layer", results)


def crossing_data(report, where: str) -> dict:
    """Each crossing value: ``role @ positions`` (``where`` is ``cut`` or ``boundary``)."""
    crossed: dict[str, dict[str, list[int]]] = {}
    for cut in report.cuts:
        for value in cut.crossing:
            roles = crossed.setdefault(value.node, {})
            roles.setdefault(str(value.role), []).append(cut.position)
    results = {
        name: {
            "value": "; ".join(f"{role} @ {ranges(at)}" for role, at in sorted(roles.items())),
            "bgColor": _ROLE_COLOR.get(min(roles), "#ffffb3"),
        }
        for name, roles in crossed.items()
    }
    return _graph_data(f"graphcheck crossing ({where})", results)


def findings_data(report, names: set[str]) -> tuple[dict, list[dict]]:
    """Each node a finding names: ``GC201 @ cut 4; ...``. Returns the node data and the
    findings no node of the graph carries (whole-program findings, stage programs)."""
    found: dict[str, list[str]] = {}
    unplaced: list[dict] = []
    for d in report.diagnostics:
        if d.node is None or d.node not in names:
            unplaced.append({"code": d.code, "cut": d.cut, "node": d.node, "message": d.message})
            continue
        at = f" @ cut {d.cut}" if d.cut is not None else ""
        found.setdefault(d.node, []).append(f"{d.code}{at}")
    results = {
        name: {"value": "; ".join(dict.fromkeys(codes)), "bgColor": "#e41a1c"}
        for name, codes in found.items()
    }
    return _graph_data("graphcheck findings", results), unplaced


def custom_ops(graph: torch.fx.Graph) -> list[str]:
    """Ops outside torch's and graphcheck's own namespaces: loading the ``.pt2`` needs
    the code that defines them imported first."""
    found = set()
    for node in graph.nodes:
        target = node.target
        if (
            isinstance(target, torch._ops.OpOverload)
            and target.namespace not in _BUILTIN_NAMESPACES
        ):
            found.add(f"{target.namespace}::{target._opname}")
    return sorted(found)


def _realise(tensor, made: dict[int, torch.Tensor]):
    """A real zero of ``tensor``'s dtype expanded to its shape (one element of storage);
    the same object for the same tensor, so tied weights stay tied."""
    if not isinstance(tensor, torch.Tensor):
        return tensor
    if id(tensor) not in made:
        with torch._subclasses.fake_tensor.unset_fake_temporarily():
            zero = torch.zeros((), dtype=tensor.dtype).expand(tuple(tensor.shape))
        made[id(tensor)] = (
            torch.nn.Parameter(zero, requires_grad=False)
            if isinstance(tensor, torch.nn.Parameter)
            else zero
        )
    return made[id(tensor)]


def save_program(program, path: str) -> None:
    """The exported program with zero weights and a copied graph, saved at ``path``;
    an :class:`AnalysisError` when the copy's node names differ or torch cannot save it."""
    ep = program.exported.program
    graph = copy.deepcopy(ep.graph)
    if [n.name for n in graph.nodes] != [n.name for n in ep.graph.nodes]:
        raise AnalysisError("the copied graph renames nodes: the overlay would not match it")
    made: dict[int, torch.Tensor] = {}
    try:
        saved = torch.export.ExportedProgram(
            root=ep.graph_module, graph=graph, graph_signature=ep.graph_signature,
            state_dict={k: _realise(v, made) for k, v in ep.state_dict.items()},
            range_constraints=ep.range_constraints, module_call_graph=ep.module_call_graph,
            example_inputs=None, constants={k: _realise(v, made) for k, v in ep.constants.items()},
            verifiers=ep.verifiers,
        )  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.export.save(saved, path)
    except Exception as err:  # torch's serializer: any failure means no .pt2
        with contextlib.suppress(OSError):
            os.remove(path)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise AnalysisError(
            f"cannot save the exported program for Model Explorer: {first[:300]}"
        ) from None


def _dump(folder: str, name: OverlayFile, data: dict) -> str:
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1)
    return path


def write_overlay(folder: str, program, report, ctx=None) -> list[str]:
    """Write the ``.pt2`` and the node data of ``report`` into ``folder``: the stages of
    ``ctx.plan`` for verify (``ctx`` the proof's context), the layers for map. Returns
    the paths written."""
    os.makedirs(folder, exist_ok=True)
    names = {n.name for n in program.graph.nodes}
    save_program(program, os.path.join(folder, OverlayFile.PROGRAM))
    written = [os.path.join(folder, OverlayFile.PROGRAM)]
    several: list[str] = []
    if ctx is not None and ctx.plan is not None:
        stages, several = stage_data(ctx)
        written.append(_dump(folder, OverlayFile.STAGES, stages))
    else:
        written.append(_dump(folder, OverlayFile.LAYERS, layer_data(program)))
    where = "cut" if report.mode == "verify" else "boundary"
    written.append(_dump(folder, OverlayFile.CROSSING, crossing_data(report, where)))
    findings, unplaced = findings_data(report, names)
    written.append(_dump(folder, OverlayFile.FINDINGS, findings))
    manifest = {
        "model": report.model, "mode": report.mode, "verdict": report.verdict,
        "graph": GRAPH_ID, "node_data": [os.path.basename(p) for p in written[1:]],
        "unplaced_findings": unplaced, "read_on_several_stages": several,
        "custom_ops": custom_ops(program.graph),
    }  # fmt: skip
    written.append(_dump(folder, OverlayFile.MANIFEST, manifest))
    return written
