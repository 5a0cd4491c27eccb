"""``--format markdown``: a compact summary for a pull-request comment.

A heading with the verdict, the model and the mode; one table row per cut (its
position, verdict, codes and the activations that cross it); the first diagnostics
with where they come from and their rule's fix (a finding repeated at every layer or
cut once, with what it covers: :func:`graphcheck.diagnostics.group`); what was
ignored (``--ignore``, ``--select``, ``# graphcheck: ignore``); and the crossing set
of the first violating cut in full. It renders ``verify`` and ``map`` reports; a plan or a gate
result is a usage error (the command line refuses them before any export).

>>> _cell("a|b `c`")
'a\\\\|b \\\\`c\\\\`'
>>> _code("x = f(y)")
'`x = f(y)`'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from graphcheck._version import __version__
from graphcheck.diagnostics import Group, Verdict, counted, group
from graphcheck.errors import UsageError
from graphcheck.reporters.sarif import doc_sections
from graphcheck.results.values import Role
from graphcheck.rules import INFO

if TYPE_CHECKING:
    from graphcheck.project.check import CheckResult
    from graphcheck.report import CutReport, Report
    from graphcheck.results.values import CrossingValue

__all__ = ["KINDS", "MAX_DIAGNOSTICS", "NAME", "render"]

NAME = "markdown"
KINDS = frozenset({"verify", "map", "check"})  # the results this format renders
MAX_DIAGNOSTICS = 10  # a PR comment shows the first groups of findings; the rest are counted


def render(result: Report) -> str:
    if result.kind not in KINDS:
        raise UsageError(
            f"--format markdown summarises graphcheck verify, map or check, not {result.kind}; "
            f"use --format text or json for {result.kind}"
        )
    if result.kind == "check":
        return _check_markdown(result)
    parts = [_heading(result), _cuts(result), _diagnostics(result), _ignored(result)]
    parts.append(_first_violation(result))
    return "\n\n".join(part for part in parts if part) + "\n"


def _cell(text: str) -> str:
    """Text safe in a table cell: pipes and backticks escaped, on one line."""
    return " ".join(text.replace("|", "\\|").replace("`", "\\`").split())


def _code(text: str) -> str:
    """Inline code; a text holding a backtick is fenced with two."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _heading(report: Report) -> str:
    mark = "✅" if report.verdict == Verdict.PASS else "❌"
    proven = sum(c.verdict == Verdict.PASS for c in report.cuts)
    stages = report.stage_summary()  # verify: the verdict line's words on them
    stages = f" · {stages}" if stages else ""
    attention = report.attention
    stages += f" · {attention['kind']} attention" if attention else ""
    return (
        f"### {mark} graphcheck {report.mode}: {report.verdict.upper()}\n\n"
        f"{_code(report.model)} · {report.program_mode} mode · {report.num_layers} layers · "
        f"{proven}/{len(report.cuts)} cuts proven{stages} · graphcheck {__version__}"
    )


def _wire(crossing: list[CrossingValue]) -> str:
    acts = [c for c in crossing if c.role == Role.ACTIVATION]
    return ", ".join(f"{c.node} {c.dtype or '?'} {_shape(c)}" for c in acts) or "-"


def _shape(c: CrossingValue) -> str:
    return "[" + ", ".join(c.shape) + "]" if c.shape is not None else "-"


def _cuts(report: Report) -> str:
    if not report.cuts:
        return ""
    rows = ["| cut | verdict | codes | activations crossing |", "|---:|---|---|---|"]
    for cut in report.cuts:
        codes = ", ".join(sorted(set(cut.codes))) or "-"
        rows.append(
            f"| {cut.position} | {cut.verdict.upper()} | {codes} | {_cell(_wire(cut.crossing))} |"
        )
    return "\n".join(rows)


