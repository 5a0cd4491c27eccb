"""Token locality, proven per op: an abstract interpretation over the ATen graph.

Every node gets a :class:`~graphcheck.analysis.locality.Val` from the transfer function
:mod:`graphcheck.analysis.optable` holds for its op. Two facts are collected at the
graph's outputs (and at every in-place write into a buffer or input, whose
value outlives the call):

* ``leaks`` - the ops where an element first came to depend on tokens of
  other documents (an op that mixes tokens without proving document
  boundaries, or an op the table does not know that touches a token
  dimension: fail closed), with the reason; GC401 reports them;
* ``fabricated`` - the ops where an absolute token or document index (an
  ``arange`` over T, a prefix count, the packed length, ``cu_seq_lens``
  offsets) entered a value as data rather than as index bookkeeping; GC402
  reports them.

Only origins that reach an output count: mixing inside dead code or inside
structural bookkeeping that a document-aware op consumes is not a finding.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from graphcheck.analysis.fx import is_view_node
from graphcheck.analysis.locality import Dep, Interp, Kind, Val, carry, meta_toks
from graphcheck.analysis.passes.base import NodePass
from graphcheck.analysis.transfer import transfer
from graphcheck.varlen import BY_NAME, Structure

__all__ = ["PropagateLocalityPass"]

# The varlen inputs that are structure, not token data (by their row's ``structure``):
# the kind of value they start as and how they depend on tokens.
_STRUCTURE_KINDS = {
    Structure.POSITIONS: (Kind.POS, Dep.POINT),
    Structure.BOUNDARIES: (Kind.CU, Dep.NONE),
    Structure.MAX_LENGTH: (Kind.LENGTH, Dep.NONE),
}


class PropagateLocalityPass(NodePass, Interp):
    """``inputs``: placeholder name -> varlen input name; ``tokens``: the sympy names
    of the packed length T; ``root``: the graph module (for subgraphs)."""

    def __init__(self, root: torch.nn.Module, inputs: dict[str, str], tokens: set[str]) -> None:
        Interp.__init__(self, root, tokens, transfer)
        self.inputs = inputs
        self.mutated = _mutated_placeholders(root.graph)
        self.order: dict[torch.fx.Node, int] = {}
        self.alias_root: dict[torch.fx.Node, torch.fx.Node] = {}  # view or write -> storage root
        self.stored: dict[torch.fx.Node, list] = {}  # root -> [(position, written value)]
        self.leaks: dict[torch.fx.Node, str] = {}
        self.fabricated: dict[torch.fx.Node, str] = {}

    def placeholder(self, node: torch.fx.Node) -> None:
        name = self.inputs.get(node.name)
        val = node.meta.get("val")
        toks = meta_toks(val, self.tokens)
        row = BY_NAME.get(name) if name is not None else None
        if row is not None and row.structure in _STRUCTURE_KINDS and node not in self.mutated:
            kind, dep = _STRUCTURE_KINDS[row.structure]
            absolute = frozenset({node}) if kind in (Kind.CU, Kind.LENGTH) else frozenset()
            self.vals[node] = Val(toks, dep, kind=kind, absolute=absolute)
            self.reasons.setdefault(node, f"{name} used as a value")
        elif name is not None:
            self.vals[node] = Val(toks, Dep.POINT)  # tokens, or an input changed in place
        else:
            self.vals[node] = Val(toks)  # parameters, buffers, constants

    def get_attr(self, node: torch.fx.Node) -> None:
        self.vals[node] = Val(meta_toks(node.meta.get("val"), self.tokens))

    def call_function(self, node: torch.fx.Node) -> None:
        """Reads through an alias see every write into its storage made after the alias
        was taken; then the op's own transfer."""
        self.order[node] = len(self.order)
        for arg in node.all_input_nodes:
            self._see_writes(arg)
        writes_before = len(self.writes)
        self.vals[node] = transfer(self, node)
        root = self.alias_root.get(node.args[0], node.args[0]) if node.args else None
        if len(self.writes) > writes_before and isinstance(root, torch.fx.Node):
            self.alias_root[node] = root
            self.stored.setdefault(root, []).append((self.order[node], self.vals[node]))
        elif is_view_node(node) and isinstance(node.args[0], torch.fx.Node):
            self.alias_root[node] = self.alias_root.get(node.args[0], node.args[0])

    def _see_writes(self, arg: torch.fx.Node) -> None:
        root = self.alias_root.get(arg, arg)
        later = [v for pos, v in self.stored.get(root, ()) if pos > self.order.get(arg, -1)]
        current = self.vals.get(arg)
        if later and isinstance(current, Val):
            self.vals[arg] = current.with_(**carry([current, *later]), kind=None)

    def output(self, node: torch.fx.Node) -> None:
        for arg in node.all_input_nodes:
            self.collect(arg)
        for written in self.writes:
            if _root(written).op == "placeholder":  # state that outlives the call
                self.collect(written)

    def collect(self, node: torch.fx.Node) -> None:
        """Record the leak and fabrication origins that reach ``node``'s value."""
        for val in _flat(self.vals.get(node)):
            for origin in val.leaks:
                self.leaks.setdefault(origin, self.reasons.get(origin, "mixes tokens"))
            for origin in val.absolute:
                self.fabricated.setdefault(origin, self.reasons.get(origin, "absolute index"))


def _flat(val) -> list[Val]:
    if isinstance(val, Val):
        return [val]
    if isinstance(val, (tuple, list)):
        return [v for item in val for v in _flat(item)]
    return []


def _root(node: torch.fx.Node) -> torch.fx.Node:
    while is_view_node(node):
        node = node.args[0]
        if node.op == "call_function" and node.target is operator.getitem:
            node = node.args[0]
    return node


def _mutated_placeholders(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """Placeholders some in-place op writes into (directly or through a view)."""
    found = set()
    for node in graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None:
            continue
        for index, arg in enumerate(schema.arguments):
            if arg.alias_info is None or not arg.alias_info.is_write:
                continue
            value = node.args[index] if index < len(node.args) else node.kwargs.get(arg.name)
            while isinstance(value, torch.fx.Node) and is_view_node(value):
                value = value.args[0]
                if value.op == "call_function" and value.target is operator.getitem:
                    value = value.args[0]
            if isinstance(value, torch.fx.Node) and value.op == "placeholder":
                found.add(value)
    return found
