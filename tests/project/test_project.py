"""The project configuration and ``graphcheck check``: found like ruff's, validated before
any export (each bad configuration is exit 2 and one line, before a model is built),
``-k`` selection, relative paths, the worst exit status, and the formats of a check.

The lock and its diff are in tests/project/test_lock.py.
"""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest
from harness import ROOT
from markdown_it import MarkdownIt

from graphcheck.project.config import Plan, PlanKind, find_config, load_config

FIXTURE = ROOT / "fixtures/lockable.py"


def _project(tmp_path, body: str, name: str = "pyproject.toml"):
    """``tmp_path`` holding a copy of the lockable fixture and a configuration."""
    shutil.copy(FIXTURE, tmp_path / "lockable.py")
    (tmp_path / name).write_text(textwrap.dedent(body), encoding="utf-8")
    return tmp_path


GOOD = """\
    [tool.graphcheck]
    [[tool.graphcheck.checks]]
    name = "small"
    model = "lockable.py:lockable"
    cuts = [[2], [3, 5]]
    stages = 2
    layout = "E|t*3|t*3|L"
"""


def test_config_is_found_from_a_subfolder_and_paths_are_relative_to_it(tmp_path, monkeypatch):
    root = _project(tmp_path, GOOD)
    (root / "sub/deeper").mkdir(parents=True)
    monkeypatch.chdir(root / "sub/deeper")
    assert find_config() == root / "pyproject.toml"
    config = load_config()
    (check,) = config.checks
    assert check.model == f"{root / 'lockable.py'}:lockable"  # not under the working folder
    assert [p.name for p in check.plans] == ["cuts 2", "cuts 3,5", "stages 2", "layout E|t*3|t*3|L"]
    assert config.lock_path == root / "graphcheck.lock"
    monkeypatch.chdir(root)
    assert load_config().checks[0].model == "lockable.py:lockable"


def test_graphcheck_toml_wins_over_pyproject_and_needs_no_tool_table(tmp_path, monkeypatch):
    root = _project(tmp_path, GOOD)
    (root / "graphcheck.toml").write_text(
        '[[checks]]\nname = "own"\nmodel = "lockable.py:lockable"\n', encoding="utf-8"
    )
    monkeypatch.chdir(root)
    config = load_config()
    assert config.path.name == "graphcheck.toml"
    assert [c.name for c in config.checks] == ["own"]
    assert config.checks[0].plans == (Plan(PlanKind.DECLARED),)


