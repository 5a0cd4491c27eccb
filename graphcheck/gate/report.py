"""Gate reports: the result of ``graphcheck gate`` as a value (:mod:`graphcheck.reporters`
renders it).

A :class:`GateReport` holds the static verdict of the plan (the same proof
``graphcheck verify`` runs), the executed comparison of the staged run with
the uncut model (:class:`ByteCheck`), the document-isolation comparison
(:class:`IsolationCheck`) and, with ``--train``, the comparison after one
optimizer step (:class:`TrainCheck`). Exit status: 0 when every comparison
holds, 1 when one fails.

>>> r = GateReport(model="m.py:f", num_layers=2, cuts=[1], docs=(3,), seed=0,
...                static_verdict="pass", bytes=ByteCheck("equal"),
...                isolation=IsolationCheck("bitwise"))
>>> r.verdict, r.exit_code, r.agrees
('pass', 0, True)
>>> r.bytes.status is ByteStatus.EQUAL, r.mode
(True, <RunMode.PROCESSES: 'processes'>)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from graphcheck._version import __version__
from graphcheck.gate.graph_run import Blocked, Handover

__all__ = [
    "ISOLATION_TOLERANCE",
    "ByteCheck",
    "ByteStatus",
    "GateReport",
    "IsolationCheck",
    "IsolationStatus",
    "RunMode",
    "TrainCheck",
    "TrainStatus",
]

# What a report compares unless told otherwise (graphcheck.gate.output.Compared.as_dict)
RETURNED = {"kind": "returned", "fqn": None, "what": "the tensor the forward returns"}

# Relative tolerance of the isolation comparison when it is not bitwise:
# max |packed - alone| / max |alone| over a document's logits. Measured on
# transformers models: a leak gives 0.09-0.8, a correct model at most 0.0065.
ISOLATION_TOLERANCE = 0.02


class ByteStatus(StrEnum):
    """Staged logits against the uncut model's."""

    EQUAL = "equal"
    DIFFER = "differ"
    BLOCKED = "blocked"  # a stage could not run


class IsolationStatus(StrEnum):
    """Each document alone against its packed logits."""

    BITWISE = "bitwise"
    TOLERANCE = "tolerance"  # within the relative tolerance
    FAIL = "fail"


class TrainStatus(StrEnum):
    """After one optimizer step on both (and the logits of a second forward)."""

    EQUAL = "equal"
    DIFFER = "differ"
    BLOCKED = "blocked"  # a stage could not take its step


class RunMode(StrEnum):
    """How the gate runs the stages."""

    PROCESSES = "processes"  # a fresh process per stage
    GRAPH = "graph"  # the partitioned exported graph, in the gate's process


@dataclass
class ByteCheck:
    """Staged logits against the uncut model's: ``equal``, ``differ`` or ``blocked``
    (a stage could not run: ``blocked`` says why)."""

    status: ByteStatus
    max_abs_diff: float = 0.0
    first_diff: dict | None = None  # token, document, position, column
    blocked: Blocked | None = None
    message: str = ""

    def __post_init__(self) -> None:
        self.status = ByteStatus(self.status)

    @property
    def holds(self) -> bool:
        return self.status is ByteStatus.EQUAL

    def as_dict(self) -> dict:
        return {
            "status": self.status,
            "max_abs_diff": self.max_abs_diff,
            "first_diff": self.first_diff,
            "blocked": self.blocked.as_dict() if self.blocked else None,
            "message": self.message,
        }


@dataclass
class IsolationCheck:
    """Packed logits per document against the document run alone: ``bitwise``,
    ``tolerance`` (within :data:`ISOLATION_TOLERANCE`) or ``fail``."""

    status: IsolationStatus
    max_rel_diff: float = 0.0
    worst_document: int | None = None
    tolerance: float = ISOLATION_TOLERANCE
    documents: int = 0

    def __post_init__(self) -> None:
        self.status = IsolationStatus(self.status)

    @property
    def holds(self) -> bool:
        return self.status in (IsolationStatus.BITWISE, IsolationStatus.TOLERANCE)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class TrainCheck:
    """After one forward+backward+SGD step on both: every parameter (by global name)
    and the logits of a second forward. ``equal``, ``differ`` or ``blocked``."""

    status: TrainStatus
    parameters: int = 0  # parameters of the uncut model compared
    differing: list[str] = field(default_factory=list)  # their global names
    max_abs_diff: float = 0.0
    logits_after: TrainStatus | str = ""  # equal / differ: the second forward
    message: str = ""

    def __post_init__(self) -> None:
        self.status = TrainStatus(self.status)
        self.logits_after = TrainStatus(self.logits_after) if self.logits_after else ""

    @property
    def holds(self) -> bool:
        return self.status is TrainStatus.EQUAL

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class GateReport:
    model: str
    num_layers: int
    cuts: list[int]
    docs: tuple[int, ...]
    seed: int
    static_verdict: str
    bytes: ByteCheck
    isolation: IsolationCheck
    static_codes: list[str] = field(default_factory=list)
    stages: list = field(default_factory=list)  # partition.Stage
    stage_builder: str | None = None
    handovers: list[Handover] = field(default_factory=list)
    export_faithful: bool = True  # the exported uncut program gives the model's bytes
    seconds: dict[str, float] = field(default_factory=dict)
    mode: RunMode = RunMode.PROCESSES
    train: TrainCheck | None = None
    program_mode: str = "train"  # the program run: model.train() or model.eval()
    # what was compared: kind (returned, head, module), fqn, what (a sentence), shape
    compared: dict = field(default_factory=lambda: dict(RETURNED))

    kind = "gate"  # what the reporters render

    def __post_init__(self) -> None:
        self.mode = RunMode(self.mode)

    @property
    def verdict(self) -> str:
        trained = self.train is None or self.train.holds
        return "pass" if self.bytes.holds and self.isolation.holds and trained else "fail"

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == "pass" else 1

    @property
    def agrees(self) -> bool:
        """The static verdict never says pass where the bytes differ (forward, or after
        one optimizer step)."""
        trained = self.train is None or self.train.holds
        return self.static_verdict == "fail" or (self.bytes.holds and trained)

    def as_dict(self) -> dict:
        return {
            "graphcheck": __version__,
            "model": self.model,
            "mode": "gate",
            "run": self.mode,
            "program_mode": str(self.program_mode),
            "compared": self.compared,
            "verdict": self.verdict,
            "num_layers": self.num_layers,
            "cuts": self.cuts,
            "stage_builder": self.stage_builder,
            "stages": [s.as_dict() for s in self.stages],
            "docs": list(self.docs),
            "tokens": sum(self.docs),
            "seed": self.seed,
            "static": {"verdict": self.static_verdict, "codes": self.static_codes},
            "agrees": self.agrees,
            "handovers": [h.as_dict() for h in self.handovers],
            "bytes": self.bytes.as_dict(),
            "isolation": self.isolation.as_dict(),
            "train": self.train.as_dict() if self.train else None,
            "export_faithful": self.export_faithful,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
        }
