"""Stage-program equivalence: each stage runs the slice of the uncut program it replaces.

For every stage of a plan the stage builder makes the stage module, graphcheck
exports it with the same symbolic inputs and compares, part by part, the
program it will actually run with the uncut program: every global layer, the
embedding on the first stage, the norm and head on the last, the side inputs
each layer reads, and the hand-off between consecutive stages.

Stages are built as ranks build them. :func:`build_stage_fresh` runs in a fresh
process (:func:`graphcheck.fresh.run_fresh`): it imports the model code, builds
the model as its factory does (the model the builder takes), applies the kernel
stand-ins and the builder, exports the stage and analyses it. No state left by
building or exporting the uncut model or another stage reaches it: class-level
counters, caches filled by a first caller and module-level flags set at trace
time start as a rank finds them. The builder takes a model built in that same
process, as on a rank that builds the model and then takes its stage: a builder
that constructs fresh layers finds a class counter where building the model left
it. A model given as a Python object cannot be
rebuilt elsewhere; its stages are built in this process and the report says so
(``isolated: false``).

What comes back from the fresh process is a :class:`StageProgram`: the stage's
parts (:class:`graphcheck.fingerprint.Part`, plain data) and what the checks
read, not the exported program. Shipping the exported program instead
(``torch.export.save``/``load``) keeps ``nn_module_stack``, ``stack_trace`` and
the symbol names, but loading costs about 7 ms a node in this process, more
than exporting the stage; fingerprints cost nothing to load and the child
analyses its own program with the same passes.

The stage's layer container is found by module identity with the model's
(builders that keep the layer objects), else by the stage's own
``get_pp_module_config()``, the model's prefix, a path that ends the same way
(``inner.model.layers`` for ``model.layers``) or the usual names; edge modules
and model-level FQNs are mapped through the same change of root.

Parts are compared by a Weisfeiler-Lehman hash (different hashes prove a
difference) and, when hashes agree, by an exact ``DiGraphMatcher`` isomorphism.
"""

from __future__ import annotations

import difflib
import functools
import logging
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.fx
from networkx.algorithms.isomorphism import DiGraphMatcher
from torch import nn

from graphcheck.diagnostics import source_line
from graphcheck.errors import AnalysisError, GraphcheckError, LayoutError, ModelLoadError
from graphcheck.export import export_model
from graphcheck.fingerprint import (
    NodeRecord,
    Part,
    Provenance,
    glue_labels,
    is_identity_view,
    is_size,
    op_label,
    part_of,
    record,
)
from graphcheck.layout import _LAYER_CANDIDATES, Layout, _layer_keys
from graphcheck.load import default_dtype
from graphcheck.program import Program, analyse
from graphcheck.regions import GLUE, INPUT, OUTPUT, Region

__all__ = [
    "Mismatch",
    "StageProgram",
    "StageRequest",
    "build_stage",
    "build_stage_fresh",
    "compare_stage",
    "same_part",
    "stage_layout",
]


@dataclass
class StageProgram:
    """One stage module, exported and analysed, as plain data: how its layers map to
    global ones and the parts :func:`compare_stage` compares."""

    index: int
    layers: list[int]
    keys: dict[str, int]  # container key -> global layer index
    renumbered: bool
    layer_ids: dict[int, int] = field(default_factory=dict)  # global -> layer_idx attribute
    seconds: float = 0.0
    nodes: int = 0
    parts: dict[Region, Part] = field(default_factory=dict)
    glue: Counter = field(default_factory=Counter)  # model-level op labels
    glue_nodes: dict[str, NodeRecord] = field(default_factory=dict)  # first node per label
    outputs: list[tuple[str | None, list[str] | None, NodeRecord]] = field(default_factory=list)
    isolated: bool = False  # built and exported in a fresh process


@dataclass
class Mismatch:
    """A difference between a stage program and the uncut program.

    ``kind``: ``layer`` (an op differs), ``side-choice`` (a layer reads another side
    input the uncut program also computes), ``side-prelude`` (the stage computes a side
    input the uncut program never does), ``edge`` (embedding / norm+head), ``boundary``
    (the hand-off between stages), ``missing`` (a layer the stage does not run),
    ``extra`` (a layer the uncut program does not run), ``glue`` (model-level work).
    ``node`` and ``uncut`` are FX nodes or :class:`NodeRecord` values (both carry
    ``name`` and ``meta``)."""

    kind: str
    stage: int
    layer: int | None
    message: str
    node: NodeRecord | torch.fx.Node | None = None
    uncut: NodeRecord | torch.fx.Node | None = None


