"""The embedding and the final norm and head run on one stage each.

A builder that leaves an output module on an earlier stage (Persimmon's final norm is
``model.final_layernorm``, not ``model.norm``) makes that stage hand over the normed
residual: the stage program runs an edge the uncut program runs on the last stage only
(GC303, naming the module); the gate shows the staged logits differ. ``hf-slice`` drops
the output modules the layout names: PASS, equal bytes.
"""

from __future__ import annotations

import pytest
from harness import spec

from graphcheck import api
from graphcheck.gate.run import gate

MODEL = "hf:persimmon"
BY_NAME = spec("hf_stage_builders:slice_dropping_model_norm")


def test_a_final_norm_left_on_an_earlier_stage_is_gc303():
    report = api.verify(MODEL, cuts=[4], stage_builder=BY_NAME)
    assert (report.verdict, {d.code for d in report.errors}) == ("fail", {"GC303"})
    [edge] = [d for d in report.errors if d.code == "GC303"]
    assert edge.stage == 0
    assert "stage 0 runs `model.final_layernorm (LayerNorm)` (the output modules)" in edge.message
    assert "on the last stage only" in edge.message


def test_hf_slice_drops_the_final_norm_whatever_its_name():
    report = api.verify(MODEL, cuts=[4])
    assert (report.verdict, report.errors) == ("pass", [])
    assert report.stage_proof.builder == "hf-slice"


@pytest.mark.parametrize(("builder", "status"), [(None, "equal"), (BY_NAME, "differ")])
def test_the_gate_agrees(builder, status):
    result = gate(MODEL, [4], stage_builder=builder).as_dict()
    assert result["bytes"]["status"] == status
    assert result["agrees"] is True
