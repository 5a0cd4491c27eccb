"""Every mistake is caught before the export: one line on stderr, exit 2, no traceback.

A table of bad inputs, one or more per flag, run through the in-process command line
with the model build (:meth:`Session._fake`) and the export (:attr:`Explorer.program`)
watched: a mistake that does not need the model is caught before it is built, one that
needs its layer count before it is exported, and only an export failure gets past both
(and adds indented lines locating it). Under ``--format json`` (``sarif``) the error is
also a document on stdout. Then the built-module check of the API (a notebook's fp32
module is one error; a bf16 one with declared carve-outs passes; a stray fp32 parameter
is still GC501), the ``--set`` keys a config folds into others, and the JSON ``source``.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch
from harness import ROOT, spec

from graphcheck import api
from graphcheck.errors import UsageError
from graphcheck.model.hf import build_config
from graphcheck.model.session import Session

REF = spec("reference:reference")
ARGS, BUILD, EXPORT = "args", "build", "export"  # how far a bad input may get

BAD_INPUTS = [
    # (argv, words in the error, how far it gets)
    (["verify", REF, "--cuts", "4,x"], "--cuts '4,x' is not a comma-separated list", ARGS),
    (["verify", REF, "--cuts", ""], "--cuts '' is not", ARGS),
    (["verify", REF, "--cuts", "99"], "cut 99 is out of range 0..8", BUILD),
    (["verify", REF, "--stages", "0"], "--stages 0 must be between 1 and 8", BUILD),
    (["verify", REF, "--stages", "x"], "--stages: invalid int value", ARGS),
    (["verify", REF], "give either cuts or stages", BUILD),
    (["verify", REF, "--layout", "E|x|L"], "--layout 'E|x|L' holds 'x'", BUILD),
    (["verify", REF, "--layout", "E|t*3|t*4|L"], "holds 7 decoder layers (t); the model has 8",
     BUILD),
    (["verify", REF, "--fqns-per-stage", "[["], "is not a JSON list of lists", ARGS),
    (["verify", REF, "--fqns-per-stage", '[["model.embed_tokens"]]'], "must list every layer",
     BUILD),
    (["verify", REF, "--cuts", "4", "--docs", "a"], "--docs 'a' is not a count", ARGS),
    (["verify", REF, "--cuts", "4", "--docs", "0"], "--docs must be a positive", ARGS),
    (["verify", REF, "--cuts", "4", "--tokens", "1"], "--tokens 1 cannot hold", ARGS),
    (["verify", REF, "--cuts", "4", "--tokens", "10", "--docs", "3,4"], "holds 7 tokens", ARGS),
    (["verify", REF, "--cuts", "4", "--token-multiple", "0"], "--token-multiple must be", ARGS),
    (["verify", REF, "--cuts", "4", "--token-multiple", "4", "--tokens", "30"],
     "not a multiple of --token-multiple 4", ARGS),
    (["verify", REF, "--cuts", "4", "--boundary-state", "{"], "--boundary-state '{' is not JSON",
     ARGS),
    (["verify", REF, "--cuts", "4", "--boundary-state", '{"rank": 4}'], "must be a mapping",
     ARGS),
    (["verify", REF, "--cuts", "4", "--layers", "model.blocks"], "'model.blocks' not found",
     BUILD),
    (["verify", REF, "--cuts", "4", "--inputs", "model.nope"], "'model.nope' not found", BUILD),
    (["verify", REF, "--cuts", "4", "--outputs", "lm_head,nope"], "'nope' not found", BUILD),
    (["verify", REF, "--cuts", "4", "--dtype", "float16"], "--dtype: invalid choice", ARGS),
    (["verify", REF, "--cuts", "4", "--mode", "test"], "--mode: invalid choice", ARGS),
    (["verify", REF, "--cuts", "4", "--inputs-from", "titan"], "unknown --inputs-from 'titan'",
     ARGS),
    (["verify", REF, "--cuts", "4", "--inputs-from", "torchtitan"],
     "has no get_attention_masks", BUILD),
    (["verify", spec("conventions:unadapted"), "--cuts", "1"], "fits no input convention",
     BUILD),
    (["verify", REF, "--cuts", "4", "--format", "yaml"], "--format: invalid choice", ARGS),
    (["verify", REF, "--cuts", "4", "--format", "html"], "use it with graphcheck map or plan",
     ARGS),
    (["plan", REF, "--stages", "2", "--format", "sarif"], "does not render graphcheck plan",
     ARGS),
    (["plan", REF, "--stages", "2", "--cost", "bytes"], "--cost: invalid choice", ARGS),
    (["plan", REF, "--stages", "99"], "asks for 99 stages", BUILD),
    (["plan", REF, "--stages", "2", "--virtual", "0"], "--virtual 0 asks for 0 stages", BUILD),
    (["gate", REF, "--cuts", "4", "--seed", "x"], "--seed: invalid int value", ARGS),
    (["map", REF, "--doc-length", "0"], "--doc-length 0 must be at least 1", ARGS),
    (["map", "hf:llama", "--set", "layers"], "--set 'layers' is not KEY=VALUE", ARGS),
    (["map", "hf:llama", "--set", "intermediate_sise=1"],
     "LlamaConfig has no such key; did you mean intermediate_size?", ARGS),
    (["map", "hf:nosuchfamily"], "unknown model type 'nosuchfamily'", ARGS),
    (["map", REF, "--set", "a=1"], "--set applies to hf: models only", ARGS),
    (["map", REF, "--kernels", "missing.py"], "kernels file not found: missing.py", ARGS),
    (["map", REF, "--token-local", "aten::mul"],
     "--token-local 'aten::mul': give a custom op as 'namespace::op'", ARGS),
    (["map", REF, "--backward", "--mode", "eval"], "--backward proves the training step", ARGS),
    (["verify", REF, "--cuts", "4", "--output", "/nonexistent/r.json"],
     "--output /nonexistent/r.json: the folder /nonexistent does not exist", ARGS),
    (["verify", REF, "--cuts", "4", "--output", str(ROOT)], "is a folder; give a file name", ARGS),
    (["verify", REF, "--cuts", "4", "--output", f"{ROOT}/README.md/r.json"],
     "README.md is a file, not a folder", ARGS),
    (["map", REF, "--html", "/nonexistent/x.html"], "the folder /nonexistent does not exist",
     ARGS),
    (["verify", REF, "--cuts", "4", "--model-explorer", "/nonexistent/a/b"],
     "the folder /nonexistent/a does not exist", ARGS),
    (["verify", REF, "--cuts", "4", "--stage-builder", "keep_index"],
     "unknown stage builder 'keep_index' (did you mean keep-index?)", ARGS),
    (["verify", REF, "--cuts", "4", "--stage-builder", f"{ROOT}/fixtures/reference.py:nope"],
     "reference.py has no callable 'nope'", ARGS),
    (["verify", REF, "--cuts", "4", "--stage-builder", "none.py:build"],
     "stage builder 'none.py:build': file not found", ARGS),
    (["verify", REF, "--cuts", "4", "--dtype", "float32", "--stage-builder", "keep-index"],
     "drop --dtype float32 or --stage-builder", BUILD),
    (["verify", REF, "--cuts", "4", "--allow-fp32", "["], "the '[' is never closed", ARGS),
    (["verify", REF, "--cuts", "4", "--allow-fp32", ""], "a glob of parameter names", ARGS),
    (["verify", REF, "--cuts", "4", "--allow-fp32", "*.a,*.b"], "one glob per --allow-fp32",
     ARGS),
    (["verify", str(ROOT / "fixtures"), "--cuts", "4"], "fixtures/FILE.py:factory", ARGS),
    (["verify", "{hfdir}", "--cuts", "4"], "holding a config.json: write hf:", ARGS),
    (["verify", f"{ROOT}/fixtures/reference.py", "--cuts", "4"],
     "the model (callable without arguments: reference, window_only, ", ARGS),
    (["verify", "{hfdir}/config.json", "--cuts", "4"], "is a JSON file: write hf:/", ARGS),
    (["verify", "{hfdir}:model", "--cuts", "4"], "holding a config.json: write hf:", ARGS),
    (["verify", f"{ROOT}/fixtures/missing.py:model", "--cuts", "4"], "file not found", ARGS),
    (["verify", "fixtures/refrence.py:reference", "--cuts", "4"],
     "file not found: fixtures/refrence.py; did you mean fixtures/reference.py?", ARGS),
    (["verify", "fixtures/reference.py:refrence", "--cuts", "4"],
     "no callable 'refrence'; did you mean reference?", ARGS),
    (["verify", f"{ROOT}/fixtures/reference.py:missing", "--cuts", "4"], "no callable", ARGS),
    (["verify", "no-colon", "--cuts", "4"], "is not 'path/to/file.py:factory'", ARGS),
    (["gate", REF, "--cuts", "4", "--docs", "x"], "--docs 'x' is not", ARGS),
    (["gate", REF, "--cuts", "4", "--init", "nope"], "--init nope: CausalLM has no method",
     BUILD),
    (["rules", "GC999"], "unknown rule 'GC999'", ARGS),
    (["frobnicate"], "invalid choice: 'frobnicate'", ARGS),
    ([], "the following arguments are required: command", ARGS),
    pytest.param(["verify", spec("violations:export_fails"), "--cuts", "2"],
                 "torch.export failed", EXPORT, id="export-fails"),  # slow; test_cli's twin: fast
]  # fmt: skip


@pytest.fixture
def watched(monkeypatch):
    """The stages a run reached: ``build`` (the model on fake weights), ``export``."""
    reached: list[str] = []
    build, program = Session._fake, api.Explorer.program.fget

    def fake(self, factory):
        reached.append(BUILD)
        return build(self, factory)

    def exported(self):
        reached.append(EXPORT)
        return program(self)

    monkeypatch.setattr(Session, "_fake", fake)
    monkeypatch.setattr(api.Explorer, "program", property(exported))
    return reached


@pytest.fixture
def hfdir(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(("argv", "words", "reach"), BAD_INPUTS)
def test_bad_input_is_one_line_exit_2_before_the_export(cli, watched, hfdir, argv, words, reach):
    code, out, err = cli(*[arg.replace("{hfdir}", str(hfdir)) for arg in argv])
    first, *detail = err.splitlines()
    document = any(f in argv for f in ("json", "sarif"))  # --format json|sarif: on stdout too
    assert code == 2 and (json.loads(out) if document else out == "")
    assert first.startswith("graphcheck: error: ") and words in first
    assert "Traceback" not in err and "warn" not in err.lower()
    if reach == EXPORT:
        assert detail and all(line.startswith("  ") for line in detail)
    else:
        assert detail == []
    stages = [ARGS, BUILD, EXPORT]
    assert set(watched) <= set(stages[1 : stages.index(reach) + 1])


def test_the_table_covers_every_flag_that_takes_a_value():
    """A new flag of verify, map, plan or gate gets a row here (or is listed as exempt)."""
    from graphcheck.cli import build_parser

    exempt = {"--help", "--version", "--head", "--output-fqn",
              "--cache-dir", "--select", "--ignore"}  # fmt: skip
    subparsers = build_parser()._subparsers._group_actions[0].choices
    flags = {
        option
        for name in ("verify", "map", "plan", "gate")
        for action in subparsers[name]._actions
        if action.nargs != 0
        for option in action.option_strings
    }
    rows = [row.values if hasattr(row, "values") else row for row in BAD_INPUTS]
    tested = {arg for argv, _, _ in rows for arg in argv if arg.startswith("--")}
    assert sorted(flags - tested - exempt) == []


def test_a_usage_error_under_format_json_is_a_json_object_on_stdout(cli):
    code, out, err = cli("verify", REF, "--cuts", "4", "--allow-fp32", "[", "--format", "json")
    assert code == 2 and err.count("\n") == 1
    assert json.loads(out) == {"error": err.removeprefix("graphcheck: error: ").rstrip("\n"),
                               "detail": [], "exit_code": 2}  # fmt: skip


def test_a_usage_error_under_format_sarif_is_a_failed_invocation(cli):
    code, out, err = cli("map", REF, "--format=sarif", "--stage-builder", "x")  # not a map flag
    assert code == 2 and "unrecognized arguments: --stage-builder x" in err
    log = json.loads(out)
    schema = json.loads((ROOT / "tests/data/sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
    jsonschema.validators.validator_for(schema)(schema).validate(log)
    (run,) = log["runs"]
    (invocation,) = run["invocations"]
    assert (invocation["executionSuccessful"], invocation["exitCode"], run["results"]) == (
        False, 2, [],
    )  # fmt: skip
    assert (
        "unrecognized arguments" in invocation["toolExecutionNotifications"][0]["message"]["text"]
    )


def test_keys_a_config_folds_into_others_are_not_unknown():
    """``rope_theta`` is no LlamaConfig attribute, but its ``__init__`` reads it."""
    config = build_config("hf:llama", {"rope_theta": 5e5})
    assert config.rope_parameters["rope_theta"] == 5e5
    with pytest.raises(UsageError, match=r"--set tie_word_embedding: .* tie_word_embeddings\?$"):
        build_config("hf:llama", {"tie_word_embedding": False})


def _small(dtype: torch.dtype | None = None, module=None) -> torch.nn.Module:
    from reference import CausalLM, Config

    model = (module or CausalLM)(Config(num_hidden_layers=1))
    return model if dtype is None else model.to(dtype)


def test_a_built_fp32_module_is_one_error_before_the_export(watched):
    with pytest.raises(UsageError) as caught:
        api.verify(_small(), cuts=[1])
    message = str(caught.value)
    assert message.startswith("CausalLM was given built with fp32 parameters (13 of 13, e.g. ")
    assert "pass its factory instead" in message and "model.to(torch.bfloat16)" in message
    assert watched == []


def test_a_bf16_module_keeps_its_declared_fp32_carve_outs_and_a_stray_one_is_gc501():
    """The correction bias is declared fp32 (``_keep_in_fp32_modules_strict``): allowed; the
    final norm's weight is fp32 by mistake: GC501, the module's only finding."""
    from framework_build import DeclaredRouterLM

    model = _small(torch.bfloat16, DeclaredRouterLM)
    bias = model.model.layers[0].mlp.e_score_correction_bias
    bias.data = bias.data.float()
    model.model.norm.weight.data = model.model.norm.weight.data.float()
    report = api.verify(model, cuts=[1])
    assert [(d.code, d.node) for d in report.diagnostics] == [("GC501", "p_model_norm_weight")]


def test_json_source_is_file_line_and_text():
    """A diagnostic's JSON ``source`` is an object; the text report keeps the line."""
    from graphcheck.diagnostics import Diagnostic
    from graphcheck.report import Report, render

    at = "fixtures/violations.py:175: x32 = x32 + self.mlp(h)"
    found = [Diagnostic("GC203", "boundary-not-materialized", "two precisions", cut=4, source=at)]
    report = Report("m.py:f", 8, "verify", diagnostics=found)
    (diag,) = json.loads(render(report, "json"))["diagnostics"]
    assert diag["source"] == {"file": "fixtures/violations.py", "line": 175,
                              "text": "x32 = x32 + self.mlp(h)"}  # fmt: skip
    assert f" {at}\n" in render(report, "text")
    nowhere = Report("m.py:f", 8, "verify", diagnostics=[Diagnostic("GC205", "n", "m", cut=4)])
    assert json.loads(render(nowhere, "json"))["diagnostics"][0]["source"] is None


def test_output_file_prints_the_one_line_verdict(cli, monkeypatch, tmp_path):
    """``--output FILE``: the report in FILE, its verdict on stdout for the CI log."""
    from graphcheck.diagnostics import Diagnostic
    from graphcheck.report import CutReport, Report

    found = [Diagnostic("GC201", "extra-activation-crosses-cut", "two cross", cut=1)]
    cuts = [CutReport(0, []), CutReport(1, [], ["GC201"]), CutReport(2, [])]
    report = Report("m.py:f", 2, "map", cuts=cuts, diagnostics=found)
    monkeypatch.setattr(api, "cut_map", lambda *args, **kwargs: report)
    target = tmp_path / "map.txt"
    code, out, _ = cli("map", REF, "--output", target)
    assert code == 1 and target.read_text().endswith("legal cuts: 0, 2\n")
    assert out == f"graphcheck: FAIL — legal cuts: 0, 2; report written to {target}\n"
    code, out, _ = cli("map", REF, "--output", target, "--format", "sarif")
    # the same line whatever the format: read from the result, not from the rendered file
    assert out == f"graphcheck: FAIL — legal cuts: 0, 2; report written to {target}\n"