@dataclass(frozen=True)
class StageRequest:
    """What a fresh process needs to build one stage, as plain data."""

    model: str  # a MODEL spec: file.py:factory, pkg.mod:factory or hf:...
    builder: str  # a builtin name or file.py:function
    layout: Layout  # the uncut model's
    index: int
    layers: tuple[int, ...]
    num_stages: int
    hidden: int  # width of the residual the stage takes (0 on the first stage)
    strict: bool = False
    settings: tuple[tuple[str, object], ...] = ()
    kernels: str | None = None
    stand_ins: bool = True


def _mapping(container: nn.Module, prefix: str, layers: list[int]) -> tuple[dict, bool]:
    keys, _ = _layer_keys(container, prefix)
    present = sorted(keys, key=keys.__getitem__)
    if sorted(keys.values()) == sorted(layers):
        return keys, False
    if len(present) == len(layers):
        return dict(zip(present, layers, strict=True)), True
    return {}, True


def build_stage_fresh(request: StageRequest) -> StageProgram:
    """Build, export and summarise one stage from nothing but the model code (run in a
    fresh process). Anything unexpected becomes a one-line :class:`GraphcheckError`;
    torch's warnings and logs stay in the child (findings come back as data)."""
    logging.getLogger("torch").setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stage = _build_fresh(request)
    except GraphcheckError:
        raise
    except Exception as err:
        raise AnalysisError(
            f"stage {request.index}: building it raised {_one_line(err)}; cannot verify"
        ) from None
    stage.isolated = True
    return stage


def _build_fresh(request: StageRequest) -> StageProgram:
    from graphcheck.hf import hf_factory, is_hf_spec
    from graphcheck.kernels import BUILTIN, load_kernels, patched
    from graphcheck.load import build_fake, fake_mode, resolve_factory
    from graphcheck.stages import resolve_builder

    mode = fake_mode()
    spec = request.model
    factory = (
        hf_factory(spec, dict(request.settings)) if is_hf_spec(spec) else resolve_factory(spec)
    )
    model = build_fake(factory, mode)
    stand_ins = (
        *(BUILTIN if request.stand_ins else ()),
        *(load_kernels(request.kernels) if request.kernels else ()),
    )
    builder = resolve_builder(request.builder, request.layout)
    with patched(model, stand_ins):
        return build_stage(
            model, request.layout, builder, mode, request.index, list(request.layers),
            request.num_stages, request.hidden, request.strict, request.builder,
        )  # fmt: skip


def _one_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    text = f"{type(err).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= 300 else text[:297] + "..."


def build_stage(
    model: nn.Module,
    layout: Layout,
    builder,
    mode,
    index: int,
    layers: list[int],
    num_stages: int,
    hidden: int,
    strict: bool = False,
    name: str | None = None,
) -> StageProgram:
    """Build stage ``index`` with ``builder``, export it, analyse it and summarise it."""
    module = _call_builder(builder, model, mode, index, layers, num_stages, name)
    stage_lay, rename = stage_layout(module, layout, layers, model)
    kind = "input_ids" if index == 0 else "hidden"
    try:
        exported = export_model(module, mode, strict, stage_input=kind, hidden_size=hidden)
        program = analyse(exported, stage_lay)
    except GraphcheckError as err:
        raise type(err)(f"stage {index}: {err}") from None
    container = module.get_submodule(stage_lay.layer_prefix)
    keys, renumbered = _mapping(container, stage_lay.layer_prefix, layers)
    stage = StageProgram(
        index, list(layers), keys, renumbered, _layer_ids(container, keys), exported.seconds,
        len(program.graph.nodes),
    )  # fmt: skip
    _summarise(stage, program, rename)
    return stage


def _call_builder(builder, model, mode, index, layers, num_stages, name) -> nn.Module:
    what = name or getattr(builder, "__qualname__", "the stage builder")
    try:
        with mode, default_dtype(torch.bfloat16):
            module = builder(model, index, list(layers), num_stages)
    except GraphcheckError as err:
        raise type(err)(f"stage {index}: {err}") from None
    except Exception as err:
        raise ModelLoadError(
            f"stage builder {what} raised {_one_line(err)} for stage {index} "
            f"(layers {layers[0] if layers else '-'}-{layers[-1] if layers else '-'}); "
            "fix the builder"
        ) from None
    if not isinstance(module, nn.Module):
        raise ModelLoadError(
            f"stage builder {what} returned {type(module).__name__} for stage {index}; "
            "return an nn.Module"
        )
    return module


