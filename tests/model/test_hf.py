"""``hf:`` specs, ``--set``, full-size configs, kernel stand-ins: the contract and its errors."""

from __future__ import annotations

import json
import sys

import pytest
import torch
import torch.nn.functional as F
from harness import ROOT
from hfcache import cut_map

from graphcheck.errors import ModelLoadError, UsageError
from graphcheck.kernels import BUILTIN, check_targets, patched
from graphcheck.kernels import custom_ops as ops
from graphcheck.kernels.standins import StandIn, load_kernels
from graphcheck.model.hf import build_config, hf_factory
from graphcheck.model.load import build_fake, fake_mode

CONFIGS = ROOT / "fixtures" / "configs"


# --- tiny configs from the family's own config class -------------------------------------


def test_tiny_config_keeps_the_family_layer_pattern():
    next_ = build_config("hf:qwen3_next")
    assert (next_.hidden_size, next_.num_attention_heads, next_.vocab_size) == (64, 4, 256)
    assert next_.layer_types == ["linear_attention"] * 3 + ["full_attention"] + [
        "linear_attention"
    ] * 3 + ["full_attention"]
    gemma = build_config("hf:gemma3_text", {"num_hidden_layers": 12})
    assert gemma.layer_types.count("full_attention") == 2  # every 6th layer
    assert gemma.tie_word_embeddings is True and gemma.use_cache is False


def test_multimodal_type_uses_its_text_config():
    assert build_config("hf:gemma3").model_type == "gemma3_text"
    assert build_config("hf:qwen3_5").model_type == "qwen3_5_text"


def test_settings_parse_as_json_else_string():
    config = build_config("hf:llama", {"num_hidden_layers": "4", "hidden_act": "gelu"})
    assert (config.num_hidden_layers, config.hidden_act) == (4, "gelu")
    assert build_config("hf:qwen3", {"attn_implementation": "eager"})._attn_implementation == (
        "eager"
    )


@pytest.mark.parametrize(
    ("spec", "settings", "error", "text"),
    [
        ("hf:lama", {}, UsageError, "unknown model type 'lama'.*llama"),
        ("hf:", {}, UsageError, "needs a model type"),
        ("hf:llama", {"num_hidden_layers": "abc"}, UsageError, "expected int"),
        ("hf:llama", {"num_attention_heads": "5"}, UsageError, "not a multiple"),
        ("hf:llama", {"no_such_key": "1"}, UsageError, "LlamaConfig has no such key"),
    ],
)
def test_bad_specs_and_settings_are_one_line_errors(spec, settings, error, text):
    with pytest.raises(error, match=text) as caught:
        build_config(spec, settings)
    assert "\n" not in str(caught.value)


# --- full-size configs -------------------------------------------------------------------


def test_full_config_is_the_real_shape_without_downloads():
    config = build_config(f"hf:{CONFIGS / 'deepseek-v3.json'}")
    assert (config.num_hidden_layers, config.hidden_size, config.n_routed_experts) == (
        61,
        7168,
        256,
    )
    assert getattr(config, "quantization_config", None) is None


def test_multimodal_config_json_uses_text_config_and_real_depth():
    config = build_config(f"hf:{CONFIGS / 'qwen3.5-35b-a3b.json'}")
    assert config.model_type == "qwen3_5_moe_text" and config.num_hidden_layers == 40
    shallow = build_config(f"hf:{CONFIGS / 'qwen3.5-35b-a3b.json'}", {"num_hidden_layers": 8})
    assert shallow.layer_types == config.layer_types[:8]


def test_config_directory_and_missing_fields(tmp_path):
    (tmp_path / "config.json").write_text((CONFIGS / "llama-3.1-8b.json").read_text())
    assert build_config(f"hf:{tmp_path}").num_hidden_layers == 32
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    with pytest.raises(ModelLoadError, match=r"missing required field.*num_hidden_layers"):
        build_config(f"hf:{broken}")
    with pytest.raises(ModelLoadError, match="config not found"):
        build_config(f"hf:{tmp_path / 'absent.json'}")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="not a JSON config"):
        build_config(f"hf:{tmp_path / 'bad.json'}")


