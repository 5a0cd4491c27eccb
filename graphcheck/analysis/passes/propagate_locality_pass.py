"""Token locality, proven per op: an abstract interpretation over the ATen graph.

Every node gets a :class:`~graphcheck.analysis.locality.Val` from the transfer function
:mod:`graphcheck.analysis.locality` registers for its op. Two facts are collected at the
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

A buffer the forward only accumulates into (``tokens_per_expert.add_(counts)``: its old
value is read by nothing but the writes into it) is step state, handed to whatever runs
between steps (an optimizer hook) as the gradients are: no output of this call, and no
later call's forward, reads it. The origins that reach only such buffers are kept apart
(``step_state``, GC404, a warning); a buffer the forward also reads (last step's value
routing this step's tokens) is state a later forward computes with, and its origins
are ``leaks``.

A third fact fails closed where no proof can be built: when the export fixed T to
the example's length (a model that specialises: ``torch._check(T == 29)``, a Python
branch on ``x.shape[1] == 29``), no size is symbolic in T and no dimension can be
recognised as the token dimension. ``untracked`` then holds the first op (in graph
order) whose value has a dimension of that size and is computed from the token
inputs (tokens, positions, the hidden states of a stage), with the reason; GC401
reports it (and GC403 the specialisation itself). A constant of the same size that
is not computed from the tokens (a weight's width) is not taken for T.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from graphcheck.analysis.fx import METADATA_ONLY, is_view_node, op_name
from graphcheck.analysis.locality import Dep, Interp, Kind, Val, carry, meta_toks
from graphcheck.analysis.locality.transfer import transfer
from graphcheck.analysis.passes.base import NodePass
from graphcheck.analysis.passes.link_mutations_pass import written_arguments
from graphcheck.varlen import BY_NAME, Structure

__all__ = ["PropagateLocalityPass", "flat"]

# The varlen inputs that are structure, not token data (by their row's ``structure``):
# the kind of value they start as and how they depend on tokens.
_STRUCTURE_KINDS = {
    Structure.POSITIONS: (Kind.POS, Dep.POINT),
    Structure.BOUNDARIES: (Kind.CU, Dep.NONE),
    Structure.MAX_LENGTH: (Kind.LENGTH, Dep.NONE),
}


class PropagateLocalityPass(NodePass, Interp):
    """``inputs``: placeholder name -> varlen input name; ``tokens``: the sympy names
    of the packed length T; ``root``: the graph module (for subgraphs); ``rows``: the
    export's varlen table (:attr:`graphcheck.analysis.export.Exported.rows`)."""

    def __init__(
        self, root: torch.nn.Module, inputs: dict[str, str], tokens: set[str], rows=BY_NAME
    ) -> None:
        Interp.__init__(self, root, tokens, transfer)
        self.inputs = inputs
        self.rows = rows
        self.mutated = _mutated_placeholders(root.graph)
        self.order: dict[torch.fx.Node, int] = {}
        self.alias_root: dict[torch.fx.Node, torch.fx.Node] = {}  # view or write -> storage root
        self.stored: dict[torch.fx.Node, list] = {}  # root -> [(position, written value)]
        self.leaks: dict[torch.fx.Node, str] = {}
        # accumulated-only buffer -> the leak origins that reach only it, with reasons
        self.step_state: dict[torch.fx.Node, dict[torch.fx.Node, str]] = {}
        self.fabricated: dict[torch.fx.Node, str] = {}
        self.fixed_length: int | None = None  # T when the export made it a constant
        self.untracked: dict[torch.fx.Node, str] = {}  # the first op over a fixed T

    def placeholder(self, node: torch.fx.Node) -> None:
        name = self.inputs.get(node.name)
        val = node.meta.get("val")
        toks = meta_toks(val, self.tokens)
        row = self.rows.get(name) if name is not None else None
        if row is not None and row.dim_name == "T" and isinstance(val, torch.Tensor):
            size = _constant(val.shape[row.dim]) if row.dim < val.dim() else None
            if size is not None:  # not a symbol: the export specialised T
                self.fixed_length = size
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
        if self.fixed_length is not None and not self.untracked:
            self._over_fixed_length(node)
        root = self.alias_root.get(node.args[0], node.args[0]) if node.args else None
        if len(self.writes) > writes_before and isinstance(root, torch.fx.Node):
            self.alias_root[node] = root
            self.stored.setdefault(root, []).append((self.order[node], self.vals[node]))
        elif is_view_node(node) and isinstance(node.args[0], torch.fx.Node):
            self.alias_root[node] = self.alias_root.get(node.args[0], node.args[0])

    def _over_fixed_length(self, node: torch.fx.Node) -> None:
        """Record ``node`` as where documents stop being tracked when its value has a
        dimension of the fixed T and it reads values computed from the token inputs."""
        if not any(_sizes_of(node.meta.get("val"), self.fixed_length)):
            return
        if not any(v.dep > Dep.NONE or v.leaks for v in map(self.val, node.all_input_nodes) if v):
            return
        self.untracked[node] = (
            f"documents cannot be tracked: the export fixed T to {self.fixed_length} at this "
            f"op (`{op_name(node.target)}`: a specialised token count, so no dimension is "
            "known to run over the tokens); make the length dynamic (see GC403)"
        )

    def _see_writes(self, arg: torch.fx.Node) -> None:
        root = self.alias_root.get(arg, arg)
        later = [v for pos, v in self.stored.get(root, ()) if pos > self.order.get(arg, -1)]
        current = self.vals.get(arg)
        if later and isinstance(current, Val):
            self.vals[arg] = current.with_(**carry([current, *later]), kind=None)

    def output(self, node: torch.fx.Node) -> None:
        for arg in node.all_input_nodes:
            self.collect(arg)
        state: dict[torch.fx.Node, list[torch.fx.Node]] = {}
        for written in self.writes:
            root = _root(written)
            if root.op != "placeholder":
                continue
            if root.name in self.inputs or not _accumulated_only(root):
                self.collect(written)  # state that outlives the call, read by a forward
            else:
                state.setdefault(root, []).append(written)
        for root, writes in state.items():
            origins = {o for w in writes for v in flat(self.vals.get(w)) for o in v.leaks}
            kept = {o: self.reasons.get(o, "mixes tokens") for o in origins - set(self.leaks)}
            if kept:
                self.step_state[root] = kept

    def collect(self, node: torch.fx.Node) -> None:
        """Record the leak and fabrication origins that reach ``node``'s value."""
        for val in flat(self.vals.get(node)):
            for origin in val.leaks:
                self.leaks.setdefault(origin, self.reasons.get(origin, "mixes tokens"))
            for origin in val.absolute:
                self.fabricated.setdefault(origin, self.reasons.get(origin, "absolute index"))


