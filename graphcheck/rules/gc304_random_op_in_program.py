"""GC304 random-op-in-program

What it checks
    The proven program draws no random numbers. An op is random when ATen tags it
    ``nondeterministic_seeded`` (dropout and its feature and alpha variants,
    ``native_dropout``, attention kernels with a ``dropout_p``, ``rrelu``,
    ``bernoulli``, ``rand``, ``randn``, ``randint``, ``randperm``, ``multinomial``,
    ``normal``, ``uniform_``, ``exponential_``, ...), in the graph or in a
    higher-order op's subgraph, unless its own arguments prove it deterministic: a
    dropout probability (``p``, ``dropout``, ``dropout_p``) that is the literal 0, or a
    ``train`` / ``training`` flag that is the literal ``False`` (what ``model.eval()``
    passes to dropout). A probability or flag the graph computes (symbolic, unknown)
    is random: graphcheck cannot read it, so it does not pass. GC304 runs on every
    ``verify`` and ``map`` (no stage builder needed) and judges the program of the
    mode proven (``--mode train``, the default, or ``--mode eval``).

Why it matters
    Exact lanes promise the very same bytes in the trainer and the sampler, and
    pipeline parallelism promises that the staged program computes the uncut one.
    A random op breaks both: each stage draws from its own generator state, in
    another order than the uncut run, so no staged run reproduces the uncut
    program's random stream (``graphcheck gate`` refuses to compare such bytes).
    Dropout in the training program is the usual case: ``model.train()`` turns it
    on, so a model proven in eval mode may still run it.

Example
    ``nn.Dropout(0.1)`` on a layer's MLP output, proven in train mode;
    ``F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)``; transformers'
    attention with ``attention_dropout = 0.1`` in the training program;
    ``x + 0.01 * torch.randn_like(x)``.

Fix
    Set the dropout probability to 0 for exact lanes: the config key that sets it
    (``--set attention_dropout=0`` for an ``hf:`` model, ``hidden_dropout``,
    ``resid_pdrop``, ...) or the module's ``p``. Draw no random numbers in the
    forward (pass noise in, or keep it in a buffer). If the eval program is the one
    you run, prove it with ``--mode eval``.
"""

from __future__ import annotations

import torch
import torch.fx

from graphcheck.analysis.fx import op_name
from graphcheck.diagnostics import Diagnostic, module_path

__all__ = ["CODE", "NAME", "EXAMPLE", "SEVERITY", "SUMMARY", "check", "random_reason"]

CODE = "GC304"
NAME = "random-op-in-program"
SEVERITY = "error"
SUMMARY = "the program draws random numbers (dropout with p > 0, `rand`, `bernoulli`, ...)"
# The documentation's example, run by tests/rules/test_rule_table.py: the code fires
# at the cut on the violating model and not on its passing twin.
EXAMPLE = {
    "violating": "fixtures/training.py:dropout_layer",
    "passing": "fixtures/training.py:dropout_zero",
    "cut": 2,
}

_PROBABILITY = ("p", "dropout", "dropout_p")  # zero: nothing is drawn
_SWITCH = ("train", "training")  # False: the op is the identity (eval mode)


def check(ctx) -> list[Diagnostic]:
    """One finding per module, op and reason (a loop unrolled by export repeats an op)."""
    program = ctx.program
    mode = program.exported.program_mode
    groups: dict[tuple[str, str, str], list[torch.fx.Node]] = {}
    for node in _nodes(program.exported.program.graph_module):
        reason = random_reason(node)
        if reason is not None:
            key = (module_path(node) or "", op_name(node.target), reason)
            groups.setdefault(key, []).append(node)
    found = []
    for (_, op, reason), nodes in groups.items():
        more = f" ({len(nodes)} such ops here)" if len(nodes) > 1 else ""
        message = (
            f"`{op}` {reason} in the {mode} program{more}: a staged run cannot reproduce the "
            f"uncut program's random stream; {_fix(nodes[0], mode)}"
        )
        found.append(Diagnostic.at(CODE, NAME, message, node=nodes[0]))
    return found


def _nodes(root: torch.nn.Module):
    """Every call of every graph: the program's and its higher-order ops' subgraphs."""
    for module in root.modules():
        graph = getattr(module, "graph", None)
        if isinstance(graph, torch.fx.Graph):
            yield from (n for n in graph.nodes if n.op == "call_function")


def random_reason(node: torch.fx.Node) -> str | None:
    """Why ``node`` draws random numbers, or ``None`` when it does not.

    >>> graph = torch.fx.Graph()
    >>> x = graph.placeholder("x")
    >>> drop = torch.ops.aten.dropout.default
    >>> [random_reason(graph.call_function(drop, (x, p, train))) for p, train in
    ...  [(0.1, True), (0.0, True), (0.1, False)]]
    ['draws random numbers (dropout with p = 0.1)', None, None]
    >>> random_reason(graph.call_function(torch.ops.aten.rand_like.default, (x,)))
    'draws random numbers'
    """
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return None
    if torch.Tag.nondeterministic_seeded not in target.tags:
        return None
    switch = _argument(node, _SWITCH)
    if switch is not None and _literal(switch[1]) is False:
        return None
    probability = _argument(node, _PROBABILITY)
    if probability is None:
        return "draws random numbers"
    name, value = probability
    literal = _literal(value)
    if literal is None or isinstance(literal, bool):
        return f"may draw random numbers ({name} is computed in the graph, not a literal)"
    if literal == 0:
        return None
    return f"draws random numbers (dropout with {name} = {literal:g})"


def _argument(node: torch.fx.Node, names: tuple[str, ...]) -> tuple[str, object] | None:
    """The first schema argument of ``node`` named one of ``names``, with its value."""
    for index, arg in enumerate(node.target._schema.arguments):
        if arg.name not in names:
            continue
        if arg.name in node.kwargs:
            return arg.name, node.kwargs[arg.name]
        if index < len(node.args) and not arg.kwarg_only:
            return arg.name, node.args[index]
        return arg.name, arg.default_value if arg.has_default_value() else None
    return None


def _literal(value) -> bool | int | float | None:
    """``value`` as a Python number when the graph holds it as one (a literal, or a node
    whose recorded value is one); ``None`` when it is symbolic or unknown."""
    if isinstance(value, torch.fx.Node):
        value = value.meta.get("val")
    return value if isinstance(value, bool | int | float) else None


def _fix(node: torch.fx.Node, mode: str) -> str:
    """How to fix it: a probability to set to 0, or random numbers not to draw; the eval
    program when a train flag switches the op."""
    if _argument(node, _PROBABILITY) is not None:
        fix = (
            "set the dropout probability to 0 for exact lanes (--set attention_dropout=0 "
            "for an hf: model, or the config key or module p that sets it)"
        )
    else:
        fix = "draw no random numbers in the forward (pass noise in, or keep it in a buffer)"
    if mode == "train" and _argument(node, _SWITCH) is not None:
        fix += ", or prove --mode eval if that is the program you run"
    return fix