def _fix(code: str) -> str | None:
    rule = next((rule for rule in INFO if rule.code == code), None)
    fix = doc_sections(rule.doc).get("Fix") if rule is not None else None
    return " ".join(fix.split("\n\n")[0].split()).replace("``", "`") if fix else None


def _item(g: Group, fix: bool) -> str:
    """A finding (or a repeated one, with what it covers) as a list item; ``fix`` adds
    its rule's fix (once per code)."""
    d = g.first
    lines = [f"- **{d.code}** {g.summary()}", f"  {' '.join(d.message.split())}"]
    if d.source:
        lines.append(f"  at {_code(d.source)}")
    hint = _fix(d.code) if fix else None
    if hint:
        lines.append(f"  *Fix:* {hint}")
    return "\n".join(lines)


def _diagnostics(report: Report) -> str:
    if not report.diagnostics:
        return "No findings."
    groups = group(report.diagnostics)
    shown = groups[:MAX_DIAGNOSTICS]
    lines = [f"#### Findings ({len(report.diagnostics)})", ""]
    codes = [g.first.code for g in shown]
    lines += [_item(g, g.first.code not in codes[:i]) for i, g in enumerate(shown)]
    rest = sum(len(g.members) for g in groups[len(shown) :])
    if rest:
        lines.append(f"- … and {rest} more (`--format text` or `json` lists them all)")
    return "\n".join(lines)


def _ignored(report: Report) -> str:
    """What was kept out of the verdict, and the ignore comments that matched nothing."""
    summary = report.ignored_summary()
    notes = [f"- {_cell(u.message)}" for u in report.unused_ignores]
    lines = [f"*{_cell(summary)}*"] if summary else []
    if summary and notes:
        lines.append("")
    return "\n".join(lines + notes)


def _first_violation(report: Report) -> str:
    cut: CutReport | None = next((c for c in report.cuts if c.verdict == Verdict.FAIL), None)
    if cut is None:
        return ""
    rows = [
        f"#### What crosses cut {cut.position}",
        "",
        "| value | role | dtype | shape | producer | consumers |",
        "|---|---|---|---|---|---|",
    ]
    for c in cut.crossing:
        cells = [c.node, str(c.role), c.dtype or "-", _shape(c), c.producer]
        more = f" +{len(c.consumers) - 2}" if len(c.consumers) > 2 else ""
        cells.append(", ".join(c.consumers[:2]) + more or "-")
        rows.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    return "\n".join(rows)


# --- graphcheck check and lock: a verdict table, the lock's changes, each summary -------


def _check_markdown(result: CheckResult) -> str:
    mark = {"pass": "✅", "fail": "❌"}.get(result.verdict, "⚠️")
    parts = [f"## {mark} graphcheck check: {result.verdict.upper()}"]
    rows = ["| check | plan | verdict | codes |", "|---|---|---|---|"]
    for run in result.runs:
        if run.error is not None:
            rows.append(f"| {_cell(run.check.name)} | - | ERROR | {_cell(run.error)} |")
        for plan, r in run.reports.items():
            codes = ", ".join(sorted(r.codes)) or "-"
            cells = [run.check.name, plan, r.verdict.upper(), codes]
            rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    parts.append("\n".join(rows))
    if result.diff is not None:
        parts.append(_markdown_lock(result))
    for run, plan, report in result.reports:
        parts += [
            f"**{_cell(run.check.name)}** · {_cell(plan)}",
            report.markdown.strip(),
        ]
    return "\n\n".join(parts) + "\n"


def _markdown_lock(result: CheckResult) -> str:
    changes = result.diff.changes
    lines = [f"#### graphcheck.lock: {counted(len(changes), 'change')}", ""]
    for c in changes:
        model = f"**{c.model}** " if c.model else ""
        lines.append(f"- {'❌' if c.fails else 'ℹ️'} {model}{_cell(c.message)}")
        if c.source:
            lines.append(f"  at `` {c.source} ``")
    return "\n".join(lines if changes else [*lines[:-1], "", "No change."])
