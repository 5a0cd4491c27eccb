"""Findings a person can act on: grouped, explained, and ignorable without going silent.

* a finding repeated at every layer or cut is shown once with what it covers, in the
  text and the markdown report; JSON keeps every diagnostic and adds ``groups``;
* ``map`` text gives each illegal boundary's first finding with its message;
* ``--select`` / ``--ignore`` (and the API's ``select=`` / ``ignore=``) and
  ``# graphcheck: ignore[CODE]`` comments keep findings out of the verdict, but the
  report lists them; an unknown code is exit 2 before anything is built; ignoring
  never turns a run that could not verify into a pass;
* GC205's fix names ``--set tie_word_embeddings=false`` for an ``hf:`` spec and the
  model code otherwise; GC201 says where a skip value is made and where it is read.

The models are two- to four-layer variants of the fixtures, written into ``tmp_path``
as a user's model file (an export each: kept small).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from harness import NO_STAGES
from harness import RuleExplorer as Explorer  # no stage programs: findings and ignores

from graphcheck import api
from graphcheck.report import render

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def verify(model, **options):
    """:func:`graphcheck.api.verify` without stage programs (the tests here are about
    findings and ignores)."""
    return api.verify(model, stage_builder=NO_STAGES, **options)


MODELS = """
import sys
sys.path.insert(0, {fixtures!r})
from dataclasses import replace
from reference import Config, reference
from violations import (
    NO_WINDOW, SdpaAttention, SdpaLayer, SkipDecoder, StaleDecoder, _decoder, _lm,
)


class LeakyAttention(SdpaAttention):
    def forward(self, h, cos, sin, *varlen):
        return self.attend(h, cos, sin, None){mark}


class LeakyLayer(SdpaLayer):
    attention_class = LeakyAttention


def leaky():{unused}
    return _lm(_decoder(LeakyLayer), replace(NO_WINDOW, num_hidden_layers=2))


def tied():
    model = reference(4)
    model.lm_head.weight = model.model.embed_tokens.weight
    return model


def skip():
    return _lm(SkipDecoder, Config(num_hidden_layers=4))


def stale():
    return _lm(StaleDecoder, Config(num_hidden_layers=2))


def raises():
    raise RuntimeError("the factory ran")
