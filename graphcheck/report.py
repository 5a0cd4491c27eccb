"""Reports: the result of a run, as a value, as text and as JSON.

The JSON form is the public contract (``"graphcheck": "<version>"`` first):

>>> r = Report(model="m.py:f", num_layers=2, mode="verify")
>>> r.verdict, r.exit_code, list(r.as_dict())[:3]
('pass', 0, ['graphcheck', 'model', 'mode'])
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from graphcheck import __version__
from graphcheck.dataflow import Crossing
from graphcheck.diagnostics import Diagnostic
from graphcheck.partition import Stage

__all__ = ["CutReport", "Report", "render_json", "render_map", "render_text"]


@dataclass
class CutReport:
    position: int
    crossing: list[Crossing]
    codes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return "fail" if self.codes else "pass"

    def as_dict(self) -> dict:
        return {
            "position": self.position,
            "verdict": self.verdict,
            "crossing": [c.as_dict() for c in self.crossing],
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
    stage_programs: list[dict] = field(default_factory=list)  # with a stage builder

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def verdict(self) -> str:
        return "fail" if self.errors else "pass"

    @property
    def exit_code(self) -> int:
        return 1 if self.errors else 0

    @property
    def codes(self) -> set[str]:
        return {d.code for d in self.diagnostics}

    def cut(self, position: int) -> CutReport:
        return next(c for c in self.cuts if c.position == position)

    def legal_cuts(self) -> list[int]:
        """Boundaries whose cut passes and that no whole-program finding spoils."""
        if any(d.cut is None for d in self.errors):
            return []
        return [c.position for c in self.cuts if c.verdict == "pass"]

    def as_dict(self) -> dict:
        return {
            "graphcheck": __version__,
            "model": self.model,
            "mode": self.mode,
            "verdict": self.verdict,
            "num_layers": self.num_layers,
            "stages": [s.as_dict() for s in self.stages],
            "cuts": [c.as_dict() for c in self.cuts],
            "diagnostics": [d.as_dict() for d in self.diagnostics],
            "stage_programs": self.stage_programs,
            "export_seconds": round(self.export_seconds, 3),
            "seconds": round(self.seconds, 3),
            "nodes": self.nodes,
        }


def render_json(report: Report) -> str:
    return json.dumps(report.as_dict(), indent=2) + "\n"


def _header(report: Report) -> list[str]:
    return [
        f"graphcheck {__version__} · {report.model} · {report.num_layers} layers · "
        f"{report.nodes} nodes · export {report.export_seconds:.1f} s · "
        f"total {report.seconds:.1f} s"
    ]


def _stage_line(stage: Stage) -> str:
    layers = f"layers {stage.layers[0]}-{stage.layers[1]}" if stage.layers else "no layers"
    mods = f" + {', '.join(stage.modules)}" if stage.modules else ""
    return f"  stage {stage.index}: {layers}{mods}"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "    " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip()
        for r in rows
    ]


def _crossing_rows(crossing: list[Crossing]) -> list[str]:
    rows = [["value", "role", "dtype", "shape", "producer", "consumers"]]
    for c in crossing:
        shape = "[" + ", ".join(c.shape) + "]" if c.shape is not None else "-"
        more = f" +{len(c.consumers) - 2}" if len(c.consumers) > 2 else ""
        consumers = ", ".join(c.consumers[:2]) + more
        rows.append([c.node.name, c.role, c.dtype or "-", shape, c.producer, consumers or "-"])
    return _table(rows)


def _diagnostic_lines(d: Diagnostic) -> list[str]:
    where = [f"cut {d.cut}" if d.cut is not None else None]
    where += [f"stage {d.stage}" if d.stage is not None else None]
    label = " (warning)" if d.severity == "warning" else ""
    head = f"{d.code} {d.name}{label}" + "".join(f" · {w}" for w in where if w)
    lines = [head, f"    {d.message}"]
    if d.node or d.module:
        lines.append(f"    at {d.node or '-'} in {d.module or '-'}")
    if d.source:
        lines.append(f"    {d.source}")
    return lines


def _diagnostics(report: Report) -> list[str]:
    lines = [
        "",
        f"diagnostics ({len(report.diagnostics)}):" if report.diagnostics else "diagnostics: none",
    ]
    for d in report.diagnostics:
        lines.extend("  " + line for line in _diagnostic_lines(d))
    return lines


def render_text(report: Report) -> str:
    lines = _header(report)
    lines += [_stage_line(s) for s in report.stages]
    if report.stage_programs:
        seconds = sum(p["export_seconds"] for p in report.stage_programs)
        lines += [
            f"  stage programs: {len(report.stage_programs)} exported in {seconds:.1f} s, "
            f"{sum(p['nodes'] for p in report.stage_programs)} nodes, compared layer by layer"
        ]
    for cut in report.cuts:
        codes = f" ({', '.join(sorted(set(cut.codes)))})" if cut.codes else ""
        lines += ["", f"cut {cut.position}: {cut.verdict.upper()}{codes}"]
        lines += _crossing_rows(cut.crossing)
    lines += _diagnostics(report)
    proven = sum(c.verdict == "pass" for c in report.cuts)
    summary = f"{proven}/{len(report.cuts)} cuts proven"
    if report.stage_programs:
        differ = sum(d.code in ("GC301", "GC303") for d in report.errors)
        plural = "" if differ == 1 else "s"
        summary += f"; {len(report.stage_programs)} stage programs, {differ} difference{plural}"
    lines += ["", f"verdict: {report.verdict.upper()} ({summary})"]
    return "\n".join(lines) + "\n"


def render_map(report: Report) -> str:
    """One line per boundary: verdict, codes and what crosses."""
    lines = [*_header(report), "", "  cut  verdict  codes        activations crossing"]
    for cut in report.cuts:
        acts = [c for c in cut.crossing if c.role == "activation"]
        wire = ", ".join(f"{c.node.name}:{c.dtype}" for c in acts) or "-"
        codes = ",".join(sorted(set(cut.codes))) or "-"
        lines.append(f"  {cut.position:>3}  {cut.verdict.upper():<7}  {codes:<11}  {wire}")
    whole = [d for d in report.diagnostics if d.cut is None]
    if whole:
        lines += [
            "",
            f"whole-program findings ({len(whole)}); no cut is legal until they are fixed:",
        ]
        for d in whole:
            lines.extend("  " + line for line in _diagnostic_lines(d))
    legal = report.legal_cuts()
    lines += ["", f"legal cuts: {', '.join(map(str, legal)) if legal else 'none'}"]
    return "\n".join(lines) + "\n"
