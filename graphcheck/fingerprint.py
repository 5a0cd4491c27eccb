"""Canonical fingerprints of a program's parts, for comparing programs.

A *part* is the subgraph of one region (a decoder layer, the input modules,
the output modules) as a labelled ``networkx.DiGraph``:

* each op is a node labelled with its target, its non-tensor arguments (window
  sizes, scales, eps, ``is_causal``), and its result's dtype and symbolic shape
  (symbols by name: ``T``, ``N+1``);
* each value the part reads from outside is a node too: a parameter by its FQN
  relative to the layer, the incoming activation by dtype and shape, and every
  side input (mask, rotary table, varlen metadata) by its *provenance*: a hash
  of how the prelude computed it from the inputs, so a sliding-window layer
  and a full layer that differ only in the mask they read are told apart;
* edges carry the argument positions.

>>> canonical([1.0, None, (2, "a")])
'[1.0, None, [2, a]]'
"""

from __future__ import annotations

import hashlib
import operator
import warnings
from collections import Counter
from dataclasses import dataclass, field

import networkx as nx
import torch
import torch.fx
from torch.utils._pytree import tree_flatten

from graphcheck.ops import is_view_node, op_name
from graphcheck.program import Program
from graphcheck.regions import GLUE, Region

__all__ = [
    "Part",
    "part_of",
    "canonical",
    "Provenance",
    "glue_labels",
    "is_size",
    "is_identity_view",
]


def canonical(value, readable=str) -> str:
    """A stable text form of a non-tensor argument."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(canonical(v, readable) for v in value) + "]"
    if isinstance(value, torch.fx.Node):
        return "%"
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return readable(value)
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return str(value)


def op_label(program: Program, node: torch.fx.Node) -> str:
    args = canonical(list(node.args), program.readable)[1:-1]
    kwargs = ", ".join(f"{k}={canonical(v, program.readable)}" for k, v in node.kwargs.items())
    sig = ", ".join(p for p in (args, kwargs) if p)
    return f"{op_name(node.target)}({sig}) -> {value_label(program, node)}"


def value_label(program: Program, node: torch.fx.Node) -> str:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return f"{program.dtype(node)}{program.shape(node)}"
    if isinstance(val, (list, tuple)):
        return "(" + ", ".join(type(v).__name__ for v in val) + ")"
    return canonical(val, program.readable)


_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)


class Provenance:
    """How a side input was computed: a hash over its ancestry, by labels only."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.memo: dict[torch.fx.Node, str] = {}

    def __call__(self, node: torch.fx.Node) -> str:
        if node not in self.memo:
            self.memo[node] = self._compute(node)
        return self.memo[node]

    def _compute(self, node: torch.fx.Node) -> str:
        program = self.program
        if isinstance(node.meta.get("val"), _SYMBOLIC):
            text = f"size:{value_label(program, node)}"  # sizes compare by expression
        elif node.op == "placeholder":
            source = program.owner.get(node) or self._input_name(node)
            text = f"{program.region[node].kind}:{source}:{value_label(program, node)}"
        else:
            parents = [self(a) for a in node.all_input_nodes]
            text = op_label(program, node) + "|" + ",".join(parents)
        return hashlib.sha1(text.encode()).hexdigest()[:16]

    def _input_name(self, node: torch.fx.Node) -> str:
        names = {n: k for k, n in self.program.user_inputs.items()}
        return names.get(node, node.name)


@dataclass
class Part:
    """One region of a program as a labelled graph."""

    region: Region
    graph: nx.DiGraph
    ops: list[torch.fx.Node] = field(default_factory=list)
    externals: dict[str, torch.fx.Node] = field(default_factory=dict)

    @property
    def hash(self) -> str:
        with warnings.catch_warnings():  # networkx notes a change of its directed hashes
            warnings.simplefilter("ignore")
            return nx.weisfeiler_lehman_graph_hash(self.graph, node_attr="label", edge_attr="pos")

    def labels(self) -> list[str]:
        return [self.graph.nodes[n.name]["label"] for n in self.ops]


def part_of(program: Program, region: Region, provenance: Provenance, prefix: str = "") -> Part:
    """The part of ``program`` in ``region``; parameters named relative to ``prefix``.

    Sizes (SymInt arithmetic) are not ops of a part: they are recomputable metadata,
    read as ``size:<expr>`` wherever they were computed. Views that change nothing
    (a full slice, a view to the same shape) are looked through."""
    part = Part(region, nx.DiGraph())
    for node in program.graph.nodes:
        if node.op != "call_function" or program.region.get(node) != region:
            continue
        if is_size(node) or is_identity_view(node):
            continue
        part.ops.append(node)
        part.graph.add_node(node.name, label=op_label(program, node))
        flat, _ = tree_flatten((node.args, node.kwargs))
        for pos, arg in enumerate(flat):
            if isinstance(arg, torch.fx.Node):
                _add_edge(program, part, _through(arg), node, pos, provenance, prefix)
    return part


def _add_edge(program, part: Part, arg, node, pos: int, provenance, prefix: str) -> None:
    internal = program.region.get(arg) == part.region and not is_size(arg)
    source = arg.name if internal else _external(program, part, arg, provenance, prefix)
    old = (
        part.graph.edges[source, node.name]["pos"] if part.graph.has_edge(source, node.name) else ""
    )
    part.graph.add_edge(source, node.name, pos=f"{old}{pos},")


def is_size(node: torch.fx.Node) -> bool:
    return isinstance(node.meta.get("val"), _SYMBOLIC)


def is_identity_view(node: torch.fx.Node) -> bool:
    """A view whose result is its input, same shape and dtype (``x[:, 0:]``)."""
    if not is_view_node(node) or node.target is operator.getitem:
        return False
    src = node.args[0] if node.args else None
    a, b = node.meta.get("val"), getattr(src, "meta", {}).get("val")
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    return (
        a.dtype == b.dtype and str(a.shape) == str(b.shape) and str(a.stride()) == str(b.stride())
    )


def glue_labels(program: Program, nodes) -> Counter:
    """Labels of the model-level ops among ``nodes`` that carry state (activations,
    weight-derived values), sizes and identity views left out."""
    return Counter(
        op_label(program, n)
        for n in nodes
        if program.region.get(n) == GLUE
        and n in program.interval
        and n.op == "call_function"
        and not is_size(n)
        and not is_identity_view(n)
    )


def _through(node: torch.fx.Node) -> torch.fx.Node:
    while node.op == "call_function" and is_identity_view(node):
        node = node.args[0]
    return node


def _external(program, part: Part, node, provenance: Provenance, prefix: str) -> str:
    key = f"ext:{node.name}"
    if key not in part.graph:
        part.externals[key] = node
        part.graph.add_node(key, label=external_label(program, node, provenance, prefix))
    return key


def external_label(program: Program, node, provenance: Provenance, prefix: str) -> str:
    region = program.region.get(node)
    if region is not None and region.kind == "parameter":
        fqn = program.owner.get(node, node.name).removeprefix(prefix)
        return f"param:{fqn}:{value_label(program, node)}"
    if program.role.get(node) == "activation":
        return f"activation:{value_label(program, node)}"
    return f"side:{provenance(node)}"
