"""A user ``torch.autograd.Function``'s own backward, held to its tokens by execution.

The export keeps a Function's forward only (inlined as the ops it runs); autograd would
derive the backward of those ops, not the one the Function defines. So graphcheck runs
the Function itself, as the model called it (a :class:`FunctionCall`, recorded by
:func:`graphcheck.analysis.export.autograd_functions`: every argument, the dims over
the tokens marked), on random values over a packing of
``DOCS`` tokens, forward and its own backward, and checks that every token keeps to
itself (as :mod:`graphcheck.kernels.validation` checks a custom op declared
token-local):

* **perturb**: for each token, every other token's rows (of the token inputs and of the
  output's gradient) are redrawn; the token's output rows and its input gradients must
  stay bitwise equal;
* **shift**: ``FILLER`` tokens go in front; every token's rows must equal the
  unshifted ones bitwise.

A Function that passes is token-local in its forward and its backward; gradients of its
other arguments (parameters) are sums over the tokens and are not compared. One that
fails is reported with the token that shows it; one that does not run on these values
(its arguments hold token indices or a token-by-token table, as a per-document Function
does) stays unproven, and the backward proof fails closed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graphcheck.errors import one_line
from graphcheck.kernels.validation import Claim, OpCheck, OpStatus

__all__ = ["FunctionCall", "TensorArg", "validate_function"]

DOCS = 15  # tokens the Function runs on
FILLER = 8  # the shift: this many tokens in front
SEED = 0


@dataclass(frozen=True)
class FunctionCall:
    """A user ``torch.autograd.Function`` the forward applies, with what it was given:
    each tensor argument as ``TensorArg`` (its dims over the tokens marked), any other
    argument as it is (``None``: the call was not recorded). ``name``:
    ``Name (file.py:line)``."""

    name: str
    cls: type
    args: tuple | None  # None: the call was not seen (its arguments unknown)


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument: ``shape`` with ``None`` where a dim runs over the ``tokens``."""

    shape: tuple[int | None, ...]
    dtype: torch.dtype
    grad: bool


def validate_function(call: FunctionCall) -> OpCheck:
    """The verdict of running ``call``'s Function as a token-local op, forward and
    backward."""
    claim = str(Claim.TOKEN_LOCAL)
    if call.args is None:
        detail = "its call was not seen, so it could not be run with its arguments"
        return OpCheck(call.name, claim, str(OpStatus.UNVERIFIED), detail)
    if not any(isinstance(a, TensorArg) and None in a.shape for a in call.args):
        return OpCheck(call.name, claim, str(OpStatus.ISOLATED))
    try:
        why = _leak(call)
    except Exception as err:  # the Function's own code raised on these values
        detail = f"running it on random values raised {one_line(err)}"
        return OpCheck(call.name, claim, str(OpStatus.UNVERIFIED), detail)
    if why is None:
        return OpCheck(call.name, claim, str(OpStatus.ISOLATED))
    return OpCheck(call.name, claim, str(OpStatus.LEAKS), why)


def _leak(call: FunctionCall) -> str | None:
    """Why the Function is not token-local (``None``: it is)."""
    inputs = _values(call.args, DOCS, SEED)
    outs = _outputs(call, inputs)
    grads = _values(outs, DOCS, SEED + 1)
    base = _rows(call, inputs, grads)
    other, other_grads = _values(call.args, DOCS, SEED + 2), _values(outs, DOCS, SEED + 3)
    for token in range(DOCS):
        mixed = [_mix(a, b, token) for a, b in zip(inputs, other, strict=True)]
        mixed_grads = [_mix(a, b, token) for a, b in zip(grads, other_grads, strict=True)]
        for what, ours, theirs in _compared(base, _rows(call, mixed, mixed_grads)):
            if not torch.equal(ours.select(0, token), theirs.select(0, token)):
                return (f"over {DOCS} tokens, token {token}'s {what} changed when the other "
                        "tokens were redrawn")  # fmt: skip
    front, front_grads = _values(call.args, FILLER, SEED + 4), _values(outs, FILLER, SEED + 5)
    shifted = [_front(f, v) for f, v in zip(front, inputs, strict=True)]
    shifted_grads = [_front(f, g) for f, g in zip(front_grads, grads, strict=True)]
    for what, ours, theirs in _compared(base, _rows(call, shifted, shifted_grads)):
        if not torch.equal(ours, theirs[FILLER:]):
            return f"its {what} changed when {FILLER} tokens were put in front"
    return None


