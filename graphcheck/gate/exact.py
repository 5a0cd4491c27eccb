"""Exact document isolation: perturb and shift, on the forward and on the gradients.

A batch of the same document lengths runs the same kernels with the same reductions,
so these tests need no tolerance: one changed bit is a finding.

* **perturb**: for each document ``d``, every other document's tokens are redrawn
  (seeded), every length kept. A changed bit of ``d``'s outputs is data crossing
  documents.
* **shift**: the batch padded with filler documents to a whole number of row tiles
  and the same row rolled by one tile
  (:meth:`~graphcheck.gate.batch.PackedBatch.shifted`), so every document starts at
  another offset. A changed bit of ``d``'s outputs is a dependence on absolute
  position. The move is a whole tile (64 tokens; 512 in rows of 512 or more) because
  kernels that reduce over the packed row tile it (CPU SDPA over a dense document mask
  blocks queries and keys): a document moved by part of a tile would be reduced in
  another order, and its bits would change with no dependence on position at all.
* **gradients** (``--train``): the gradient of one document's loss (the fixed seeded
  loss of ``--train`` restricted to that document's tokens) w.r.t. the first layer's
  floating input (the embedding output, per token) and every parameter. Under perturb
  both must not change: other documents contribute exact zeros to every reduction and
  lengths and positions are unchanged, so the reductions run in the same order. The
  gradient of ``d``'s loss must also be exactly zero at other documents' tokens.
  Under shift the reductions of the parameter gradients over tokens run in another
  order, so only the per-token input gradients are compared (of the whole loss, its
  weights moved with their tokens: with isolated documents each token's gradient is
  its own document's).

Cost: perturb one forward per document, shift two, alone one short forward per
document; the gradients one forward and a backward per document on the batch, one
forward and backward per perturbed batch, and two for shift.
* **alone** (information, never the verdict): each document run alone against its
  packed outputs; a shorter batch runs other reductions, so it need not be bitwise.

Where a test sees a change, forward hooks on the layers of the model's
:class:`~graphcheck.model.layout.Layout` (``layer_prefix``, ``layer_keys``) say which
layer's output on the document's tokens shows it first. Both run modes of the gate
use this module: :func:`graphcheck.gate.runner.run_uncut` in its fresh process and
the in-process graph mode (:mod:`graphcheck.gate.run`).

The token axis of a value is the axis of the packed length; where two axes have that
length (logits ``[T, V]`` of a vocabulary as large as T) the model's residual layout
decides: 1 for a model of ``[1, T, H]``, 0 for the flat ``[T, H]`` (``batched``).

>>> token_axis((1, 7, 64), 7), token_axis((7, 64), 7), token_axis((2, 3), 7)
(1, 0, None)
>>> token_axis((7, 7), 7), token_axis((7, 7), 7, batched=False)
(1, 0)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property

import torch
import torch.utils._pytree as pytree
from torch import nn

from graphcheck.gate.batch import PackedBatch
from graphcheck.gate.tensors import restore
from graphcheck.model.layout import Layout
from graphcheck.results.gate import (
    AloneCheck,
    Crossing,
    ExactCheck,
    GradientCheck,
    IsolationCheck,
    IsolationStatus,
    IsolationTest,
)

__all__ = [
    "Probe",
    "Traced",
    "alone_check",
    "gradient_check",
    "isolation_check",
    "loss_weights",
    "model_layers",
    "token_axis",
]

Span = tuple[int, int]


def token_axis(shape, tokens: int, batched: bool = True) -> int | None:
    """The axis of ``shape`` that runs over the ``tokens`` packed tokens: 1 (``[1, T,
    ...]``) before 0 (``[T, ...]``) for a model whose residual is ``batched``, 0 before 1
    for a flat ``[T, H]`` one; ``None`` when no axis has that size."""
    sizes = list(shape)
    for axis in ((1, 0) if batched else (0, 1)) + tuple(range(2, len(sizes))):
        if axis < len(sizes) and sizes[axis] == tokens:
            return axis
    return None


def model_layers(model: nn.Module, layout: Layout) -> list[tuple[int, str, nn.Module]]:
    """``(global index, path, module)`` of every layer the layout names, by index."""
    try:
        container = model.get_submodule(layout.layer_prefix) if layout.layer_prefix else model
    except AttributeError:
        return []
    prefix = f"{layout.layer_prefix}." if layout.layer_prefix else ""
    found = []
    for key, index in layout.layer_keys.items():
        try:
            module = container.get_submodule(key)
        except AttributeError:
            continue
        if isinstance(module, nn.Module):
            found.append((index, prefix + key, module))
    return sorted(found, key=lambda entry: entry[0])


def loss_weights(shape, seed: int) -> torch.Tensor:
    """The weights ``R`` of the fixed ``--train`` loss ``(out.float() * R).sum()``
    (:func:`graphcheck.gate.runner.loss_of`)."""
    generator = torch.Generator().manual_seed(seed + 1)
    return torch.randn(tuple(shape), generator=generator) / shape[-2]


@dataclass
class Traced:
    """One forward: the compared tensor and every layer's outputs (in call order)."""

    output: torch.Tensor
    layers: dict[str, list[torch.Tensor | None]] = field(default_factory=dict)


