"""Reports: the result of a run as a value, and the one seam that renders it.

:func:`render` turns a result (a :class:`Report` of ``verify`` or ``map``, a
:class:`~graphcheck.results.gate.GateReport`) into text in a format; each format is
one module of :mod:`graphcheck.reporters` (``NAME``, ``render(result) -> str``), found
by name, so a new output format is one new module.

The JSON form is the public contract (``"graphcheck": "<version>"`` first):

>>> r = Report(model="m.py:f", num_layers=2, mode="verify")
>>> str(r.verdict), r.exit_code, list(r.as_dict())[:3]
('pass', 0, ['graphcheck', 'model', 'mode'])
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import pkgutil
from dataclasses import dataclass, field
from importlib import resources

from graphcheck._version import __version__
from graphcheck.diagnostics import Diagnostic, Severity, Verdict, group
from graphcheck.planning.plan import Stage
from graphcheck.results.values import CrossingValue, ResultKind
from graphcheck.rules import MISMATCH_CODES
from graphcheck.rules.suppress import Ignored, UnusedIgnore

__all__ = [
    "CutReport",
    "PlanReport",
    "Report",
    "StageProof",
    "formats",
    "headline",
    "ignored_summary",
    "render",
    "renders",
]


@dataclass
class CutReport:
    """One cut's verdict: what crosses it (plain data, snapshotted from the program), the
    codes of the errors found at it, the state it hands over and the codes ignored there."""

    position: int
    crossing: list[CrossingValue]
    codes: list[str] = field(default_factory=list)
    state: dict | None = None  # the state the cut hands over: name, declared, node, dtype, shape
    ignored: list[str] = field(default_factory=list)  # codes of the errors ignored here

    @property
    def verdict(self) -> str:
        return Verdict.FAIL if self.codes else Verdict.PASS

    def as_dict(self) -> dict:
        return {
            "position": self.position,
            "verdict": self.verdict,
            "crossing": [c.as_dict() for c in self.crossing],
            "state": self.state,
            "ignored": self.ignored,
        }


@dataclass(frozen=True)
class StageProof:
    """Whether each stage's own program (built by a stage builder, the way a rank builds
    it) was proven to run its slice of the uncut program, and by which builder; when not,
    why (``reason``) and what would prove them (``hint``, the verdict line's words).
    ``required`` (``--require-stage-programs``) makes an unproven one fail the verdict.

    >>> StageProof(True, "keep-index", default=True).summary(2, 0)
    '2 stage programs, 0 differences'
    >>> StageProof(False, reason="turned off").summary(0, 0)
    'stage programs not proven: pass --stage-builder'
    >>> StageProof(False, reason="turned off", required=True).summary(0, 0)
    'stage programs not proven, required: pass --stage-builder'
    """

    proven: bool
    builder: str | None = None  # the builder's name (a callable's qualified name)
    default: bool = False  # graphcheck chose the builder: the user gave none
    reason: str | None = None  # why they are not proven
    hint: str = "pass --stage-builder"  # what proves them
    required: bool = False

    @property
    def fails(self) -> bool:
        """An unproven stage program that the user requires: the verdict fails."""
        return self.required and not self.proven

    def summary(self, count: int, differences: int) -> str:
        """The verdict line's words on the stage programs (``count`` of them built,
        ``differences`` their mismatch findings)."""
        if self.proven:
            plural = "" if differences == 1 else "s"
            return f"{count} stage programs, {differences} difference{plural}"
        required = ", required" if self.required else ""
        return f"stage programs not proven{required}: {self.hint}"

    def as_dict(self, stages: list[dict]) -> dict:
        return {
            "proven": self.proven,
            "builder": self.builder,
            "default": self.default,
            "required": self.required,
            "reason": self.reason,
            "stages": stages,
        }


@dataclass
class Report:
    model: str
    num_layers: int
    mode: str
    stages: list[Stage] = field(default_factory=list)
    cuts: list[CutReport] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    export_seconds: float = 0.0
    seconds: float = 0.0
    nodes: int = 0
    costs: dict | None = None  # map: the cost model (graphcheck.analysis.cost)
    stage_programs: list[dict] = field(default_factory=list)  # each stage program built
    stage_proof: StageProof | None = None  # verify: whether the stage programs were proven
    tokens: dict | None = None  # for which T the proof holds (Exported.tokens)
    program_mode: str = "train"  # the program proven: model.train() or model.eval()
    attention: dict | None = None  # transformers models: the attention proven (kernels.attention)
    kernels: list[dict] = field(default_factory=list)  # custom ops validated (kernels.validation)
    stand_ins: list[str] = field(default_factory=list)  # "module:attr" stood in for (kernels)
    backward: dict | None = None  # train mode: whether the backward program was proven
    ignored: list[Ignored] = field(default_factory=list)  # --select/--ignore, comments
    unused_ignores: list[UnusedIgnore] = field(default_factory=list)

    @classmethod
    def of(
        cls,
        model: str,
        mode: str,
        num_layers: int,
        cuts: dict[int, list[CrossingValue]],
        diagnostics: list[Diagnostic],
        states: dict[int, dict] | None = None,
        ignored: list[Ignored] | None = None,
        **timings,
    ) -> Report:
        """The report of ``diagnostics`` over the analysed ``cuts`` (each position with
        its crossing set): each cut with the state it hands over (``states``) and the codes
        of the errors found at it (and of those ``ignored`` there)."""
        ignored = ignored or []
        reports = []
        for position, crossing in cuts.items():
            here = [d for d in diagnostics if d.cut == position and d.severity == Severity.ERROR]
            state = (states or {}).get(position)
            report = CutReport(position, crossing, [d.code for d in here], state)
            report.ignored = sorted(
                {i.diagnostic.code for i in ignored if _counts_at(i.diagnostic, position)}
            )
            reports.append(report)
        return cls(
            model, num_layers, mode, cuts=reports, diagnostics=diagnostics, ignored=ignored,
            **timings,
        )  # fmt: skip

    @property
    def kind(self) -> ResultKind:
        """What the reporters render: ``verify`` or ``map``."""
        return ResultKind(self.mode)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == Severity.ERROR]

    @property
    def verdict(self) -> str:
        """``fail`` on an error, or on stage programs required and not proven."""
        required = self.stage_proof is not None and self.stage_proof.fails
        return Verdict.FAIL if self.errors or required else Verdict.PASS

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict == Verdict.FAIL else 0

    def summary(self) -> str:
        """What the verdict line says in brackets: ``1/1 cuts proven; 2 stage programs,
        0 differences; 3 ignored``."""
        proven = sum(c.verdict == Verdict.PASS for c in self.cuts)
        stages = self.stage_summary()
        parts = [f"{proven}/{len(self.cuts)} cuts proven", *([stages] if stages else [])]
        if self.ignored:
            parts.append(f"{len(self.ignored)} ignored")
        trusted = sum(k["status"] == "trusted, not verified" for k in self.kernels)
        if trusted:
            ops = "op" if trusted == 1 else "ops"
            parts.append(f"{trusted} custom {ops} trusted, not verified by execution")
        return "; ".join(parts)

    def stage_summary(self) -> str | None:
        """The verdict line's words on the stage programs (``None`` for ``map``)."""
        if self.stage_proof is None:
            return None
        differ = sum(d.code in MISMATCH_CODES for d in self.errors)
        return self.stage_proof.summary(len(self.stage_programs), differ)

    @property
    def codes(self) -> set[str]:
        return {d.code for d in self.diagnostics}

    def cut(self, position: int) -> CutReport:
        """The report of cut ``position``; a :class:`KeyError` naming the cuts there are.

        >>> Report(model="m", num_layers=2, mode="verify").cut(1)
        Traceback (most recent call last):
        KeyError: 'no cut 1 in this report; its cuts are: none'
        """
        found = next((c for c in self.cuts if c.position == position), None)
        if found is None:
            there = ", ".join(str(c.position) for c in self.cuts) or "none"
            raise KeyError(f"no cut {position} in this report; its cuts are: {there}")
        return found

    def legal_cuts(self) -> list[int]:
        """Boundaries whose cut passes and that no whole-program finding spoils."""
        if any(d.cut is None for d in self.errors):
            return []
        return [c.position for c in self.cuts if c.verdict == Verdict.PASS]

    def as_dict(self) -> dict:
        return {
            "graphcheck": __version__,
            "model": self.model,
            "mode": self.mode,
            "program_mode": str(self.program_mode),
            "verdict": self.verdict,
            "num_layers": self.num_layers,
            "stages": [s.as_dict() for s in self.stages],
            "cuts": [c.as_dict() for c in self.cuts],
            "diagnostics": [d.as_dict() for d in self.diagnostics],
            "stage_programs": self._stage_programs_dict(),
            "export_seconds": round(self.export_seconds, 3),
            "seconds": round(self.seconds, 3),
            "nodes": self.nodes,
            **({"costs": self.costs} if self.costs is not None else {}),
            **({"tokens": self.tokens} if self.tokens is not None else {}),
            **({"attention": self.attention} if self.attention is not None else {}),
            **({"kernels": self.kernels} if self.kernels else {}),
            **({"stand_ins": self.stand_ins} if self.stand_ins else {}),
            **({"backward": self.backward} if self.backward is not None else {}),
            **({"legal_cuts": self.legal_cuts()} if self.mode == "map" else {}),
            "groups": [_group_dict(g) for g in group(self.diagnostics)],
            "ignored": [i.as_dict() for i in self.ignored],
            "unused_ignores": [u.as_dict() for u in self.unused_ignores],
        }

    def _stage_programs_dict(self) -> dict | None:
        """``stage_programs`` in JSON: proven or not, by which builder, why not, and each
        stage program built; ``None`` for ``map`` (no plan)."""
        if self.stage_proof is None:
            return None
        return self.stage_proof.as_dict(self.stage_programs)

    def ignored_summary(self) -> str | None:
        """``3 findings ignored (GC501 ×2 by --ignore, GC205 ×1 by # graphcheck: ignore at
        model.py:12)``; ``None`` when nothing was ignored."""
        return ignored_summary(self.ignored)