def _values(args, tokens: int, seed: int) -> list:
    """Random values for ``args`` over ``tokens`` tokens: the token rows drawn from
    ``seed``, every other tensor (a parameter) the same in every run."""
    generator, fixed = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(99)
    values = []
    for arg in args:
        if not isinstance(arg, TensorArg):
            values.append(arg)
            continue
        shape = [tokens if d is None else d for d in arg.shape]
        draw = generator if None in arg.shape else fixed
        if arg.dtype.is_floating_point:
            values.append(torch.randn(shape, generator=draw).to(arg.dtype))
        elif arg.dtype == torch.bool:
            values.append(torch.rand(shape, generator=draw) < 0.5)
        else:
            values.append(torch.randint(0, 4, shape, generator=draw).to(arg.dtype))
    return values


def _outputs(call: FunctionCall, inputs: list) -> list[TensorArg]:
    """The Function's floating outputs over the tokens, as arguments to draw gradients for."""
    with torch.no_grad():
        out = call.cls.apply(*inputs)
    found = []
    for o in out if isinstance(out, tuple | list) else (out,):
        if isinstance(o, torch.Tensor) and o.is_floating_point() and DOCS in o.shape:
            shape = tuple(None if d == DOCS else d for d in o.shape)
            found.append(TensorArg(shape, o.dtype, False))
    return found


def _rows(call: FunctionCall, values: list, grads: list) -> list[tuple[str, torch.Tensor]]:
    """The Function's outputs over the tokens and its token inputs' gradients under
    ``grads``, each with its token dim first."""
    inputs = [
        v.detach().requires_grad_(True)
        if isinstance(a, TensorArg) and None in a.shape and v.is_floating_point()
        else v
        for a, v in zip(call.args, values, strict=True)
    ]
    out = call.cls.apply(*inputs)
    outs = [
        o for o in (out if isinstance(out, tuple | list) else (out,))
        if isinstance(o, torch.Tensor) and o.is_floating_point() and _has_tokens(o)
    ]  # fmt: skip
    wanted = [i for i in inputs if isinstance(i, torch.Tensor) and i.requires_grad]
    pairs = [(o, g) for o, g in zip(outs, grads, strict=True) if o.requires_grad]
    found = torch.autograd.grad(
        [o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True
    ) if pairs and wanted else ()  # fmt: skip
    rows = [("output", _first(o.detach())) for o in outs]
    return rows + [("input gradient", _first(g)) for g in found if g is not None]


def _compared(base: list, rows: list):
    for (what, ours), (_, theirs) in zip(base, rows, strict=True):
        yield what, ours, theirs


def _has_tokens(value: torch.Tensor) -> bool:
    return any(d in (DOCS, FILLER + DOCS) for d in value.shape)


def _first(value: torch.Tensor) -> torch.Tensor:
    """``value`` with its (first) token dim moved first."""
    dim = next(i for i, d in enumerate(value.shape) if d in (DOCS, FILLER + DOCS))
    return value.movedim(dim, 0)


def _mix(base, other, token: int):
    """``other`` with ``base``'s rows at ``token`` (on every token dim)."""
    if not isinstance(base, torch.Tensor) or base.dim() == 0:
        return base
    mixed = other.clone()
    for dim, size in enumerate(base.shape):
        if size == DOCS:
            index = [slice(None)] * base.dim()
            index[dim] = token
            mixed[tuple(index)] = base[tuple(index)]
    return mixed


def _front(front, value):
    """``front``'s tokens, then ``value``'s (on the first token dim)."""
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        return value
    dim = next((i for i, d in enumerate(value.shape) if d == DOCS), None)
    return value if dim is None else torch.cat([front, value], dim=dim)