@dataclass
class Probe:
    """What the exact tests run: ``forward(batch)`` returns the compared tensor of
    ``model``, restored to ``state`` (the weights and buffers the packed run started
    from) before every run; ``layout`` names its layers; ``seed`` draws the other
    documents' tokens and the loss; ``batched``: the model's residual is ``[1, T, H]``
    (``False``: the flat ``[T, H]``), which places the token axis of its values."""

    model: nn.Module
    forward: Callable[[PackedBatch], torch.Tensor]
    layout: Layout
    state: dict
    seed: int = 0
    batched: bool = True

    @cached_property
    def layers(self) -> list[tuple[int, str, nn.Module]]:
        return model_layers(self.model, self.layout)

    def run(self, batch: PackedBatch) -> Traced:
        restore(self.model, self.state)
        with _recording(self.layers) as seen:
            output = self.forward(batch)
        return Traced(output.detach(), seen)


@contextlib.contextmanager
def _recording(layers) -> Iterator[dict]:
    """Inside the block, every layer's output (its first floating tensor) is recorded."""
    seen: dict[str, list] = {fqn: [] for _, fqn, _ in layers}
    hooks = [
        module.register_forward_hook(lambda _m, _a, out, fqn=fqn: seen[fqn].append(_first(out)))
        for _, fqn, module in layers
    ]
    try:
        yield seen
    finally:
        for hook in hooks:
            hook.remove()


def _first(out) -> torch.Tensor | None:
    leaves = [v for v in pytree.tree_leaves(out) if isinstance(v, torch.Tensor)]
    found = next((v for v in leaves if v.is_floating_point()), None)
    return None if found is None else found.detach().clone()


def _cut(
    value: torch.Tensor | None, span: Span, tokens: int, batched: bool = True
) -> torch.Tensor | None:
    """``value`` on the tokens of ``span`` (``None``: no token axis)."""
    if value is None or (axis := token_axis(value.shape, tokens, batched)) is None:
        return None
    return value.narrow(axis, span[0], span[1] - span[0])


def _first_token(a: torch.Tensor, b: torch.Tensor, axis: int) -> int | None:
    """The first index along ``axis`` where ``a`` and ``b`` differ (``None``: another
    shape, or no difference)."""
    if a.shape != b.shape:
        return None
    changed = (a != b).movedim(axis, 0).reshape(a.shape[axis], -1).any(dim=1)
    hits = changed.nonzero()
    return int(hits[0]) if len(hits) else None


def _abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return (a.float() - b.float()).abs().nan_to_num(float("inf")).max().item()


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


@dataclass(frozen=True)
class _Place:
    """A document's place in two runs: its span in each and the packed length (and
    the model's residual layout: :func:`token_axis`)."""

    document: int
    mine: Span
    theirs: Span
    tokens: int
    batched: bool = True

    def cut(self, value: torch.Tensor | None, span: Span) -> torch.Tensor | None:
        return _cut(value, span, self.tokens, self.batched)

    def axis(self, shape) -> int | None:
        return token_axis(shape, self.tokens, self.batched)