def _counts_at(d: Diagnostic, position: int) -> bool:
    """Whether error ``d`` would fail cut ``position`` (at it, or whole-program)."""
    return d.severity == Severity.ERROR and d.cut == position


def _group_dict(g) -> dict:
    first = g.first
    return {
        "code": first.code,
        "count": len(g.members),
        "cuts": g.covers("cut"),
        "stages": g.covers("stage"),
        "layers": g.covers("layer"),
        "message": first.message,
        "source": first.source_location(),
    }


def ignored_summary(ignored: list[Ignored]) -> str | None:
    """One line on what was ignored and by what (the flag, the configuration's list or
    the comment: :attr:`Ignored.label`).

    >>> from graphcheck.rules.suppress import IgnoredBy
    >>> d = Diagnostic("GC501", "non-bf16-parameter", "fp32")
    >>> found = [Ignored(d, IgnoredBy.IGNORE)] * 2 + [Ignored(d, IgnoredBy.COMMENT, "m.py:3")]
    >>> ignored_summary(found)
    '3 findings ignored (GC501 ×2 by --ignore, GC501 ×1 by # graphcheck: ignore at m.py:3)'
    >>> ignored_summary([Ignored(d, IgnoredBy.IGNORE, selectors_from="graphcheck.toml")])
    '1 finding ignored (GC501 ×1 by graphcheck.toml ignore)'
    """
    if not ignored:
        return None
    counts: dict[tuple[str, str], int] = {}
    for i in ignored:
        by = f"not in {i.label}" if i.by == "--select" else f"by {i.label}"
        by += f" at {i.comment}" if i.comment else ""
        counts[(i.diagnostic.code, by)] = counts.get((i.diagnostic.code, by), 0) + 1
    parts = ", ".join(f"{code} ×{n} {by}" for (code, by), n in counts.items())
    plural = "s" if len(ignored) != 1 else ""
    return f"{len(ignored)} finding{plural} ignored ({parts})"


