"""The backward program: the training step's gradients, proven document-local too.

A pipeline stage in training runs its forward and then its backward: the gradient of
the loss with respect to every token's activations flows back through the same layers,
and each parameter's gradient sums the contributions of every token. The backward is a
program of its own (``mm`` over the tokens for a weight's gradient, the attention's
backward kernel, ``slice_backward``, a custom op's registered ``backward``) and a leak
there makes the step's update depend on other documents although the forward does not.

:func:`prove_backward` builds the joint program of the exported forward (AOT autograd
traces forward and backward together: the loss is ``sum(output * tangent)`` over every
floating output, the tangent a token input like any other) and runs the same per-op
locality interpretation over it. Facts are collected where the step's results leave:

* a parameter's gradient is a sum over the tokens by construction; where that sum is a
  plain sum of every token (``mm`` contracting the tokens, ``sum`` over them,
  ``embedding_dense_backward``, a norm's weight gradient: :attr:`Interp.sums`) it is
  admitted, and what it sums must be document-local;
* every other mixing op of the backward is a leak, reported by GC401 as a finding of the
  backward program, located at the forward code it differentiates.

Origins in the forward part of the joint program are the forward's own findings (the
forward proof reports them): only backward ops are reported here.

Where the joint program is not the program training runs, a proof of it is not
enough: a ``torch.autograd.Function`` in the model's forward (the export inlines its
forward and drops its ``backward``; :mod:`graphcheck.analysis.export` records every one
it saw, with its call's arguments) must have passed running as a per-token op, forward
and its own backward (:mod:`graphcheck.kernels.functions`); any other is reported
instead of proving a derived backward in its place. ``torch``'s own functions
(reentrant checkpointing) are trusted: their backward recomputes the forward.
"""

from __future__ import annotations

import contextlib
import copy
import operator
import time
from dataclasses import dataclass, field

import sympy
import torch
import torch.fx
from torch._guards import detect_fake_mode

from graphcheck.analysis.export import Exported
from graphcheck.analysis.locality import Tokens, meta_toks
from graphcheck.analysis.passes.propagate_locality_pass import PropagateLocalityPass, flat
from graphcheck.errors import AnalysisError, one_line

__all__ = ["BackwardProof", "prove_backward"]


@dataclass
class BackwardProof:
    """The joint program and what its backward part does to documents.

    ``leaks``: backward op -> reason (GC401); ``functions``: the user
    ``autograd.Function`` classes whose own backward the joint program does not hold
    (the proof does not cover them); ``seconds``: building and analysing it."""

    graph: torch.fx.GraphModule | None
    leaks: dict[torch.fx.Node, str] = field(default_factory=dict)
    functions: tuple[str, ...] = ()
    # the autograd.Function classes run (graphcheck.kernels.functions): name -> OpCheck
    executed: dict = field(default_factory=dict)
    seconds: float = 0.0
    nodes: int = 0
    unproven: str = ""  # why no proof was attempted (the forward's own finding says more)
    refused: str = ""  # why the joint program proves nothing for every T (GC401)

    @property
    def proven(self) -> bool:
        return not (self.leaks or self.functions or self.unproven or self.refused)


def prove_backward(
    exported: Exported, tokens: Tokens, token_local=frozenset(), executed: dict | None = None
) -> BackwardProof:
    """The backward proof of ``exported`` (a forward in train mode); ``executed``: the
    user ``autograd.Function`` classes its forward applies
    (:func:`graphcheck.analysis.export.autograd_functions`), each with the verdict of
    running its own backward (:func:`graphcheck.kernels.functions.validate_function`).
    The joint program holds their forward's derived backward, not theirs: a Function
    not validated token-local leaves the backward unproven."""
    start = time.perf_counter()
    executed = executed or {}
    if not tokens:  # the export fixed T: no dim is known to run over the tokens (GC403)
        return BackwardProof(None, unproven="the export fixed T (see GC401, GC403)")
    functions = tuple(name for name, check in executed.items() if not check.isolated)
    if functions:
        seconds = time.perf_counter() - start
        return BackwardProof(None, functions=functions, executed=executed, seconds=seconds)
    env = detect_fake_mode(
        [n.meta.get("val") for n in exported.program.graph.nodes if n.op == "placeholder"]
    ).shape_env
    with _shapes_kept(env) as fixed:
        joint, inputs = _joint(exported)
        fixed.extend(_fixed(env, tokens))
    if fixed:
        why = f"tracing the backward fixed T to {fixed[0]}, so it would hold for that length only"
        return BackwardProof(None, refused=why, seconds=time.perf_counter() - start)
    interp = PropagateLocalityPass(joint, inputs, tokens, exported.rows)
    interp.token_local = token_local
    interp.run(joint.graph)
    forward = _forward_part(joint.graph)
    leaks = {
        origin: interp.reasons.get(origin, "mixes tokens")
        for origin in _origins(interp, joint.graph)
        if origin not in forward
    }
    _locate(joint, exported, leaks, tokens)
    seconds = time.perf_counter() - start
    nodes = len(joint.graph.nodes)
    return BackwardProof(joint, leaks, executed=executed, seconds=seconds, nodes=nodes)