def stage_layout(
    module: nn.Module, layout: Layout, layers: list[int], model: nn.Module | None = None
) -> tuple[Layout, Callable[[str], str]]:
    """The layout of stage ``module`` (its own layer prefix, the edge modules it holds,
    container keys mapped to global layers) and the map from its FQNs to the uncut
    model's (``inner.model.norm.weight`` -> ``model.norm.weight``)."""
    prefix = _find_layers(module, layout, model)
    uroot, sroot = _roots(layout.layer_prefix, prefix)
    moved = {prefix: layout.layer_prefix}  # stage FQN -> uncut FQN
    edges: tuple[list[str], list[str]] = ([], [])
    for fqns, found in zip((layout.input_fqns, layout.output_fqns), edges, strict=True):
        for fqn in fqns:
            at = next((c for c in (_moved(fqn, uroot, sroot), fqn) if _has(module, c)), None)
            if at is not None:
                found.append(at)
                moved[at] = fqn
    keys, _ = _mapping(module.get_submodule(prefix), prefix, layers)
    stage = Layout(prefix, tuple(edges[0]), tuple(edges[1]), layout.num_layers, keys, "stage")
    return stage, functools.partial(_rename, moved, sroot, uroot)


def _rename(moved: dict[str, str], sroot: str, uroot: str, fqn: str) -> str:
    for at, fqn_uncut in sorted(moved.items(), key=lambda kv: -len(kv[0])):
        if fqn == at or fqn.startswith(at + "."):
            return fqn_uncut + fqn[len(at) :]
    return _moved(fqn, sroot, uroot)


def _find_layers(module: nn.Module, layout: Layout, model: nn.Module | None) -> str:
    """The path of ``module``'s layer container (see the module docstring for the order)."""
    found = _by_identity(module, model, layout) if model is not None else None
    declared = getattr(module, "get_pp_module_config", None)
    try:
        own = declared().get("layer_prefix") if callable(declared) else None
    except Exception:
        own = None
    names = [p for p, m in module.named_modules() if isinstance(m, nn.ModuleList | nn.ModuleDict)]
    ending = sorted(
        (p for p in names if p.endswith("." + layout.layer_prefix)
         or layout.layer_prefix.endswith("." + p)),
        key=len,
    )  # fmt: skip
    for candidate in (found, own, layout.layer_prefix, *ending, *_LAYER_CANDIDATES):
        if candidate and _is_container(module, candidate):
            return candidate
    raise LayoutError(
        f"cannot find the layer container of the {type(module).__name__} the stage builder "
        f"returned (not at {layout.layer_prefix!r}); give the stage module a "
        "get_pp_module_config() naming its layer_prefix"
    )


def _by_identity(module: nn.Module, model: nn.Module, layout: Layout) -> str | None:
    try:
        container = model.get_submodule(layout.layer_prefix)
    except AttributeError:
        return None
    layers = {id(m) for m in container.children()}
    for path, sub in module.named_modules():
        if sub is container:
            return path
        if isinstance(sub, nn.ModuleList | nn.ModuleDict) and any(
            id(m) in layers for m in sub.children()
        ):
            return path
    return None


def _is_container(module: nn.Module, fqn: str) -> bool:
    try:
        return isinstance(module.get_submodule(fqn), nn.ModuleList | nn.ModuleDict)
    except AttributeError:
        return False


def _roots(uncut: str, stage: str) -> tuple[str, str]:
    """The differing heads of two layer prefixes (``model.layers``, ``inner.model.layers``
    -> ``("", "inner")``)."""
    u, s = uncut.split("."), stage.split(".")
    while u and s and u[-1] == s[-1]:
        u, s = u[:-1], s[:-1]
    return ".".join(u), ".".join(s)


def _moved(fqn: str, old: str, new: str) -> str:
    """``fqn`` under root ``old`` moved to root ``new``; unchanged if not under ``old``."""
    if old and not fqn.startswith(old + "."):
        return fqn
    rest = fqn[len(old) + 1 :] if old else fqn
    return f"{new}.{rest}" if new else rest


def _has(module: nn.Module, fqn: str) -> bool:
    try:
        return module.get_submodule(fqn) is not None
    except AttributeError:
        return False


