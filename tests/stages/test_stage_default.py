"""A PASS covers the stage programs by default.

With no ``--stage-builder`` graphcheck proves each stage's own program with the builder
it can find: ``keep-index`` for a pipeline-aware model (its pruned stages export),
``hf-slice`` for ``hf:`` models. A model whose pruned stages do not export gets its
cuts proven and its verdict says the stage programs are not: exit 0, or 1 with
``--require-stage-programs`` (the default of ``graphcheck check``). ``--stage-builder
none`` turns them off, and says so.

Fixtures: ``gate_state:trace_flag`` (layer 0 raises a module-level flag at trace time;
a rank without layer 0 picks the other window: GC301 at every cut but 0 and 8) and its
twin ``model_flag`` (the decoder raises it on every stage); ``violations:pp_config``
(declares ``get_pp_module_config()`` but calls every module it holds: not
pipeline-aware) and ``violations:sdpa_doc_mask`` (no declared config, not
pipeline-aware).
"""

from __future__ import annotations

import json
from functools import cache

import pytest
from harness import spec

import graphcheck
from graphcheck.api import Explorer
from graphcheck.report import Report
from graphcheck.stages import programs

NOT_AWARE = "stage programs not proven: pass --stage-builder"


@cache
def default(name: str, cut: int, **options) -> Report:
    """The plain ``graphcheck.verify(MODEL, [cut])`` a user writes."""
    return graphcheck.verify(spec(name), [cut], **options)


def test_build_order_flag_fails_a_plain_verify(cli_default):
    code, out, _ = cli_default("verify", spec("gate_state:trace_flag"), "--cuts", "4")
    assert code == 1
    assert "verdict: FAIL (1/1 cuts proven; 2 stage programs, 4 differences)" in out
    assert "stage programs: 2 built by keep-index (the default)" in out
    report = default("gate_state:trace_flag", 4)
    assert {d.code for d in report.errors} == {"GC301"}
    assert {d.message.split(":")[0] for d in report.errors} == {
        f"global layer {g}" for g in (4, 5, 6, 7)
    }


def test_twin_that_sets_the_flag_on_every_stage_passes(cli_default):
    code, out, _ = cli_default("verify", spec("gate_state:model_flag"), "--cuts", "4")
    assert code == 0
    assert "verdict: PASS (1/1 cuts proven; 2 stage programs, 0 differences)" in out
    proof = default("gate_state:model_flag", 4).stage_proof
    assert (proof.proven, proof.builder, proof.default) == (True, "keep-index", True)


def test_the_flag_is_invisible_without_stage_programs(cli_default):
    code, out, _ = cli_default(
        "verify", spec("gate_state:trace_flag"), "--cuts", "4", "--stage-builder", "none"
    )
    assert code == 0
    assert "verdict: PASS (1/1 cuts proven; stage programs not proven: --stage-builder none)" in out
    assert "stage programs: not proven (turned off by --stage-builder none)" in out


