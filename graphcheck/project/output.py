"""A :class:`~graphcheck.project.check.CheckResult` in every format the reports have.

Each (model, plan) report was rendered by its own reporter through the seam
(:func:`graphcheck.report.render`) when its check ran, and kept in plain data
(:class:`~graphcheck.project.record.PlanResult`); this module only joins the parts, so a
check served from the cache prints what its fresh run printed, and rendering imports no
torch (of the reporters, only the JSON one, which imports nothing):

* ``text``: each check under a heading, a line per proven plan (and what it ignored, by
  the flag or configuration table that ignored it) and the whole text report of a
  failing one, the lock's changes, and last the ``verdict:`` line (the one
  ``--output`` echoes);
* ``json``: the result's ``as_dict()`` (each report's own JSON inside);
* ``sarif``: one run holding every report's results (each tagged with its check and
  plan in ``properties``) and a result per lock change, located at the model source
  line responsible where there is one, else at the configuration file (rule ids
  ``lock/<kind>``);
* ``markdown``: a verdict table of every check and plan, the lock's changes, then each
  report's own summary.

>>> _located("m.py:12: x = f(y)")
{'physicalLocation': {'artifactLocation': {'uri': 'm.py'}, 'region': {'startLine': 12}}}
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from graphcheck.diagnostics import Verdict
from graphcheck.errors import UsageError
from graphcheck.project.check import CheckResult
from graphcheck.project.diff import Change, ChangeKind
from graphcheck.project.record import PlanResult
from graphcheck.reporters import json as json_reporter  # imports no torch, as the others do

__all__ = ["FORMATS", "check_headline", "render_check"]

FORMATS = ("json", "markdown", "sarif", "text")
_SOURCE = re.compile(r"(?P<path>.+?):(?P<line>\d+):")


def render_check(result: CheckResult, fmt: str = "text") -> str:
    """``result`` in ``fmt`` (one of :data:`FORMATS`)."""
    renderers = {"text": _text, "json": _json, "sarif": _sarif, "markdown": _markdown}
    if fmt not in renderers:
        raise UsageError(f"--format {fmt}: graphcheck check writes {', '.join(FORMATS)}")
    return renderers[fmt](result)


def _json(result: CheckResult) -> str:
    return json_reporter.render(result)


def _count(n: int, noun: str) -> str:
    """``1 check``, ``2 checks``."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _change_lines(change: Change) -> list[str]:
    mark = "✗" if change.fails else "·"
    model = f"{change.model}: " if change.model else ""
    lines = [f"  {mark} {model}{change.message}"]
    return lines + ([f"      at {change.source}"] if change.source else [])


def check_headline(result: CheckResult) -> str:
    """The verdict of ``check`` or ``lock`` in one line (the text's verdict line)."""
    return _summary(result).removeprefix("verdict: ").rstrip("\n")


def _summary(result: CheckResult) -> str:
    reports = result.reports
    proven = sum(r.verdict == Verdict.PASS for _, _, r in reports)
    errors = sum(run.error is not None for run in result.runs)
    parts = [_count(len(result.runs), "check"), f"{proven}/{len(reports)} plans proven"]
    parts += [f"{errors} could not run"] if errors else []
    if result.diff is not None:
        failing = sum(c.fails for c in result.diff.changes)
        parts.append(f"lock: {_count(len(result.diff.changes), 'change')}, {failing} failing")
    if result.wrote is not None:
        parts.append(f"wrote {result.wrote.name}")
    elif result.command == "lock":
        parts.append("graphcheck.lock left as it was: a check could not run")
    return f"verdict: {result.verdict.upper()} · " + " · ".join(parts) + "\n"


