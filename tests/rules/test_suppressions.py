"""Ignored findings keep their place in every output and say where the ignore came from.

* ``--format sarif`` lists each ignored finding as a result with ``suppressions``:
  ``inSource`` (located at the comment) for a ``# graphcheck: ignore[CODE]`` comment,
  ``external`` for ``--ignore`` / ``--select`` and for a configuration's lists, each with
  the ignore as written for its justification; the log validates against the SARIF 2.1.0
  schema shipped in tests/data;
* a finding ignored by a configuration's ``ignore`` is labelled by that configuration
  (``[tool.graphcheck] ignore``, ``graphcheck.toml ignore``) in text, JSON and SARIF,
  ``check``'s composed outputs included; the API's plain ``ignore=`` still says ``--ignore``;
* GC501's fix names the API's ``allow_fp32=`` next to ``--allow-fp32``.

One small model file (two layers, written into ``tmp_path``): its attention drops the
document mask (GC401, ignored by a comment) and its embeddings are tied (GC205, left to
the flags or the configuration). One export for the API and SARIF tests, one for ``check``.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import jsonschema
import pytest
from harness import RuleExplorer as Explorer  # no stage programs: suppressions

from graphcheck.project.check import run_project
from graphcheck.report import render
from graphcheck.rules.suppress import Suppression

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "tests/data/sarif-schema-2.1.0.json").read_text(encoding="utf-8"))

MODELS = """
import sys
sys.path.insert(0, {fixtures!r})
from dataclasses import replace
from violations import NO_WINDOW, Fp32RMSNorm, SdpaAttention, SdpaLayer, _decoder, _lm


class LeakyAttention(SdpaAttention):
    def forward(self, h, cos, sin, *varlen):
        return self.attend(h, cos, sin, None)  # graphcheck: ignore[GC401]


class LeakyLayer(SdpaLayer):
    attention_class = LeakyAttention


def leaky_tied():
    config = replace(NO_WINDOW, num_hidden_layers=2)
    model = _lm(_decoder(LeakyLayer), config)
    model.lm_head.weight = model.model.embed_tokens.weight
    norm = Fp32RMSNorm(config.hidden_size, config.rms_eps)
    model.model.layers[1].post_attention_layernorm = norm
    return model
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("suppressions") / "models.py"
    path.write_text(MODELS.format(fixtures=str(ROOT / "fixtures")))
    return path


@pytest.fixture(scope="module")
def explorer(models) -> Explorer:
    return Explorer(f"{models}:leaky_tied", ignore=["GC2", "GC501"])


def _comment_line(path: Path) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, start=1) if "graphcheck: ignore" in line)


def _valid(text: str) -> dict:
    """The SARIF log ``text``, validated against the schema (every error listed if not)."""
    log = json.loads(text)
    validator = jsonschema.validators.validator_for(SCHEMA)(SCHEMA)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(log)]
    assert not errors, errors
    return log


def _suppressions(log: dict) -> list[tuple[str, str, str]]:
    """``(ruleId, kind, justification)`` of every suppressed result."""
    results = log["runs"][0]["results"]
    return [
        (r["ruleId"], s["kind"], s["justification"]) for r in results for s in r["suppressions"]
    ]


def test_sarif_holds_flag_and_inline_ignores_as_suppressed_results(explorer, models):
    report = explorer.verify([1])
    assert (report.verdict, report.diagnostics) == ("pass", [])
    log = _valid(render(report, "sarif"))
    comment = f"models.py:{_comment_line(models)}"
    found = _suppressions(log)
    assert {("GC205", "external", "--ignore GC2"), ("GC501", "external", "--ignore GC501")} <= set(
        found
    )
    inline = [f for f in found if f[0] == "GC401"]
    assert len(inline) == 2 and all(kind == "inSource" for _, kind, _ in inline)
    assert all(
        re.fullmatch(rf"# graphcheck: ignore\[GC401\] at \S*{comment}", j) for *_, j in inline
    )
    assert len(found) == len(report.ignored) == len(log["runs"][0]["results"])
    result = next(r for r in log["runs"][0]["results"] if r["ruleId"] == "GC401")
    where = result["suppressions"][0]["location"]["physicalLocation"]
    assert where["region"]["startLine"] == _comment_line(models)
    assert where["artifactLocation"]["uri"].endswith("models.py")
    assert result["properties"]["ignored_by"] == "# graphcheck: ignore"
    assert log["runs"][0]["properties"]["verdict"] == "pass"


def test_select_and_a_configuration_table_label_the_ignore_by_its_source(explorer):
    explorer.suppression = Suppression.of(select=["GC4"], selectors_from="graphcheck.toml")
    try:
        report = explorer.verify([1])  # same export and cut analysis: no new export
    finally:
        explorer.suppression = Suppression.of(ignore=["GC2", "GC501"])
    found = _suppressions(_valid(render(report, "sarif")))
    assert ("GC205", "external", "not in graphcheck.toml select GC4") in found
    assert "GC205 ×1 not in graphcheck.toml select" in render(report, "text")
    data = json.loads(render(report, "json"))
    assert {i["code"]: i["ignored_by"] for i in data["ignored"]}["GC205"] == (
        "graphcheck.toml select"
    )


def test_plain_ignore_keyword_is_still_labelled_by_the_flag(explorer):
    text = render(explorer.verify([1]), "text")
    assert re.search(r"GC205 ×1 by --ignore[,)]", text)


def test_an_empty_selectors_from_is_a_usage_error_before_the_build(models):
    from graphcheck.errors import UsageError

    with pytest.raises(UsageError, match="name the configuration table"):
        Explorer(f"{models}:raises_if_built", ignore=["GC2"], selectors_from=" ")


def test_check_labels_a_configuration_ignore_by_the_configuration(models, tmp_path):
    config = tmp_path / "pyproject.toml"
    config.write_text(
        textwrap.dedent(f"""\
        [tool.graphcheck]
        ignore = ["GC205", "GC5"]

        [[tool.graphcheck.checks]]
        name = "leaky"
        model = "{models}:leaky_tied"
        cuts = [1]
        """)
    )
    result = run_project(config)
    assert result.exit_code == 0
    text = render(result, "text")
    assert "GC205 ×1 by [tool.graphcheck] ignore" in text and "by --ignore" not in text
    assert re.search(
        r"cuts 1: PASS \(1/1 cuts proven; 2 stage programs, 0 differences\)\n"
        r" +4 findings ignored \(",
        text,
    )
    found = _suppressions(_valid(render(result, "sarif")))
    assert ("GC205", "external", "[tool.graphcheck] ignore GC205") in found
    assert ("GC501", "external", "[tool.graphcheck] ignore GC5") in found
    assert {kind for code, kind, _ in found if code == "GC401"} == {"inSource"}
    data = json.loads(render(result, "json"))
    ignored = data["checks"][0]["plans"][0]["report"]["ignored"]
    assert {i["code"]: i["ignored_by"] for i in ignored}["GC205"] == "[tool.graphcheck] ignore"


def test_gc501_fix_names_the_api_keyword_next_to_the_flag(explorer):
    (fp32,) = [i.diagnostic for i in explorer.verify([1]).ignored if i.diagnostic.code == "GC501"]
    fqn = "model.layers.1.post_attention_layernorm.weight"
    assert fp32.message.endswith(
        f'or allow it with --allow-fp32 GLOB (allow_fp32=["{fqn}"] in the API)'
    )
