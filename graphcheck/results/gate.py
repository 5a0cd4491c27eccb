"""Gate reports: the result of ``graphcheck gate`` as plain data (:mod:`graphcheck.reporters`
renders it; :mod:`graphcheck.gate` computes it).

A :class:`GateReport` holds the static verdict of the plan (the same proof
``graphcheck verify`` runs), the executed comparison of the staged run with
the uncut model (:class:`ByteCheck`), the exact document-isolation tests
(:class:`IsolationCheck`: perturb and shift, each an :class:`ExactCheck`, the
gradients with ``--train`` a :class:`GradientCheck`, each document alone as
information, :class:`AloneCheck`) and, with ``--train``, the comparison after one
optimizer step (:class:`TrainCheck`). Exit status: 0 when every comparison
holds, 1 when one fails. ``agrees`` is whether the static verdict stands: a static
PASS agrees only when every comparison holds.

>>> r = GateReport(model="m.py:f", num_layers=2, cuts=[1], docs=(3,), seed=0,
...                static_verdict="pass", bytes=ByteCheck("equal"),
...                isolation=IsolationCheck("bitwise"))
>>> r.verdict, r.exit_code, r.agrees
('pass', 0, True)
>>> leak = Crossing("perturb", document=2, token=13, layer=3, layer_fqn="model.layers.3")
>>> r.isolation = IsolationCheck("fail", perturb=ExactCheck("perturb", "fail", leak))
>>> r.verdict, r.agrees, r.isolation.crossing.layer_fqn
('fail', False, 'model.layers.3')
>>> print(leak.describe())
document 2 token 13 changes when other documents change; first at layer 3 (model.layers.3)
>>> r.bytes.status is ByteStatus.EQUAL, r.mode
(True, <RunMode.PROCESSES: 'processes'>)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from graphcheck._version import __version__
from graphcheck.results.values import ResultKind

__all__ = [
    "ISOLATION_TOLERANCE",
    "AloneCheck",
    "Blocked",
    "ByteCheck",
    "ByteStatus",
    "Crossing",
    "ExactCheck",
    "GateReport",
    "GradientCheck",
    "Handover",
    "IsolationCheck",
    "IsolationStatus",
    "IsolationTest",
    "RunMode",
    "TrainCheck",
    "TrainStatus",
]

# What a report compares unless told otherwise (graphcheck.gate.output.Compared.as_dict)
RETURNED = {"kind": "returned", "fqn": None, "what": "the tensor the forward returns"}

# Deprecated: the relative tolerance the isolation verdict once allowed (max |packed -
# alone| / max |alone|). The verdict is exact now (graphcheck.gate.exact); kept for
# callers that import it, it decides nothing.
ISOLATION_TOLERANCE = 0.02


@dataclass(frozen=True)
class Handover:
    """What crossed one cut in a run."""

    cut: int
    node: str | None
    dtype: str | None
    shape: list[str] | None
    rounded: bool  # not bf16 in the program: rounded on the wire

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Blocked:
    """A stage needed a value the wire did not carry."""

    stage: int
    node: str
    producer: str  # module path of the value
    made_on: int | None  # the stage that computes it
    message: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class ByteStatus(StrEnum):
    """Staged logits against the uncut model's."""

    EQUAL = "equal"
    DIFFER = "differ"
    BLOCKED = "blocked"  # a stage could not run


class IsolationStatus(StrEnum):
    """An exact isolation test: no changed bit, or one."""

    BITWISE = "bitwise"
    FAIL = "fail"


class IsolationTest(StrEnum):
    """The exact isolation tests (:mod:`graphcheck.gate.exact`)."""

    PERTURB = "perturb"  # the other documents' tokens redrawn: data crossing documents
    SHIFT = "shift"  # the document moved to another offset: absolute position


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


@dataclass(frozen=True)
class Crossing:
    """Where an exact test first saw a changed bit: the document whose outputs (or whose
    loss's gradients) changed, the token (position in ``at_document``, the document it
    belongs to: ``document`` itself unless a gradient reached another one), the first
    layer whose output shows it (global index and path), the parameter whose gradient
    changed, and the largest absolute difference."""

    test: IsolationTest | str
    document: int
    token: int | None = None
    layer: int | None = None
    layer_fqn: str | None = None
    parameter: str | None = None
    max_abs_diff: float = 0.0
    at_document: int | None = None
    gradient: str = ""  # "" (forward), "input", "parameter" or "reach" (another document)

    def describe(self) -> str:
        """One clause: what changed, where it first shows."""
        when = {
            IsolationTest.PERTURB: "changes when other documents change",
            IsolationTest.SHIFT: "changes when the document moves to another offset",
        }[IsolationTest(self.test)]
        at = self.document if self.at_document is None else self.at_document
        loss = f"the gradient of document {self.document}'s loss"
        if self.gradient == "parameter":
            return f"{loss} w.r.t. {self.parameter} {when}"
        if self.gradient == "reach":
            return f"{loss} reaches document {at} token {self.token} (not zero there)"
        if self.gradient == "input" and IsolationTest(self.test) is IsolationTest.SHIFT:
            return f"the input gradient of document {at} token {self.token} {when}"
        if self.gradient == "input":
            return f"{loss} at document {at} token {self.token} {when}"
        token = f" token {self.token}" if self.token is not None else ""
        text = f"document {self.document}{token} {when}"
        if self.layer_fqn is not None:
            text += f"; first at layer {self.layer} ({self.layer_fqn})"
        return text

    def as_dict(self) -> dict:
        return {**self.__dict__, "test": str(self.test)}