def _plan_line(plan: str, report: PlanResult) -> str:
    """A plan in one line (a proven one, or any under ``lock``): ``cuts 3: PASS (1/1 cuts
    proven; 2 stage programs, 0 differences)``, and what it ignored on the next; a failing
    plan under ``check`` gets its whole text report instead."""
    codes = ", ".join(report.errors)
    line = f"  {plan}: {report.verdict.upper()} ({report.summary})"
    ignored = f"      {report.ignored}\n" if report.ignored else ""
    return line + (f" {codes}\n" if codes else "\n") + ignored


def _text(result: CheckResult) -> str:
    out = []
    for run in result.runs:
        out.append(f"== {run.check.name} ({run.check.model}) ==\n")
        if run.error is not None:
            out.append(f"error: {run.error}\n")
        for plan, report in run.reports.items():
            if result.command == "lock" or report.verdict == Verdict.PASS:
                out.append(_plan_line(plan, report))
            else:
                out.append(f"-- {plan} --\n{report.text}")
    if result.diff is not None:
        out.append(f"== lock: {_count(len(result.diff.changes), 'change')} ==\n")
        lines = [line for c in result.diff.changes for line in _change_lines(c)]
        out.append("\n".join(lines or ["  no change"]) + "\n")
    if result.update and result.diff is not None and result.diff.exit_code:
        out.append("(--update: the lock now records these changes)\n")
    return "".join(out) + _summary(result)


def _located(source: str | None) -> dict | None:
    match = _SOURCE.match(source or "")
    if match is None:
        return None
    physical = {
        "artifactLocation": {"uri": match["path"]},
        "region": {"startLine": int(match["line"])},
    }
    return {"physicalLocation": physical}


def _file_location(path: Path) -> dict:
    """``path`` as an artifact location: relative to the working directory under it."""
    try:
        uri = path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        uri = path.resolve().as_uri()
    return {"physicalLocation": {"artifactLocation": {"uri": uri}}}


def _lock_result(change: Change, config: Path) -> dict:
    """A lock change as a result, at the model's line responsible, else at the
    configuration that declares the check (code scanning shows located results only)."""
    location = _located(change.source) or _file_location(config)
    return {
        "ruleId": f"lock/{change.kind}",
        "level": "error" if change.fails else "note",
        "message": {"text": f"{change.model or 'graphcheck.lock'}: {change.message}"},
        "locations": [location],
        "properties": {"model": change.model, "lock": str(change.kind)},
    }


def _lock_rules() -> list[dict]:
    return [
        {"id": f"lock/{kind}", "shortDescription": {"text": f"graphcheck.lock: {kind} changed"}}
        for kind in ChangeKind
    ]


def _sarif(result: CheckResult) -> str:
    logs = [(run, plan, json.loads(r.sarif)) for run, plan, r in result.reports]
    base = logs[0][2] if logs else _empty_log()
    results = []
    for run, plan, log in logs:
        for found in log["runs"][0]["results"]:
            found["properties"].update(check=run.check.name, plan=plan)
            results.append(found)
    merged = base["runs"][0]
    merged["results"] = results
    if result.diff is not None:
        merged["tool"]["driver"]["rules"] += _lock_rules()
        merged["results"] += [_lock_result(c, result.config) for c in result.diff.changes]
    merged["properties"] = {"mode": "check", "verdict": result.verdict}
    return json.dumps(base, indent=2) + "\n"


def _empty_log() -> dict:
    """The SARIF log of a verify report without findings, for a result without plans
    (every check could not run; none came from the cache)."""
    from graphcheck.report import Report, render

    return json.loads(render(Report(model="", num_layers=0, mode="verify"), "sarif"))


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").replace("`", "\\`").split())


def _markdown(result: CheckResult) -> str:
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
    lines = [f"#### graphcheck.lock: {_count(len(changes), 'change')}", ""]
    for c in changes:
        model = f"**{c.model}** " if c.model else ""
        lines.append(f"- {'❌' if c.fails else 'ℹ️'} {model}{_cell(c.message)}")
        if c.source:
            lines.append(f"  at `` {c.source} ``")
    return "\n".join(lines if changes else [*lines[:-1], "", "No change."])