"""


def _models(folder: Path, mark: str = "", unused: str = "") -> Path:
    path = folder / "models.py"
    path.write_text(MODELS.format(fixtures=str(FIXTURES), mark=mark, unused=unused))
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    return _models(tmp_path_factory.mktemp("findings"))


def _line(path: Path, text: str) -> int:
    """The number of the line of ``path`` that holds ``text``."""
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, start=1) if text in line)


def test_repeated_finding_is_one_group_per_layer_range(cli, models):
    code, out, _ = cli("verify", f"{models}:leaky", "--cuts", "1")
    assert code == 1
    assert "GC401 varlen-metadata-not-consumed · layers 0-1 · 2 findings" in out
    assert out.count("attention without a document mask") == 1  # one message per group
    assert re.search(rf"models\.py:{_line(models, 'return self.attend')}: return self", out)


def test_repeated_cut_finding_groups_in_text_markdown_and_json(models):
    report = verify(f"{models}:tied", cuts=[1, 2, 3])
    assert len(report.diagnostics) == 3  # one per cut: nothing dropped
    head = "GC205 parameter-shared-across-stages · cuts 1-3 · stages 1-3 · 3 findings"
    text = render(report, "text")
    assert head in text and text.count("is read on both sides") == 1
    markdown = render(report, "markdown")
    assert f"- **GC205** {head.removeprefix('GC205 ')}" in markdown
    data = json.loads(render(report, "json"))
    assert len(data["diagnostics"]) == 3
    assert [(g["code"], g["count"], g["cuts"]) for g in data["groups"]] == [("GC205", 3, [1, 2, 3])]
    # not an hf: spec: the fix is in the model code
    assert "untie the embeddings in the model code" in text and "--set" not in text


def test_ignore_keeps_findings_out_of_the_verdict_but_lists_them(models):
    # with its stage programs: the head reads the tied weight under the other name
    report = api.verify(f"{models}:tied", cuts=[1, 2, 3], ignore=["GC2"])
    assert (report.verdict, report.exit_code, report.diagnostics) == ("pass", 0, [])
    text = render(report, "text")
    assert "verdict: PASS (3/3 cuts proven; 4 stage programs, 0 differences; 3 ignored)" in text
    assert text.rstrip().endswith("3 findings ignored (GC205 ×3 by --ignore)")
    data = json.loads(render(report, "json"))
    assert [(d["code"], d["cut"], d["ignored_by"]) for d in data["ignored"]] == [
        ("GC205", k, "--ignore") for k in (1, 2, 3)
    ]
    assert "3 findings ignored" in render(report, "markdown")


def test_select_reports_only_the_family_and_says_what_it_left_out(cli, models):
    code, out, _ = cli("verify", f"{models}:leaky", "--cuts", "1", "--select", "GC2,gc5")
    assert code == 0
    assert "diagnostics: none" in out
    assert out.rstrip().endswith("2 findings ignored (GC401 ×2 not in --select)")


@pytest.mark.parametrize(
    ("flag", "value", "nearest"),
    [("--ignore", "GC59", "GC501"), ("--select", "GC2O1", "GC201"), ("--ignore", "E501", None)],
)
def test_unknown_code_is_exit_2_before_the_model_is_built(cli, models, flag, value, nearest):
    code, out, err = cli("verify", f"{models}:raises", "--cuts", "1", flag, value)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "the factory ran" not in err
    assert f"{flag} {value}: no graphcheck code starts with {value}" in err
    assert nearest is None or f"did you mean {nearest}?" in err


def test_unknown_code_from_the_api_is_a_usage_error_before_the_build(models):
    from graphcheck.errors import UsageError

    with pytest.raises(UsageError, match="did you mean GC205"):  # a swap of two digits
        Explorer(f"{models}:raises", ignore="GC250")


def test_ignoring_every_code_never_turns_a_failed_run_into_a_pass(cli, models):
    code, out, err = cli("verify", f"{models}:raises", "--cuts", "1", "--ignore", "GC")
    assert (code, out) == (2, "") and "the factory ran" in err


def test_inline_ignore_flips_the_exit_status_and_says_so(cli, tmp_path):
    path = _models(
        tmp_path,
        mark="  # graphcheck: ignore[GC401]",
        unused="  # graphcheck: ignore[GC999]",
    )
    code, out, _ = cli("verify", f"{path}:leaky", "--cuts", "1")
    assert code == 0, out
    comment = f"models.py:{_line(path, 'ignore[GC401]')}"
    assert re.search(
        rf"2 findings ignored \(GC401 ×2 by # graphcheck: ignore at \S*{comment}\)", out
    )
    unused = f"models.py:{_line(path, 'ignore[GC999]')}"
    assert re.search(rf"note: # graphcheck: ignore\[GC999\] at \S*{unused} matched no finding", out)
    assert "GC999: not a graphcheck code" in out


def test_map_lists_each_illegal_boundarys_first_finding(cli, models):
    code, out, _ = cli("map", f"{models}:skip")
    assert code == 1
    block = out.split("first finding at each illegal boundary:\n", 1)[1]
    # cuts 1 and 2 carry the embedding output next to the residual: one finding for both
    assert block.startswith("  cuts 1-2: GC201 2 activations cross cut 1; besides the residual")
    assert re.search(r"\n  cut 3: GC201 2 activations cross cut 3", block)
    # the skip value: where it is made and where the right side reads it
    reference = FIXTURES / "reference.py"
    made = _line(reference, "x = self.embed_tokens(input_ids)")
    read = _line(reference, "h = self.run_layers(")
    assert re.search(rf"made at \S*reference\.py:{made}, read across the cut by \w+ in ", block)
    assert re.search(rf"at \S*reference\.py:{read}: h = self\.run_layers", block)
    assert out.rstrip().endswith("legal cuts: 0, 4")


def test_not_layer_output_says_where_the_stale_value_is_made_and_read(models):
    (found,) = verify(f"{models}:stale", cuts=[1]).diagnostics
    reference = FIXTURES / "reference.py"
    made = _line(reference, "x = self.embed_tokens(input_ids)")
    read = _line(reference, "h = self.input_layernorm(x)")
    assert found.code == "GC204"
    assert re.search(
        rf"made at \S*reference\.py:{made}, read across the cut by \w+ in "
        rf"model\.layers\.1\.input_layernorm at \S*reference\.py:{read}: ",
        found.message,
    )


def test_map_and_plan_treat_a_boundary_illegal_only_by_an_ignored_code_as_legal(models):
    explorer = Explorer(f"{models}:skip", ignore=["GC201"])
    cut_map = explorer.map()
    assert cut_map.legal_cuts() == [0, 1, 2, 3, 4] and cut_map.exit_code == 0
    assert "(GC201 ignored)" in render(cut_map, "text")
    assert [c["ignored"] for c in cut_map.as_dict()["cuts"]] == [[], *[["GC201"]] * 3, []]
    plan = explorer.balanced(2)
    assert plan.exit_code == 0 and plan.plan.cuts[0] in (1, 2, 3)
    assert plan.legal_by_ignore == [{"position": k, "codes": ["GC201"]} for k in (1, 2, 3)]
    assert "legal only because GC201 is ignored: 1, 2, 3" in render(plan, "text")


def test_tied_embeddings_of_an_hf_spec_name_the_set_flag(cli):
    code, out, _ = cli(
        "verify", "hf:llama", "--set", "tie_word_embeddings=true", "--set",
        "num_hidden_layers=2", "--cuts", "1",
    )  # fmt: skip
    assert code == 1 and "GC205" in out
    assert "untie the embeddings with --set tie_word_embeddings=false" in out
