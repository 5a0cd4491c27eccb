"""The outputs for CI: ``--format sarif`` checked against the official SARIF 2.1.0 schema
(shipped in tests/data, nothing is fetched), its results located at the model's source
line; ``--format markdown`` parsed by a Markdown library and its tables read cell by
cell; each on a violating fixture and its passing twin. The pytest plugin runs in a user's
test file under pytester: a passing model passes, a violating one fails with the report.
The pre-commit hook and the example workflow are read as YAML and their structure checked.

Reports come from the harness's cached explorers, so no test here exports a model of its own.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from harness import ROOT, cut_map, spec, verify
from markdown_it import MarkdownIt

from graphcheck.diagnostics import Diagnostic
from graphcheck.report import Report, render
from graphcheck.rules import RULES

pytest_plugins = ["pytester"]

SCHEMA = json.loads((ROOT / "tests/data/sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
VIOLATION = "violations:skip_connection"
TWIN = "reference:reference"


def _sarif(result) -> dict:
    """``result`` as SARIF, validated against the schema (every error listed if not)."""
    log = json.loads(render(result, "sarif"))
    validator = jsonschema.validators.validator_for(SCHEMA)(SCHEMA)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(log)]
    assert not errors, errors
    return log


def test_schema_is_the_official_one_and_rejects_a_broken_log():
    """The validation below can fail: the shipped schema rejects a log without ``runs``."""
    assert SCHEMA["title"].startswith("Static Analysis Results Format (SARIF) Version 2.1.0")
    validator = jsonschema.validators.validator_for(SCHEMA)(SCHEMA)
    assert not validator.is_valid({"version": "2.1.0"})
    assert not validator.is_valid({"version": "2.1.0", "runs": [{"tool": {}}]})


def test_sarif_locates_the_violation_at_the_model_source_line():
    report = verify(VIOLATION, (4,))
    (run,) = _sarif(report)["runs"]
    (result,) = run["results"]
    assert (result["ruleId"], result["level"]) == ("GC201", "error")
    assert result["message"]["text"] == report.diagnostics[0].message
    assert result["properties"] | {"cut": 4, "stage": 1} == result["properties"]
    physical = result["locations"][0]["physicalLocation"]
    path, line = physical["artifactLocation"]["uri"], physical["region"]["startLine"]
    assert not Path(path).is_absolute()
    code = report.diagnostics[0].source.split(": ", 1)[1]
    assert code in Path(path).read_text(encoding="utf-8").splitlines()[line - 1]
    rules = run["tool"]["driver"]["rules"]
    assert rules[result["ruleIndex"]]["id"] == "GC201"
    assert run["properties"]["verdict"] == "fail"


def test_sarif_of_the_passing_twin_has_no_results():
    (run,) = _sarif(verify(TWIN, (4,)))["runs"]
    assert run["results"] == []
    assert run["properties"]["verdict"] == "pass"


def test_sarif_of_a_map_holds_every_failing_boundary():
    report = cut_map(VIOLATION)
    (run,) = _sarif(report)["runs"]
    assert sorted({r["properties"]["cut"] for r in run["results"] if "cut" in r["properties"]}) == (
        sorted({d.cut for d in report.diagnostics if d.cut is not None})
    )
    assert run["results"] and len(run["results"]) == len(report.diagnostics)


def test_one_descriptor_per_rule_from_its_doc():
    (run,) = _sarif(verify(TWIN, (4,)))["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [rule.CODE for rule in RULES]
    for descriptor, rule in zip(rules, RULES, strict=True):
        assert descriptor["name"] == rule.NAME
        assert descriptor["shortDescription"]["text"] == rule.SUMMARY
        assert descriptor["defaultConfiguration"]["level"] == rule.SEVERITY
        for section in ("What it checks", "Why it matters", "Example", "Fix"):
            assert f"**{section}**" in descriptor["help"]["markdown"], (rule.CODE, section)
    gc202 = rules[[r.CODE for r in RULES].index("GC202")]
    assert gc202["fullDescription"]["text"].startswith("The residual crossing each cut")


def test_finding_without_a_source_line_points_at_the_factory():
    """A warning with no node: located at ``def skip_connection`` in the fixture file."""
    model = spec(VIOLATION)
    found = Diagnostic("GC302", "layer-identity-lost", "renumbered", severity="warning")
    (run,) = _sarif(Report(model=model, num_layers=8, mode="verify", diagnostics=[found]))["runs"]
    (result,) = run["results"]
    assert result["level"] == "warning"
    physical = result["locations"][0]["physicalLocation"]
    lines = (ROOT / "fixtures/violations.py").read_text(encoding="utf-8").splitlines()
    assert lines[physical["region"]["startLine"] - 1].startswith("def skip_connection(")


def _parse(text: str) -> tuple[list[str], list[list[list[str]]], list[str]]:
    """The headings, the tables (rows of cells, the header row first) and the list
    items of a Markdown text, as the CommonMark parser with tables reads it."""
    headings, tables, items = [], [], []
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            headings.append(tokens[i + 1].content)
        elif token.type == "table_open":
            tables.append([])
        elif token.type == "tr_open":
            tables[-1].append([])
        elif token.type in ("th_open", "td_open"):
            tables[-1][-1].append(tokens[i + 1].content)
        elif token.type == "list_item_open":
            items.append(tokens[i + 2].content)
    return headings, tables, items


def test_markdown_of_a_violation_tables_the_cut_and_its_crossing_set():
    report = verify(VIOLATION, (4,))
    headings, tables, items = _parse(render(report, "markdown"))
    assert "FAIL" in headings[0]
    cuts, crossing = tables
    assert cuts[0] == ["cut", "verdict", "codes", "activations crossing"]
    ((position, verdict, codes, wire),) = cuts[1:]
    assert (position, verdict, codes) == ("4", "FAIL", "GC201")
    assert wire.count("bfloat16") == 2 and "embedding" in wire
    assert crossing[0][:3] == ["value", "role", "dtype"]
    assert len(crossing) - 1 == len(report.cut(4).crossing)
    roles = {row[0]: row[1] for row in crossing[1:]}
    assert roles["embedding"] == "activation"
    assert "What crosses cut 4" in headings
    (item,) = items
    assert item.startswith("**GC201**") and "Fix:" in item and "fixtures/reference.py:184" in item


def test_markdown_of_the_passing_twin():
    headings, tables, items = _parse(render(verify(TWIN, (4,)), "markdown"))
    assert "PASS" in headings[0]
    ((_, row),) = tables
    assert row[:3] == ["4", "PASS", "-"]
    assert items == [] and not any("What crosses" in h for h in headings)


def test_markdown_of_a_map_has_a_row_per_boundary():
    report = cut_map(VIOLATION)
    _, tables, items = _parse(render(report, "markdown"))
    rows = tables[0][1:]
    assert [(int(r[0]), r[1]) for r in rows] == [
        (c.position, c.verdict.upper()) for c in report.cuts
    ]
    first = next(c.position for c in report.cuts if c.verdict == "fail")
    assert len(tables[1]) - 1 == len(report.cut(first).crossing)
    assert sum("Fix:" in item for item in items) == 1  # once per code


def test_markdown_shows_the_first_findings_and_counts_the_rest():
    found = [
        Diagnostic("GC202", "boundary-not-bf16", f"cut {i} | fp32", cut=i, source=f"m.py:{i}: x")
        for i in range(13)
    ]  # distinct source lines: not grouped
    text = render(Report(model="m.py:f", num_layers=13, mode="map", diagnostics=found), "markdown")
    _, _, items = _parse(text)
    assert len(items) == 11 and "3 more" in items[-1]
    assert "cut 0 | fp32" in items[0]


@pytest.mark.parametrize("fmt", ["sarif", "markdown"])
@pytest.mark.parametrize("command", ["plan", "gate"])
def test_refuses_plan_and_gate_before_any_export(cli, command, fmt):
    plan = ["--stages", "2"] if command == "plan" else ["--cuts", "1"]
    code, out, err = cli(command, "no/such/model.py:f", *plan, "--format", fmt)
    assert code == 2
    if fmt == "sarif":  # the error as a SARIF log whose invocation did not succeed
        (invocation,) = json.loads(out)["runs"][0]["invocations"]
        assert invocation["executionSuccessful"] is False
    else:
        assert out == ""
    assert err.count("\n") == 1
    assert f"--format {fmt} does not render graphcheck {command}" in err


# Two-layer variants of the fixtures, as a user's model file (an export each: kept small).
USER_MODELS = """
import sys
sys.path.insert(0, {fixtures!r})
from reference import Config, reference
from violations import SkipDecoder, _lm