def _layer_ids(container: nn.Module, keys: dict[str, int]) -> dict[int, int]:
    ids = {}
    for key, g in keys.items():
        layer = container[key] if isinstance(container, nn.ModuleDict) else container[int(key)]
        for attr in ("layer_idx", "layer_id"):
            value = getattr(layer, attr, None)
            if isinstance(value, int):
                ids[g] = value
                break
    return ids


def _summarise(stage: StageProgram, program: Program, rename: Callable[[str], str]) -> None:
    """Fill ``stage`` with the parts and facts :func:`compare_stage` reads."""
    provenance = Provenance(program, rename)
    for region in (*(Region("layer", g) for g in stage.layers), INPUT, OUTPUT):
        stage.parts[region] = part_of(program, region, provenance)
    stage.glue = glue_labels(program, program.graph.nodes)
    for node in program.graph.nodes:
        if (
            program.region.get(node) == GLUE
            and node in program.interval
            and node.op == "call_function"
            and not is_size(node)
            and not is_identity_view(node)
        ):
            stage.glue_nodes.setdefault(op_label(program, node), record(program, node))
    output = next(n for n in program.graph.nodes if n.op == "output")
    values = [a for a in output.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]
    stage.outputs = [(program.dtype(v), program.shape(v), record(program, v)) for v in values]
    if not values:
        stage.outputs = [(None, None, record(program, output))]


def same_part(a: Part, b: Part) -> bool:
    """Exact equality of two parts: WL hashes as a filter, then an isomorphism."""
    if len(a.graph) != len(b.graph) or a.hash != b.hash:
        return False
    matcher = DiGraphMatcher(
        a.graph,
        b.graph,
        node_match=lambda x, y: x["label"] == y["label"],
        edge_match=lambda x, y: x["pos"] == y["pos"],
    )
    return matcher.is_isomorphic()


class _Uncut:
    """The uncut program's parts and the set of side inputs it computes."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.provenance = Provenance(program)
        self._all: set[str] | None = None

    def part(self, region: Region) -> Part:
        return part_of(self.program, region, self.provenance)

    @property
    def all(self) -> set[str]:
        if self._all is None:
            nodes = self.program.graph.nodes
            self._all = {self.provenance(n) for n in nodes if n not in self.program.interval}
        return self._all


def compare_stage(
    uncut: Program, stage: StageProgram, last: bool, hidden: int, glue: Counter | None = None
) -> list[Mismatch]:
    """Every difference between ``stage``'s program and its slice of ``uncut``.

    ``glue`` holds the labels of the model-level ops the plan runs on this stage in
    the uncut program; the stage program must run exactly those outside its layers."""
    u = _Uncut(uncut)
    present = set(uncut.layout.layer_keys.values())
    found = []
    for g in stage.layers:
        sp = stage.parts.get(Region("layer", g))
        if g not in present:
            found += _extra_layer(stage, g, sp)
            continue
        found += _compare(u.part(Region("layer", g)), sp, u, stage.index, g)
    if stage.index == 0:
        found += _compare(u.part(INPUT), stage.parts[INPUT], u, stage.index, None)
    if last:
        found += _compare(u.part(OUTPUT), stage.parts[OUTPUT], u, stage.index, None)
    else:
        found += _boundary(stage, hidden)
    if glue is not None:
        found += _glue_difference(stage, glue)
    return found


def _extra_layer(stage: StageProgram, g: int, part: Part | None) -> list[Mismatch]:
    if part is None or not part.ops:
        return []
    message = f"stage {stage.index} runs global layer {g}, which the uncut program does not run"
    return [Mismatch("extra", stage.index, g, message, part.ops[0])]


def _glue_difference(stage: StageProgram, expected: Counter) -> list[Mismatch]:
    """Model-level ops (outside every module) the stage adds to or drops from the uncut
    program's share of this stage."""
    added, dropped = stage.glue - expected, expected - stage.glue
    if not added and not dropped:
        return []
    label = next(iter(added or dropped))
    node = stage.glue_nodes.get(label) if added else None
    what = "adds" if added else "drops"
    message = (
        f"stage {stage.index} {what} model-level work outside its modules: `{label}` "
        f"({sum(added.values())} ops added, {sum(dropped.values())} dropped against the uncut "
        "program); run the model's own code between layers"
    )
    return [Mismatch("glue", stage.index, None, message, node)]


