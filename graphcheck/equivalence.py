"""Stage-program equivalence: each stage runs the slice of the uncut program it replaces.

For every stage of a plan the stage builder makes the stage module, graphcheck
exports it with the same symbolic inputs and compares, part by part, the
program it will actually run with the uncut program: every global layer, the
embedding on the first stage, the norm and head on the last, the side inputs
each layer reads, and the hand-off between consecutive stages.

Parts are compared by a Weisfeiler-Lehman hash (different hashes prove a
difference) and, when hashes agree, by an exact ``DiGraphMatcher`` isomorphism.
"""

from __future__ import annotations

import difflib
from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.fx
from networkx.algorithms.isomorphism import DiGraphMatcher
from torch import nn

from graphcheck.diagnostics import normalize_fqn
from graphcheck.errors import AnalysisError
from graphcheck.export import export_model
from graphcheck.fingerprint import Part, Provenance, glue_labels, op_label, part_of
from graphcheck.layout import Layout, _layer_keys
from graphcheck.load import default_dtype
from graphcheck.program import Program, analyse
from graphcheck.regions import INPUT, OUTPUT, Region

__all__ = ["StageProgram", "Mismatch", "build_stage", "compare_stage", "same_part"]


@dataclass
class StageProgram:
    """One stage module, exported and analysed, with how its layers map to global ones."""

    index: int
    layers: list[int]
    program: Program
    keys: dict[str, int]  # container key -> global layer index
    renumbered: bool
    layer_ids: dict[int, int] = field(default_factory=dict)  # global -> layer_idx attribute
    seconds: float = 0.0


@dataclass
class Mismatch:
    """A difference between a stage program and the uncut program.

    ``kind``: ``layer`` (an op differs), ``side-choice`` (a layer reads another side
    input the uncut program also computes), ``side-prelude`` (the stage computes a side
    input the uncut program never does), ``edge`` (embedding / norm+head), ``boundary``
    (the hand-off between stages), ``missing`` (a layer the stage does not run)."""

    kind: str
    stage: int
    layer: int | None
    message: str
    node: torch.fx.Node | None = None
    uncut: torch.fx.Node | None = None


def _mapping(container: nn.Module, prefix: str, layers: list[int]) -> tuple[dict, bool]:
    keys, _ = _layer_keys(container, prefix)
    present = sorted(keys, key=keys.__getitem__)
    if sorted(keys.values()) == sorted(layers):
        return keys, False
    if len(present) == len(layers):
        return dict(zip(present, layers, strict=True)), True
    return {}, True


def build_stage(
    model: nn.Module,
    layout: Layout,
    builder,
    mode,
    index: int,
    layers: list[int],
    plan,
    hidden: int,
    strict: bool = False,
) -> StageProgram:
    """Build stage ``index`` with ``builder``, export it and analyse it."""
    num = plan.num_stages
    with mode, default_dtype(torch.bfloat16):
        module = builder(model, index, list(layers), num)
    if not isinstance(module, nn.Module):
        raise AnalysisError(f"stage builder returned {type(module).__name__} for stage {index}")
    container = module.get_submodule(layout.layer_prefix)
    keys, renumbered = _mapping(container, layout.layer_prefix, layers)
    present = [fqn for fqn in (*layout.input_fqns, *layout.output_fqns) if _has(module, fqn)]
    stage_layout = Layout(
        layout.layer_prefix,
        tuple(f for f in layout.input_fqns if f in present),
        tuple(f for f in layout.output_fqns if f in present),
        layout.num_layers,
        keys,
        "stage",
    )
    kind = "input_ids" if index == 0 else "hidden"
    exported = export_model(module, mode, strict, stage_input=kind, hidden_size=hidden)
    ids = _layer_ids(container, keys)
    return StageProgram(
        index, list(layers), analyse(exported, stage_layout), keys, renumbered, ids,
        exported.seconds,
    )  # fmt: skip


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


