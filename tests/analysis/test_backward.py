"""The backward program proven (graphcheck/analysis/backward.py, ``--backward``).

The joint program of the exported forward is interpreted op by op like the forward; a
parameter's gradient may sum every token, nothing else of the backward may mix
documents. fixtures/trained_kernels.py holds a norm whose forward keeps to its token
with a per-token backward (proven), one whose backward centres over the tokens (GC401
in the backward, at the norm) and an autograd.Function (its own backward is not in the
export: GC401, fail closed). The gate's --train gradient tests agree.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from harness import ROOT, RuleExplorer, explorer, spec

from graphcheck.gate import Gate

KERNELS = str(ROOT / "fixtures/kernels/trained.py")


def _report(name: str, **options):
    found = explorer(name, kernels=KERNELS if "trained" in name else None, **options)
    return found.verify([4])


def _backward(report) -> list:
    return [d for d in report.errors if d.node and d.node.endswith("(backward)")]


def test_the_reference_decoders_backward_is_proven():
    report = _report("reference:reference", backward=True)
    assert (report.verdict, report.codes) == ("pass", set())
    assert report.backward["checked"] and report.backward["proven"]
    assert report.backward["ops"] > 1500  # the joint program, forward and backward
    assert report.as_dict()["backward"]["proven"] is True


def test_a_custom_ops_own_per_token_backward_is_proven():
    report = _report("trained_kernels:norm_with_backward", backward=True)
    assert (report.verdict, report.codes) == ("pass", set())
    assert report.backward["proven"]


def test_a_backward_that_mixes_documents_is_gc401_at_the_module_it_differentiates():
    report = _report("trained_kernels:norm_backward_over_tokens", backward=True)
    assert report.codes == {"GC401"}
    (found,) = _backward(report)
    assert found.message.startswith(
        "in the backward program: mean over the token dimension without a document mask"
    )
    assert found.module == "model.layers.7.post_attention_layernorm"
    assert found.layer == 7
    assert not report.backward["proven"]
    assert [c.verdict for c in report.cuts] == ["pass"]  # the forward crossing is sound


@pytest.mark.parametrize("attention", [None, "sdpa"])
def test_a_transformers_decoders_backward_is_proven(attention):
    """With sdpa the joint program rebuilds transformers' packed mask from decomposed
    ops (``diff`` as ``cat`` and slices, ``where`` of ``scalar_tensor`` fills): still
    proven, as the forward is."""
    settings = {"num_hidden_layers": 2, **({"attn_implementation": attention} if attention else {})}
    report = RuleExplorer("hf:llama", settings=settings, backward=True).verify([1])
    assert (report.verdict, report.codes) == ("pass", set())
    assert report.backward["proven"]


@pytest.mark.parametrize("family", ["qwen3_moe", "gpt_oss", "gemma2"])
def test_moe_and_stand_in_backwards_are_proven(family):
    """Token-choice MoE: each gather's backward scatters the gradient back through the
    same permutation, each expert weight's gradient sums its own group; gemma2: the
    varlen stand-in's own backward, and a tied embedding read under one name only."""
    settings = {"num_hidden_layers": 2}
    report = RuleExplorer(f"hf:{family}", settings=settings, backward=True).verify([1])
    assert report.backward["proven"], [d.message for d in report.errors]


def test_torchtitan_style_moe_backward_is_proven_and_the_gate_agrees_up_to_sum_order():
    """The combine's scatter-add of rows has a gather of rows as its backward. An expert
    weight's gradient sums its group's rows in the order the routing of every token
    sorts them: with these documents the gate sees that order change one expert
    weight's gradient at rounding level (docs/soundness.md, the backward program)."""
    fixture = "moe_rows:titan_moe"
    found = explorer(fixture, backward=True)
    assert found.verify([2]).backward["proven"]
    gated = Gate(spec(fixture), explorer=found).run([2], docs=(23, 9, 31, 4), train=True)
    assert gated.static_verdict == "pass" and gated.isolation.forward_holds
    grads = gated.isolation.gradients
    assert grads.shift.holds  # every input gradient stays its document's
    crossing = grads.perturb.crossing
    assert crossing is None or (
        crossing.gradient == "parameter"
        and crossing.parameter.endswith("mixer.w_e")
        and crossing.max_abs_diff < 1e-5
    ), crossing