def test_pipeline_aware_json_names_the_builder(cli_default):
    code, out, _ = cli_default(
        "verify", spec("gate_state:model_flag"), "--cuts", "4", "--format", "json"
    )
    staged = json.loads(out)["stage_programs"]
    assert code == 0 and staged["proven"] is True
    assert (staged["builder"], staged["default"], staged["required"]) == ("keep-index", True, False)
    assert [s["layers"] for s in staged["stages"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert staged["reason"] is None and all(s["isolated"] for s in staged["stages"])


@pytest.mark.parametrize("name", ["violations:pp_config", "violations:sdpa_doc_mask"])
def test_not_pipeline_aware_passes_and_says_stage_programs_not_proven(cli_default, name):
    code, out, _ = cli_default("verify", spec(name), "--cuts", "4")
    assert code == 0
    assert f"verdict: PASS (1/1 cuts proven; {NOT_AWARE})" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("  stage programs:"))
    assert "not proven (the default stage builder keep-index cannot build them: stage" in line
    assert "pipeline-aware" in line
    report = default(name, 4)
    assert report.verdict == "pass" and report.errors == []  # not a finding


def test_not_pipeline_aware_json_says_why(cli_default):
    code, out, _ = cli_default(
        "verify", spec("violations:pp_config"), "--cuts", "4", "--format", "json"
    )
    data = json.loads(out)
    staged = data["stage_programs"]
    assert (code, data["verdict"], staged["proven"], staged["stages"]) == (0, "pass", False, [])
    assert "keep-index cannot build them" in staged["reason"]
    assert (staged["builder"], staged["default"], staged["required"]) == ("keep-index", True, False)


def test_required_stage_programs_fail_when_not_proven(cli_default):
    args = ("verify", spec("violations:pp_config"), "--cuts", "4", "--require-stage-programs")
    code, out, _ = cli_default(*args)
    assert code == 1
    assert (
        "verdict: FAIL (1/1 cuts proven; stage programs not proven, required: "
        "pass --stage-builder)" in out
    )
    code, out, _ = cli_default(*args, "--format", "json")
    data = json.loads(out)
    assert (code, data["verdict"], data["stage_programs"]["required"]) == (1, "fail", True)
    assert data["diagnostics"] == []


def test_required_and_opted_out_fails(cli_default):
    code, out, _ = cli_default(
        "verify", spec("reference:reference"), "--cuts", "4", "--stage-builder", "none",
        "--require-stage-programs",
    )  # fmt: skip
    assert code == 1
    required = "stage programs not proven, required: --stage-builder none"
    assert f"verdict: FAIL (1/1 cuts proven; {required})" in out


def test_required_and_proven_passes():
    report = default("gate_state:model_flag", 4, require_stage_programs=True)
    assert (report.verdict, report.exit_code, report.stage_proof.required) == ("pass", 0, True)


def test_api_requires_and_opts_out():
    required = default("violations:pp_config", 4, require_stage_programs=True)
    assert (required.verdict, required.exit_code, required.errors) == ("fail", 1, [])
    off = default("reference:reference", 4, stage_builder="none")
    assert (off.stage_proof.proven, off.stage_programs, off.verdict) == (False, [], "pass")


def test_explicit_builder_that_cannot_build_is_still_exit_2(cli_default):
    code, out, err = cli_default(
        "verify", spec("violations:pp_config"), "--cuts", "4", "--stage-builder", "keep-index"
    )
    assert (code, out) == (2, "")
    first = err.splitlines()[0]
    assert first.startswith("graphcheck: error: stage 0: torch.export failed") and "need a" in first


def test_float32_build_leaves_them_unproven(cli_default):
    code, out, _ = cli_default(
        "verify", spec("reference:reference"), "--cuts", "4", "--dtype", "float32"
    )
    assert code == 0
    assert "stage programs not proven: drop --dtype float32)" in out


def test_markdown_and_sarif_say_it():
    from graphcheck.report import render

    report = default("violations:pp_config", 4, require_stage_programs=True)
    markdown = render(report, "markdown")
    assert "graphcheck verify: FAIL" in markdown
    assert "stage programs not proven, required: pass --stage-builder" in markdown
    run = json.loads(render(report, "sarif"))["runs"][0]
    assert run["properties"]["verdict"] == "fail"
    assert run["properties"]["stagePrograms"]["proven"] is False
    assert run["properties"]["stagePrograms"]["required"] is True


def test_plan_proves_its_plan_with_stage_programs(cli_default):
    code, out, _ = cli_default("plan", spec("gate_state:trace_flag"), "--stages", "2")
    assert code == 1
    assert "2 stage programs, 4 differences)" in out.splitlines()[-1]
    code, out, _ = cli_default(
        "plan", spec("violations:pp_config"), "--stages", "2", "--require-stage-programs"
    )
    assert code == 1 and "stage programs not proven, required" in out.splitlines()[-1]


def test_a_stage_is_built_once_per_process_while_the_model_code_is_unchanged(tmp_path, monkeypatch):
    model = tmp_path / "model.py"
    model.write_text("from reference import reference as model\n")
    calls = []
    real = programs.run_fresh_many

    def counted(fn, calls_, *args, **kwargs):
        calls.append(len(calls_))
        return real(fn, calls_, *args, **kwargs)

    monkeypatch.setattr(programs, "run_fresh_many", counted)
    explorer = Explorer(f"{model}:model")
    first = explorer.verify([4])
    again = explorer.verify([4])
    assert calls == [2, 0]  # the second proof: both stages from memory
    assert first.stage_programs == again.stage_programs and again.verdict == "pass"
    model.write_text("# edited\nfrom reference import reference as model\n")
    assert Explorer(f"{model}:model").verify([4]).verdict == "pass"
    assert calls == [2, 0, 2]  # the model file changed: built afresh


def test_check_requires_stage_programs_by_default(tmp_path, cli_default):
    config = tmp_path / "graphcheck.toml"
    config.write_text(
        f'[[checks]]\nname = "aware"\nmodel = "{spec("gate_state:model_flag")}"\ncuts = [4]\n\n'
        f'[[checks]]\nname = "unaware"\nmodel = "{spec("violations:pp_config")}"\ncuts = [4]\n'
    )
    code, out, _ = cli_default("check", "--config", config, "--no-cache")
    assert code == 1
    assert "cuts 4: PASS (1/1 cuts proven; 2 stage programs, 0 differences)" in out
    assert "stage programs not proven, required: pass --stage-builder" in out
    assert out.splitlines()[-1].startswith("verdict: FAIL · 2 checks · 1/2 plans proven")
    config.write_text("require_stage_programs = false\n" + config.read_text())
    code, out, _ = cli_default("check", "--config", config, "--no-cache")
    assert code == 0
    assert f"cuts 4: PASS (1/1 cuts proven; {NOT_AWARE})" in out


def test_check_key_per_check_wins_and_is_typed(tmp_path, cli_default):
    config = tmp_path / "graphcheck.toml"
    config.write_text(
        "require_stage_programs = true\n[[checks]]\n"
        f'model = "{spec("violations:pp_config")}"\ncuts = [4]\nrequire_stage_programs = false\n'
    )
    assert cli_default("check", "--config", config, "--no-cache")[0] == 0
    config.write_text(f'require_stage_programs = "yes"\n[[checks]]\nmodel = "{spec("a:b")}"\n')
    code, out, err = cli_default("check", "--config", config)
    assert (code, out) == (2, "")
    assert "require_stage_programs = 'yes' is not a bool" in err


def test_gate_refuses_stage_builder_none(cli_default):
    code, _, err = cli_default(
        "gate", spec("reference:reference"), "--cuts", "4", "--stage-builder", "none"
    )
    assert code == 2 and "--stage-builder none builds none" in err


def test_hf_models_are_proven_with_hf_slice():
    report = graphcheck.verify("hf:llama", [2], settings={"num_hidden_layers": 4})
    proof = report.stage_proof
    assert (proof.proven, proof.builder, proof.default) == (True, "hf-slice", True)
    assert report.verdict == "pass" and [s["layers"] for s in report.stage_programs] == [
        [0, 1],
        [2, 3],
    ]
    assert {d.code for d in report.diagnostics} == {"GC302"}  # a renumbered container: a warning