def test_pyproject_without_the_table_is_passed_over(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 100\n", "utf-8")
    (tmp_path / "inner").mkdir()
    _project(tmp_path / "inner", "[tool.other]\n")
    monkeypatch.chdir(tmp_path / "inner")
    with pytest.raises(Exception, match=r"no graphcheck\.toml or pyproject\.toml"):
        find_config()


BAD = [
    ("[tool.graphcheck]\nchecks = []\n", "give the models to check as [[checks]] tables"),
    ("[tool.graphcheck]\nselct = ['GC2']\n", "unknown key 'selct'; did you mean 'select'?"),
    (
        "[[tool.graphcheck.checks]]\nmodel = 'lockable.py:lockable'\nstgaes = 2\n",
        "checks[0]: unknown key 'stgaes'; did you mean 'stages'?",
    ),
    (
        "[[tool.graphcheck.checks]]\nmodel = 'lockable.py:lockable'\nallow_fp23 = ['x']\n",
        "did you mean 'allow_fp32'?",
    ),
    ("[[tool.graphcheck.checks]]\ncuts = [2]\n", "checks[0]: no model"),
    (
        "[[tool.graphcheck.checks]]\nmodel = 'missing.py:f'\n",
        "missing.py: no such file (relative paths are relative to",
    ),
    ("[[tool.graphcheck.checks]]\nmodel = 'lockable.py'\n", "is not 'path/to/file.py:factory'"),
    (
        "[[tool.graphcheck.checks]]\nmodel = 'lockable.py:lockable'\ncuts = [2, 'x']\n",
        "cuts = [2, 'x']: give non-negative integers",
    ),
    (
        "[[tool.graphcheck.checks]]\nmodel = 'lockable.py:lockable'\nstages = true\n",
        "stages = [True]: give non-negative integers",
    ),
    (
        "[[tool.graphcheck.checks]]\nmodel = 'lockable.py:lockable'\nmode = 'training'\n",
        "mode = 'training': use one of train, eval",
    ),
    (
        "[[tool.graphcheck.checks]]\nmodel = 'lockable.py:lockable'\nset = 4\n",
        "set = 4 is not a table",
    ),
    (
        "[[tool.graphcheck.checks]]\nmodel = 'lockable.py:lockable'\nignore = ['GC999']\n",
        "no rule code 'GC999'",
    ),
    (
        "[[tool.graphcheck.checks]]\nmodel = 'lockable.py:lockable'\n"
        "[[tool.graphcheck.checks]]\nmodel = 'lockable.py:lockable'\n",
        "two checks are named 'lockable.py:lockable'; give each a unique name",
    ),
    ("[tool.graphcheck\n", "not valid TOML"),
    (
        "[[tool.graphcheck.checks]]\nmodel = 'lockable.py:lockable'\n"
        "stage_builder = 'keep_index'\n",
        "checks[0]: stage_builder: unknown stage builder 'keep_index' (did you mean keep-index?)",
    ),
]


@pytest.mark.parametrize(("body", "message"), BAD, ids=[m[:30] for _, m in BAD])
def test_bad_configuration_is_one_line_and_exit_2_before_any_export(
    tmp_path, monkeypatch, cli, body, message
):
    _project(tmp_path, body)
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("check")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("graphcheck: error: ")
    assert message in err
    assert "Traceback" not in err


def test_usage_errors_of_the_commands(tmp_path, monkeypatch, cli):
    _project(tmp_path, GOOD)
    monkeypatch.chdir(tmp_path)
    cases = {
        ("check", "-k", "nothing"): "-k 'nothing' selects no check of pyproject.toml: small",
        ("check", "--update"): "add --locked",
        ("check", "--locked"): "run graphcheck lock first",
        ("check", "--config", "nowhere.toml"): "--config nowhere.toml: no such file",
        ("check", "--format", "html"): "invalid choice: 'html'",
    }
    for argv, message in cases.items():
        code, _, err = cli(*argv)
        assert (code, err.count("\n")) == (2, 1), (argv, err)
        assert message in err, (argv, err)
    assert not (tmp_path / "graphcheck.lock").exists()


def test_no_configuration_says_where_it_looked(tmp_path, monkeypatch, cli):
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("check")
    assert code == 2 and "pass --config FILE" in err


WORST = """\
    [[tool.graphcheck.checks]]
    name = "proven"
    model = "lockable.py:lockable"
    cuts = [3]
    require_stage_programs = false  # not pipeline-aware: its cuts alone are proven

    [[tool.graphcheck.checks]]
    name = "skip"
    model = "{violations}:skip_connection"
    cuts = [4]

    [[tool.graphcheck.checks]]
    name = "skip-ignored"
    model = "{violations}:skip_connection"
    cuts = [4]
    ignore = ["GC2"]
    require_stage_programs = false  # not pipeline-aware either
"""


def test_check_runs_every_model_and_exits_with_the_worst(tmp_path, monkeypatch, cli):
    body = WORST.format(violations=ROOT / "fixtures/violations.py")
    root = _project(tmp_path, body)
    monkeypatch.chdir(root)
    code, out, err = cli("check", "--format", "json")
    assert code == 1, err
    data = json.loads(out)
    assert (data["mode"], data["verdict"], data["lock"]) == ("check", "fail", None)
    verdicts = {c["name"]: (c["verdict"], [p["plan"] for p in c["plans"]]) for c in data["checks"]}
    assert verdicts == {
        "proven": ("pass", ["cuts 3"]),
        "skip": ("fail", ["cuts 4"]),
        "skip-ignored": ("pass", ["cuts 4"]),  # the check's own ignore, passed to the API
    }
    skip = data["checks"][1]["plans"][0]["report"]
    assert {d["code"] for d in skip["diagnostics"]} == {"GC201"}
    ignored = data["checks"][2]["plans"][0]["report"]["ignored"]
    assert [i["code"] for i in ignored] == ["GC201"]  # listed, not dropped


def test_a_model_that_cannot_be_built_is_exit_2_and_the_others_still_run(
    tmp_path, monkeypatch, cli
):
    root = _project(
        tmp_path,
        """\
        [[tool.graphcheck.checks]]
        name = "proven"
        model = "lockable.py:lockable"
        cuts = [3]
        require_stage_programs = false

        [[tool.graphcheck.checks]]
        name = "broken"
        model = "lockable.py:no_such_factory"
        cuts = [3]
        """,
    )
    monkeypatch.chdir(root)
    code, out, _ = cli("check")
    assert code == 2
    assert "error: lockable.py has no callable 'no_such_factory'" in out
    assert "  cuts 3: PASS (1/1 cuts proven; stage programs not proven" in out  # still ran
    code, out, _ = cli("check", "-k", "brok*")  # a glob on the name: that check alone
    assert code == 2 and "== broken (lockable.py:no_such_factory) ==" in out
    assert "== proven" not in out and out.splitlines()[-1].endswith(
        "0/0 plans proven · 1 could not run"
    )
    code, out, _ = cli("check", "-k", "broken", "--format", "markdown")
    tokens = MarkdownIt("commonmark").enable("table").parse(out)
    cells = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "td_open"]
    assert code == 2 and cells[:3] == ["broken", "-", "ERROR"]
    assert "no callable 'no_such_factory'" in cells[3]


