"""Per-layer costs read from the exported graph: no weights, no run.

For every decoder layer (and for the first and last stage's own modules) a
:class:`LayerCost` holds

* ``param_bytes`` - the bytes of the parameters the part reads: each parameter
  placeholder of ``graph_signature`` counts for every part one of its users runs in
  (a weight tied between the embedding and the head counts for both: each stage
  holds a copy);
* ``flops_per_token`` - the matmul FLOPs per token: the coefficient of T in the
  symbolic FLOP count of the part's ``mm``, ``bmm``, ``addmm``, ``linear``,
  ``matmul``, ``einsum``, ``convolution`` and ``_grouped_mm`` ops (``2·M·N·K``),
  plus its attention;
* ``attention_flops_per_token`` - attention counted per query token at a mean
  document length D (``doc_length``, default :data:`DOC_LENGTH`): ``QKᵀ`` and ``PV``
  cost ``2·H·(d_qk + d_v)`` FLOPs per attended key, and a query at position i of a
  document attends to the keys its window allows (causal: i+1; a left window W:
  at most W+1). Varlen attention (``torch_attn._varlen_attn``,
  ``graphcheck::varlen_attention``) reads the window and causality from its
  arguments; SDPA and flex attention are counted as causal within a document (the
  packed-varlen convention); linear attention (``graphcheck::chunk_gated_delta_rule``)
  as ``6·H·d_k·d_v`` per token (reading, updating and querying the state) and a
  depthwise causal convolution as ``2·C·K``;
* ``uncounted`` - the ops whose size does not scale with T alone (a data-dependent
  row count, as in an MoE layer that gathers each expert's tokens with ``nonzero``):
  their FLOPs are left out and named. An MoE layer whose experts run as one
  ``_grouped_mm`` over the ``T·k`` routed rows counts exactly the active experts;
  one that loops over experts on data-dependent slices counts its dense ops (router,
  shared experts, attention) and lists the expert matmuls here.

Model-level glue counts where its placement starts: the prelude with the first
stage, glue after layer k with layer k, the epilogue with the last stage.
``boundary_bytes_per_token[k]`` is what crosses boundary k (the activations of its
crossing set) in bytes per token.

>>> keys_per_query(4, -1, 0), keys_per_query(4, 1, 0), keys_per_query(4, -1, -1)
(2.5, 1.75, 4.0)
>>> LayerCost("layer 0", 0, 10, 4.0).as_dict()["flops_per_token"]
4.0
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import sympy
import torch
import torch.fx

from graphcheck.analysis.dataflow import CutAnalysis
from graphcheck.analysis.fx import op_name
from graphcheck.analysis.locality import bind
from graphcheck.analysis.opfacts import Work, attention_window, work_of
from graphcheck.analysis.program import Program
from graphcheck.analysis.regions import RegionKind
from graphcheck.planning.cost import DOC_LENGTH, FIRST, LAST, Costs, LayerCost, keys_per_query

__all__ = ["DOC_LENGTH", "Costs", "LayerCost", "costs", "keys_per_query"]  # values: planning.cost


def costs(
    program: Program, cuts: Iterable[CutAnalysis] = (), doc_length: int = DOC_LENGTH
) -> Costs:
    """The cost model of ``program``; ``cuts`` (the map's analysed boundaries) give the
    bytes per token crossing each boundary."""
    if doc_length < 1:
        raise ValueError(f"the mean document length must be at least 1, not {doc_length}")
    parts = {FIRST: LayerCost(FIRST, None), LAST: LayerCost(LAST, None)}
    parts |= {i: LayerCost(f"layer {i}", i) for i in range(program.num_layers)}
    tokens = _token_expr(program)
    for param in program.parameters:
        for key in _parts_reading(program, param):
            parts[key].param_bytes += _bytes(param)
    for node in program.graph.nodes:
        key = _part(program, node) if node.op == "call_function" else None
        if key is not None:
            _count(parts[key], node, tokens, doc_length)
    crossing = {c.position: _crossing_bytes(c.activations, tokens) for c in cuts}
    return Costs(
        parts[FIRST],
        [parts[i] for i in range(program.num_layers)],
        parts[LAST],
        doc_length,
        [crossing.get(k) for k in range(program.num_layers + 1)] if crossing else [],
    )


# --- where a node's cost goes -----------------------------------------------------------


def _part(program: Program, node: torch.fx.Node) -> str | int | None:
    """The part a node runs in: a layer index, ``first`` or ``last``."""
    region = program.region.get(node)
    if region is None:
        return None
    if region.kind == RegionKind.LAYER:
        return region.layer
    if region.kind == RegionKind.INPUT:
        return FIRST
    if region.kind == RegionKind.OUTPUT:
        return LAST
    if region.kind != RegionKind.GLUE:
        return None
    lo = program.interval.get(node, (-1, -1))[0]
    if lo < 0:
        return FIRST
    return LAST if lo >= program.num_layers else lo


def _parts_reading(program: Program, param: torch.fx.Node) -> set[str | int]:
    """The parts whose nodes read ``param``; its owner's part when none does."""
    found = {_part(program, user) for user in param.users} - {None}
    if found:
        return found
    fqn = program.owner.get(param, "")
    layer = program.layout.layer_of(fqn)
    edge = program.layout.edge_of(fqn)
    if layer is not None:
        return {layer}
    return {FIRST} if edge == "input" else {LAST} if edge == "output" else set()


def _bytes(node: torch.fx.Node) -> int:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return 0
    return int(math.prod(int(d) for d in val.shape)) * val.element_size()


# --- FLOPs ---------------------------------------------------------------------------------


def _count(part: LayerCost, node: torch.fx.Node, tokens: sympy.Expr | None, doc: int) -> None:
    name = op_name(node.target)
    attends = {Work.VARLEN_ATTENTION, Work.SDPA_ATTENTION} & work_of(name)
    if attends or name.endswith("flex_attention"):
        flops = _attention(node, name, doc)
        part.attention_flops_per_token += flops
        part.flops_per_token += flops
        return
    total = _matmul_flops(node, name)
    if total is None:
        return
    per_token = _per_token(total, tokens)
    if per_token is None:
        part.uncounted.append(f"{node.name} ({name})")
    else:
        part.flops_per_token += per_token


def _matmul_flops(node: torch.fx.Node, name: str) -> sympy.Expr | None:
    """The symbolic FLOPs of a matmul-like node (``None``: not one)."""
    args = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in node.args]
    out = node.meta.get("val")
    work = work_of(name)
    if Work.MATMUL in work and isinstance(out, torch.Tensor):
        a = args[1] if name == "aten.addmm.default" else args[0]
        return 2 * _numel(out) * _dim(a.shape[-1])
    if Work.CONVOLUTION in work and isinstance(out, torch.Tensor):
        return 2 * _numel(out) * _numel(args[1], skip=1)
    if name == "aten.einsum.default":
        return _einsum(args[0], args[1])
    if name == "graphcheck.chunk_gated_delta_rule.default":
        q, v = args[0], args[2]  # [1, T, H, dk], [1, T, H, dv]
        return 6 * _numel(q) * _dim(v.shape[-1])
    if name == "graphcheck.causal_conv1d.default":
        x, w = args[0], args[1]  # [B, C, T], [C, K]
        return 2 * _numel(x) * _dim(w.shape[-1])
    return None