def _compare(test: IsolationTest, place: _Place, a: Traced, b: Traced, layers) -> Crossing | None:
    """The first change of ``place``'s document between runs ``a`` and ``b``: the first
    layer whose output differs on its tokens, and its compared outputs."""
    first = None
    for index, fqn, _ in layers:
        if (token := _layer_change(place, a.layers.get(fqn, []), b.layers.get(fqn, []))) != -1:
            first = (index, fqn, token)
            break
    out_a, out_b = (place.cut(r.output, s) for r, s in ((a, place.mine), (b, place.theirs)))
    if out_a is None:  # a compared value without a token axis: the whole of it
        out_a, out_b = a.output, b.output
    if first is None and _same(out_a, out_b):
        return None
    axis = place.axis(a.output.shape) or 0
    token = first[2] if first else _first_token(out_a, out_b, axis)
    layer, fqn = (first[0], first[1]) if first else (None, None)
    diff = _abs_diff(out_a, out_b) if not _same(out_a, out_b) else 0.0
    return Crossing(test, place.document, token, layer, fqn, max_abs_diff=diff)


def _layer_change(place: _Place, mine: list, theirs: list) -> int | None:
    """-1: the layer's outputs on the document's tokens are bitwise the same in both
    runs; else the first token that changed (``None``: unknown, another call count or
    shape)."""
    if len(mine) != len(theirs):
        return None
    for x, y in zip(mine, theirs, strict=True):
        a, b = place.cut(x, place.mine), place.cut(y, place.theirs)
        if (a is None) != (b is None):
            return None
        if a is not None and not _same(a, b):
            return _first_token(a, b, place.axis(x.shape))
    return -1


def _exact(test: IsolationTest, crossings: list[Crossing | None]) -> ExactCheck:
    found = [c for c in crossings if c is not None]
    if not found:
        return ExactCheck(test)
    return ExactCheck(test, IsolationStatus.FAIL, found[0], [c.document for c in found])


def _perturb(probe: Probe, batch: PackedBatch, base: Traced) -> ExactCheck:
    crossings = []
    if len(batch.docs) > 1:  # one document: nothing to redraw
        for index, span in enumerate(batch.spans):
            other = probe.run(batch.perturbed(index, probe.seed))
            place = _Place(index, span, span, batch.tokens, probe.batched)
            crossings.append(_compare(IsolationTest.PERTURB, place, base, other, probe.layers))
    return _exact(IsolationTest.PERTURB, crossings)


def _shift(probe: Probe, batch: PackedBatch) -> ExactCheck:
    crossings = []
    first, moved, tile = batch.shifted(probe.seed)
    a, b = probe.run(first), probe.run(moved)
    for document, (start, end) in enumerate(batch.spans):
        moved_span = (start + tile, end + tile)
        place = _Place(document, (start, end), moved_span, first.tokens, probe.batched)
        crossings.append(_compare(IsolationTest.SHIFT, place, a, b, probe.layers))
    return _exact(IsolationTest.SHIFT, crossings)


def alone_check(probe: Probe, batch: PackedBatch, packed: torch.Tensor) -> AloneCheck:
    """Information: each document alone against its packed outputs (relative diff)."""
    worst, at = 0.0, None
    for index, span in enumerate(batch.spans):
        restore(probe.model, probe.state)
        alone = probe.forward(batch.document(index)).detach()
        mine = _cut(packed, span, batch.tokens, probe.batched)
        if mine is not None and _same(mine, alone):
            continue
        diff = _abs_diff(mine, alone) if mine is not None else float("inf")
        rel = diff / max(alone.float().abs().max().item(), 1e-30)
        rel = rel if rel == rel else float("inf")
        if at is None or rel > worst:
            worst, at = rel, index
    return AloneCheck("bitwise" if at is None else "differ", worst, at)