EXAMPLE = ROOT / "examples/graphcheck.toml"


def test_the_example_configuration_loads_with_three_kinds_of_model(monkeypatch):
    monkeypatch.chdir(ROOT)
    config = load_config(EXAMPLE)
    models = {c.name: (c.model, [p.name for p in c.plans]) for c in config.checks}
    assert models == {
        "llama-small": ("hf:llama", ["stages 2", "stages 4"]),
        "reference": (
            "fixtures/reference.py:reference",
            ["cuts 4", "cuts 2,4,6", "layout E|t*4|t*4|L"],
        ),
        "llama-3.1-8b": ("hf:fixtures/configs/llama-3.1-8b.json", ["stages 4"]),
    }
    assert config.checks[0].options == {"settings": {"num_hidden_layers": 4}}


def test_check_of_three_models_gives_valid_sarif_and_markdown(monkeypatch):
    import jsonschema

    from graphcheck.project.check import run_project
    from graphcheck.report import render

    monkeypatch.chdir(ROOT)
    result = run_project(EXAMPLE)
    assert [run.check.name for run in result.runs] == ["llama-small", "reference", "llama-3.1-8b"]
    assert result.exit_code == 0 and len(result.reports) == 6
    schema = json.loads((ROOT / "tests/data/sarif-schema-2.1.0.json").read_text("utf-8"))
    log = json.loads(render(result, "sarif"))
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert not [e.message for e in validator.iter_errors(log)]
    assert log["runs"][0]["properties"] == {"mode": "check", "verdict": "pass"}
    tokens = MarkdownIt("commonmark").enable("table").parse(render(result, "markdown"))
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings[0] == "✅ graphcheck check: PASS"
    cells = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "td_open"]
    rows = [cells[i : i + 4] for i in range(0, 24, 4)]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("llama-small", "stages 2", "PASS"),
        ("llama-small", "stages 4", "PASS"),
        ("reference", "cuts 4", "PASS"),
        ("reference", "cuts 2,4,6", "PASS"),
        ("reference", "layout E|t*4|t*4|L", "PASS"),
        ("llama-3.1-8b", "stages 4", "PASS"),
    ]
    assert sum(h.endswith("graphcheck verify: PASS") for h in headings) == 6


def test_k_matches_the_name_or_the_spec_by_substring_or_glob():
    from graphcheck.project.config import Check

    check = Check("llama-small", "hf:llama")
    assert [check.matches(p) for p in ("small", "hf:ll", "llama-*", "hf:*", "*8b", "gpt")] == [
        True,
        True,
        True,
        True,
        False,
        False,
    ]


def test_a_check_without_a_plan_on_a_model_without_ranges_says_what_to_add(
    tmp_path, monkeypatch, cli
):
    _project(tmp_path, "[[tool.graphcheck.checks]]\nmodel = 'lockable.py:lockable'\n")
    monkeypatch.chdir(tmp_path)
    code, out, _ = cli("check")
    assert code == 2
    assert (
        "error: check 'lockable.py:lockable' gives no plan and the model declares no "
        "pipeline_layer_ranges: add cuts, stages or layout to it in the configuration"
    ) in out