class _Side:
    """Provenance hashes of one program, and the set of side inputs it computes."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.provenance = Provenance(program)
        self._all: set[str] | None = None

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
    u, s = _Side(uncut), _Side(stage.program)
    ukeys = {g: k for k, g in uncut.layout.layer_keys.items()}
    skeys = {g: k for k, g in stage.keys.items()}
    prefix = uncut.layout.layer_prefix
    found = []
    for g in stage.layers:
        if g not in ukeys:
            found += _extra_layer(stage, g)
            continue
        up = part_of(uncut, Region("layer", g), u.provenance, f"{prefix}.{ukeys[g]}.")
        sp = part_of(stage.program, Region("layer", g), s.provenance, f"{prefix}.{skeys.get(g)}.")
        found += _compare(up, sp, u, s, stage.index, g)
    if stage.index == 0:
        found += _compare(
            part_of(uncut, INPUT, u.provenance), part_of(stage.program, INPUT, s.provenance),
            u, s, stage.index, None,
        )  # fmt: skip
    if last:
        found += _compare(
            part_of(uncut, OUTPUT, u.provenance), part_of(stage.program, OUTPUT, s.provenance),
            u, s, stage.index, None,
        )  # fmt: skip
    else:
        found += _boundary(stage, hidden)
    if glue is not None:
        found += _glue_difference(stage, glue)
    return found


def _extra_layer(stage: StageProgram, g: int) -> list[Mismatch]:
    ops = [n for n, r in stage.program.region.items() if r == Region("layer", g)]
    if not ops:
        return []
    message = f"stage {stage.index} runs global layer {g}, which the uncut program does not run"
    return [Mismatch("extra", stage.index, g, message, ops[0])]


def _glue_difference(stage: StageProgram, expected: Counter) -> list[Mismatch]:
    """Model-level ops (outside every module) the stage adds to or drops from the uncut
    program's share of this stage."""
    program = stage.program
    got = glue_labels(program, program.graph.nodes)
    added, dropped = got - expected, expected - got
    if not added and not dropped:
        return []
    label = next(iter(added or dropped))
    node = next((n for n in program.interval if added and op_label(program, n) == label), None)
    what = "adds" if added else "drops"
    message = (
        f"stage {stage.index} {what} model-level work outside its modules: `{label}` "
        f"({sum(added.values())} ops added, {sum(dropped.values())} dropped against the uncut "
        "program); run the model's own code between layers"
    )
    return [Mismatch("glue", stage.index, None, message, node)]


def _compare(up: Part, sp: Part, u: _Side, s: _Side, index: int, layer) -> list[Mismatch]:
    if same_part(up, sp):
        return []
    what = f"global layer {layer}" if layer is not None else _edge_name(up)
    if not sp.ops and up.ops:
        return [Mismatch("missing", index, layer, f"stage {index} does not run {what}")]
    kind = "layer" if layer is not None else "edge"
    if up.labels() != sp.labels():
        return [_op_difference(up, sp, u, s, index, layer, what, kind)]
    return [_external_difference(up, sp, u, s, index, layer, what, kind)]


def _edge_name(part: Part) -> str:
    return "the input modules" if part.region == INPUT else "the output modules"


def _op_difference(up, sp, u, s, index, layer, what, kind) -> Mismatch:
    matcher = difflib.SequenceMatcher(a=up.labels(), b=sp.labels(), autojunk=False)
    tag, i1, _, j1, _ = next(op for op in matcher.get_opcodes() if op[0] != "equal")
    unode = up.ops[i1] if i1 < len(up.ops) else None
    snode = sp.ops[j1] if j1 < len(sp.ops) else None
    umod, smod = _within(u.program, unode), _within(s.program, snode)
    if tag == "replace" and unode.target == snode.target and umod == smod:
        detail = _arg_difference(u.program, s.program, unode, snode)
    elif umod != smod and unode is not None and snode is not None:
        detail = f"uncut program runs `{umod}`; this stage's program runs `{smod}`"
    elif len(up.ops) == len(sp.ops):
        ucall, scall = _call(u.program, unode), _call(s.program, snode)
        detail = f"uncut program {ucall}; this stage's program {scall}"
    else:
        detail = (
            f"uncut program has {len(up.ops)} ops, stage {index} program {len(sp.ops)}; "
            f"first divergence: uncut {_call(u.program, unode)}, stage {_call(s.program, snode)}"
        )
    return Mismatch(kind, index, layer, f"{what}: {detail}", snode, unode)