def isolation_check(probe: Probe, batch: PackedBatch) -> IsolationCheck:
    """Perturb and shift on the forward, each document alone as information."""
    base = probe.run(batch)
    perturb = _perturb(probe, batch, base)
    shift = _shift(probe, batch)
    alone = alone_check(probe, batch, base.output)
    holds = perturb.holds and shift.holds
    status = IsolationStatus.BITWISE if holds else IsolationStatus.FAIL
    return IsolationCheck(status, len(batch.docs), perturb, shift, alone)


# --- gradients -------------------------------------------------------------------------


@contextlib.contextmanager
def _layer_input(layers) -> Iterator[list[torch.Tensor]]:
    """Inside the block, the first floating tensor the first layer receives (made a
    tensor gradients can be taken w.r.t. when it is not one) is recorded."""
    captured: list[torch.Tensor] = []

    def hook(_module, args, kwargs):
        if captured:
            return None
        args, kwargs = list(args), dict(kwargs)
        slots = [(args, i) for i in range(len(args))] + [(kwargs, k) for k in kwargs]
        for holder, key in slots:
            value = holder[key]
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                if not value.requires_grad:
                    holder[key] = value = value.detach().requires_grad_(True)
                captured.append(value)
                return tuple(args), kwargs
        return None

    handle = layers[0][2].register_forward_pre_hook(hook, with_kwargs=True) if layers else None
    try:
        yield captured
    finally:
        if handle is not None:
            handle.remove()


@dataclass
class _GradRun:
    """A forward with gradients: the compared tensor and the first layer's input."""

    output: torch.Tensor
    inputs: torch.Tensor | None


def _grad_run(probe: Probe, batch: PackedBatch) -> _GradRun:
    restore(probe.model, probe.state)
    with torch.enable_grad(), _layer_input(probe.layers) as captured:
        output = probe.forward(batch)
    return _GradRun(output, captured[0] if captured else None)


def _masked(weights: torch.Tensor, span: Span, axis: int) -> torch.Tensor:
    """``weights`` on the tokens of ``span``, zero elsewhere."""
    kept = torch.zeros_like(weights)
    kept.narrow(axis, span[0], span[1] - span[0]).copy_(
        weights.narrow(axis, span[0], span[1] - span[0])
    )
    return kept


def _gradients(run: _GradRun, weights: torch.Tensor, params, retain: bool) -> list:
    """Gradients of ``(out.float() * weights).sum()`` w.r.t. the layer input and
    ``params`` (``None`` where nothing reaches)."""
    loss = (run.output.float() * weights).sum()
    wrt = [p for _, p in params] if run.inputs is None else [run.inputs, *(p for _, p in params)]
    found = torch.autograd.grad(loss, wrt, retain_graph=retain, allow_unused=True)
    found = [None if g is None else g.detach() for g in found]
    return found if run.inputs is not None else [None, *found]


@dataclass(frozen=True)
class _Grads:
    """What one document's loss gradient is compared against."""

    batch: PackedBatch
    params: list[tuple[str, nn.Parameter]]
    weights: torch.Tensor
    axis: int
    batched: bool = True


def gradient_check(probe: Probe, batch: PackedBatch) -> GradientCheck:
    """``--train``: perturb on the gradients of each document's loss w.r.t. the layer
    input and every parameter, shift on the per-token input gradients."""
    params = [(n, p) for n, p in probe.model.named_parameters() if p.requires_grad]
    base = _grad_run(probe, batch)
    axis = token_axis(base.output.shape, batch.tokens, probe.batched)
    if axis is None or base.inputs is None:
        what = "its compared output has no token axis" if axis is None else "no floating input"
        return GradientCheck(message=f"cannot take per-document gradients: {what} "
                             "reaches the first layer")  # fmt: skip
    weights = loss_weights(base.output.shape, probe.seed)
    grads = _Grads(batch, params, weights, axis, probe.batched)
    last = len(batch.spans) - 1
    mine = [
        _gradients(base, _masked(grads.weights, span, axis), params, retain=index < last)
        for index, span in enumerate(batch.spans)
    ]
    del base
    perturb = _grad_perturb(probe, grads, mine)
    return GradientCheck(perturb, _grad_shift(probe, batch), len(params))


