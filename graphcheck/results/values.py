"""The values a report names: what a value is to a cut (:class:`Role`) and one value of
a crossing set as plain data (:class:`CrossingValue`).

A crossing set is computed on the program's FX graph (:mod:`graphcheck.analysis.dataflow`);
the report keeps a snapshot of each value, so a report is data that renders, caches and
compares without the graph:

>>> v = CrossingValue("add_7", Role.ACTIVATION, "bfloat16", ["1", "T", "64"],
...                   "model.layers.3", ["model.layers.4"], "model.py:57: return h + x")
>>> str(v.as_dict()["role"]), CrossingValue.from_dict(v.as_dict() | {"source": v.source}) == v
('activation', True)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["CrossingValue", "NodeName", "ResultKind", "Role"]


class ResultKind(StrEnum):
    """What a result is, the word a reporter renders it by (a reporter's ``KINDS``)."""

    VERIFY = "verify"  # a stage plan's cuts (graphcheck.report.Report)
    MAP = "map"  # every boundary (graphcheck.report.Report)
    PLAN = "plan"  # the balanced legal plan (graphcheck.report.PlanReport)
    GATE = "gate"  # the executed comparisons (graphcheck.results.gate.GateReport)
    CHECK = "check"  # a project's checks (graphcheck.project.check.CheckResult)
    VIEW = "view"  # the cut explorer's page (graphcheck.reporters.view.CutView)


class Role(StrEnum):
    """What a value is to a cut (a ``str``: reports print and compare it as one)."""

    ACTIVATION = "activation"
    REPLICATED = "replicated"
    PARAMETER = "parameter"
    SYMBOLIC = "symbolic"


class NodeName(str):
    """A value's name in the program (``add_7``). A report once held the FX node itself:
    ``.name`` still gives the name, with a warning, for a release.

    >>> NodeName("add_7") == "add_7"
    True
    """

    __slots__ = ()

    @property
    def name(self) -> str:
        warnings.warn(
            "a crossing value's node is its name now (a str): use value.node, not value.node.name",
            DeprecationWarning,
            stacklevel=2,
        )
        return str(self)


@dataclass(frozen=True)
class CrossingValue:
    """One value a cut carries: its name in the program (``node``), its :class:`Role`,
    dtype, shape (symbolic sizes as text), the module that makes it, the modules that
    read it across the cut and the model's source line that makes it."""

    node: str
    role: Role
    dtype: str | None
    shape: list[str] | None
    producer: str
    consumers: list[str] = field(default_factory=list)
    source: str | None = None  # "file.py:57: code", when the model's frame is known

    def __post_init__(self) -> None:
        object.__setattr__(self, "node", NodeName(self.node))

    def as_dict(self) -> dict:
        """The value in the report's JSON (its source is the explorer's, not the JSON's)."""
        return {
            "node": self.node,
            "role": self.role,
            "dtype": self.dtype,
            "shape": self.shape,
            "producer": self.producer,
            "consumers": self.consumers,
        }

    @classmethod
    def from_dict(cls, data: dict) -> CrossingValue:
        """:meth:`as_dict` read back (with ``source`` when the dict has it)."""
        return cls(
            data["node"], Role(data["role"]), data["dtype"], data["shape"],
            data["producer"], list(data["consumers"]), data.get("source"),
        )  # fmt: skip