def test_embedding_gradients_scaled_by_frequency_are_gc401_at_the_embedding():
    report = _report("trained_kernels:embedding_scaled_by_frequency", backward=True)
    (found,) = _backward(report)
    assert "scale_grad_by_freq" in found.message
    assert found.module == "model.embed_tokens"


def test_a_backward_that_fixes_the_length_is_refused_and_the_forward_stays_symbolic():
    found = RuleExplorer("hf:deepseek_v3", settings={"num_hidden_layers": 2}, backward=True)
    report = found.verify([1])
    refused = [d for d in report.errors if d.message.startswith("backward not proven")]
    assert len(refused) == 1 and "fixed T to 29" in refused[0].message
    assert report.codes == {"GC401", "GC501"}  # as without the flag, but the refusal
    ids = next(n for n in found.program.graph.nodes if n.name == "input_ids")
    assert str(ids.meta["val"].shape[1]) == "s70"  # what the trace fixed was taken back


def test_without_the_flag_the_pass_says_the_backward_was_not_proven():
    report = _report("trained_kernels:norm_backward_over_tokens")
    assert report.verdict == "pass"
    assert report.backward == {"checked": False}


def test_an_autograd_function_whose_own_backward_is_per_token_is_proven_by_running_it():
    report = _report("trained_kernels:function_norm", backward=True)
    assert (report.verdict, report.codes) == ("pass", set())
    source = (ROOT / "fixtures/trained_kernels.py").read_text().splitlines()
    line = source.index("class _Function(torch.autograd.Function):") + 1
    assert report.backward["validated"] == [f"_Function (fixtures/trained_kernels.py:{line})"]
    assert report.backward["functions"] == [] and report.backward["proven"]


def test_an_autograd_function_whose_own_backward_mixes_tokens_is_gc401_naming_it():
    report = _report("trained_kernels:function_norm_backward_over_tokens", backward=True)
    assert report.codes == {"GC401"}
    (found,) = report.errors
    source = (ROOT / "fixtures/trained_kernels.py").read_text().splitlines()
    line = source.index("class _FunctionCentred(_Function):") + 1
    where = f"_FunctionCentred (fixtures/trained_kernels.py:{line})"
    assert found.message.startswith(f"backward not proven: `{where}` is a torch.autograd.Function")
    assert "Run alone, over 15 tokens, token 0's input gradient changed when the other " in (
        found.message
    )
    assert report.backward["functions"] == [where] and not report.backward["proven"]


def test_an_autograd_function_that_does_not_run_on_random_values_stays_unproven():
    from graphcheck.kernels.functions import FunctionCall, TensorArg, validate_function

    class Picky(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, index):
            return x[index.long() + 100]  # reads rows the random indices do not have

        @staticmethod
        def backward(ctx, grad):
            return grad, None

    args = (TensorArg((None, 4), torch.float32, True), TensorArg((None,), torch.int64, False))
    check = validate_function(FunctionCall("Picky", Picky, args))
    assert check.status == "trusted, not verified" and "raised IndexError" in check.detail
    unseen = validate_function(FunctionCall("Unseen", Picky, None))
    assert unseen.status == "trusted, not verified" and "not seen" in unseen.detail


def test_backward_in_eval_mode_is_a_usage_error():
    run = subprocess.run(
        [sys.executable, "-m", "graphcheck", "verify", spec("reference:reference"),
         "--cuts", "4", "--mode", "eval", "--backward"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "graphcheck: error: --backward proves the training step's backward: it needs --mode train"
    ]


@pytest.mark.parametrize(
    ("name", "static", "isolated"),
    [
        ("norm_with_backward", "pass", True),
        ("norm_backward_over_tokens", "fail", False),
        # its own backward, run as a per-token op
        ("function_norm", "pass", True),
        ("function_norm_backward_over_tokens", "fail", False),
        ("embedding_scaled_by_frequency", "fail", False),
    ],
)
def test_the_gate_with_train_agrees(name, static, isolated):
    fixture = f"trained_kernels:{name}"
    gate = Gate(spec(fixture), kernels=KERNELS, backward=True)
    gated = gate.run([4], docs=(23, 9, 31, 4), train=True)
    assert gated.static_verdict == static
    assert gated.isolation.forward_holds  # the forward keeps documents apart in every one
    assert gated.isolation.gradients.holds is isolated, gated.isolation.gradients
