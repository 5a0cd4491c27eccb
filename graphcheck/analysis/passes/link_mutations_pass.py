"""Mutation is dataflow: link every in-place write to what reads the written storage.

``torch.export.export(strict=False)`` in torch 2.13 produces the *training IR*: in-place
ATen ops stay in the graph (``aten.copy_``, ``aten.add_``, ``aten.mul_``,
``aten.index_add_``, ...) and ``graph_signature`` lists no buffer or input mutation
(``buffers_to_mutate`` and ``user_inputs_to_mutate`` are empty; the only outputs are
user outputs). Tracing points a mutated tensor at the in-place op's result, so a later
read of the *same* Python tensor already reads the write node. What the graph does not
say is that a view taken *before* the write, the written tensor read through another
alias (``self.buf`` after ``self.buf[0].add_(1)``), and the placeholder of a buffer or
input all share the written storage: their readers see the write without an edge to it.

Approach: add write→read edges across aliases, instead of running
``ExportedProgram.run_decompositions({})`` to functionalise the program (which would
turn the writes into explicit outputs, but costs ~1.6 s on an 8-layer model, more than
the whole export, and renames every node the rules report). One linear sweep in program
order keeps, per storage root, the last write (an op whose schema marks the argument
``alias_info.is_write``; views and in-place results resolve to the root they alias); a
node reading an alias of that root created before the write gets the write as an extra
input (:attr:`mutation_inputs`). Graphs without in-place ops cost one scan.

Semantics, on top of the edges:

* a write made by one layer (or the edge modules: anything pinned to one stage) whose
  value reaches another region through values that are not activations (a rotary
  table scaled in place, ``position_ids`` edited in place, a buffer or parameter
  written with a constant) is no longer replicated: its role becomes ``activation``,
  and so does every tensor computed from it, so it must cross the cut like any other
  activation (GC201). Writes in model-level glue run on every stage and stay as they
  are;
* a buffer or parameter keeps its last write into the next step. A stage-local write
  whose buffer is read *before* the first write of the step (last step's value) by
  another region is a :class:`Persisted` channel; the crossing sets list the write at
  every cut it spans (GC201).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.fx

from graphcheck.analysis.fx import METADATA_ONLY, is_view_node, op_name
from graphcheck.analysis.passes.propagate_taint_pass import is_tensor_value
from graphcheck.analysis.regions import BUFFER, PARAMETER, Region, RegionKind
from graphcheck.analysis.taint import Role

__all__ = ["LinkMutationsPass", "Persisted", "storage_root", "written_arguments"]

_PINNED = (RegionKind.LAYER, RegionKind.INPUT, RegionKind.OUTPUT)
_FLIPPABLE = (Role.REPLICATED, Role.PARAMETER)


@dataclass(frozen=True)
class Persisted:
    """State carried to the next step: ``writer`` is the last write into ``root``
    (a buffer or parameter); ``readers`` read the value it had before this step's
    first write, i.e. what ``writer`` stored in the previous step."""

    root: torch.fx.Node
    writer: torch.fx.Node
    readers: tuple[torch.fx.Node, ...]


def written_arguments(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The arguments an in-place op writes into (``copy_(dst, src)``: ``dst``)."""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None:
        return []
    found = []
    for index, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = node.args[index] if index < len(node.args) else node.kwargs.get(arg.name)
        if isinstance(value, torch.fx.Node):
            found.append(value)
    return found


def storage_root(node: torch.fx.Node, memo: dict | None = None) -> torch.fx.Node:
    """The tensor whose storage ``node`` shares (through views and in-place results)."""
    memo = {} if memo is None else memo
    if node in memo:
        return memo[node]
    written = written_arguments(node)
    if written:
        root = storage_root(written[0], memo)
    elif is_view_node(node) and isinstance(node.args[0], torch.fx.Node):
        root = storage_root(node.args[0], memo)
    else:
        root = node
    memo[node] = root
    return root


