"""Gate reports: the result of ``graphcheck gate``, as a value, as text and as JSON.

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
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from graphcheck import __version__
from graphcheck.passes.run_stages_pass import Blocked, Handover
from graphcheck.report import _stage_line

__all__ = [
    "ISOLATION_TOLERANCE",
    "ByteCheck",
    "GateReport",
    "IsolationCheck",
    "TrainCheck",
    "render_gate_json",
    "render_gate_text",
]

# Relative tolerance of the isolation comparison when it is not bitwise:
# max |packed - alone| / max |alone| over a document's logits. Measured on
# transformers models: a leak gives 0.09-0.8, a correct model at most 0.0065.
ISOLATION_TOLERANCE = 0.02


@dataclass
class ByteCheck:
    """Staged logits against the uncut model's: ``equal``, ``differ`` or ``blocked``
    (a stage could not run: ``blocked`` says why)."""

    status: str
    max_abs_diff: float = 0.0
    first_diff: dict | None = None  # token, document, position, column
    blocked: Blocked | None = None
    message: str = ""

    @property
    def holds(self) -> bool:
        return self.status == "equal"

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

    status: str
    max_rel_diff: float = 0.0
    worst_document: int | None = None
    tolerance: float = ISOLATION_TOLERANCE
    documents: int = 0

    @property
    def holds(self) -> bool:
        return self.status in ("bitwise", "tolerance")

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class TrainCheck:
    """After one forward+backward+SGD step on both: every parameter (by global name)
    and the logits of a second forward. ``equal``, ``differ`` or ``blocked``."""

    status: str
    parameters: int = 0  # parameters of the uncut model compared
    differing: list[str] = field(default_factory=list)  # their global names
    max_abs_diff: float = 0.0
    logits_after: str = ""  # equal / differ: the second forward
    message: str = ""

    @property
    def holds(self) -> bool:
        return self.status == "equal"

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
    mode: str = "processes"  # a fresh process per stage; "graph": the partitioned export
    train: TrainCheck | None = None

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


def render_gate_json(report: GateReport) -> str:
    return json.dumps(report.as_dict(), indent=2) + "\n"


def _bytes_line(check: ByteCheck) -> str:
    if check.status == "equal":
        return "staged vs uncut: EQUAL (torch.equal on the logits)"
    if check.status == "blocked":
        return f"staged vs uncut: CANNOT RUN ({check.message})"
    first = check.first_diff or {}
    where = (
        f"first at token {first['token']} (document {first['document']}, position "
        f"{first['position']}), logit {first['column']}"
        if first
        else check.message
    )
    return f"staged vs uncut: DIFFER (max abs diff {check.max_abs_diff:.4g}; {where})"


def _isolation_line(check: IsolationCheck) -> str:
    n = check.documents
    if check.status == "bitwise":
        return f"document isolation: BITWISE ({n} documents alone equal their packed logits)"
    detail = (
        f"max relative diff {check.max_rel_diff:.2g} at document {check.worst_document}, "
        f"tolerance {check.tolerance:g}"
    )
    if check.status == "tolerance":
        return f"document isolation: WITHIN TOLERANCE ({detail}; not bitwise on this CPU)"
    return f"document isolation: FAIL ({detail}: documents see each other)"


def _train_line(check: TrainCheck) -> str:
    if check.status == "equal":
        return (
            f"after one SGD step: EQUAL ({check.parameters} parameters and the logits of a "
            "second forward)"
        )
    if check.status == "blocked":
        return f"after one SGD step: CANNOT RUN ({check.message})"
    names = ", ".join(check.differing[:3]) + (", ..." if len(check.differing) > 3 else "")
    params = f"{len(check.differing)}/{check.parameters} parameters differ"
    detail = f"{params} (max abs diff {check.max_abs_diff:.4g}: {names})" if names else params
    return f"after one SGD step: DIFFER ({detail}; second forward {check.logits_after})"


def _handover_lines(report: GateReport) -> list[str]:
    lines = []
    for h in report.handovers:
        if h.node is None:
            lines.append(f"  cut {h.cut}: no activation may cross (the proof found no residual)")
            continue
        shape = "[" + ", ".join(h.shape) + "]" if h.shape else ""
        note = f" (rounded from {h.dtype})" if h.rounded else ""
        lines.append(f"  cut {h.cut}: hands over {h.node} {shape} as bf16 bytes{note}")
    return lines


_BYTES = {"equal": "bytes equal", "differ": "bytes differ", "blocked": "a stage cannot run"}
_TRAINED = {
    "equal": "equal after a step",
    "differ": "differ after a step",
    "blocked": "no training step",
}


def _summary(report: GateReport) -> str:
    isolated = "documents isolated" if report.isolation.holds else "documents not isolated"
    static = report.static_verdict.upper()
    agree = "agrees with" if report.agrees else "CONTRADICTS"
    what = f"{_BYTES[report.bytes.status]}, {isolated}"
    if report.train is not None:
        what += ", " + _TRAINED[report.train.status]
    return f"verdict: {report.verdict.upper()} ({what}; {agree} the static proof: {static})"


def render_gate_text(report: GateReport) -> str:
    tokens = sum(report.docs)
    lines = [
        f"graphcheck {__version__} gate · {report.model} · {report.num_layers} layers · "
        f"seed {report.seed} · {len(report.docs)} documents, {tokens} tokens · "
        f"total {report.seconds.get('total', 0.0):.1f} s"
    ]
    lines += [_stage_line(s) for s in report.stages]
    codes = f" ({', '.join(report.static_codes)})" if report.static_codes else ""
    lines += ["", f"static proof: {report.static_verdict.upper()}{codes}"]
    if report.mode == "graph":
        lines.append("stages run: the exported uncut graph partitioned by the proof, in-process")
    elif report.stage_builder:
        lines.append(
            f"stages run: stage builder {report.stage_builder}, one fresh process per stage, "
            "weights from the uncut checkpoint"
        )
    lines += _handover_lines(report)
    if not report.export_faithful:
        lines.append("note: the exported uncut program itself differs from the model here")
    lines += ["", _bytes_line(report.bytes), _isolation_line(report.isolation)]
    if report.train is not None:
        lines.append(_train_line(report.train))
    lines += ["", _summary(report)]
    return "\n".join(lines) + "\n"
