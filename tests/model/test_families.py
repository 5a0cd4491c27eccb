"""The coverage matrix: transformers families on tiny configs, fake weights, symbolic T and N.

Every family is built from its own config class (``hf:<model_type>``), attends
through ``graphcheck_varlen`` and runs the built-in kernel stand-ins. Each is
exported once (:mod:`hfcache`); its cut map and a verify at cut 4 are judged
from that export.
"""

from __future__ import annotations

import pytest
from harness import ROOT
from hfcache import FAMILIES, custom_ops, cut_map, explorer

from graphcheck.errors import ExportError

ALL = list(FAMILIES)
PASSING = ["llama", "qwen3", "qwen3_5"]
MOE = ["qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3", "qwen3_next", "qwen3_5_moe"]


def hf(family: str) -> str:
    return f"hf:{family}"


@pytest.mark.parametrize("family", ALL)
def test_every_cut_carries_one_bf16_residual(family):
    """Judged cut by cut, every boundary of every family is proven."""
    report = cut_map(hf(family))
    assert report.num_layers == 8
    for cut in report.cuts:
        if family == "gemma3_text":  # tied embeddings: GC205 at every cut, nothing else
            assert set(cut.codes) == {"GC205"}, (cut.position, cut.codes)
        else:
            assert cut.verdict == "pass", (cut.position, cut.codes)
        (act,) = [c for c in cut.crossing if c.role == "activation"]
        assert act.dtype == "bfloat16"


@pytest.mark.parametrize("family", PASSING)
def test_dense_families_pass_at_every_legal_cut(family):
    report = cut_map(hf(family))
    assert report.verdict == "pass", [(d.code, d.message) for d in report.errors]
    assert report.legal_cuts() == list(range(9))
    assert explorer(hf(family)).verify([4]).verdict == "pass"


def test_tied_embeddings_fire_gc205_where_the_family_ties():
    report = explorer(hf("gemma3_text")).verify([4])
    assert report.codes == {"GC205"}
    (diag,) = report.errors
    assert diag.module == "lm_head.weight" and "model.embed_tokens.weight" in diag.message


def test_untied_gemma3_passes():
    report = cut_map(hf("gemma3_text"), settings=(("tie_word_embeddings", False),))
    assert report.verdict == "pass" and report.legal_cuts() == list(range(9))


@pytest.mark.parametrize("family", MOE)
def test_moe_families_pass_at_every_legal_cut(family):
    # the experts' token permutation (inv_perm[perm] = arange(T * top_k); out[inv_perm])
    # picks rows: it is not a position, so GC402 stays silent
    allow = ("*.mlp.gate.weight",) if family == "deepseek_v3" else ()
    report = cut_map(hf(family), allow_fp32=allow)
    assert report.verdict == "pass", sorted(report.codes)
    assert report.legal_cuts() == list(range(9))


def test_fp32_router_is_reported_unless_allowed():
    report = cut_map(hf("deepseek_v3"))
    fp32 = [d for d in report.errors if d.code == "GC501"]
    assert fp32 and all(d.module.endswith(".mlp.gate.weight") for d in fp32)
    allowed = cut_map(hf("deepseek_v3"), allow_fp32=("*.mlp.gate.weight",))
    assert "GC501" not in allowed.codes


@pytest.mark.parametrize(
    ("family", "per_layer"),
    [("llama", 8), ("gemma3_text", 8), ("gpt_oss", 8), ("deepseek_v3", 8), ("qwen3_5", 2)],
)
def test_one_attention_node_per_layer_sees_the_boundaries(family, per_layer):
    ops = custom_ops(hf(family))
    nodes = ops.get("torch_attn._varlen_attn.default", []) + ops.get(
        "graphcheck.varlen_attention.default", []
    )
    assert len(nodes) == per_layer
    for node in nodes:
        assert [a.name for a in node.args[3:5]] == ["cu_seq_lens_q", "cu_seq_lens_k"]


def test_window_scale_and_sinks_are_arguments():
    """gpt_oss alternates 128-token windows with full attention and has sinks."""
    nodes = custom_ops(hf("gpt_oss"))["graphcheck.varlen_attention.default"]
    windows = [node.args[8] for node in nodes]
    assert windows == [127, -1] * 4
    assert all(node.args[7] == 0.25 for node in nodes)  # head_dim 16
    assert all(node.args[11].name.endswith("self_attn_sinks") for node in nodes)
    gemma = custom_ops(hf("gemma3_text"))["torch_attn._varlen_attn.default"]
    assert [n.args[9] for n in gemma].count([-1, 0]) == 1  # one full layer in 8 (pattern 6)


@pytest.mark.parametrize("family", ["qwen3_next", "qwen3_5", "qwen3_5_moe"])
def test_hybrids_export_shape_generic_through_the_stand_ins(family):
    program = explorer(hf(family)).program
    assert program.exported.guards == []
    assert "GC403" not in cut_map(hf(family)).codes
    ops = custom_ops(hf(family))
    for name in ("graphcheck.chunk_gated_delta_rule.default", "graphcheck.causal_conv1d.default"):
        assert len(ops[name]) == 6  # 3 linear-attention layers in every 4
        assert all("cu_seq_lens_q" in [a.name for a in n.all_input_nodes] for n in ops[name])


@pytest.mark.parametrize("family", ["qwen3_5", "qwen3_next"])
def test_without_stand_ins_transformers_refuses_packed_linear_attention(family):
    """What actually happens: the CPU fallback raises rather than mix documents."""
    with pytest.raises(ExportError, match="can't keep packed sequences apart"):
        _ = explorer(hf(family), stand_ins=False).program


def test_torch_fallback_without_boundaries_leaks_and_specialises():
    """The fallback as it ran before transformers refused: it guards T and mixes documents."""
    report = cut_map(
        hf("qwen3_5"),
        settings=(("num_hidden_layers", 1),),
        stand_ins=False,
        kernels=str(ROOT / "fixtures/kernels/torch_fallback.py"),
    )
    assert {"GC401", "GC403"} <= report.codes
    leaks = {d.module for d in report.errors if d.code == "GC401"}
    assert leaks == {"model.layers.0.linear_attn"}


def test_eager_gpt_oss_mask_ignores_document_boundaries():
    """gpt_oss through its own eager attention: the packed mask ignores position_ids."""
    report = cut_map(hf("gpt_oss"), settings=(("attn_implementation", "eager"),))
    leaks = {d.module for d in report.errors if d.code == "GC401"}
    assert leaks == {f"model.layers.{i}.self_attn" for i in range(8)}


def test_user_kernels_file_replaces_the_builtin_stand_ins():
    spec = hf("qwen3_5")
    options = {"stand_ins": False, "kernels": str(ROOT / "fixtures/kernels/example.py")}
    report = cut_map(spec, **options)
    assert report.verdict == "pass"
    ops = custom_ops(spec, **options)
    assert len(ops["example.gated_delta_rule.default"]) == 6
    assert "graphcheck.chunk_gated_delta_rule.default" not in ops