class LinkMutationsPass:
    """Compute write→read edges, role changes and persisted state for one graph."""

    def __init__(self, region: dict[torch.fx.Node, Region], role: dict[torch.fx.Node, Role]):
        self.region = region
        self.role = role  # updated in place: mutated state becomes an activation
        self.mutation_inputs: dict[torch.fx.Node, list[torch.fx.Node]] = {}
        self.writes: dict[torch.fx.Node, torch.fx.Node] = {}  # write -> storage root
        self.persisted: list[Persisted] = []
        self._roots: dict[torch.fx.Node, torch.fx.Node] = {}

    def run(self, graph: torch.fx.Graph) -> None:
        nodes = list(graph.nodes)
        targets = [(n, w) for n in nodes for w in written_arguments(n)]
        if not targets:
            return
        self.writes = {n: storage_root(w, self._roots) for n, w in targets}
        mutated = set(self.writes.values())
        first_reads = self._sweep(nodes, mutated)
        self._find_persisted(first_reads)
        readers = self._readers()
        escaping = [w for w in self.writes if self._escapes(w, readers)]
        escaping += [p.writer for p in self.persisted]
        self._flip(nodes, escaping)

    def inputs(self, node: torch.fx.Node) -> list[torch.fx.Node]:
        """What ``node`` reads: its arguments, then the writes linked to it."""
        return [*node.all_input_nodes, *self.mutation_inputs.get(node, ())]

    def _sweep(self, nodes, mutated) -> dict[torch.fx.Node, list[torch.fx.Node]]:
        """Link reads to the last write of their root; collect reads before any write."""
        last: dict[torch.fx.Node, torch.fx.Node] = {}  # root -> last write so far
        seen: dict[torch.fx.Node, torch.fx.Node | None] = {}  # alias -> write it sees
        first_reads: dict[torch.fx.Node, list[torch.fx.Node]] = {}
        for node in nodes:
            for arg in node.all_input_nodes:
                root = self._roots.get(arg) or storage_root(arg, self._roots)
                if root not in mutated or op_name(node.target) in METADATA_ONLY:
                    continue
                write = last.get(root)
                if write is None:
                    first_reads.setdefault(root, []).append(node)
                elif seen.get(arg) is not write and arg is not write:
                    self.mutation_inputs.setdefault(node, []).append(write)
            root = storage_root(node, self._roots)
            if node in self.writes:
                last[root] = node
            if root in mutated:
                seen[node] = last.get(root)
        return first_reads

    def _find_persisted(self, first_reads) -> None:
        """Buffers and parameters whose last write is read, next step, elsewhere."""
        final: dict[torch.fx.Node, torch.fx.Node] = {}
        for write, root in self.writes.items():
            final[root] = write  # dict order is program order: the last one wins
        for root, writer in final.items():
            if self.region.get(root) not in (BUFFER, PARAMETER) or not self._pinned(writer):
                continue
            readers = tuple(
                r for r in first_reads.get(root, ()) if self.region.get(r) != self.region[writer]
            )
            if readers:
                self.persisted.append(Persisted(root, writer, readers))

    def _pinned(self, node: torch.fx.Node) -> bool:
        region = self.region.get(node)
        return region is not None and region.kind in _PINNED

    def _escapes(self, write: torch.fx.Node, readers) -> bool:
        """A stage-local write whose non-activation value reaches another region."""
        if not self._pinned(write) or self.role.get(write) not in _FLIPPABLE:
            return False
        home, todo, done = self.region[write], [write], set()
        while todo:
            node = todo.pop()
            for user in readers.get(node, ()):
                if user in done or op_name(user.target) in METADATA_ONLY:
                    continue
                done.add(user)
                if self.region.get(user) != home:
                    return True
                if self.role.get(user) in _FLIPPABLE:
                    todo.append(user)
        return False

    def _readers(self) -> dict[torch.fx.Node, list[torch.fx.Node]]:
        """Node -> what reads it: its users and the reads linked to it."""
        readers: dict[torch.fx.Node, list[torch.fx.Node]] = {}
        for node, extra in self.mutation_inputs.items():
            for write in extra:
                readers.setdefault(write, []).append(node)
        for node in self.region:
            readers.setdefault(node, []).extend(node.users)
        return readers

    def _flip(self, nodes: list[torch.fx.Node], sources: Iterable[torch.fx.Node]) -> None:
        """Make ``sources`` and every tensor computed from them activations."""
        flipped = set(sources)
        for node in nodes:
            if node not in flipped and not any(a in flipped for a in self.inputs(node)):
                continue
            val = node.meta.get("val")
            if self.role.get(node) in _FLIPPABLE and (is_tensor_value(val) or val is None):
                self.role[node] = Role.ACTIVATION
                flipped.add(node)