def _compare(up: Part, sp: Part, u: _Uncut, index: int, layer) -> list[Mismatch]:
    if same_part(up, sp):
        return []
    what = f"global layer {layer}" if layer is not None else _edge_name(up)
    if not sp.ops and up.ops:
        return [Mismatch("missing", index, layer, f"stage {index} does not run {what}")]
    kind = "layer" if layer is not None else "edge"
    if up.labels() != sp.labels():
        return [_op_difference(up, sp, index, layer, what, kind)]
    return [_external_difference(up, sp, u, index, layer, what, kind)]


def _edge_name(part: Part) -> str:
    return "the input modules" if part.region == INPUT else "the output modules"


def _op_difference(up: Part, sp: Part, index, layer, what, kind) -> Mismatch:
    matcher = difflib.SequenceMatcher(a=up.labels(), b=sp.labels(), autojunk=False)
    tag, i1, _, j1, _ = next(op for op in matcher.get_opcodes() if op[0] != "equal")
    unode = up.ops[i1] if i1 < len(up.ops) else None
    snode = sp.ops[j1] if j1 < len(sp.ops) else None
    umod = unode.within if unode else None
    smod = snode.within if snode else None
    if tag == "replace" and unode.op == snode.op and umod == smod:
        detail = _arg_difference(unode, snode)
    elif umod != smod and unode is not None and snode is not None:
        detail = f"uncut program runs `{umod}`; this stage's program runs `{smod}`"
    elif len(up.ops) == len(sp.ops):
        detail = f"uncut program {_call(unode)}; this stage's program {_call(snode)}"
    else:
        detail = (
            f"uncut program has {len(up.ops)} ops, stage {index} program {len(sp.ops)}; "
            f"first divergence: uncut {_call(unode)}, stage {_call(snode)}"
        )
    return Mismatch(kind, index, layer, f"{what}: {detail}", snode, unode)


def _call(node: NodeRecord | None) -> str:
    return f"calls `{node.op}`" if node is not None else "has no more ops"


def _arg_difference(unode: NodeRecord, snode: NodeRecord) -> str:
    ua, sa = dict(unode.args), dict(snode.args)
    diffs = [(k, ua.get(k), sa.get(k)) for k in dict.fromkeys([*ua, *sa]) if ua.get(k) != sa.get(k)]
    if not diffs:
        diffs.append(("result", unode.value, snode.value))
    ustr = ", ".join(f"{k}={a}" for k, a, _ in diffs)
    sstr = ", ".join(f"{k}={b}" for k, _, b in diffs)
    name = unode.op
    return f"uncut program calls `{name}({ustr})`; this stage's program calls `{name}({sstr})`"


def _external_difference(up: Part, sp: Part, u: _Uncut, index, layer, what, kind) -> Mismatch:
    ulabels = {n.label: n for n in up.externals.values()}
    slabels = {n.label: n for n in sp.externals.values()}
    extra = [label for label in slabels if label not in ulabels]
    gone = [label for label in ulabels if label not in slabels]
    if not extra:
        return Mismatch(kind, index, layer, f"{what}: same ops, wired differently")
    snode, unode = slabels[extra[0]], ulabels[gone[0]] if gone else None
    if extra[0].startswith("side:"):
        kind = "side-choice" if extra[0][5:] in u.all else "side-prelude"
    read = _describe(snode)
    instead = f" where the uncut program reads {_describe(unode)}" if unode else ""
    return Mismatch(kind, index, layer, f"{what} reads {read}{instead}", snode, unode)


def _describe(node: NodeRecord) -> str:
    where = source_line(node)
    return f"`{node.name}` ({node.place}{'; ' + where if where else ''})"


def _boundary(stage: StageProgram, hidden: int) -> list[Mismatch]:
    """A non-last stage must return the bf16 ``[1, T, H]`` the next stage takes as ``x``."""
    want = ["1", "T", str(hidden)]
    values = [(d, s, n) for d, s, n in stage.outputs if d is not None]
    if len(values) == 1 and (values[0][0], values[0][1]) == ("bfloat16", want):
        return []
    got = ", ".join(f"{d}{s}" for d, s, _ in values) or "nothing"
    message = (
        f"stage {stage.index} returns {got}, but stage {stage.index + 1} takes "
        f"x = bfloat16{want}; return the bf16 residual stream"
    )
    node = values[0][2] if values else stage.outputs[0][2] if stage.outputs else None
    return [Mismatch("boundary", stage.index, None, message, node)]
