"""The residual's shape is the model's: the flat ``[T, H]`` of varlen code.

``flat_residual`` keeps its residual as ``[T, H]`` (no batch dim), its twin
``batched_residual`` as ``[1, T, H]`` with the same math: both pass at every cut, prove
their stage programs (a stage's ``hidden`` takes the wire of the model's layout), plan,
gate (bitwise equal bytes, documents isolated) and lock alike, each with its own wire.
``second_flat_stream`` carries a second ``[T, H]`` value (the embedding output) across
the cuts between layers: GC201. ``squeezed_layers`` hands ``[T, H]`` over where its
edges lay the residual out as ``[1, T, H]``: GC206, naming the rank-2 declaration.
``--boundary-state`` takes a rank-2 declaration; a wrong rank names the one to write.
"""

from __future__ import annotations

import json

import pytest
from harness import spec

from graphcheck.analysis.residual import residual_layout
from graphcheck.api import Explorer
from graphcheck.gate.run import Gate
from graphcheck.model.boundary import ResidualLayout, WireShape
from graphcheck.project.diff import ChangeKind, diff_lock
from graphcheck.project.lock import FORMAT, ModelState, model_state
from graphcheck.results.gate import ByteStatus

FLAT, BATCHED = spec("flat_residual:flat_residual"), spec("flat_residual:batched_residual")
TWINS = {"flat": (FLAT, ["T", "64"]), "batched": (BATCHED, ["1", "T", "64"])}
ALL = [0, 1, 2, 3, 4]
STATE = '{"rank": %d, "dtype": "bfloat16", "shape_suffix": [64], "state": "flat"}'
RANK2 = '{"rank": 2, "dtype": "bfloat16", "shape_suffix": (64,), "state": "%s"}'


@pytest.fixture(scope="module")
def explorers():
    return {name: Explorer(model) for name, (model, _) in TWINS.items()}


@pytest.fixture(scope="module")
def maps(explorers):
    return {name: explorer.map() for name, explorer in explorers.items()}


@pytest.mark.parametrize("twin", TWINS)
def test_every_cut_is_legal_and_carries_the_residual_of_the_models_layout(maps, explorers, twin):
    shape = TWINS[twin][1]
    report = maps[twin]
    assert (report.legal_cuts(), report.diagnostics) == (ALL, [])
    for cut in report.cuts:
        acts = [c.shape for c in cut.crossing if c.role == "activation"]
        assert acts == [shape]
        assert (cut.state["name"], cut.state["shape"]) == ("residual", shape)
    layout = residual_layout(explorers[twin].program)
    assert layout == ResidualLayout(batched=twin == "batched", width=64)


def test_flat_stage_programs_take_and_return_the_flat_wire(explorers):
    report = explorers["flat"].verify([2])
    assert (report.verdict, report.exit_code, report.diagnostics) == ("pass", 0, [])
    assert report.stage_proof.proven and len(report.stage_programs) == 2
    assert report.cut(2).state["shape"] == ["T", "64"]


@pytest.mark.parametrize("twin", TWINS)
def test_stage_programs_prove_alike_at_every_interior_cut(explorers, twin):
    report = explorers[twin].verify([1, 2, 3])
    assert (report.verdict, report.diagnostics, report.stage_proof.proven) == ("pass", [], True)
    assert len(report.stage_programs) == 4
    assert [c.state["shape"] for c in report.cuts] == [TWINS[twin][1]] * 3


def test_plan_balances_both_twins_alike(explorers):
    plans = {twin: explorers[twin].balanced(2, stage_builder="none") for twin in TWINS}
    for found in plans.values():
        assert (found.verdict, found.exit_code, found.legal) == ("pass", 0, ALL)
    flat, batched = (list(plans[twin].plan.cuts) for twin in TWINS)
    assert flat == batched and len(flat) == 1


@pytest.mark.parametrize("twin", TWINS)
def test_lock_records_each_twins_wire(explorers, tmp_path, twin):
    model, shape = TWINS[twin]
    entry = model_state(explorers[twin], model, {}, {}, tmp_path).entry
    assert entry["residual"] == f"residual bfloat16 [{', '.join(shape)}]"
    assert [(b[1], b[2]) for b in entry["boundaries"]] == [("pass", [])] * 5
    assert {b[3][0] for b in entry["boundaries"]} == {f"activation bfloat16[{', '.join(shape)}]"}


