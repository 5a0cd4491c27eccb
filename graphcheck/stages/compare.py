"""Stage-program equivalence: each stage runs the slice of the uncut program it replaces.

The program each stage will actually run (a :class:`~graphcheck.stages.build.StageProgram`)
is compared, part by part, with the uncut program: every global layer, the
embedding on the first stage, the norm and head on the last, the side inputs
each layer reads, and the hand-off between consecutive stages. Every difference
is a :class:`Mismatch` of one :class:`MismatchKind`; each kind has exactly one
owning rule (GC301 or GC303).

Parts are compared by a Weisfeiler-Lehman hash (different hashes prove a
difference) and, when hashes agree, by an exact ``DiGraphMatcher`` isomorphism.
Non-persistent buffers and constant tensors are compared by value
(:attr:`~graphcheck.stages.fingerprint.Part.values`): a layer whose ``inv_freq``
another layer index computed is a difference naming the buffer, and a value
graphcheck could not compute is one too (it fails closed, never compares equal).
"""

from __future__ import annotations

import difflib
import hashlib
from collections import Counter
from dataclasses import dataclass, replace
from enum import StrEnum

import torch.fx
from networkx.algorithms.isomorphism import DiGraphMatcher

from graphcheck.analysis.program import Program
from graphcheck.analysis.regions import INPUT, OUTPUT, Region, RegionKind
from graphcheck.diagnostics import source_line
from graphcheck.model.boundary import WireShape
from graphcheck.model.values import LIMIT, TensorValue, max_abs_diff
from graphcheck.stages.build import StageProgram
from graphcheck.stages.fingerprint import NodeRecord, Part, Provenance, part_of

__all__ = ["Mismatch", "MismatchKind", "compare_stage", "same_part", "tied_names", "untied"]


class MismatchKind(StrEnum):
    """What differs. Each kind is owned by exactly one rule (its module's ``OWNS``)."""

    LAYER = "layer"  # an op of a layer differs
    SIDE_CHOICE = "side-choice"  # a layer reads another side input the uncut program computes
    SIDE_PRELUDE = "side-prelude"  # the stage computes a side input the uncut program never does
    EDGE = "edge"  # the embedding, or the norm and head
    BOUNDARY = "boundary"  # the hand-off between stages
    MISSING = "missing"  # a layer (or edge) the stage does not run
    EXTRA = "extra"  # a layer the uncut program does not run
    GLUE = "glue"  # model-level work outside every module
    UNKNOWN_VALUE = "unknown-value"  # a value compared by value that graphcheck cannot compute


@dataclass
class Mismatch:
    """A difference between a stage program and the uncut program, of one
    :class:`MismatchKind`. ``node`` and ``uncut`` are FX nodes or :class:`NodeRecord`
    values (both carry ``name`` and ``meta``)."""

    kind: MismatchKind
    stage: int
    layer: int | None
    message: str
    node: NodeRecord | torch.fx.Node | None = None
    uncut: NodeRecord | torch.fx.Node | None = None


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
        self.tied = tied_names(program.aliases)

    def part(self, region: Region) -> Part:
        return untied(part_of(self.program, region, self.provenance), self.tied)

    @property
    def all(self) -> set[str]:
        if self._all is None:
            nodes = self.program.graph.nodes
            self._all = {self.provenance(n) for n in nodes if n not in self.program.interval}
        return self._all


