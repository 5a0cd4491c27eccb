"""Stages built as ranks build them: state left by building or tracing does not leak in."""

from __future__ import annotations

from functools import cache

import pytest
from harness import FIXTURES, spec

import graphcheck
from graphcheck.cli import main
from graphcheck.errors import ModelLoadError
from graphcheck.model.load import resolve_factory
from graphcheck.report import Report

BUILDERS = FIXTURES / "build_state.py"


def builder(name: str) -> str:
    return name if "-" in name else f"{BUILDERS}:{name}"


@cache
def verify(model: str, cut: int, stage_builder: str) -> Report:
    return graphcheck.verify(
        spec(f"build_state:{model}"), [cut], stage_builder=builder(stage_builder)
    )


def by_severity(report: Report) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {"error": set(), "warning": set()}
    for d in report.diagnostics:
        found[d.severity].add(d.code)
    return found


STATE = [
    # model, cut, builder, the global layers whose program differs on a fresh rank
    ("counted", 2, "own_layers", {3, 5, 7}),
    ("first_cached", 3, "keep-index", {3, 4, 5, 6, 7}),
    ("flagged", 4, "keep-index", {4, 5, 6, 7}),
]


@pytest.mark.parametrize(("model", "cut", "stage_builder", "flipped"), STATE)
def test_flags_state_left_by_building_or_tracing(model, cut, stage_builder, flipped):
    report = verify(model, cut, stage_builder)
    assert by_severity(report)["error"] == {"GC301"}
    layers = {d.message.split(":")[0] for d in report.errors}
    assert layers == {f"global layer {g}" for g in flipped}
    assert all(s["isolated"] for s in report.stage_programs)


@pytest.mark.parametrize(("model", "cut", "stage_builder", "flipped"), STATE)
def test_allows_the_twin_without_hidden_state(model, cut, stage_builder, flipped):
    report = verify(f"{model}_twin", cut, stage_builder)
    assert by_severity(report) == {"error": set(), "warning": set()}
    assert report.verdict == "pass"


def test_identical_per_layer_buffers_compare_relative_to_the_layer():
    # the container is renumbered (GC302), the layers and their buffers are not
    report = verify("buffered", 3, "slice_layers")
    assert by_severity(report) == {"error": set(), "warning": {"GC302"}}


@pytest.mark.parametrize("stage_builder", ["wrapped", "unwrapped"])
def test_stage_module_that_moves_the_layer_container(stage_builder):
    # layers at inner.model.layers (wrapped) or at layers (unwrapped) in the stage,
    # at model.layers in the model
    report = verify("buffered", 3, stage_builder)
    assert report.verdict == "pass" and report.diagnostics == []
    assert [s["layers"] for s in report.stage_programs] == [[0, 1, 2], [3, 4, 5, 6, 7]]


def test_flip_is_found_through_a_wrapping_stage():
    report = verify("first_cached", 3, "wrapped")
    assert by_severity(report)["error"] == {"GC301"}


def test_model_given_as_object_is_built_in_process_and_says_so():
    factory = resolve_factory(spec("build_state:counted_twin"))
    report = graphcheck.verify(factory, [2], stage_builder="keep-index")
    assert report.verdict == "pass"
    assert [s["isolated"] for s in report.stage_programs] == [False, False]


def test_raising_stage_builder_is_one_line_exit_2(capsys):
    model = spec("build_state:counted_twin")
    code = main(["verify", model, "--cuts", "4", "--stage-builder", builder("raising")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("graphcheck: error: ")
    assert "RuntimeError: no device mesh for stage 1" in err and "stage 1" in err


def test_raising_stage_builder_in_process_is_a_model_load_error():
    factory = resolve_factory(spec("build_state:counted_twin"))
    build = resolve_factory(f"{BUILDERS}:raising")
    with pytest.raises(ModelLoadError, match=r"raised RuntimeError: no device mesh") as err:
        graphcheck.verify(factory, [4], stage_builder=build)
    assert "\n" not in str(err.value) and "stage 1" in str(err.value)


def test_stage_without_a_layer_container_is_one_line_exit_2(capsys):
    model = spec("build_state:counted_twin")
    code = main(["verify", model, "--cuts", "4", "--stage-builder", builder("layerless")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "layer container" in err and "get_pp_module_config" in err