def _grad_perturb(probe: Probe, grads: _Grads, mine: list[list]) -> ExactCheck:
    batch, crossings = grads.batch, []
    for index, span in enumerate(batch.spans):
        crossing = _reaches(batch, index, mine[index][0], grads.batched)
        if len(batch.docs) > 1:
            run = _grad_run(probe, batch.perturbed(index, probe.seed))
            weights = _masked(grads.weights, span, grads.axis)
            other = _gradients(run, weights, grads.params, retain=False)
            changed = _input_change(batch, index, mine[index][0], other[0], grads.batched)
            crossing = changed or crossing
            crossing = crossing or _param_change(index, grads.params, mine[index], other)
        crossings.append(crossing)
    return _exact(IsolationTest.PERTURB, crossings)


def _reaches(
    batch: PackedBatch, index: int, grad: torch.Tensor | None, batched: bool = True
) -> Crossing | None:
    """The gradient of document ``index``'s loss must be exactly zero at every other
    document's token."""
    if grad is None or (axis := token_axis(grad.shape, batch.tokens, batched)) is None:
        return None
    outside = grad.movedim(axis, 0).reshape(batch.tokens, -1).ne(0).any(dim=1)
    start, end = batch.spans[index]
    outside[start:end] = False
    hits = outside.nonzero()
    if not len(hits):
        return None
    document, position = batch.locate(int(hits[0]))
    diff = grad.float().abs().movedim(axis, 0)[outside].max().item()
    return Crossing(IsolationTest.PERTURB, index, position, max_abs_diff=diff,
                    at_document=document, gradient="reach")  # fmt: skip


def _input_change(batch: PackedBatch, index: int, a, b, batched: bool = True) -> Crossing | None:
    if _same(a, b):
        return None
    if a is None or b is None or a.shape != b.shape:
        return Crossing(IsolationTest.PERTURB, index, None, max_abs_diff=float("inf"),
                        gradient="input")  # fmt: skip
    token = _first_token(a, b, token_axis(a.shape, batch.tokens, batched) or 0)
    document, position = batch.locate(token) if token is not None else (index, None)
    return Crossing(IsolationTest.PERTURB, index, position, max_abs_diff=_abs_diff(a, b),
                    at_document=document, gradient="input")  # fmt: skip


def _param_change(index: int, params, mine: list, other: list) -> Crossing | None:
    for (name, _), a, b in zip(params, mine[1:], other[1:], strict=True):
        if not _same(a, b):
            diff = float("inf") if a is None or b is None else _abs_diff(a, b)
            return Crossing(IsolationTest.PERTURB, index, parameter=name, max_abs_diff=diff,
                            gradient="parameter")  # fmt: skip
    return None


def _grad_shift(probe: Probe, batch: PackedBatch) -> ExactCheck:
    """The per-token input gradients of the whole loss, its weights moved with their
    tokens, in the two batches of :meth:`~graphcheck.gate.batch.PackedBatch.shifted`."""
    first, moved, tile = batch.shifted(probe.seed)
    a = _grad_run(probe, first)
    axis = token_axis(a.output.shape, first.tokens, probe.batched)
    weights = loss_weights(a.output.shape, probe.seed)
    mine = _gradients(a, weights, [], retain=False)[0]
    b = _grad_run(probe, moved)
    theirs = _gradients(b, weights.roll(tile, axis), [], retain=False)[0]
    crossings = []
    for document, (start, end) in enumerate(batch.spans):
        x = _cut(mine, (start, end), first.tokens, probe.batched)
        y = _cut(theirs, (start + tile, end + tile), first.tokens, probe.batched)
        if _same(x, y):
            continue
        known = x is not None and y is not None and x.shape == y.shape
        at = token_axis(mine.shape, first.tokens, probe.batched)
        token = _first_token(x, y, at) if known else None
        diff = _abs_diff(x, y) if known else float("inf")
        crossings.append(Crossing(IsolationTest.SHIFT, document, token, max_abs_diff=diff,
                                  at_document=document, gradient="input"))  # fmt: skip
    return _exact(IsolationTest.SHIFT, crossings)
