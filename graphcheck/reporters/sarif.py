"""``--format sarif``: the findings as a SARIF 2.1.0 log, for code scanning in CI.

One run: ``tool.driver`` names graphcheck and its version and carries one reporting
descriptor per rule, generated from the rule modules (``CODE``, ``NAME``, ``SEVERITY``,
``SUMMARY`` and the doc's sections: "What it checks" is the full description, the whole
doc the help). Each diagnostic is a ``result``: its rule, level (``error`` or
``warning``), message, and a location at the model's source line (the node's stack
trace, :attr:`Diagnostic.source`), a path relative to the working directory where it
lies under it, so a CI job run from the repository root annotates the pull request's
diff. A finding with no source line (a stage plan, a parameter) is located at the
factory of a ``file.py:factory`` model; an ``hf:`` model has no file to point at, so
such a finding keeps only its logical location (the module path). The cut, stage,
node and module are in the result's ``properties``; the run's ``properties`` hold
the model, the mode and the verdict.

An ignored finding (:attr:`Report.ignored`) is a result too, with ``suppressions``, so
code scanning shows it dismissed rather than losing it: ``inSource`` for a
``# graphcheck: ignore`` comment (its justification ``# graphcheck: ignore[GC205] at
model.py:12``, its location the comment's line), ``external`` for ``--ignore`` /
``--select`` or the configuration's lists (``--ignore GC205``,
``[tool.graphcheck] ignore GC2``); its ``properties`` say ``ignored_by``.

It renders ``verify`` and ``map`` reports; a plan or a gate result is a usage error
(the command line refuses them before any export).

>>> _physical("fixtures/violations.py:44: x = f(y)")
{'artifactLocation': {'uri': 'fixtures/violations.py'}, 'region': {'startLine': 44}}
>>> doc_sections("GC1 x\\n\\nFix\\n    Do it.\\n")["Fix"]
'Do it.'
"""

from __future__ import annotations

import ast
import json
import os
import re
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from graphcheck._version import __version__
from graphcheck.diagnostics import Severity
from graphcheck.errors import UsageError
from graphcheck.model.spec import ModelSpec
from graphcheck.rules import INFO, RuleInfo
from graphcheck.rules.suppress import IgnoredBy

if TYPE_CHECKING:
    from graphcheck.diagnostics import Diagnostic
    from graphcheck.project.check import CheckResult
    from graphcheck.project.diff import Change
    from graphcheck.report import Report
    from graphcheck.rules.suppress import Ignored

__all__ = [
    "KINDS",
    "NAME",
    "SCHEMA",
    "VERSION",
    "doc_sections",
    "error_log",
    "render",
    "rule_descriptor",
]

NAME = "sarif"
KINDS = frozenset({"verify", "map", "check"})  # the results this format renders
VERSION = "2.1.0"
SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
SECTIONS = ("What it checks", "Why it matters", "Example", "Fix")

_SOURCE = re.compile(r"(?P<path>.+?):(?P<line>\d+):")


def render(result: Report) -> str:
    if result.kind not in KINDS:
        raise UsageError(
            f"--format sarif renders the findings of graphcheck verify, map or check, not "
            f"{result.kind}; use --format json or text for {result.kind}"
        )
    if result.kind == "check":
        return _check_log(result)
    log = {"$schema": SCHEMA, "version": VERSION, "runs": [_run(result)]}
    return json.dumps(log, indent=2) + "\n"


def error_log(message: str, detail: tuple[str, ...] = ()) -> str:
    """The SARIF log of a run that could not verify (exit 2): no results, one invocation
    that did not succeed, its error as a tool execution notification."""
    text = "\n".join((message, *detail))
    invocation = {
        "executionSuccessful": False,
        "exitCode": 2,
        "toolExecutionNotifications": [{"level": "error", "message": {"text": text}}],
    }
    driver = {"name": "graphcheck", "version": __version__, "semanticVersion": __version__}
    run = {"tool": {"driver": driver}, "invocations": [invocation], "results": []}
    return json.dumps({"$schema": SCHEMA, "version": VERSION, "runs": [run]}, indent=2) + "\n"


def _run(report: Report) -> dict:
    index = {rule.code: i for i, rule in enumerate(INFO)}
    fallback = _factory_location(report.model)
    return {
        "tool": {
            "driver": {
                "name": "graphcheck",
                "version": __version__,
                "semanticVersion": __version__,
                "rules": [rule_descriptor(rule) for rule in INFO],
            }
        },
        "columnKind": "unicodeCodePoints",
        "results": [_result(d, index, fallback) for d in report.diagnostics]
        + [_suppressed(i, index, fallback) for i in report.ignored],
        "properties": {
            "model": report.model,
            "mode": report.mode,
            "verdict": report.verdict,
            **({"stagePrograms": _stage_programs(report)} if report.stage_proof else {}),
        },
    }


def _stage_programs(report: Report) -> dict:
    """Whether the stage programs were proven (a required unproven one fails the verdict
    with no result of its own: the run's ``verdict`` says it)."""
    proof = report.stage_proof
    return {
        "proven": proof.proven,
        "builder": proof.builder,
        "required": proof.required,
        "reason": proof.reason,
        "summary": report.stage_summary(),
    }


