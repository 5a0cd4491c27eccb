"""Stage-program equivalence: layer-index-keyed kernel choices survive the stage split."""

from __future__ import annotations

import pytest
from harness import explorer, spec

import graphcheck

CUTS = range(9)


def stage_codes(name: str, builder: str, cut: int) -> dict[str, set[str]]:
    report = explorer(name).verify([cut], stage_builder=builder)
    by_severity: dict[str, set[str]] = {"error": set(), "warning": set()}
    for d in report.diagnostics:
        by_severity[d.severity].add(d.code)
    return by_severity


@pytest.mark.parametrize("builder", ["keep-index", "moduledict"])
def test_allows_index_keeping_builders_at_every_cut(builder):
    for cut in CUTS:
        codes = stage_codes("reference:reference", builder, cut)
        assert codes == {"error": set(), "warning": set()}, cut


def test_flags_rebuild_that_flips_window_and_first_norm():
    # rebuilt stages renumber layers: the stage starting at global k runs the layer-0 norm
    # at global k and moves the sliding windows unless k % 4 == 0
    for cut in range(1, 8):
        codes = stage_codes("reference:reference", "rebuild", cut)
        assert codes == {"error": {"GC301"}, "warning": {"GC302"}}, cut


def test_allows_rebuild_where_offset_is_a_multiple_of_the_window_period():
    for cut in CUTS:
        codes = stage_codes("reference:window_only", "rebuild", cut)
        if cut % 4 == 0:
            assert codes["error"] == set(), cut
        else:
            assert codes["error"] == {"GC301"}, cut
        renumbered = 0 < cut < 8
        assert codes["warning"] == ({"GC302"} if renumbered else set()), cut


def test_flip_names_the_window_argument():
    report = explorer("reference:window_only").verify([2], stage_builder="rebuild")
    flips = {d.message.split(":")[0] for d in report.diagnostics if d.code == "GC301"}
    assert flips == {"global layer 3", "global layer 5", "global layer 7"}
    message = next(d.message for d in report.diagnostics if d.code == "GC301")
    assert "window_size=[16, 0]" in message and "window_size=[-1, 0]" in message


def test_layers_differing_only_in_the_mask_they_read_are_told_apart():
    # every layer of this fixture runs identical ops; odd layers read a sliding-window
    # mask, even layers the full document mask
    report = graphcheck.verify(spec("violations:mask_by_layer"), [1], stage_builder="rebuild")
    assert {d.code for d in report.errors} == {"GC301"}
    assert all("reads" in d.message for d in report.errors)


def test_allows_mask_by_layer_when_indices_are_kept():
    report = graphcheck.verify(spec("violations:mask_by_layer"), [1], stage_builder="keep-index")
    assert report.verdict == "pass"


def test_flags_stage_returning_fp32(tmp_path):
    builder = tmp_path / "builder.py"
    builder.write_text(
        "import torch\n"
        "from torch import nn\n"
        "from graphcheck.stages.builders import BUILTINS\n"
        "from graphcheck.model.layout import detect_layout\n"
        "class Fp32Out(nn.Module):\n"
        "    def __init__(self, inner):\n"
        "        super().__init__()\n"
        "        self.model, self.lm_head = inner.model, inner.lm_head\n"
        "        self.inner = [inner]\n"
        "    def forward(self, x, position_ids, cu_q, cu_k, max_q, max_k):\n"
        "        out = self.inner[0](x, position_ids, cu_q, cu_k, max_q, max_k)\n"
        "        return out if self.lm_head is not None else out.float()\n"
        "def build(model, index, layers, num_stages):\n"
        "    layout = detect_layout(model)\n"
        "    stage = BUILTINS['keep-index'](model, layout, index, layers, num_stages)\n"
        "    return Fp32Out(stage)\n"
    )
    report = graphcheck.verify(spec("reference:reference"), [4], stage_builder=f"{builder}:build")
    assert {d.code for d in report.errors} == {"GC303"}  # the hand-off and the added cast
    assert any("returns float32" in d.message for d in report.errors)


def test_flags_stage_running_a_layer_the_uncut_program_prunes():
    # layers 5-7 are None in the uncut model; a rebuilt stage makes them real
    report = graphcheck.verify(spec("violations:none_layers"), [4], stage_builder="rebuild")
    extra = [d.message for d in report.errors if d.code == "GC303"]
    assert extra == [
        f"stage 1 runs global layer {g}, which the uncut program does not run" for g in (5, 6, 7)
    ]


def test_flags_stage_dropping_the_model_loop_rounding(tmp_path):
    # the stage adds layer updates in bf16 where the model's loop adds in fp32 and rounds once
    builder = tmp_path / "plain_loop.py"
    builder.write_text(
        "import types\n"
        "from graphcheck.model.layout import detect_layout\n"
        "from graphcheck.stages.builders import BUILTINS\n"
        "def plain(self, x, cos, sin, *varlen):\n"
        "    for layer in self.present_layers():\n"
        "        x = x + layer(x, cos, sin, *varlen)\n"
        "    return x\n"
        "def build(model, index, layers, num_stages):\n"
        "    layout = detect_layout(model)\n"
        "    stage = BUILTINS['keep-index'](model, layout, index, layers, num_stages)\n"
        "    stage.model.run_layers = types.MethodType(plain, stage.model)\n"
        "    return stage\n"
    )
    name = "violations:cast_in_loop"
    assert graphcheck.verify(spec(name), [4], stage_builder="keep-index").verdict == "pass"
    report = graphcheck.verify(spec(name), [4], stage_builder=f"{builder}:build")
    assert {d.code for d in report.errors} == {"GC303"}
    assert all("model-level work" in d.message for d in report.errors)


def test_unknown_builder_is_a_usage_error():
    with pytest.raises(graphcheck.UsageError):
        explorer("reference:reference").verify([4], stage_builder="keep-idx")


def test_real_hybrid_model_flips_attention_type_when_rebuilt():
    # qwen3_next: full attention on every 4th layer, gated delta rule elsewhere
    from hfcache import explorer as hf_explorer

    report = hf_explorer("hf:qwen3_next").verify([2], stage_builder="hf-rebuild")
    flips = sorted(d.message.split(":")[0] for d in report.errors if d.code == "GC301")
    assert flips == ["global layer 3", "global layer 5", "global layer 7"]
    assert "linear_attn" in report.errors[0].message and "self_attn" in report.errors[0].message


@pytest.mark.parametrize(("builder", "cut"), [("hf-rebuild", 4), ("hf-slice", 2)])
def test_real_hybrid_model_keeps_kernels(builder, cut):
    from hfcache import explorer as hf_explorer

    report = hf_explorer("hf:qwen3_next").verify([cut], stage_builder=builder)
    assert report.verdict == "pass"
    assert [d.code for d in report.diagnostics] == ["GC302"]  # the container is renumbered