@dataclass
class PlanReport:
    """The result of ``plan``: the balanced legal plan (``None`` when none exists), the
    best plan that ignores legality, the boundaries that block, the costs planned on,
    and the proof of the plan (a ``verify`` :class:`Report` of its cuts)."""

    model: str
    num_layers: int
    stages: int
    virtual: int
    metric: str  # "flops" (per token) or "params" (bytes)
    costs: object  # graphcheck.analysis.cost.Costs
    plan: object | None  # graphcheck.planning.balance.Balance
    blind: object | None  # the best plan over every boundary 0..L
    legal: list[int] = field(default_factory=list)
    blocking: list[dict] = field(default_factory=list)  # illegal boundaries: position, codes
    whole_program: list[str] = field(default_factory=list)  # codes that spoil every cut
    proof: Report | None = None
    seconds: float = 0.0
    kind: ResultKind = ResultKind.PLAN
    # legal only because errors there are ignored (--ignore, --select, comments): position, codes
    legal_by_ignore: list[dict] = field(default_factory=list)
    ignored: list[Ignored] = field(default_factory=list)  # the map's ignored findings

    @property
    def verdict(self) -> str:
        proven = self.proof is not None and self.proof.verdict == Verdict.PASS
        return Verdict.PASS if proven else Verdict.FAIL

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == Verdict.PASS else 1

    def as_dict(self) -> dict:
        def plan(found) -> dict | None:
            if found is None:
                return None
            ranks = {"per_rank": found.per_rank(self.stages)} if self.virtual > 1 else {}
            return found.as_dict() | ranks

        return {
            "graphcheck": __version__,
            "model": self.model,
            "mode": "plan",
            "verdict": self.verdict,
            "num_layers": self.num_layers,
            "stages": self.stages,
            "virtual": self.virtual,
            "cost": self.metric,
            "plan": plan(self.plan),
            "blind": plan(self.blind),
            "legal_cuts": self.legal,
            "blocking": self.blocking,
            "whole_program": self.whole_program,
            "costs": self.costs.as_dict(),
            "proof": self.proof.as_dict() if self.proof is not None else None,
            "seconds": round(self.seconds, 3),
            "legal_by_ignore": self.legal_by_ignore,
            "ignored": [i.as_dict() for i in self.ignored],
        }


