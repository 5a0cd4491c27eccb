"""Declared boundary states and layer ranges (``get_pp_module_config()``).

A hyper-connection decoder hands over ``[1, T, 4, 64]`` streams: declared, every cut
0..L passes and carries the declared state (cut 0 and L too: the glue that expands
and sums the streams is placed where the declaration says); undeclared or declared
wrongly, GC206 shows the declaration to write. ``pipeline_layer_ranges`` is the plan
``verify`` proves without ``--cuts``, and a plan off it is GC101.
"""

from __future__ import annotations

import json

import pytest
from harness import spec

from graphcheck.api import Explorer

DECLARATION = (
    '"pipeline_boundary_state"] = {"rank": 4, "dtype": "bfloat16", "shape_suffix": (4, 64), '
    '"state": "%s"}'
)
FLAG = '{"rank": 4, "dtype": "bfloat16", "shape_suffix": [4, 64], "state": "streams"}'


@pytest.fixture(scope="module")
def declared():
    return Explorer(spec("hyper_connections:declared"))


def test_declared_state_passes_at_every_cut_including_0_and_L(declared):
    assert declared.map().legal_cuts() == [0, 1, 2, 3, 4]
    report = declared.verify([0, 2, 4])
    assert (report.verdict, report.diagnostics) == ("pass", [])
    for cut in report.cuts:
        activations = [c for c in cut.crossing if c.role == "activation"]
        assert [c.shape for c in activations] == [["1", "T", "4", "64"]]
        assert cut.state["name"] == "completed_hyperconnection_residual"
        assert cut.state["declared"] and cut.state["shape"] == ["1", "T", "4", "64"]


@pytest.mark.parametrize("factory", ["undeclared", "wrong_rank", "wrong_suffix"])
def test_without_or_with_a_wrong_declaration_the_message_shows_the_one_to_write(factory):
    report = Explorer(spec(f"hyper_connections:{factory}")).verify([2])
    assert report.codes == {"GC206"}
    (diag,) = report.diagnostics
    name = "NAME" if factory == "undeclared" else "completed_hyperconnection_residual"
    assert DECLARATION % name in diag.message
    assert "[1, T, 4, 64]" in diag.message


def test_the_flag_declares_the_state(cli):
    argv = ("verify", spec("hyper_connections:undeclared"), "--cuts", "0,2,4")
    code, out, _ = cli(*argv, "--boundary-state", FLAG, "--format", "json")
    cuts = json.loads(out)["cuts"]
    assert code == 0
    assert [(c["verdict"], c["state"]["name"]) for c in cuts] == [("pass", "streams")] * 3


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("rank=4", "--boundary-state 'rank=4' is not JSON"),
        ('{"rank": 4}', "--boundary-state must be a mapping with keys"),
        (FLAG.replace("[4, 64]", "[4, 0]"), "shape_suffix must be positive integers"),
        (FLAG.replace('"rank": 4', '"rank": 2'), "rank 2 leaves no room for the token dim"),
        (FLAG.replace("bfloat16", "bf16"), "dtype must name a torch dtype"),
    ],
)
def test_a_malformed_flag_is_one_line_before_building(cli, flag, says):
    code, out, err = cli("verify", "no/such/file.py:f", "--cuts", "1", "--boundary-state", flag)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and says in err


def test_layer_ranges_are_the_default_plan_and_a_plan_off_them_is_gc101(cli):
    code, out, _ = cli("verify", spec("hyper_connections:declared_ranges"), "--format", "json")
    report = json.loads(out)
    assert (code, [s["layers"] for s in report["stages"]]) == (0, [[0, 2], [3, 5]])
    code, out, _ = cli("verify", spec("hyper_connections:declared_ranges"), "--cuts", "2")
    assert code == 1
    assert "declares pipeline_layer_ranges [(0, 3), (3, 6)]" in out and "--cuts 3" in out


def test_without_declared_ranges_verify_needs_a_plan(cli):
    code, out, err = cli("verify", spec("reference:reference"))
    assert (code, out) == (2, "")
    assert "give either cuts or stages (--cuts or --stages)" in err


def test_a_malformed_declaration_in_the_model_is_a_layout_error():
    import hyper_connections

    from graphcheck.errors import LayoutError

    def factory():
        model = hyper_connections.undeclared()
        model.state = {"rank": 4, "dtype": "bfloat16", "shape_suffix": (4, 64)}
        return model

    with pytest.raises(LayoutError, match=r"pipeline_boundary_state.* must be a mapping with"):
        Explorer(factory)


def test_stage_programs_take_and_return_the_declared_state():
    report = Explorer(spec("hyper_connections:declared")).verify(
        [0, 2, 4], stage_builder="keep-index"
    )
    assert (report.verdict, report.diagnostics, len(report.stage_programs)) == ("pass", [], 4)


def test_gate_runs_stages_fed_the_declared_state_and_agrees(cli):
    code, out, _ = cli("gate", spec("hyper_connections:declared"), "--cuts", "0,2,4")
    assert code == 0
    assert out.count("hands over stage output [1, 256, 4, 64] as bf16 bytes") == 3
    assert "staged vs uncut: EQUAL" in out and "agrees with the static proof: PASS" in out


def test_a_wire_whose_token_dim_is_fixed_says_the_export_specialised_t():
    report = Explorer(spec("soundness_dataflow:fixed_length")).verify([1])
    assert {"GC206", "GC403"} <= report.codes
    (wire,) = [d for d in report.diagnostics if d.code == "GC206"]
    assert "is bfloat16 [1, 29, 64]" in wire.message
    assert "its token dim is the fixed size 29: the export specialised T (GC403)" in wire.message


def test_map_json_lists_the_legal_cuts_and_a_missing_cut_names_the_plan(declared):
    assert declared.map().as_dict()["legal_cuts"] == [0, 1, 2, 3, 4]
    report = declared.verify([2])
    assert "legal_cuts" not in report.as_dict()
    with pytest.raises(KeyError, match="no cut 3 in this report; its cuts are: 2"):
        report.cut(3)
