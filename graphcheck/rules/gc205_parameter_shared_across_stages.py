"""GC205 parameter-shared-across-stages

What it checks
    No parameter, and no value computed from parameters alone, is read on both
    sides of a cut; and no parameter *storage* is: two Parameter objects on one
    storage (``lm_head.weight = nn.Parameter(embed.weight)``), or a buffer or
    constant on a parameter's storage (``register_buffer("w",
    embed.weight.detach(), persistent=False)``), read on the two sides are one
    weight, whatever the objects. Storage identity is taken from the exported
    program's state dict and constants (the model's own tensors, fake ones
    too: ``untyped_storage()`` identity).

Why it matters
    A weight used by two stages must be replicated and kept identical: its
    gradients are reduced across stages and any drift changes the bytes.
    Tied embeddings are the classic case: the embedding lives on the first
    stage, the head on the last.

Example
    ``model.lm_head.weight = model.model.embed_tokens.weight``, or
    ``model.lm_head.weight = nn.Parameter(model.model.embed_tokens.weight)``.

Fix
    Untie the weights for pipelined training (``--set tie_word_embeddings=false``
    for ``hf:`` models, or give the head its own weight), or keep the sharing
    modules on one stage.
"""

from __future__ import annotations

import torch
from torch.export.graph_signature import InputKind
from torch.multiprocessing.reductions import StorageWeakRef

from graphcheck.diagnostics import Diagnostic
from graphcheck.results.values import Role

__all__ = ["CODE", "NAME", "EXAMPLE", "SEVERITY", "SUMMARY", "check"]

CODE = "GC205"
NAME = "parameter-shared-across-stages"
SEVERITY = "error"
SUMMARY = (
    "a parameter storage (tied embeddings, two Parameters on one storage) is read by two stages"
)
# The documentation's example, run by tests/rules/test_rule_table.py: the code fires
# at the cut on the violating model and not on its passing twin.
EXAMPLE = {
    "violating": "fixtures/violations.py:tied_embeddings",
    "passing": "fixtures/reference.py:reference",
    "cut": 4,
}


def _fix(ctx, names) -> str:
    """How to fix a weight shared by ``names`` (parameters and the modules reading it):
    tied embeddings (the input and the output modules) untied by ``--set`` for an
    ``hf:`` spec, in the model code otherwise; another shared weight given to each user."""
    layout = ctx.program.layout

    def under(fqns) -> bool:
        return any(n == f or n.startswith(f + ".") for n in names for f in fqns)

    if not (under(layout.input_fqns) and under(layout.output_fqns)):
        return "give each stage its own weight, or keep the modules that read it on one stage"
    if ctx.hf_spec:
        return (
            "untie the embeddings with --set tie_word_embeddings=false, or keep the "
            "embedding and the head on one stage"
        )
    return (
        "untie the embeddings in the model code: give the head its own weight (no "
        "`lm_head.weight = embed_tokens.weight`; a transformers config: "
        "tie_word_embeddings=False), or keep the embedding and the head on one stage"
    )


def check(ctx) -> list[Diagnostic]:
    found = []
    groups = _storage_groups(ctx.program)
    for cut in ctx.cuts:
        for crossing in cut.crossing:
            if crossing.role == Role.PARAMETER:
                found.append(_diagnostic(ctx, cut, crossing))
        for group in groups:
            diagnostic = _shared_storage(ctx, cut, group)
            if diagnostic is not None:
                found.append(diagnostic)
    return found


_HELD = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


def _storage_groups(program) -> list[list]:
    """Placeholders of the model's own tensors (parameters, buffers persistent or
    not, constants) that share one storage with a parameter, two or more per group:
    a buffer on a parameter's storage is that weight too."""
    exported = program.exported.program
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    groups: dict[object, list] = {}
    for spec in exported.graph_signature.input_specs:
        node = nodes.get(spec.arg.name)
        tensor = _held(exported, spec) if spec.kind in _HELD else None
        if not isinstance(tensor, torch.Tensor) or node is None:
            continue
        try:
            key = StorageWeakRef(tensor.untyped_storage()).cdata
        except (RuntimeError, NotImplementedError):
            continue
        groups.setdefault(key, []).append((spec.target, node, spec.kind))
    return [
        [(fqn, node) for fqn, node, _ in g]
        for g in groups.values()
        if len(g) > 1 and any(kind == InputKind.PARAMETER for *_, kind in g)
    ]


def _held(exported, spec):
    """The tensor behind an input spec: the state dict (parameters, persistent
    buffers) or the program's constants (non-persistent buffers, tensor constants)."""
    if not spec.target:
        return None
    found = exported.state_dict.get(spec.target)
    return found if found is not None else exported.constants.get(spec.target)


def _readers(program, node) -> list:
    """The flow nodes that read ``node``, through values computed from parameters."""
    found, todo, seen = [], list(node.users), set()
    while todo:
        user = todo.pop()
        if user in seen:
            continue
        seen.add(user)
        if user in program.interval:
            found.append(user)
        else:
            todo.extend(user.users)
    return found


def _shared_storage(ctx, cut, group) -> Diagnostic | None:
    """GC205 when members of one storage group are read on both sides of ``cut``."""
    program = ctx.program
    sides: dict[bool, list[tuple[str, str]]] = {True: [], False: []}
    for fqn, node in group:
        for reader in _readers(program, node):
            sides[cut.on_left(program, reader)].append((fqn, program.label(reader)))
    pairs = [(a, b) for a in sides[True] for b in sides[False] if a[0] != b[0]]
    if not pairs:
        return None  # one Parameter read on both sides: the crossing check reports it
    (left_fqn, left), (right_fqn, right) = pairs[0]
    node = next(n for f, n in group if f == right_fqn)
    return Diagnostic.at(
        CODE,
        NAME,
        f"{_what(program, left_fqn)} {left_fqn} and {_what(program, right_fqn)} {right_fqn} "
        f"share one storage and are read on both "
        f"sides of cut {cut.position}: by {left} and by {right}; "
        + _fix(ctx, [left_fqn, right_fqn, left, right]),
        node=node,
        module=right_fqn,
        cut=cut.position,
        stage=ctx.right_stage(cut),
    )


def _what(program, fqn: str) -> str:
    """``parameter`` or ``buffer`` (a constant tensor too), for the message."""
    exported = program.exported.program
    return "parameter" if fqn in dict(exported.named_parameters()) else "buffer"


def _diagnostic(ctx, cut, crossing) -> Diagnostic:
    program, node = ctx.program, crossing.node
    fqn = program.owner.get(node, node.name)
    tied = program.aliases.get(fqn, ())
    name = fqn + (f" (tied to {', '.join(tied)})" if tied else "")
    left = {program.label(u) for u in node.users if u in program.interval}
    left = sorted(left - set(crossing.consumers))
    return Diagnostic.at(
        CODE,
        NAME,
        f"parameter {name} is read on both sides of cut {cut.position}: by "
        f"{', '.join(left[:2]) or 'the left side'} and by {', '.join(crossing.consumers[:2])}; "
        + _fix(ctx, [fqn, *tied, *left, *crossing.consumers]),
        node=node,
        module=fqn,
        cut=cut.position,
        stage=ctx.right_stage(cut),
    )
