"""The op registry: each op's transfer function, keyed by the op it describes.

A family module registers its transfer function next to it::

    @register(aten.cumsum.default, aten.cumprod.default, aten.logcumsumexp.default)
    def scan(interp, node): ...

and, with ``work=``, the kind of work the ops do (:class:`Work`: a matmul, an attention
kernel, a router): the op fact sheet the cost model and the layer kinds read
(:mod:`graphcheck.analysis.opfacts`), so a new op is known to all three from one place.

A key is one of:

* an ``OpOverload`` (``torch.ops.aten.add.Tensor``): the node's target itself;
* a Python callable that export leaves in the graph (``operator.getitem``, the SymInt
  arithmetic ``operator.add``, ``torch.sym_max``, ...): the callable itself;
* the qualified name ``"namespace::op.overload"`` of an op whose namespace may not be
  loaded when the family module is imported (``"torchtitan::deterministic_scatter_add.
  default"``, ``"torch_attn::_varlen_attn.default"``, graphcheck's own kernels): it is
  resolved at lookup, by the qualified name of the ``OpOverload`` the node calls, and
  from then on keyed by that ``OpOverload``.

:func:`find` is exact: a target that is not registered (under its own key, or by its
qualified name) is not found, whatever its name looks like. The table is complete once
every family module is imported (:mod:`graphcheck.analysis.locality.transfer` imports
them all).

>>> import torch
>>> find(torch.ops.aten.frac.default) is None
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

import torch

from graphcheck.analysis.fx import op_name

__all__ = [
    "Entry", "Transfer", "Work", "entries", "find", "find_name", "qualified_name", "register",
]  # fmt: skip

Transfer = Callable[..., object]


class Work(StrEnum):
    """What kind of work an op does, for the cost model and the layer kinds."""

    MATMUL = "matmul"  # a contraction: 2·M·N·K FLOPs; a layer running one has an MLP
    CONVOLUTION = "convolution"
    VARLEN_ATTENTION = "varlen attention"  # reads the documents' boundaries and its window
    SDPA_ATTENTION = "sdpa attention"  # its mask decides what it attends to
    LINEAR_ATTENTION = "linear attention"  # a recurrent state per document
    ROUTED = "routed"  # a router's choice, or a matmul over the rows it routed: MoE


@dataclass(frozen=True, slots=True)
class Entry:
    """One registered op: its key, its ``aten.add.Tensor`` style name, its transfer
    function and the family module that registered it."""

    key: object
    name: str
    fn: Transfer
    family: str
    work: frozenset[Work] = frozenset()


_ENTRIES: list[Entry] = []
_BY_KEY: dict[object, Entry] = {}
_BY_QUALIFIED: dict[str, Entry] = {}  # ops of namespaces that may not be loaded
_BY_NAME: dict[str, Entry] = {}


def qualified_name(op: torch._ops.OpOverload) -> str:
    """``"aten::add.Tensor"``: the namespace, the op and the overload (``default`` too).

    >>> qualified_name(torch.ops.aten.mm.default)
    'aten::mm.default'
    """
    return f"{op.namespace}::{op._opname}.{op._overloadname}"


def _name_of(key) -> str:
    if isinstance(key, str):
        namespace, _, rest = key.partition("::")
        return f"{namespace}.{rest}"
    return op_name(key)


def register(*ops, work: Work | Iterable[Work] = ()) -> Callable[[Transfer], Transfer]:
    """Register the decorated transfer function for ``ops``, doing ``work`` (an op
    registered twice is an error: the table would depend on the order the modules are
    imported in). Decorators stack: one function, ops of different work."""
    kinds = frozenset((work,) if isinstance(work, Work) else work)

    def decorate(fn: Transfer) -> Transfer:
        family = fn.__module__.rpartition(".")[2]
        for op in ops:
            if isinstance(op, str) and "::" not in op:
                raise ValueError(f"{op!r}: a name must be qualified, namespace::op.overload")
            entry = Entry(op, _name_of(op), fn, family, kinds)
            if entry.name in _BY_NAME:
                raise ValueError(f"{entry.name} registered twice")
            _ENTRIES.append(entry)
            _BY_NAME[entry.name] = entry
            (_BY_QUALIFIED if isinstance(op, str) else _BY_KEY)[op] = entry
        return fn

    return decorate


def find(target) -> Entry | None:
    """The entry registered for the FX target ``target`` (``None``: not registered)."""
    try:
        entry = _BY_KEY.get(target)
    except TypeError:  # an unhashable target is no registered op
        return None
    if entry is None and _BY_QUALIFIED and isinstance(target, torch._ops.OpOverload):
        entry = _BY_QUALIFIED.get(qualified_name(target))
        if entry is not None:
            _BY_KEY[target] = entry  # resolved: the namespace is loaded now
    return entry


def find_name(name: str) -> Entry | None:
    """The entry registered under the ``aten.add.Tensor`` style ``name`` (the in-place
    ``aten.add_.Tensor`` is looked up by its out-of-place twin's name)."""
    return _BY_NAME.get(name)


def entries() -> list[Entry]:
    """Every entry, in the order registered."""
    return list(_ENTRIES)