class _Loss(torch.nn.Module):
    """The exported forward, then ``sum(output * tangent)`` over its floating outputs:
    a scalar loss whose gradient at each output is the tangent (a token input).
    Integer size inputs are handed in as the size of an empty tensor (AOT autograd takes
    tensors), read back as the same symbolic size."""

    def __init__(self, forward: torch.fx.GraphModule, sizes: set[int], outputs: list[int]):
        super().__init__()
        self.forward_program = forward
        self.sizes, self.outputs = sizes, outputs

    def forward(self, *args):
        count = len(args) - len(self.outputs)
        real = [a.shape[0] if i in self.sizes else a for i, a in enumerate(args[:count])]
        out = torch.fx.Interpreter(self.forward_program).run(*real)  # keeps each op's meta
        loss = 0
        for index, tangent in zip(self.outputs, args[count:], strict=True):
            loss = loss + (out[index].float() * tangent).sum()
        return (loss,)


def _joint(exported: Exported) -> tuple[torch.fx.GraphModule, dict[str, str]]:
    """The joint forward-backward graph of ``exported`` and its placeholder names ->
    varlen input names (the tangents named ``tangent<i>``)."""
    from torch._functorch.aot_autograd import aot_export_module

    program = exported.program
    holders = [n for n in program.graph.nodes if n.op == "placeholder"]
    vals = [n.meta["val"] for n in holders]
    mode = detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
    sizes = {i for i, v in enumerate(vals) if isinstance(v, torch.SymInt | int)}
    specs = program.graph_signature.output_specs
    results = [getattr(a, "meta", {}).get("val") for a in program.graph.output_node().args[0]]
    floats = [
        i for i, (spec, val) in enumerate(zip(specs, results, strict=True))
        if spec.kind.name == "USER_OUTPUT" and isinstance(val, torch.Tensor)
        and val.is_floating_point()
    ]  # fmt: skip
    if not floats:
        raise AnalysisError("the backward cannot be proven: the model returns no floating "
                            "tensor to take a loss of")  # fmt: skip
    with mode:
        args = [torch.empty(v) if i in sizes else v for i, v in enumerate(vals)]
        for i, holder in enumerate(holders):  # a tied weight's second name reads nothing
            if not holder.users and isinstance(args[i], torch.Tensor):
                args[i] = args[i].detach()
        args += [torch.empty(results[i].shape, dtype=torch.float32) for i in floats]
        try:
            with torch.fx.traceback.preserve_node_meta():
                joint, signature = aot_export_module(
                    _Loss(program.graph_module, sizes, floats), args,
                    trace_joint=True, output_loss_index=0,
                )  # fmt: skip
        except Exception as err:
            raise AnalysisError(
                f"the backward program cannot be built: {_first_line(err)}"
            ) from None
    grads = signature.backward_signature.gradients_to_user_inputs
    joint.meta["graphcheck_gradients"] = dict(grads)  # gradient output -> its input
    return joint, _input_names(exported, joint, len(holders))


def _input_names(exported: Exported, joint: torch.fx.GraphModule, count: int) -> dict[str, str]:
    holders = [n for n in joint.graph.nodes if n.op == "placeholder"]
    specs = exported.program.graph_signature.input_specs
    user = [i for i, spec in enumerate(specs) if spec.kind.name == "USER_INPUT"]
    names = {holders[i].name: name for i, name in zip(user, exported.inputs, strict=False)}
    names.update({n.name: f"tangent{k}" for k, n in enumerate(holders[count:])})
    return names


@contextlib.contextmanager
def _shapes_kept(env):
    """Whatever tracing the joint program adds to the shape environment (a size it
    fixed, a relation it guards) is taken back: the forward's sizes stay symbolic for
    every later reader. Yields a list to collect what was fixed in."""
    kept = {k: copy.copy(v) for k, v in vars(env).items() if type(v) in (dict, list, set)}
    fixed: list = []
    try:
        yield fixed
    finally:
        for name, value in kept.items():  # the same objects: other holders see them too
            held = getattr(env, name)
            held.clear()
            held.update(value) if not isinstance(held, list) else held.extend(value)
        for counter in ("_replacements_version_counter", "_version_counter"):
            if isinstance(getattr(env, counter, None), int):  # every cached reading is stale
                setattr(env, counter, getattr(env, counter) + 1)
        getattr(env, "_update_version_counter", lambda: None)()