def small_reference():
    return reference(2)


def small_skip_connection():
    return _lm(SkipDecoder, Config(num_hidden_layers=2))
"""

USER_TESTS = """
from graphcheck.pytest_plugin import assert_cuts

MODELS = {models!r}


def test_reference(graphcheck_assert_cuts):
    report = graphcheck_assert_cuts(MODELS + ":small_reference", cuts=[1])
    assert report.verdict == "pass"


def test_skip_connection(graphcheck_assert_cuts):
    graphcheck_assert_cuts(MODELS + ":small_skip_connection", cuts=[1])


def test_bad_cut_is_an_error_not_a_pass():
    assert_cuts(MODELS + ":small_reference", cuts=[99])
"""


def test_pytest_plugin_fails_a_user_test_with_the_report(pytester):
    """One in-process run: the fixture comes from the ``pytest11`` entry point (the
    user's file never names the plugin), the violation fails with its rule code and
    text report, and an unprovable plan raises graphcheck's own error."""
    models = pytester.makepyfile(user_models=USER_MODELS.format(fixtures=str(ROOT / "fixtures")))
    pytester.makepyfile(test_user=USER_TESTS.format(models=str(models)))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest")
    result.assert_outcomes(passed=1, failed=2)
    failures = {r.head_line: r.longreprtext for r in result.reprec.getreports() if r.failed}
    skip = failures["test_skip_connection"]
    assert "AssertionError: graphcheck: the cuts are not proven (GC201)" in skip
    assert "GC201 extra-activation-crosses-cut" in skip and "verdict: FAIL" in skip
    assert "UsageError" in failures["test_bad_cut_is_an_error_not_a_pass"]


def test_pre_commit_hook_runs_the_projects_checks():
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert (hook["id"], hook["entry"], hook["language"]) == (
        "graphcheck",
        "graphcheck check",
        "python",
    )
    assert hook["pass_filenames"] is False
    changed = ("models/llama.py", "pyproject.toml", "graphcheck.toml", "graphcheck.lock")
    assert all(re.search(hook["files"], path) for path in changed)
    assert not any(re.search(hook["files"], path) for path in ("a.md", "graphcheck.lock.bak"))


def test_example_workflow_uploads_the_sarif_and_posts_the_markdown():
    workflow = yaml.safe_load((ROOT / "examples/github-workflow.yml").read_text(encoding="utf-8"))
    (job,) = workflow["jobs"].values()
    steps = job["steps"]
    runs = "\n".join(step.get("run", "") for step in steps)
    assert (
        "--index-url https://download.pytorch.org/whl/cpu"
        in runs.split("pip install graphcheck")[0]
    )
    assert "graphcheck check --locked --format sarif --output graphcheck.sarif" in runs
    assert "graphcheck check --locked --format markdown --output graphcheck.md" in runs
    (upload,) = [
        s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload-sarif@")
    ]
    assert upload["with"]["sarif_file"] == "graphcheck.sarif"
    assert steps.index(upload) > next(i for i, s in enumerate(steps) if "sarif" in s.get("run", ""))
    assert any("graphcheck.md" in s.get("run", "") and "comment" in s["run"] for s in steps)
    assert workflow["permissions"]["security-events"] == "write"