def formats() -> list[str]:
    """The output formats: one per module of :mod:`graphcheck.reporters`.

    >>> formats()
    ['html', 'json', 'markdown', 'sarif', 'text']
    """
    package = importlib.import_module("graphcheck.reporters")
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.ispkg)


def renders(fmt: str, kind: str) -> bool:
    """Whether format ``fmt`` renders a ``kind`` result (``verify``, ``map``, ``plan``,
    ``gate``): a reporter module's ``KINDS``, every kind when it has none.

    >>> renders("sarif", "verify"), renders("sarif", "gate"), renders("json", "gate")
    (True, False, True)
    """
    kinds = _kinds(fmt)
    return kinds is None or kind in kinds


def _kinds(fmt: str) -> frozenset[str] | None:
    """The ``KINDS`` of reporter ``fmt``, read from its source without running it (a
    reporter imports the analysis, so torch: an argument check must not); the module is
    imported when its source names ``KINDS`` other than as ``KINDS = frozenset({...})``.

    >>> sorted(_kinds("sarif")), _kinds("json")
    (['check', 'map', 'verify'], None)
    """
    source = resources.files("graphcheck.reporters").joinpath(f"{fmt}.py").read_text("utf-8")
    if "KINDS" not in source:
        return None
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if [t.id if isinstance(t, ast.Name) else None for t in targets] == ["KINDS"]:
            value = node.value
            if isinstance(value, ast.Call) and ast.unparse(value.func) == "frozenset":
                value = value.args[0] if len(value.args) == 1 and not value.keywords else None
            with contextlib.suppress(TypeError, ValueError):
                return frozenset(ast.literal_eval(value))
    return getattr(importlib.import_module(f"graphcheck.reporters.{fmt}"), "KINDS", None)


def headline(result) -> str:
    """``result``'s verdict in one line (``PASS (1/1 cuts proven)``), whatever the format
    it is rendered in: what ``--output FILE`` prints for the CI log."""
    return importlib.import_module("graphcheck.reporters.text").headline(result)


def render(result, fmt: str = "text") -> str:
    """``result`` rendered by the reporter module named ``fmt``."""
    if fmt not in formats():
        raise ValueError(f"unknown format {fmt!r}: use one of {', '.join(formats())}")
    return importlib.import_module(f"graphcheck.reporters.{fmt}").render(result)
