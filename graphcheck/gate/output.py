"""What the gate compares: the tensor the forward returns, the logits a named head makes
of the hidden states it returns (``--head``), or the output of a named module
(``--output-fqn``).

Framework models return hidden states (the loss applies the head) or a structure
(transformers' ``ModelOutput``, a dataclass, a dict). The forward's value is read as:

* a tensor: itself;
* a tuple or list: its first tensor;
* a mapping, a dataclass or an object with attributes: ``logits``, else
  ``last_hidden_state`` (with ``--head`` only ``last_hidden_state``: the head is
  applied to hidden states).

Anything else is a :class:`~graphcheck.errors.GateError` (exit 2) naming
``--output-fqn`` and ``--head``. The same reading applies to the uncut model in its
process and to the last stage in its own: the head (or the module) is looked up by
the same path in the stage module, so it runs on the rank that owns it.

>>> returned_tensor({"loss": None, "logits": torch.ones(1)}).tolist()
[1.0]
>>> Compared(head="lm_head").describe()
'the logits of lm_head applied to the returned hidden states'
>>> Compared().kind, Compared(module="model.norm").as_dict()["fqn"]
(<OutputKind.RETURNED: 'returned'>, 'model.norm')
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum

import torch
import torch.utils._pytree as pytree
from torch import nn

from graphcheck.errors import GateError, UsageError

__all__ = ["Compared", "OutputKind", "hidden_tensor", "returned_tensor", "wire_tensor"]

_OPTIONS = "pass --output-fqn FQN (a module whose output to compare) or --head FQN"
LOGITS, HIDDEN = "logits", "last_hidden_state"


class OutputKind(StrEnum):
    """Which value of a run the gate compares."""

    RETURNED = "returned"  # the tensor the forward returns (logits or hidden states)
    HEAD = "head"  # a head module applied to the returned hidden states
    MODULE = "module"  # the output of a named module


def _field(out, name: str):
    """``out[name]`` or ``out.name``; ``None`` when it has neither."""
    if isinstance(out, Mapping):
        return out.get(name)
    if dataclasses.is_dataclass(out) or hasattr(out, name):
        return getattr(out, name, None)
    return None


def _first_tensor(out) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return next((v for v in out if isinstance(v, torch.Tensor)), None)
    return None


def returned_tensor(
    out, names: tuple[str, ...] = (LOGITS, HIDDEN), hint: str = _OPTIONS
) -> torch.Tensor:
    """The tensor a forward returned: the tensor itself, the first of a tuple, or the first
    of ``names`` a ``ModelOutput``, dataclass or dict holds."""
    found = _first_tensor(out)
    for name in names:
        if found is None and isinstance(value := _field(out, name), torch.Tensor):
            found = value
    if found is None:
        known = " or ".join(f"`{n}`" for n in names)
        raise GateError(
            f"the model returned {type(out).__name__} with no tensor named {known}; {hint}"
        )
    return found


def hidden_tensor(out) -> torch.Tensor:
    """The hidden states a forward returned (what ``--head`` is applied to)."""
    hint = (
        "--head applies to the returned hidden states (a tensor, a tuple or "
        "`last_hidden_state`); pass --output-fqn FQN instead"
    )
    return returned_tensor(out, (HIDDEN,), hint)


def wire_tensor(out) -> torch.Tensor:
    """What a stage hands on: the tensor :func:`returned_tensor` reads, else the only
    tensor of the output (a dict of one tensor under any name)."""
    try:
        return returned_tensor(out)
    except GateError:
        tensors = [v for v in pytree.tree_leaves(out) if isinstance(v, torch.Tensor)]
        if len(tensors) != 1:
            raise
        return tensors[0]


@dataclass(frozen=True)
class Compared:
    """The value the gate compares: the returned tensor, ``head`` applied to the returned
    hidden states, or the output of ``module`` (one of the two at most)."""

    head: str | None = None
    module: str | None = None

    def __post_init__(self) -> None:
        if self.head and self.module:
            raise UsageError("pass --head or --output-fqn, not both")

    @property
    def kind(self) -> OutputKind:
        if self.head:
            return OutputKind.HEAD
        return OutputKind.MODULE if self.module else OutputKind.RETURNED

    def describe(self) -> str:
        """What the report says was compared."""
        if self.kind is OutputKind.HEAD:
            return f"the logits of {self.head} applied to the returned hidden states"
        if self.kind is OutputKind.MODULE:
            return f"the output of {self.module}"
        return "the tensor the forward returns"

    def as_dict(self) -> dict:
        return {"kind": str(self.kind), "fqn": self.head or self.module, "what": self.describe()}

    def check(self, model: nn.Module) -> None:
        """A :class:`UsageError` when ``model`` has no module at the path named (before
        anything is exported or run)."""
        if self.kind is not OutputKind.RETURNED:
            option = "--head" if self.kind is OutputKind.HEAD else "--output-fqn"
            _submodule(model, self.head or self.module, "the model", option, UsageError)

    @contextlib.contextmanager
    def reading(self, model: nn.Module, where: str = "the model") -> Iterator[Callable]:
        """Inside the block, ``read(out)`` turns what ``model`` returned into the compared
        tensor (the module's output is recorded by a forward hook meanwhile)."""
        if self.kind is OutputKind.RETURNED:
            yield returned_tensor
        elif self.kind is OutputKind.HEAD:
            head = _submodule(model, self.head, where, "--head")
            yield lambda out: head(hidden_tensor(out))
        else:
            module = _submodule(model, self.module, where, "--output-fqn")
            seen: list = []
            handle = module.register_forward_hook(lambda _m, _a, out: seen.append(out))
            try:
                yield lambda _out: self._recorded(seen)
            finally:
                handle.remove()

    def _recorded(self, seen: list) -> torch.Tensor:
        """The one output the module made in this forward."""
        if len(seen) != 1:
            raise GateError(
                f"--output-fqn {self.module} ran {len(seen)} times in one forward; name a "
                "module that runs once (the final norm), or pass --head FQN"
            )
        return returned_tensor(seen.pop())


def _submodule(
    model: nn.Module, fqn: str, where: str, option: str, error: type[Exception] = GateError
) -> nn.Module:
    try:
        module = model.get_submodule(fqn)
    except AttributeError:
        module = None
    if not isinstance(module, nn.Module):
        raise error(
            f"{option} {fqn}: {where} has no module at that path; name a module of the "
            "model (e.g. lm_head, model.norm) that the last stage keeps"
        )
    return module