def test_full_size_llama_8b_verifies_on_fake_weights():
    report = cut_map(f"hf:{CONFIGS / 'llama-3.1-8b.json'}")
    assert report.num_layers == 32 and report.verdict == "pass"
    assert report.legal_cuts() == list(range(33))


# --- the command line --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["map", "hf:not_a_family"], "unknown model type"),
        (["map", "hf:llama", "--set", "num_hidden_layers=abc"], "num_hidden_layers"),
        (["map", "hf:llama", "--set", "layers"], "is not KEY=VALUE"),
        (["map", "hf:llama", "--set", "bogus=1"], "has no such key"),
        (["map", str(ROOT / "fixtures/reference.py:reference"), "--set", "a=1"], "hf: models"),
        (["map", "hf:llama", "--kernels", "absent.py"], "kernels file not found"),
        (["map", "hf:llama", "--kernels", str(ROOT / "fixtures/reference.py")], "STAND_INS"),
    ],
)
def test_cli_errors_are_one_line_exit_2(cli, argv, text):
    code, out, err = cli(*argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and text in err


def test_cli_config_missing_fields_is_one_line_exit_2(cli, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3", "num_hidden_layers": 2}))
    code, out, err = cli("map", f"hf:{tmp_path}")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "missing required field(s): hidden_size, num_attention_heads" in err


def test_cli_set_and_map(cli):
    code, out, _ = cli("map", "hf:qwen3", "--set", "num_hidden_layers=2")
    assert code == 0
    assert "2 layers" in out and "legal cuts: 0, 1, 2" in out


# --- kernel stand-ins --------------------------------------------------------------------


def test_patching_is_undone_after_export():
    from transformers.models.qwen3_5 import modeling_qwen3_5 as modeling

    original = modeling.torch_chunk_gated_delta_rule
    model = build_fake(hf_factory("hf:qwen3_5", {"num_hidden_layers": 1}), fake_mode())
    with patched(model, BUILTIN) as names:
        assert modeling.torch_chunk_gated_delta_rule is not original
        assert f"{modeling.__name__}:causal_conv1d_fn" in names
    assert modeling.torch_chunk_gated_delta_rule is original


def test_bare_targets_patch_the_modules_of_the_models_classes():
    model = build_fake(hf_factory("hf:qwen3_5", {"num_hidden_layers": 1}), fake_mode())
    (stand_in,) = load_kernels(str(ROOT / "fixtures/kernels/example.py"))[:1]
    bare = type(stand_in)("causal_conv1d_fn", stand_in.replacement)
    with patched(model, [bare]) as names:
        assert names == ["transformers.models.qwen3_5.modeling_qwen3_5:causal_conv1d_fn"]


def _documents(total: int = 11) -> torch.Tensor:
    return torch.tensor([0, 4, total], dtype=torch.int32)


def test_gated_delta_rule_op_restarts_at_each_document():
    from transformers.models.qwen3_5 import modeling_qwen3_5 as modeling

    reference = modeling.torch_chunk_gated_delta_rule.__wrapped__
    torch.manual_seed(0)
    q, k = torch.randn(1, 11, 2, 8), torch.randn(1, 11, 2, 8)
    v, g, beta = torch.randn(1, 11, 4, 8), -torch.rand(1, 11, 4), torch.rand(1, 11, 4)
    out = ops.chunk_gated_delta_rule(q, k, v, g, beta, _documents(), 8**-0.5, True)
    for lo, hi in ((0, 4), (4, 11)):
        part = (x[:, lo:hi] for x in (q, k, v, g, beta))
        expected, _ = reference(*part, chunk_size=4, use_qk_l2norm_in_kernel=True)
        torch.testing.assert_close(out[:, lo:hi], expected, atol=1e-4, rtol=1e-4)


def test_causal_conv1d_op_restarts_at_each_document():
    torch.manual_seed(0)
    x, w = torch.randn(1, 3, 11), torch.randn(3, 4)
    out = ops.causal_conv1d(x, w, None, _documents(), "silu")
    for lo, hi in ((0, 4), (4, 11)):
        expected = F.silu(F.conv1d(x[..., lo:hi], w[:, None], padding=3, groups=3)[..., : hi - lo])
        torch.testing.assert_close(out[..., lo:hi], expected)


def test_varlen_attention_op_matches_sdpa_per_document():
    torch.manual_seed(0)
    q, k, v = torch.randn(11, 4, 8), torch.randn(11, 2, 8), torch.randn(11, 2, 8)
    cu = _documents()
    out = ops.varlen_attention(q, k, v, cu, cu, 7, 7, 8**-0.5, -1, True, 0.0, None)
    for lo, hi in ((0, 4), (4, 11)):
        qs, ks, vs = (t[lo:hi].transpose(0, 1) for t in (q, k, v))
        expected = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=True)
        torch.testing.assert_close(out[lo:hi], expected.transpose(0, 1), atol=1e-5, rtol=1e-5)
    sinks = ops.varlen_attention(q, k, v, cu, cu, 7, 7, 8**-0.5, 1, True, 30.0, torch.zeros(4))
    assert sinks.shape == out.shape and not torch.allclose(sinks, out)


def test_kernels_file_is_imported_once(tmp_path):
    file = tmp_path / "kernels.py"
    file.write_text("COUNT = [0]\nCOUNT[0] += 1\nSTAND_INS = {'x': print}\n")
    first, second = load_kernels(str(file)), load_kernels(str(file))
    assert first == second
    (module,) = [m for n, m in sys.modules.items() if n.startswith("graphcheck_kernels_") and
                 getattr(m, "__file__", None) == str(file)]  # fmt: skip
    assert module.COUNT == [1]


# --- method stand-ins: a per-document loop in Python becomes a custom op ------------------

FRAMEWORK = ROOT / "fixtures/framework.py:per_doc_loop"
METHOD_KERNELS = str(ROOT / "fixtures/kernels/method_standin.py")


def test_method_target_is_patched_in_the_class_and_restored_on_failure():
    import framework
    import reference

    model = build_fake(framework.per_doc_loop, fake_mode())
    stand_ins = (
        *load_kernels(METHOD_KERNELS),
        StandIn("ConvLM.forward", print),  # inherited: restored by deleting the override
        StandIn("DecoderLayer.forward", print),  # one class, seen from two modules
    )
    check_targets(model, (*BUILTIN, *stand_ins))  # the built-in ones: absent here, skipped
    originals = framework.ShortConv.per_document, reference.DecoderLayer.forward
    with pytest.raises(RuntimeError), patched(model, stand_ins) as names:
        assert framework.ShortConv.per_document is stand_ins[0].replacement
        assert [n.split(":")[1] for n in names] == [
            "ShortConv.per_document", "ConvLM.forward", "DecoderLayer.forward"
        ]  # fmt: skip
        raise RuntimeError("the export failed")
    assert (framework.ShortConv.per_document, reference.DecoderLayer.forward) == originals
    assert "forward" not in vars(framework.ConvLM)


def test_per_document_loop_exports_only_with_the_method_stand_in(cli):
    code, _, err = cli("verify", FRAMEWORK, "--cuts", "2")
    assert code == 2 and "torch.export failed" in err
    code, out, _ = cli("verify", FRAMEWORK, "--cuts", "2", "--kernels", METHOD_KERNELS)
    assert code == 0 and "diagnostics: none" in out and "verdict: PASS" in out


def test_gate_with_the_method_stand_in_gives_equal_bytes(cli):
    argv = ("--cuts", "2", "--kernels", METHOD_KERNELS, "--docs", "5,7", "--in-process")
    code, out, _ = cli("gate", FRAMEWORK, *argv)
    assert code == 0 and "staged vs uncut: EQUAL" in out


@pytest.mark.parametrize(
    ("target", "missing"),
    [
        ("ShortConv.nope", "ShortConv has no attribute 'nope'"),
        ("Nope.per_document", "no module of the model's classes has 'Nope'"),
        ("torch.nn:Linear.nope", "torch.nn.Linear has no attribute 'nope'"),
        ("no_such_module:ShortConv.forward", "cannot import module 'no_such_module'"),
    ],
)
def test_unresolved_kernels_target_is_one_line_exit_2(cli, tmp_path, target, missing):
    file = tmp_path / "kernels.py"
    file.write_text(f"STAND_INS = {{{target!r}: print}}\n")
    code, out, err = cli("verify", FRAMEWORK, "--cuts", "2", "--kernels", file)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"kernels target {target!r}: {missing}" in err
