"""The model options, declared once (graphcheck/options.py): the flags, the
configuration keys, the API keywords and the README's table all come from it."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest

from graphcheck import options
from graphcheck.cli import build_parser
from graphcheck.errors import UsageError
from graphcheck.model.session import Session
from graphcheck.options import OPTIONS, Form, Group
from graphcheck.project.config import CHECK_KEYS, load_config


def test_the_configuration_page_is_the_declarations():
    from graphcheck.console.reference import configuration_markdown
    from graphcheck.project.config import CHECK_KEY_HELP

    page = configuration_markdown()
    assert options.reference_markdown() in page
    assert all(f"| `{key}` |" in page for key in CHECK_KEY_HELP)
    assert set(CHECK_KEYS) == {*CHECK_KEY_HELP, *options.MODEL_KEYS}  # every key documented


def test_the_cli_reference_page_names_every_flag_of_every_command():
    import argparse

    from graphcheck.console.reference import cli_markdown

    page = cli_markdown()
    subparsers = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    for name, parser in subparsers.choices.items():
        assert f"## `graphcheck {name}`" in page
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for flag in action.option_strings:
                assert f"`{flag}" in page or f", {flag}" in page, (name, flag)


MODEL = [o for o in OPTIONS if o.configurable]


def test_every_model_option_is_a_flag_of_verify_and_map_with_its_api_keyword():
    parser = build_parser()
    for command in ("verify", "map"):
        args = parser.parse_args([command, "m.py:f"])
        parsed = options.from_args(args, *options.MODEL_GROUPS)
        assert set(parsed) == {o.keyword for o in MODEL}
        assert parsed["stand_ins"] is True and parsed["program_mode"] == "train"
        assert parsed["settings"] is None and parsed["docs"] is None


def test_a_flag_given_reaches_its_api_keyword():
    argv = ["verify", "m.py:f", "--set", "num_hidden_layers=2", "--inputs", "a,b",
            "--docs", "3,4", "--no-stand-ins", "--mode", "eval", "--token-local", "ns::op",
            "--tokens", "7"]  # fmt: skip
    parsed = options.from_args(build_parser().parse_args(argv), *options.MODEL_GROUPS)
    assert parsed["settings"] == {"num_hidden_layers": 2}
    assert parsed["inputs"] == ["a", "b"] and parsed["docs"] == (3, 4)
    assert parsed["stand_ins"] is False and parsed["program_mode"] == "eval"
    assert parsed["token_local_ops"] == ("ns::op",) and parsed["tokens"] == 7


def test_the_api_keywords_are_the_fields_of_model_options_with_their_defaults():
    fields = inspect.signature(options.ModelOptions).parameters
    assert list(fields) == [o.keyword for o in MODEL]
    parser = build_parser()
    args = parser.parse_args(["verify", "m.py:f"])
    absent = options.from_args(args, *options.MODEL_GROUPS)
    assert absent == options.ModelOptions().keywords()


def test_a_session_takes_model_options_or_their_keywords():
    given = options.ModelOptions.of(docs=(5, 6), program_mode="eval")
    by_value = Session("fixtures/reference.py:reference", given)
    by_keywords = Session("fixtures/reference.py:reference", docs=(5, 6), program_mode="eval")
    assert by_value.options == by_keywords.options == given
    assert by_value.batch == by_keywords.batch and str(by_value.program_mode) == "eval"


def test_an_unknown_api_keyword_names_the_nearest_option():
    with pytest.raises(UsageError, match="unknown model option 'setings'; did you mean settings"):
        Session("fixtures/reference.py:reference", setings={"a": 1})


def test_a_fresh_process_rebuilds_from_the_options_alone():
    """The records a fresh process rebuilds the model from hold the options, not a copy
    of each: adding an option changes neither."""
    from graphcheck.gate.runner import Recipe
    from graphcheck.stages.build import StageRequest

    keywords = {o.keyword for o in MODEL} - {"layers"}  # StageRequest.layers: the stage's
    for record in (Recipe, StageRequest):
        names = {f.name for f in dataclasses.fields(record)}
        assert "options" in names and not names & keywords, record
    session = Session("fixtures/reference.py:reference", kernels="fixtures/kernels/example.py")
    rebuilt = session.rebuild_options()
    assert Path(rebuilt.kernels).is_absolute() and rebuilt.inputs_from == "transformers"


def test_every_option_is_a_configuration_key_read_into_its_api_keyword(tmp_path: Path):
    assert set(options.MODEL_KEYS) <= set(CHECK_KEYS)
    model = tmp_path / "m.py"
    model.write_text("def f():\n    return None\n")
    (tmp_path / "graphcheck.toml").write_text(
        '[[checks]]\nmodel = "m.py:f"\ncuts = [1]\nset = { num_hidden_layers = 2 }\n'
        'mode = "eval"\ntoken_local = ["ns::op"]\ndocs = [3, 4]\nstand_ins = false\n'
    )
    (check,) = load_config(tmp_path / "graphcheck.toml").checks
    assert check.options == {
        "settings": {"num_hidden_layers": 2}, "program_mode": "eval",
        "token_local_ops": ["ns::op"], "docs": (3, 4), "stand_ins": False,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [("mode", "test", "use one of train, eval"), ("tokens", True, "is not an integer"),
     ("docs", [3, -1], "give non-negative integers")],
)  # fmt: skip
def test_a_bad_configuration_value_is_one_usage_error_naming_the_key(key, value, said):
    with pytest.raises(UsageError, match=said) as err:
        options.config_value(key, value, Path("."), "[[checks]] 1")
    assert f"[[checks]] 1: {key}" in str(err.value)


def test_every_gate_option_is_a_flag_of_gate_and_a_keyword_of_the_gate_api():
    from graphcheck.gate.run import gate

    gate_options = [o for o in OPTIONS if o.group is Group.GATE]
    argv = ["gate", "m.py:f", "--train", "--in-process", "--docs", "5,7", "--head", "lm_head",
            "--seed", "3"]  # fmt: skip
    parsed = options.from_args(build_parser().parse_args(argv), Group.GATE)
    assert set(parsed) == {o.keyword for o in gate_options}
    assert set(parsed) <= set(inspect.signature(gate).parameters)
    assert parsed["train"] is True and parsed["mode"] == "graph" and parsed["docs"] == (5, 7)
    assert parsed["seed"] == 3
    absent = options.from_args(build_parser().parse_args(["gate", "m.py:f"]), Group.GATE)
    assert absent["mode"] == "processes" and absent["docs"] == options.GATE_DOCS
    assert absent["seed"] == 0
    assert not {o.key for o in gate_options} & set(options.MODEL_KEYS)  # not configuration
    with pytest.raises(UsageError, match="not allowed with"):  # --head or --output-fqn
        build_parser().parse_args(["gate", "m.py:f", "--head", "a", "--output-fqn", "b"])


def test_every_form_is_declared_by_some_option():
    assert {o.form for o in OPTIONS} == set(Form)