def _einsum(equation: str, operands) -> sympy.Expr | None:
    """``2 · ∏ sizes`` over every index of the equation (``None``: an ellipsis)."""
    inputs = equation.replace(" ", "").split("->")[0].split(",")
    operands = [o.meta.get("val") if isinstance(o, torch.fx.Node) else o for o in operands]
    if "..." in equation or len(inputs) != len(operands):
        return None
    pairs = zip(operands, inputs, strict=True)
    if not all(isinstance(o, torch.Tensor) and o.dim() == len(i) for o, i in pairs):
        return None
    sizes: dict[str, sympy.Expr] = {}
    for letters, tensor in zip(inputs, operands, strict=True):
        sizes.update({c: _dim(d) for c, d in zip(letters, tensor.shape, strict=True)})
    return 2 * sympy.Mul(*sizes.values())


def _attention(node: torch.fx.Node, name: str, doc: int) -> float:
    """FLOPs per query token of an attention op at mean document length ``doc``."""
    bound = bind(node)
    vals = [v.meta.get("val") for v in node.all_input_nodes[:3]]
    q, _, v = vals
    left, right = attention_window(name, bound)
    heads = int(q.shape[-2] if q.dim() == 3 else q.shape[-3])  # [T, H, d] or [B, H, T, d]
    width = int(q.shape[-1]) + int(v.shape[-1])
    return 2 * heads * width * keys_per_query(doc, left, right)


def _numel(val, skip: int = 0) -> sympy.Expr:
    return sympy.Mul(*(_dim(d) for d in val.shape[skip:]))


def _dim(d) -> sympy.Expr:
    return d.node.expr if isinstance(d, torch.SymInt) else sympy.Integer(int(d))


def _per_token(total: sympy.Expr, tokens: sympy.Expr | None) -> float | None:
    """The coefficient of T in ``total`` when ``total`` is that times T, or a
    constant (a weight-only op: no per-token cost); ``None`` otherwise."""
    if not total.free_symbols:
        return 0.0
    if tokens is None:
        return None
    ratio = sympy.simplify(total / tokens) if not (total / tokens).is_number else total / tokens
    return float(ratio) if ratio.is_number else None


def _token_expr(program: Program) -> sympy.Expr | None:
    """T as the shape environment spells it (``s70``; ``4*s0`` under a token multiple)."""
    symbols = {}
    for node in program.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        for d in getattr(val, "shape", ()):
            if isinstance(d, torch.SymInt):
                symbols |= {str(s): s for s in d.node.expr.free_symbols}
    for text, name in program.exported.symbols.items():
        if name == "T":
            return sympy.sympify(text, locals=symbols)
    return None


def _crossing_bytes(nodes: list[torch.fx.Node], tokens: sympy.Expr | None) -> int | None:
    """Bytes per token of the activations crossing a boundary (``None``: not per token)."""
    total = 0
    for node in nodes:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            return None
        per_token = _per_token(_numel(val) * val.element_size(), tokens)
        if per_token is None:
            return None
        total += int(per_token)
    return total