def test_a_lock_whose_wire_changed_layout_fails_check_locked():
    def lock(residual):
        entry = {
            "model": "m.py:f", "layers": [], "edges": [], "programs": {}, "findings": [],
            "boundaries": [[0, "pass", [], []]], "plans": [], "sources": {},
            "residual": residual,
        }  # fmt: skip
        return entry

    versions = {"graphcheck": "1", "torch": "2", "transformers": "3"}
    old = {
        "lock": FORMAT,
        "versions": versions,
        "models": {"m": lock("residual bfloat16 [1, T, 64]")},
    }
    new = ModelState(lock("residual bfloat16 [T, 64]"))
    (change,) = diff_lock(old, versions, {"m": new}).changes
    assert (change.kind, change.fails) == (ChangeKind.BOUNDARY, True)
    assert "[1, T, 64] → residual bfloat16 [T, 64]" in change.message
    unchanged = diff_lock(old, versions, {"m": ModelState(lock("residual bfloat16 [1, T, 64]"))})
    assert unchanged.changes == []


def test_gate_hands_the_flat_wire_over_and_agrees(explorers):
    report = Gate(FLAT, explorer=explorers["flat"]).run([2])
    assert (report.verdict, report.exit_code, report.static_verdict) == ("pass", 0, "pass")
    assert (report.bytes.status, report.isolation.holds) == (ByteStatus.EQUAL, True)
    assert [(h.cut, h.shape) for h in report.handovers] == [(2, ["256", "64"])]
    assert report.compared["shape"] == [256, 256]  # logits [T, V], V = T: tokens on axis 0


def test_gate_runs_the_batched_twin_alike(cli):
    code, out, _ = cli("gate", BATCHED, "--cuts", "1,3")
    assert code == 0
    assert out.count("hands over stage output [1, 256, 64] as bf16 bytes") == 2
    assert "staged vs uncut: EQUAL" in out and "document isolation: BITWISE" in out


def test_gate_trains_the_flat_twin_alike(cli):
    code, out, _ = cli("gate", FLAT, "--cuts", "1,3", "--train", "--format", "json")
    report = json.loads(out)
    assert code == 0 and report["verdict"] == "pass"
    assert report["bytes"]["status"] == "equal" and report["train"]["status"] == "equal"


def test_gate_stops_a_stage_that_hands_over_another_wire_than_the_proofs(cli):
    builder = spec("flat_residual:batch_dim_stages")
    code, out, _ = cli("gate", FLAT, "--cuts", "2", "--stage-builder", builder)
    assert code == 1
    assert "static proof: FAIL (GC303)" in out and "staged vs uncut: CANNOT RUN" in out
    assert (
        "stage 0 hands over [1, 256, 64] at cut 2, but the wire the proof has there is bf16 "
        "[T, 64] ([256, 64] on this batch)"
    ) in out
    assert "agrees with the static proof: FAIL" in out


def test_a_second_flat_stream_across_the_cuts_is_gc201(cli):
    code, out, _ = cli("map", spec("flat_residual:second_flat_stream"), "--format", "json")
    report = json.loads(out)
    cuts = {c["position"]: c for c in report["cuts"]}
    assert code == 1
    assert [k for k, c in cuts.items() if c["verdict"] == "pass"] == [0, 4]
    codes = {(d["cut"], d["code"]) for d in report["diagnostics"] if d["cut"] is not None}
    assert codes == {(k, "GC201") for k in (1, 2, 3)}
    for k in (1, 2, 3):
        acts = [c["shape"] for c in cuts[k]["crossing"] if c["role"] == "activation"]
        assert acts == [["T", "64"], ["T", "64"]]


def test_a_flat_wire_where_the_model_is_batched_is_gc206_naming_the_declaration():
    report = Explorer(spec("flat_residual:squeezed_layers")).map()
    assert report.legal_cuts() == [0]
    found = [d for d in report.diagnostics if d.code == "GC206"]
    assert sorted(d.cut for d in found) == [1, 2, 3, 4]
    for diag in found:
        assert "is bfloat16 [T, 64], but the pipeline wire is one bf16 [1, T, 64]" in diag.message
        assert RANK2 % "NAME" in diag.message


def test_a_rank_2_boundary_state_is_accepted(cli):
    argv = ("verify", FLAT, "--cuts", "0,2,4", "--boundary-state", STATE % 2)
    code, out, _ = cli(*argv, "--format", "json")
    cuts = json.loads(out)["cuts"]
    assert code == 0
    assert [(c["verdict"], c["state"]["name"], c["state"]["declared"]) for c in cuts] == [
        ("pass", "flat", True)
    ] * 3


def test_a_wrong_rank_names_the_declaration_that_matches(cli):
    code, out, _ = cli("verify", FLAT, "--cuts", "2", "--boundary-state", STATE % 3)
    assert code == 1
    assert "GC206" in out and "declares its boundary state 'flat' as bfloat16 [1, T, 64]" in out
    assert RANK2 % "flat" in out


def test_a_wire_shape_reads_both_layouts():
    flat, batched = WireShape.of(["T", "64"]), WireShape.of(["1", "T", "64"])
    assert (flat.rank, flat.token_dim, flat.sizes(5)) == (2, 0, (5, 64))
    assert (batched.rank, batched.token_dim, batched.sizes(5)) == (3, 1, (1, 5, 64))
    assert WireShape.of(["T", "N+1"]) is None