def _fixed(env, tokens: Tokens) -> list[str]:
    """The values the trace fixed a symbol of T to."""
    found = []
    for name in tokens.length:
        value = env.replacements.get(sympy.Symbol(name, integer=True, positive=True))
        value = value if value is not None else _by_name(env.replacements, name)
        if value is not None and value.is_number:
            found.append(str(value))
    return found


def _by_name(replacements: dict, name: str):
    return next((v for k, v in replacements.items() if str(k) == name), None)


def _first_line(err: BaseException) -> str:
    return one_line(err, limit=0)


def _forward_part(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """The nodes the loss is computed from: the forward part of the joint program."""
    loss = graph.output_node().args[0][0]
    seen, stack = set(), [loss]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(node.all_input_nodes)
    return seen


def _origins(interp: PropagateLocalityPass, graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """The leak origins that reach the joint program's results, but for the plain sums
    over every token that produce a result with no token dim (a weight's gradient)."""
    origins: set[torch.fx.Node] = set()
    admitted: set[torch.fx.Node] = set()
    for result in graph.output_node().all_input_nodes:
        admitted |= {_summing(node) for node in _frontier(interp, result)} & interp.sums
        for val in flat(interp.vals.get(result)):
            origins |= val.leaks
    for written in interp.writes:
        for val in flat(interp.vals.get(written)):
            origins |= val.leaks
    return origins - admitted


def _frontier(interp: PropagateLocalityPass, result: torch.fx.Node) -> set[torch.fx.Node]:
    """The ops where ``result``'s value (no token dim) was summed out of values with a
    token dim: walking back from it through values without a token dim."""
    found, seen, stack = set(), set(), [result]
    while stack:
        node = stack.pop()
        if node in seen or _has_tokens(interp, node):
            continue
        seen.add(node)
        if any(_has_tokens(interp, arg) for arg in node.all_input_nodes):
            found.add(node)
            continue
        stack.extend(node.all_input_nodes)
    return found


def _summing(node: torch.fx.Node) -> torch.fx.Node:
    """The op a frontier value comes from: itself, or the op whose result it takes apart
    (a norm's backward returns the input's and the weight's gradients together)."""
    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
        return node.args[0]
    return node


def _has_tokens(interp, node: torch.fx.Node) -> bool:
    """Whether a value of ``node`` has a dim of the packed length (by its shape);
    ``interp``: the interpretation, or the :class:`Tokens` themselves."""
    tokens = interp if isinstance(interp, Tokens) else interp.tokens
    val = node.meta.get("val")
    vals = val if isinstance(val, tuple | list) else [val]
    return any(any(t is not None for t in meta_toks(v, tokens)) for v in vals)


def _gradient_of(node: torch.fx.Node, gradient: dict) -> str | None:
    """The parameter whose gradient ``node`` is (through views and sums of gradients)."""
    stack, seen = [node], set()
    while stack:
        current = stack.pop()
        if current in seen or len(seen) > 16:
            continue
        seen.add(current)
        if gradient.get(current.name):
            return gradient[current.name]
        stack.extend(u for u in current.users if u.op == "call_function")
    return None


def _locate(joint: torch.fx.GraphModule, exported: Exported, nodes, tokens: Tokens) -> None:
    """Give each backward op of ``nodes`` the module of the parameter it reads nearest
    (the joint program keeps no module paths): the weight whose gradient, or the
    module whose backward, it computes."""
    specs = exported.program.graph_signature.input_specs
    holders = [n for n in joint.graph.nodes if n.op == "placeholder"]
    owner = {
        holder: spec.target
        for holder, spec in zip(holders, specs, strict=False)
        if spec.kind.name == "PARAMETER" and spec.target
    }
    of = {holder.name: owner[holder] for holder in owner}
    gradient = {name: of.get(held) for name, held in joint.meta["graphcheck_gradients"].items()}
    for node in nodes:
        param = None if _has_tokens(tokens, node) else _gradient_of(node, gradient)
        if param is not None:  # it computes this weight's gradient
            module = param.rsplit(".", 1)[0]
            node.meta["nn_module_stack"] = {module: (module, "")}
            continue
        frontier, seen = [node], {node}
        while frontier and not any(n in owner for n in frontier):
            frontier = [a for n in frontier for a in n.all_input_nodes if a not in seen]
            seen.update(frontier)
        found = sorted(owner[n] for n in frontier if n in owner)
        if found:
            module = found[0].rsplit(".", 1)[0]
            node.meta["nn_module_stack"] = {module: (module, "")}