def tied_names(aliases: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """Each name of a tied tensor mapped to one name of its group (the first in order).

    >>> tied_names({"lm_head.weight": ("embed.weight",), "embed.weight": ("lm_head.weight",)})
    {'lm_head.weight': 'embed.weight', 'embed.weight': 'embed.weight'}
    """
    return {fqn: min((fqn, *others)) for fqn, others in aliases.items() if others}


def untied(part: Part, tied: dict[str, str]) -> Part:
    """``part`` with the parameters it reads named by their tied group (:func:`tied_names`):
    export names a tied weight once, by one of its names (the uncut program reads the
    embedding as ``lm_head.weight``), and a stage that holds one of the modules reads it
    under the other; the tensor is the same (GC205 reports sharing it across a cut)."""
    if not tied:
        return part
    for key, rec in part.externals.items():
        kind, _, rest = rec.label.partition(":")
        fqn, sep, tail = rest.partition(":")
        if kind == "param" and fqn in tied and tied[fqn] != fqn:
            label = f"param:{tied[fqn]}{sep}{tail}"
            part.externals[key] = replace(rec, label=label)
            part.graph.nodes[key]["label"] = label
    return part


def compare_stage(
    uncut: Program,
    stage: StageProgram,
    last: bool,
    hidden: WireShape | int | tuple[int, ...] | None,
    glue: Counter | None = None,
) -> list[Mismatch]:
    """Every difference between ``stage``'s program and its slice of ``uncut``.

    ``hidden`` is the wire the next stage takes (a :class:`WireShape`; a width or
    suffix stands for the batched ``[1, T, ...]``), read on every stage but the last.
    ``glue`` holds the labels of the model-level ops the plan runs on this stage in
    the uncut program; the stage program must run exactly those outside its layers."""
    u = _Uncut(uncut)
    present = set(uncut.layout.layer_keys.values())
    found: list[Mismatch] = []
    for g in stage.layers:
        sp = stage.parts.get(Region(RegionKind.LAYER, g))
        if g not in present:
            found += _extra_layer(stage, g, sp)
            continue
        found += _compare(
            u.part(Region(RegionKind.LAYER, g)), untied(sp, u.tied), u, stage.index, g
        )
    if stage.index == 0:
        found += _compare(u.part(INPUT), untied(stage.parts[INPUT], u.tied), u, stage.index, None)
    else:
        found += _edge_off_stage(stage, INPUT, "first")
    if last:
        sp = untied(stage.parts[OUTPUT], u.tied)
        found += _compare(u.part(OUTPUT), sp, u, stage.index, None)
    else:
        found += _edge_off_stage(stage, OUTPUT, "last")
        found += _boundary(stage, hidden)
    if glue is not None:
        found += _glue_difference(stage, glue)
    return _once(found)


def _once(found: list[Mismatch]) -> list[Mismatch]:
    """The mismatches with one unknown value reported once a stage (a model-level
    buffer that every layer's side inputs read is one finding, not one a layer)."""
    seen: set[str] = set()
    kept = []
    for m in found:
        if m.kind == MismatchKind.UNKNOWN_VALUE:
            key = m.message.split(": ", 1)[-1]
            if key in seen:
                continue
            seen.add(key)
        kept.append(m)
    return kept


def _extra_layer(stage: StageProgram, g: int, part: Part | None) -> list[Mismatch]:
    if part is None or not part.ops:
        return []
    message = f"stage {stage.index} runs global layer {g}, which the uncut program does not run"
    return [Mismatch(MismatchKind.EXTRA, stage.index, g, message, part.ops[0])]


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
    return [Mismatch(MismatchKind.GLUE, stage.index, None, message, node)]


def _compare(up: Part, sp: Part, u: _Uncut, index: int, layer) -> list[Mismatch]:
    what = f"global layer {layer}" if layer is not None else _edge_name(up)
    unknown = _unknown_values(up, sp, index, layer, what)
    if same_part(up, sp):
        return unknown
    if not sp.ops and up.ops:
        return [Mismatch(MismatchKind.MISSING, index, layer, f"stage {index} does not run {what}")]
    kind = MismatchKind.LAYER if layer is not None else MismatchKind.EDGE
    if up.labels() != sp.labels():
        return [*unknown, _op_difference(up, sp, index, layer, what, kind)]
    by_value = _value_difference(up, sp, index, layer, what, kind)
    if by_value is not None:
        return [*unknown, by_value]
    return [*unknown, _external_difference(up, sp, u, index, layer, what, kind)]


def _unknown_values(up: Part, sp: Part, index: int, layer, what: str) -> list[Mismatch]:
    """A value the part reads that graphcheck could not compute, in either program:
    it cannot be compared, so it is not taken as equal."""
    found = []
    for key in dict.fromkeys([*up.values, *sp.values]):
        values = [(p, part.values.get(key)) for p, part in (("uncut", up), ("stage", sp))]
        missing = [(p, v) for p, v in values if v is not None and not v.known]
        if not missing:
            continue
        where = " and ".join(
            "the uncut program" if p == "uncut" else f"stage {index}'s program" for p, _ in missing
        )
        message = (
            f"{what}: {key} cannot be compared by value: {where} "
            f"{'have' if len(missing) > 1 else 'has'} no value for it "
            f"({missing[0][1].why}); make it at most {LIMIT} elements computed at "
            "construction (from Python numbers and such tensors), or persistent (loaded from "
            "the checkpoint, compared by name)"
        )
        node = _value_node(sp, key) or _value_node(up, key)
        found.append(Mismatch(MismatchKind.UNKNOWN_VALUE, index, layer, message, node))
    return found


def _value_node(part: Part, key: str) -> NodeRecord | None:
    external = part.value_nodes.get(key)
    return part.externals.get(external) if external else None


def _value_difference(up: Part, sp: Part, index, layer, what, kind) -> Mismatch | None:
    """The first value both parts read under one name that differs."""
    for key, uvalue in up.values.items():
        svalue = sp.values.get(key)
        if svalue is None or not (uvalue.known and svalue.known) or uvalue.sha == svalue.sha:
            continue
        detail = _value_detail(uvalue, svalue)
        snode, unode = _value_node(sp, key), _value_node(up, key)
        if snode is not None and snode.label.startswith("side:"):  # computed in the prelude
            message = (
                f"{what} reads a side input computed from {key}, which differs by value "
                f"({detail}); compute it from the uncut model's config"
            )
            return Mismatch(MismatchKind.SIDE_PRELUDE, index, layer, message, snode, unode)
        message = f"{what}: {key} differs by value ({detail})"
        return Mismatch(kind, index, layer, message, snode, unode)
    return None


def _value_detail(u: TensorValue, s: TensorValue) -> str:
    """``uncut sha 1a2b..., this stage's 3c4d...; max abs diff 0.07; uncut [..], stage [..]``."""
    text = f"uncut sha {u.short()}, this stage's {s.short()}"
    if (u.dtype, u.shape) != (s.dtype, s.shape):
        return text + f"; uncut {u.dtype}{list(u.shape)}, stage {s.dtype}{list(s.shape)}"
    diff = max_abs_diff(u, s)
    if diff is None:
        return text
    at = next(i for i, (a, b) in enumerate(zip(u.values, s.values, strict=True)) if a != b)
    return text + (
        f"; max abs diff {diff:.4g}; element {at}: uncut {u.values[at]:.6g}, "
        f"stage {s.values[at]:.6g}"
    )


def _edge_off_stage(stage: StageProgram, region: Region, where: str) -> list[Mismatch]:
    """The embedding on a stage but the first, or the final norm or head on a stage but
    the last: the uncut program runs them on that one stage only (a builder that prunes
    the final norm by one name misses a decoder's ``final_layernorm``, and the stage
    then hands over the normed residual)."""
    part = stage.parts.get(region)
    if part is None or not part.ops:
        return []
    node = part.ops[0]
    message = (
        f"stage {stage.index} runs `{node.within}` ({_edge_name(part)}), which the uncut "
        f"program runs on the {where} stage only; build the stage without it (nn.Identity "
        f"in its place on every stage but the {where})"
    )
    return [Mismatch(MismatchKind.EDGE, stage.index, None, message, node)]


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
    body = _body_difference(sp, snode, unode)
    if body is not None:
        return Mismatch(kind, index, layer, f"{what}: {body}", snode, unode)
    if extra[0].startswith("side:"):
        side = _side_key(extra[0][5:]) in u.all
        kind = MismatchKind.SIDE_CHOICE if side else MismatchKind.SIDE_PRELUDE
    read = _describe(snode)
    instead = f" where the uncut program reads {_describe(unode)}" if unode else ""
    return Mismatch(kind, index, layer, f"{what} reads {read}{instead}", snode, unode)


def _body_difference(sp: Part, snode: NodeRecord, unode: NodeRecord | None) -> str | None:
    """Where a subgraph the stage's part reads (a higher-order op's body) differs from
    the one the uncut part reads in its place, or ``None`` when they are not both
    subgraphs: the first line of their canonical bodies that differs."""
    ubody = unode.meta.get("subgraph") if unode is not None else None
    sbody = snode.meta.get("subgraph")
    if ubody is None or sbody is None:
        return None
    key = next((k for k, r in sp.externals.items() if r is snode), None)
    names = set(sp.graph.successors(key)) if key in sp.graph else set()
    reader = next((r for r in sp.ops if r.name in names), None)
    op = f"`{reader.op}`" if reader is not None else "a higher-order op"
    pairs = enumerate(zip(ubody, sbody, strict=False))
    at = next((i for i, (u, s) in pairs if u != s), None)
    if at is None and len(ubody) == len(sbody):
        return None  # equal bodies: the difference is elsewhere
    if at is None:
        counts = f"{len(ubody)} nodes, this stage's {len(sbody)}"
        return f"the body of {op} differs from the uncut program's (uncut {counts})"
    return (
        f"the body of {op} differs from the uncut program's at its node {at}: uncut "
        f"`{_short(ubody[at])}`, this stage's `{_short(sbody[at])}`"
    )


def _short(line: str, limit: int = 160) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _side_key(text: str) -> str:
    """The provenance hash of a side input's label text (a size is labelled by its
    expression, hashed as :class:`Provenance` hashes it)."""
    return hashlib.sha1(text.encode()).hexdigest()[:16] if text.startswith("size:") else text


def _describe(node: NodeRecord) -> str:
    where = source_line(node)
    return f"`{node.name}` ({node.place}{'; ' + where if where else ''})"


def _boundary(stage: StageProgram, hidden: WireShape | int | tuple[int, ...]) -> list[Mismatch]:
    """A non-last stage must return the bf16 wire the next stage takes as ``x``: the
    residual ``[1, T, H]`` or ``[T, H]`` as the model lays it out, or the shape of a
    declared boundary state."""
    want = WireShape.coerce(hidden).dims
    values = [(d, s, n) for d, s, n in stage.outputs if d is not None]
    if len(values) == 1 and (values[0][0], values[0][1]) == ("bfloat16", want):
        return []
    got = ", ".join(f"{d}{s}" for d, s, _ in values) or "nothing"
    message = (
        f"stage {stage.index} returns {got}, but stage {stage.index + 1} takes "
        f"x = bfloat16{want}; return the bf16 residual stream"
    )
    node = values[0][2] if values else stage.outputs[0][2] if stage.outputs else None
    return [Mismatch(MismatchKind.BOUNDARY, stage.index, None, message, node)]