@dataclass
class ExactCheck:
    """One exact test over every document: ``bitwise``, or ``fail`` with the first
    :class:`Crossing` and every document that changed."""

    test: IsolationTest | str
    status: IsolationStatus | str = IsolationStatus.BITWISE
    crossing: Crossing | None = None
    changed: list[int] = field(default_factory=list)  # documents whose outputs changed

    def __post_init__(self) -> None:
        self.test = IsolationTest(self.test)
        self.status = IsolationStatus(self.status)

    @property
    def holds(self) -> bool:
        return self.status is IsolationStatus.BITWISE

    def describe(self) -> str:
        return self.crossing.describe() if self.crossing else "bitwise"

    def as_dict(self) -> dict:
        crossing = self.crossing.as_dict() if self.crossing else None
        return {"status": str(self.status), "crossing": crossing, "changed": self.changed}


@dataclass
class AloneCheck:
    """Information only, never the verdict: each document run alone against its packed
    outputs (a shorter batch runs other reductions, so it need not be bitwise):
    ``bitwise`` or ``differ`` with the largest relative difference and where."""

    status: str = "bitwise"  # bitwise / differ
    max_rel_diff: float = 0.0
    worst_document: int | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class GradientCheck:
    """``--train``: the gradient of one document's loss (the fixed seeded loss on its
    tokens) w.r.t. the layers' input, per token, and every parameter, under perturb;
    the per-token input gradients under shift. ``isolated`` or ``fail``."""

    perturb: ExactCheck = field(default_factory=lambda: ExactCheck("perturb"))
    shift: ExactCheck = field(default_factory=lambda: ExactCheck("shift"))
    parameters: int = 0  # parameters whose gradients were compared
    message: str = ""  # why the gradients could not be taken

    @property
    def holds(self) -> bool:
        return not self.message and self.perturb.holds and self.shift.holds

    @property
    def status(self) -> str:
        if self.message:
            return "blocked"
        return "isolated" if self.holds else "fail"

    def as_dict(self) -> dict:
        return {
            "status": self.status,
            "perturb": self.perturb.as_dict(),
            "shift": self.shift.as_dict(),
            "parameters": self.parameters,
            "message": self.message,
        }


@dataclass
class IsolationCheck:
    """The exact document-isolation tests (:mod:`graphcheck.gate.exact`): ``status`` is
    ``bitwise`` when neither perturb nor shift changed a bit of any document's outputs,
    else ``fail``; ``gradients`` with ``--train``; ``alone`` is information. ``holds``:
    the forward tests and, when run, the gradient tests."""

    status: IsolationStatus | str
    documents: int = 0
    perturb: ExactCheck | None = None
    shift: ExactCheck | None = None
    alone: AloneCheck | None = None
    gradients: GradientCheck | None = None

    def __post_init__(self) -> None:
        self.status = IsolationStatus(self.status)

    @property
    def forward_holds(self) -> bool:
        return self.status is IsolationStatus.BITWISE

    @property
    def holds(self) -> bool:
        return self.forward_holds and (self.gradients is None or self.gradients.holds)

    @property
    def crossing(self) -> Crossing | None:
        """The first crossing of the forward tests (perturb before shift)."""
        checks = (self.perturb, self.shift)
        return next((c.crossing for c in checks if c is not None and c.crossing), None)

    def as_dict(self) -> dict:
        return {
            "status": str(self.status),
            "documents": self.documents,
            "perturb": self.perturb.as_dict() if self.perturb else None,
            "shift": self.shift.as_dict() if self.shift else None,
            "alone": self.alone.as_dict() if self.alone else None,
            "gradients": self.gradients.as_dict() if self.gradients else None,
        }


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

    kind = ResultKind.GATE  # what the reporters render

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
        """The static verdict stands: a static FAIL always does (the gate can miss what a
        forward pass cannot show); a static PASS only when the bytes are equal, the
        exact isolation tests hold (the gradients too with ``--train``) and the step
        is equal."""
        return self.static_verdict == "fail" or self.verdict == "pass"

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
