"""Liger's fused kernels, proven through graphcheck's built-in stand-ins
(graphcheck/kernels/liger.py).

The stand-ins compute what the transformers modules Liger replaces compute, bitwise,
forward and backward; a model patched with ``apply_liger_kernel_to_llama`` proves
with no kernels file, names the stand-ins it ran, and the gate agrees; a stand-in is
proven like any code (the norm over the tokens is GC401); a Liger kernel without a
stand-in is refused, naming the Triton launch. fixtures/liger.py patches transformers
for its process, so the model runs here in fresh processes only.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from harness import ROOT, fresh_process
from transformers import LlamaConfig
from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
from transformers.models.llama.modeling_llama import (
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)

from graphcheck.kernels import BUILTIN, liger

LIGER = str(ROOT / "fixtures/liger.py")


def _bf16(*shape: int, grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.bfloat16).requires_grad_(grad)


def _grads(out: torch.Tensor, inputs, seed: int = 1) -> list[torch.Tensor]:
    torch.manual_seed(seed)
    return list(torch.autograd.grad(out, inputs, torch.randn_like(out)))


@pytest.mark.parametrize(
    ("norm", "offset", "mode"),
    [(LlamaRMSNorm, 0.0, "llama"), (Gemma3RMSNorm, 1.0, "gemma")],
)
def test_the_rms_norm_stand_in_computes_the_transformers_norm_bitwise(norm, offset, mode):
    torch.manual_seed(0)
    x, module = _bf16(1, 9, 64, grad=True), norm(64, eps=1e-6).to(torch.bfloat16)
    module.weight.data.normal_()
    ours = liger.rms_norm(x, module.weight, 1e-6, offset, mode)
    theirs = module(x)
    assert torch.equal(ours, theirs) and ours.dtype == torch.bfloat16
    inputs = (x, module.weight)
    assert all(map(torch.equal, _grads(ours, inputs), _grads(theirs, inputs)))


def test_the_fused_add_norm_returns_the_residual_sum_and_its_norm():
    torch.manual_seed(0)
    x, r, module = _bf16(1, 5, 64), _bf16(1, 5, 64), LlamaRMSNorm(64).to(torch.bfloat16)
    y, s = liger.fused_add_rms_norm(x, r, module.weight, 1e-6)
    assert torch.equal(s, x + r) and torch.equal(y, module(x + r))


def test_the_rope_stand_in_rotates_as_transformers_does_bitwise():
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, num_attention_heads=4, head_dim=16)
    x = _bf16(1, 7, 64)
    cos, sin = LlamaRotaryEmbedding(config)(x, torch.arange(7)[None])
    q, k = _bf16(1, 4, 7, 16, grad=True), _bf16(1, 2, 7, 16, grad=True)
    ours, theirs = liger.rope(q, k, cos, sin), apply_rotary_pos_emb(q, k, cos, sin)
    assert all(map(torch.equal, ours, theirs))
    assert all(map(torch.equal, _grads(ours[0], q), _grads(theirs[0], q)))


def test_a_partial_rotary_width_leaves_the_other_dims_alone():
    q, k = _bf16(1, 2, 3, 8), _bf16(1, 2, 3, 8)
    cos, sin = torch.ones(1, 3, 4, dtype=torch.bfloat16), torch.zeros(1, 3, 4, dtype=torch.bfloat16)
    out_q, _ = liger.rope(q, k, cos * 0, sin + 1)  # a quarter turn of the first 4 dims
    assert torch.equal(out_q[..., 4:], q[..., 4:])
    assert torch.equal(out_q[..., :2], -q[..., 2:4])


def test_the_gated_products_match_the_activations_they_fuse():
    a, b = _bf16(6, 32), _bf16(6, 32)
    assert torch.equal(liger.silu_mul(a, b), F.silu(a) * b)
    assert torch.equal(liger.gelu_mul(a, b), F.gelu(a, approximate="tanh") * b)
    assert torch.equal(liger.fused_gate_up_silu_mul(torch.cat([a, b], -1)), F.silu(a) * b)
    scaled = (F.silu(a.float() * 0.5).to(b.dtype) * b) * 2
    assert torch.equal(liger.silu_mul(a, b, 0.5, 2.0), scaled)


def test_a_casting_mode_the_stand_in_does_not_know_is_refused():
    with pytest.raises(ValueError, match="casting mode 'fp8'"):
        liger.rms_norm(_bf16(2, 4), None, 1e-6, casting_mode="fp8")


def test_every_liger_function_with_a_stand_in_is_a_builtin_target():
    targets = {s.target for s in BUILTIN}
    assert set(liger.STAND_INS) <= targets
    assert "liger_kernel.ops:LigerRMSNormFunction.apply" in targets


def _run(*argv: str):
    done = fresh_process(["verify", *argv, "--cuts", "1", "--no-cache", "--stage-builder", "none"])
    return done.returncode, done.stdout, done.stderr


def test_a_liger_patched_llama_proves_without_a_kernels_file():
    code, out, err = _run(f"{LIGER}:llama", "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["verdict"] == "pass"
    assert report["stand_ins"] == [
        "liger_kernel.ops.rms_norm:LigerRMSNormFunction.apply",
        "liger_kernel.ops.rope:LigerRopeFunction.apply",
        "liger_kernel.ops.swiglu:LigerSiLUMulFunction.apply",
    ]


def test_a_stand_in_is_proven_not_trusted():
    code, out, _ = _run(f"{LIGER}:norm_over_tokens")
    assert code == 1
    assert "GC401" in out and "mean over the token dimension" in out
    assert "in model.norm" in out


def test_a_liger_kernel_without_a_stand_in_is_refused_naming_the_call():
    code, _, err = _run(f"{LIGER}:neighborhood_attention")
    assert code == 2
    assert "LigerFusedNeighborhoodAttentionFunction.apply" in err
    assert "hint: a Triton kernel does not run on a CPU or export" in err


def test_a_transformers_model_with_a_key_value_cache_is_refused_before_export(tmp_path, cli):
    model = tmp_path / "cached.py"
    model.write_text(
        "from transformers import LlamaConfig, LlamaForCausalLM\n"
        "def build():\n"
        "    return LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128,\n"
        "        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,\n"
        "        vocab_size=128))\n"
    )
    code, _, err = cli("verify", f"{model}:build", "--cuts", "1")
    assert code == 2
    assert err.count("\n") == 1
    assert "use_cache=True" in err and "documents attend to each other" in err


@pytest.mark.parametrize(("name", "verdict"), [("llama", "PASS"), ("norm_over_tokens", "FAIL")])
def test_the_gate_agrees_on_the_liger_models(name, verdict):
    done = fresh_process(["gate", f"{LIGER}:{name}", "--cuts", "1", "--train"])
    assert f"agrees with the static proof: {verdict}" in done.stdout, done.stdout + done.stderr


def test_the_backward_of_a_liger_llama_is_proven():
    code, out, err = _run(f"{LIGER}:llama", "--backward")
    assert code == 0, err
    assert "backward: proven" in out