def _constant(size) -> int | None:
    """``size`` when it is a number (an int, or a SymInt whose expression is one), read
    without asking the shape environment."""
    if isinstance(size, torch.SymInt):
        size = size.node.expr
    return int(size) if getattr(size, "is_Integer", False) or type(size) is int else None


def _sizes_of(val, size: int):
    """Whether each tensor of ``val`` (a tensor or a tuple of them) has a dim ``size``."""
    if isinstance(val, torch.Tensor):
        return [any(_constant(d) == size for d in val.shape)]
    if isinstance(val, (tuple, list)):
        return [found for item in val for found in _sizes_of(item, size)]
    return []


def flat(val) -> list[Val]:
    if isinstance(val, Val):
        return [val]
    if isinstance(val, (tuple, list)):
        return [v for item in val for v in flat(item)]
    return []


def _root(node: torch.fx.Node) -> torch.fx.Node:
    while is_view_node(node):
        node = node.args[0]
        if node.op == "call_function" and node.target is operator.getitem:
            node = node.args[0]
    return node


def _accumulated_only(root: torch.fx.Node) -> bool:
    """Whether the storage of placeholder ``root`` is read by nothing but the in-place
    writes into it (through views of it; shape queries aside): its old value flows only
    back into itself, and nothing of this call reads what it holds."""
    todo, seen = [root], set()
    while todo:
        alias = todo.pop()
        for user in alias.users:
            if user in seen or op_name(user.target) in METADATA_ONLY:
                continue
            seen.add(user)
            if is_view_node(user) and user.args and user.args[0] is alias:
                todo.append(user)
            elif not any(_root(w) is root for w in written_arguments(user)) or user.users:
                return False  # read by an op that does not write it back, or passed on
    return True


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