def _within(program: Program, node) -> str | None:
    """Module path of ``node`` inside its layer, with the module's class (``self_attn.q_proj``)."""
    if node is None:
        return None
    stack = list((node.meta.get("nn_module_stack") or {}).values())
    path, cls = stack[-1] if stack else ("", "")
    path = normalize_fqn(path) or ""
    region = program.region.get(node)
    keys = {g: k for k, g in program.layout.layer_keys.items()}
    if region is not None and region.kind == "layer":
        path = path.removeprefix(f"{program.layout.layer_prefix}.{keys.get(region.layer)}.")
    name = cls.rsplit(".", 1)[-1] if isinstance(cls, str) else getattr(cls, "__name__", "")
    return f"{path} ({name})" if name else path


def _call(program: Program, node) -> str:
    from graphcheck.ops import op_name

    return f"calls `{op_name(node.target)}`" if node is not None else "has no more ops"


def _arg_difference(uprog: Program, sprog: Program, unode, snode) -> str:
    from graphcheck.fingerprint import canonical, value_label
    from graphcheck.ops import op_name

    schema = getattr(unode.target, "_schema", None)
    names = [a.name for a in schema.arguments] if schema else []
    diffs = []
    for i, (a, b) in enumerate(zip(unode.args, snode.args, strict=False)):
        ca, cb = canonical(a, uprog.readable), canonical(b, sprog.readable)
        if ca != cb:
            diffs.append((names[i] if i < len(names) else f"arg{i}", ca, cb))
    for key in sorted(set(unode.kwargs) | set(snode.kwargs)):
        ca = canonical(unode.kwargs.get(key), uprog.readable)
        cb = canonical(snode.kwargs.get(key), sprog.readable)
        if ca != cb:
            diffs.append((key, ca, cb))
    if not diffs:
        ua, sa = value_label(uprog, unode), value_label(sprog, snode)
        diffs.append(("result", ua, sa))
    name = op_name(unode.target)
    ua = ", ".join(f"{k}={a}" for k, a, _ in diffs)
    sa = ", ".join(f"{k}={b}" for k, _, b in diffs)
    return f"uncut program calls `{name}({ua})`; this stage's program calls `{name}({sa})`"


def _external_difference(up, sp, u, s, index, layer, what, kind) -> Mismatch:
    ulabels = {up.graph.nodes[k]["label"]: n for k, n in up.externals.items()}
    slabels = {sp.graph.nodes[k]["label"]: n for k, n in sp.externals.items()}
    extra = [label for label in slabels if label not in ulabels]
    gone = [label for label in ulabels if label not in slabels]
    if not extra:
        return Mismatch(kind, index, layer, f"{what}: same ops, wired differently")
    snode, unode = slabels[extra[0]], ulabels[gone[0]] if gone else None
    if extra[0].startswith("side:"):
        kind = "side-choice" if extra[0][5:] in u.all else "side-prelude"
    read = _describe(s.program, snode)
    instead = f" where the uncut program reads {_describe(u.program, unode)}" if unode else ""
    return Mismatch(kind, index, layer, f"{what} reads {read}{instead}", snode, unode)


def _describe(program: Program, node: torch.fx.Node) -> str:
    from graphcheck.diagnostics import source_line

    where = source_line(node)
    return f"`{node.name}` ({program.label(node)}{'; ' + where if where else ''})"


def _boundary(stage: StageProgram, hidden: int) -> list[Mismatch]:
    """A non-last stage must return the bf16 ``[1, T, H]`` the next stage takes as ``x``."""
    program = stage.program
    output = next(n for n in program.graph.nodes if n.op == "output")
    values = [a for a in output.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]
    want = ["1", "T", str(hidden)]
    if len(values) == 1 and (program.dtype(values[0]), program.shape(values[0])) == (
        "bfloat16",
        want,
    ):
        return []
    got = ", ".join(f"{program.dtype(v)}{program.shape(v)}" for v in values) or "nothing"
    message = (
        f"stage {stage.index} returns {got}, but stage {stage.index + 1} takes "
        f"x = bfloat16{want}; return the bf16 residual stream"
    )
    return [Mismatch("boundary", stage.index, None, message, values[0] if values else output)]
