"""Execute the uncut exported program stage by stage, as the proof partitions it.

Every activation node runs on the stage the proof puts it on
(:meth:`graphcheck.checker.Context.stage_of`: layers by index, edge modules on
the first and last stage, free glue where the cut's minimum vertex cut placed
it). Everything else is recomputed on every stage that reads it: replicated
side inputs (rotary tables, masks, ``cu_seq_lens``) from the replicated user
inputs, sizes, and parameters, which are present on every stage that uses
them.

Between stage ``s`` and ``s + 1`` exactly one value crosses: the activation the
proof accepts at that cut (the residual, or the lone crossing activation), as
bf16 bytes (``.to(torch.bfloat16)``; a receiving stage whose program expects
another dtype gets those bytes widened back). A stage that reads any other
value made on another stage cannot run: the run stops with a :class:`Blocked`
naming the value, the stage that made it and what the wire carried.

A stage computes only what its hand-off (or the logits, on the last stage)
needs, plus every in-place op that writes into a tensor it reads (export keeps
``copy_`` into a ``new_empty`` buffer, ``index_put_``, ...), in program order.
A replicated node may read an activation made elsewhere only through its
metadata (``sym_size``, ``zeros_like``: the taint says its value does not flow);
such an input is replaced by zeros of the same shape and dtype. When that
shape is data-dependent (an unbacked size of ``nonzero``, ``where``, ...,
computed on another stage), the stage cannot know it: the run stops with a
:class:`Blocked` naming the size and the value.

With no cuts this runs the uncut program in one piece.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import sympy
import torch
import torch.fx

from graphcheck.analysis.passes.link_mutations_pass import storage_root, written_arguments
from graphcheck.analysis.program import Program
from graphcheck.results.gate import Blocked, Handover
from graphcheck.results.values import Role

__all__ = ["NodeFailure", "RunStagesPass", "StagedRun"]


@dataclass
class StagedRun:
    outputs: tuple | None = None
    blocked: Blocked | None = None
    handovers: list[Handover] = field(default_factory=list)


class NodeFailure(Exception):
    """An op raised while running; ``node`` is where, ``__cause__`` what."""

    def __init__(self, node: torch.fx.Node, program: Program) -> None:
        self.node = node
        self.where = program.label(node)
        super().__init__(f"{node.name} in {self.where}")


class RunStagesPass:
    """Run ``program`` split at ``cuts`` (``[(position, boundary node or None)]``)."""

    def __init__(
        self,
        program: Program,
        feeds: Mapping[str, object],
        cuts: list[tuple[int, torch.fx.Node | None]],
        stage_of: Callable[[torch.fx.Node], int | None],
    ) -> None:
        self.program = program
        self.feeds = feeds
        self.cuts = cuts
        self.stage_of = stage_of
        self.last = len(cuts)
        self.order = list(program.graph.nodes)
        self.position = {node: i for i, node in enumerate(self.order)}
        self.output = self.order[-1]
        self.bindings = _bindings(program, feeds)
        self.writers = _writers(self.order)

    def run(self) -> StagedRun:
        result = StagedRun()
        received: dict[torch.fx.Node, object] = {}
        for stage in range(self.last + 1):
            need, standin, blocked = self._closure(stage, received)
            if blocked is not None:
                result.blocked = blocked
                return result
            try:
                env = self._execute(need, standin, received)
            except _UnboundSize as err:
                result.blocked = self._size_blocked(stage, err)
                return result
            if stage == self.last:
                result.outputs = env[self.output]
                return result
            received = self._hand_over(stage, env, result)
        return result

    def _targets(self, stage: int) -> list[torch.fx.Node]:
        if stage == self.last:
            return [self.output]
        boundary = self.cuts[stage][1]
        return [boundary] if boundary is not None else []

    def _home(self, node: torch.fx.Node) -> int | None:
        """The one stage that may compute ``node``; ``None``: any stage recomputes it."""
        if node is self.output:
            return self.last
        if self.program.role.get(node) != Role.ACTIVATION:
            return None
        return self.stage_of(node)

    def _closure(self, stage: int, received):
        """Nodes stage ``stage`` computes, inputs replaced by stand-ins, or a block. A node
        brings along the in-place writes into its storage made before its reader reads it
        (a write after the last read changes nothing this stage computes)."""
        need: set[torch.fx.Node] = set()
        standin: set[torch.fx.Node] = set()
        until: dict[torch.fx.Node, int] = {}  # node -> writes followed up to this position
        todo = [(t, None) for t in self._targets(stage)]
        while todo:
            node, reader = todo.pop()
            limit = self.position[reader] if reader is not None else len(self.order)
            if node in received or until.get(node, -1) >= limit:
                continue
            if node not in need:
                home = self._home(node)
                if home is not None and home != stage:
                    if reader is not None and self._home(reader) is None:
                        standin.add(node)  # read for its metadata only
                        continue
                    return need, standin, self._blocked(stage, node, home, received)
                need.add(node)
                todo.extend((arg, node) for arg in node.all_input_nodes)
            done, until[node] = until.get(node, -1), limit
            writers = self.writers.get(storage_root(node), ())
            todo.extend((w, None) for w in writers if done < self.position[w] < limit)
        return need | self._vmap_levels(need), standin, None

    def _vmap_levels(self, need: set) -> set[torch.fx.Node]:
        """The ``vmap`` level bookkeeping (``_vmap_increment_nesting`` and its decrement,
        read by no node) that batch dims of ``need`` are added and removed under: every
        level, so they run balanced and in the program's order."""
        if not any(getattr(n.target, "__name__", "") == "_add_batch_dim" for n in need):
            return set()
        return {n for n in self.order if getattr(n.target, "__name__", "") in _VMAP_LEVELS}

    def _blocked(self, stage: int, node, home: int | None, received) -> Blocked:
        where = f"{self.program.label(node)}, made on stage {home}"
        what = f"`{node.name}` ({where})"
        val, source = node.meta.get("val"), node.args[0] if node.args else None
        if isinstance(val, torch.SymInt) and isinstance(source, torch.fx.Node):
            size = self.program.readable(val)
            what = f"the data-dependent size {size} of `{source.name}` ({where})"
        if home is not None and home > stage:
            why = f"stage {stage} runs before stage {home}"
        elif received:
            carried = ", ".join(f"`{n.name}`" for n in received)
            why = f"the wire at cut {self.cuts[stage - 1][0]} carries only {carried}"
        else:
            why = f"nothing may cross cut {self.cuts[stage - 1][0]} (no residual there)"
        message = f"stage {stage} needs {what}, but {why}; the stage cannot run"
        return Blocked(stage, node.name, self.program.label(node), home, message)

    def _size_blocked(self, stage: int, err: _UnboundSize) -> Blocked:
        node, home = err.node, self._home(err.node)
        where = f"made on stage {home}" if home is not None else "made on another stage"
        cut = self.cuts[stage - 1][0] if stage > 0 else self.cuts[0][0]
        message = (
            f"stage {stage} needs the data-dependent size {self.program.readable(err.size)} of "
            f"`{node.name}` ({self.program.label(node)}, {where}), but only the wire crosses "
            f"cut {cut}; the stage cannot run"
        )
        return Blocked(stage, node.name, self.program.label(node), home, message)

    def _execute(self, need, standin, received) -> dict[torch.fx.Node, object]:
        env: dict[torch.fx.Node, object] = dict(received)
        for node in standin:
            env[node] = self._standin(node)
        for node in self.order:
            if node in need and node not in env:
                env[node] = self._eval(node, env)
        return env

    def _eval(self, node: torch.fx.Node, env):
        if node.op == "placeholder":
            return self.feeds[node.name]
        if node.op == "get_attr":
            return _attribute(self.program.exported.program.graph_module, node.target)
        args = torch.fx.node.map_arg(node.args, env.__getitem__)
        if node.op == "output":
            return args[0]
        kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
        try:
            return node.target(*args, **kwargs)
        except Exception as err:
            raise NodeFailure(node, self.program) from err

    def _hand_over(self, stage: int, env, result: StagedRun) -> dict:
        position, boundary = self.cuts[stage]
        if boundary is None:
            result.handovers.append(Handover(position, None, None, None, False))
            return {}
        value = env[boundary]
        dtype = self.program.dtype(boundary)
        rounded = dtype != "bfloat16"
        result.handovers.append(
            Handover(position, boundary.name, dtype, self.program.shape(boundary), rounded)
        )
        return {boundary: _as_bf16_bytes(value)}

    def _standin(self, node: torch.fx.Node) -> torch.Tensor:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise NodeFailure(node, self.program) from ValueError("no tensor shape recorded")
        try:
            shape = [_evaluate(d, self.bindings) for d in val.shape]
        except _UnboundSize as err:
            err.node = node
            raise
        return torch.zeros(shape, dtype=val.dtype)