def doc_sections(doc: str) -> dict[str, str]:
    """A rule doc's sections by heading, each body dedented; an unindented paragraph
    after the last section (a note) is kept in that section."""
    found: dict[str, list[str]] = {}
    current = None
    for line in doc.strip().splitlines()[1:]:
        if line.strip() in SECTIONS and not line.startswith(" "):
            current = found.setdefault(line.strip(), [])
        elif current is not None:
            current.append(line)
    return {name: textwrap.dedent("\n".join(body)).strip() for name, body in found.items()}


def _plain(text: str) -> str:
    """One paragraph per blank-line block, its lines joined: ``reST`` literals as is."""
    return "\n\n".join(" ".join(p.split()) for p in text.split("\n\n"))


def rule_descriptor(rule: RuleInfo) -> dict:
    """The SARIF ``reportingDescriptor`` of a rule (its metadata as its module states it)."""
    sections = doc_sections(rule.doc)
    text = "\n\n".join(f"{name}\n{_plain(sections.get(name, ''))}" for name in SECTIONS)
    markdown = "\n\n".join(
        f"**{name}**\n\n{_plain(sections.get(name, '')).replace('``', '`')}" for name in SECTIONS
    )
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": _plain(sections.get("What it checks", rule.summary))},
        "help": {"text": text, "markdown": markdown},
        "defaultConfiguration": {"level": _level(rule.severity)},
        "properties": {"tags": ["pipeline-parallel", rule.code[:3] + "xx"]},
    }


def _level(severity: str) -> str:
    return "warning" if severity == Severity.WARNING else "error"


def _result(d: Diagnostic, index: dict[str, int], fallback: dict | None) -> dict:
    physical = _physical(d.source) if d.source else fallback
    location: dict = {"physicalLocation": physical} if physical else {}
    if d.module:
        location["logicalLocations"] = [{"fullyQualifiedName": d.module, "kind": "module"}]
    where = {"cut": d.cut, "stage": d.stage, "node": d.node, "module": d.module}
    result = {
        "ruleId": d.code,
        "level": _level(d.severity),
        "message": {"text": d.message},
        "locations": [location] if location else [],
        "properties": {k: v for k, v in where.items() if v is not None},
    }
    if d.code in index:
        result["ruleIndex"] = index[d.code]
    return result


def _suppressed(ignored: Ignored, index: dict[str, int], fallback: dict | None) -> dict:
    """An ignored finding as a result with its suppression: ``inSource`` (at the
    comment) for an ignore comment, ``external`` for the flags and the configuration."""
    result = _result(ignored.diagnostic, index, fallback)
    result["properties"]["ignored_by"] = ignored.label
    suppression = {"kind": "external", "justification": ignored.justification}
    if ignored.by is IgnoredBy.COMMENT:
        suppression["kind"] = "inSource"
        location = _physical(f"{ignored.comment}:") if ignored.comment else None
        suppression |= {"location": {"physicalLocation": location}} if location else {}
    result["suppressions"] = [suppression]
    return result


def _uri(path: str) -> str:
    """``path`` as a URI reference: relative (``/``-separated) under the working
    directory, a ``file:`` URI elsewhere."""
    absolute = Path(os.path.abspath(path))
    try:
        return quote(absolute.relative_to(Path.cwd()).as_posix())
    except ValueError:
        return absolute.as_uri()


def _physical(source: str) -> dict | None:
    """``{"artifactLocation": ..., "region": {"startLine": N}}`` of ``path:N: code``."""
    match = _SOURCE.match(source)
    if match is None:
        return None
    line = int(match["line"])
    return {"artifactLocation": {"uri": _uri(match["path"])}, "region": {"startLine": line}}


def _factory_location(model: str) -> dict | None:
    """Where the factory of a ``file.py:factory`` model is defined (its file alone when
    the definition is not found); ``None`` for any other spec."""
    spec = ModelSpec.of(model)
    path, factory = spec.target, spec.factory
    if spec.hf or not path.endswith(".py") or not os.path.isfile(path):
        return None
    location: dict = {"artifactLocation": {"uri": _uri(path)}}
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return location
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == factory:
            location["region"] = {"startLine": node.lineno}
    return location


# --- graphcheck check and lock: every report's results in one run, and the lock's ------


def _check_located(source: str | None) -> dict | None:
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
    location = _check_located(change.source) or _file_location(config)
    return {
        "ruleId": f"lock/{change.kind}",
        "level": "error" if change.fails else "note",
        "message": {"text": f"{change.model or 'graphcheck.lock'}: {change.message}"},
        "locations": [location],
        "properties": {"model": change.model, "lock": str(change.kind)},
    }


def _lock_rules(kinds) -> list[dict]:
    return [
        {"id": f"lock/{kind}", "shortDescription": {"text": f"graphcheck.lock: {kind} changed"}}
        for kind in kinds
    ]


def _check_log(result: CheckResult) -> str:
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
        merged["tool"]["driver"]["rules"] += _lock_rules(result.diff.kinds)
        merged["results"] += [_lock_result(c, result.config) for c in result.diff.changes]
    merged["properties"] = {"mode": "check", "verdict": result.verdict}
    return json.dumps(base, indent=2) + "\n"


def _empty_log() -> dict:
    """The SARIF log of a verify report without findings, for a result without plans
    (every check could not run; none came from the cache)."""
    from graphcheck.report import Report

    return json.loads(render(Report(model="", num_layers=0, mode="verify")))
