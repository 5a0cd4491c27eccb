"""The model-building vocabulary that needs no torch: which program is proven, and the
enum parser behind every such option, so ``--help`` lists the choices without importing
torch.

>>> as_program_mode("eval"), as_program_mode(ProgramMode.TRAIN)
(<ProgramMode.EVAL: 'eval'>, <ProgramMode.TRAIN: 'train'>)
>>> choice(ProgramMode, "test", "program mode")
Traceback (most recent call last):
...
graphcheck.errors.UsageError: unknown program mode 'test': use train or eval
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

from graphcheck.errors import UsageError

__all__ = ["ProgramMode", "as_program_mode", "choice"]

E = TypeVar("E", bound=StrEnum)


class ProgramMode(StrEnum):
    """Which program of the model graphcheck proves and runs: the one ``model.train()``
    gives (what pipeline-parallel training runs; the default) or the one
    ``model.eval()`` gives. Modules that pick a kernel by ``self.training`` (a
    short-T path in eval, dropout) run a different program in each."""

    TRAIN = "train"
    EVAL = "eval"


def as_program_mode(value: ProgramMode | str) -> ProgramMode:
    """``value`` as a :class:`ProgramMode`; a :class:`UsageError` naming the choices."""
    return choice(ProgramMode, value, "program mode")


def choice(kind: type[E], value: E | str, what: str) -> E:
    """``value`` as a member of the string enum ``kind``; a :class:`UsageError` naming
    ``what`` and the choices.

    >>> choice(ProgramMode, "train", "program mode")
    <ProgramMode.TRAIN: 'train'>
    """
    try:
        return kind(value)
    except ValueError:
        choices = " or ".join(kind)
        raise UsageError(f"unknown {what} {value!r}: use {choices}") from None