_VMAP_LEVELS = {"_vmap_increment_nesting", "_vmap_decrement_nesting", "lazy_load_decompositions"}


def _writers(order: list[torch.fx.Node]) -> dict[torch.fx.Node, list[torch.fx.Node]]:
    """Storage root -> the in-place ops that write into it."""
    writers: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for node in order:
        for target in written_arguments(node):
            writers.setdefault(storage_root(target), []).append(node)
    return writers


def _as_bf16_bytes(value):
    """The value as it arrives over a bf16 wire: rounded to bf16, in a fresh buffer,
    widened back to the dtype the receiving program expects."""
    if not isinstance(value, torch.Tensor):
        return value
    wire = value.detach().to(torch.bfloat16, copy=True).contiguous()
    return wire.to(value.dtype)


def _attribute(module: torch.nn.Module, target: str):
    for part in target.split("."):
        module = getattr(module, part)
    return module


def _bindings(program: Program, feeds: Mapping[str, object]) -> dict:
    """Symbol -> real size, from the user inputs' symbolic shapes."""
    bound: dict = {}
    for node in program.user_inputs.values():
        val, real = node.meta.get("val"), feeds.get(node.name)
        if isinstance(val, torch.SymInt) and isinstance(real, int):
            bound[val.node.expr] = real
        elif isinstance(val, torch.Tensor) and isinstance(real, torch.Tensor):
            for dim, size in zip(val.shape, real.shape, strict=False):
                expr = getattr(getattr(dim, "node", None), "expr", None)
                if isinstance(expr, sympy.Symbol):
                    bound[expr] = size
    return bound


class _UnboundSize(Exception):
    """A size with no value on this stage (an unbacked, data-dependent symbol)."""

    def __init__(self, size) -> None:
        super().__init__(str(size))
        self.size = size
        self.node: torch.fx.Node | None = None


def _evaluate(dim, bindings: dict) -> int:
    if isinstance(dim, int):
        return dim
    expr = dim.node.expr.xreplace(bindings)
    if expr.free_symbols:
        raise _UnboundSize(dim)
    return int(expr)
