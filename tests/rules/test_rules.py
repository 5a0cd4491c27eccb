"""What each rule finds beyond firing on its fixture: every cut, the crossing set, the
messages, more fixtures. That each code fires on its violating fixture and not on its
passing twin is tests/rules/test_rule_table.py."""

from __future__ import annotations

import pytest
from harness import cut_codes, cut_map, verify

INNER = range(1, 8)  # boundaries strictly between layers of the 8-layer fixtures


def test_allows_reference_at_every_boundary():
    report = cut_map("reference:reference")
    assert report.codes == set()
    assert report.legal_cuts() == list(range(9))


# GC102 misplaced-edge-module ---------------------------------------------------------------


def test_allows_final_norm_use_on_the_last_stage():
    # with the only cut at 1, the mid-stack use (read by layer 2) is on the last stage too
    assert "GC102" not in verify("violations:norm_mid_stack", (1,)).codes


# GC201 extra-activation-crosses-cut --------------------------------------------------------


@pytest.mark.parametrize(
    "fixture", ["hidden_residual_pair", "skip_connection", "collected_outputs"]
)
def test_flags_extra_activation(fixture):
    report = cut_map(f"violations:{fixture}")
    assert all("GC201" in cut_codes(report, k) for k in range(2, 8))


def test_allows_single_residual():
    report = cut_map("reference:reference")
    for k in range(9):
        assert len(report.cut(k).crossing) > 0
        assert [c.role for c in report.cut(k).crossing].count("activation") == 1


# GC202 boundary-not-bf16 --------------------------------------------------------------------


def test_flags_fp32_residual_stream():
    report = cut_map("violations:fp32_residual")
    assert all(cut_codes(report, k) == {"GC202"} for k in INNER)


def test_allows_bf16_rounding_in_model_loop():
    # (x.float() + layer(x).float()).to(bf16) in the model's own loop: the minimum cut
    # places the fp32 glue so that one bf16 value crosses
    assert cut_map("violations:cast_in_loop").codes == set()


# GC203 boundary-not-materialized ------------------------------------------------------------


def test_flags_fp32_twin():
    report = cut_map("violations:fp32_twin")
    assert all(cut_codes(report, k) == {"GC203"} for k in INNER)


def test_flags_view_of_larger_tensor():
    report = cut_map("violations:view_boundary")
    assert all(cut_codes(report, k) == {"GC203"} for k in range(1, 9))


# GC204 boundary-not-layer-output -----------------------------------------------------------


def test_flags_value_not_from_previous_layer():
    report = cut_map("violations:not_layer_output")
    assert all(cut_codes(report, k) == {"GC204"} for k in INNER)


def test_allows_pruned_layers_between_cuts():
    # layers 5..7 are None: boundaries 5..8 hand layer 4's output to the output modules
    assert cut_map("violations:none_layers").codes == set()


# GC205 parameter-shared-across-stages ------------------------------------------------------


def test_flags_tied_embeddings():
    report = cut_map("violations:tied_embeddings")
    assert all(cut_codes(report, k) == {"GC205"} for k in range(9))
    shared = [c for c in report.cut(4).crossing if c.role == "parameter"]
    assert len(shared) == 1


def test_flags_a_buffer_on_a_parameters_storage():
    """``register_buffer(..., embed.weight.detach(), persistent=False)`` read by the
    head: one weight on the first and the last stage, named parameter and buffer."""
    report = cut_map("violations:buffer_tied_embeddings")
    for k in range(9):  # the embedding left of every cut, the head right of it
        found = [d for d in report.errors if d.code == "GC205" and d.cut == k]
        assert len(found) == 1, k
        assert found[0].message.startswith(
            "parameter model.embed_tokens.weight and buffer lm_head.weight share one storage"
        )


def test_a_buffer_on_a_storage_of_its_own_is_not_shared():
    assert cut_map("violations:buffer_own_head").codes == set()


# GC401 varlen-metadata-not-consumed --------------------------------------------------------


def test_flags_attention_without_document_mask():
    report = cut_map("violations:ignores_cu_seqlens")
    assert report.codes == {"GC401"}
    assert len(report.diagnostics) == 8  # one per layer's attention


def test_allows_sdpa_with_document_mask():
    assert cut_map("violations:sdpa_doc_mask").codes == set()


# GC402 positions-fabricated ----------------------------------------------------------------


def test_flags_positions_from_arange():
    report = cut_map("violations:arange_positions")
    assert report.codes == {"GC402"}
    assert report.legal_cuts() == []


def test_flags_learned_positions_looked_up_with_arange():
    assert cut_map("violations:learned_positions_arange").codes == {"GC402"}


# GC403 shape-specialized --------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["length_guard", "specialized_length"])
def test_flags_guard_on_length(fixture):
    assert cut_map(f"violations:{fixture}").codes == {"GC403"}


# GC501 non-bf16-parameter ------------------------------------------------------------------


def test_flags_fp32_parameter():
    report = verify("violations:fp32_param", (4,))
    assert report.codes == {"GC501"}
    (diag,) = report.diagnostics
    assert diag.module == "model.layers.2.post_attention_layernorm.weight"
    assert diag.stage == 0


def test_allows_allowlisted_fp32_parameter():
    assert cut_map("violations:fp32_allowlisted").codes == set()


def test_allow_fp32_flag_extends_the_allowlist():
    report = verify("violations:fp32_param", (4,), allow_fp32=("*.post_attention_layernorm.*",))
    assert report.codes == set()


def test_flags_eager_attention_with_causal_only_mask():
    # the causal mask compares two token indices (translation invariant: not GC402); it
    # does not separate documents, so the softmax over keys mixes them
    report = cut_map("violations:eager_causal_only")
    assert report.codes == {"GC401"}
    assert {d.message.split(":")[0] for d in report.errors} == {
        "softmax over the token dimension without a document mask"
    }


def test_allows_eager_attention_with_document_mask():
    assert cut_map("violations:eager_doc_mask").codes == set()


def test_flags_sequence_mixing_hidden_in_control_flow():
    # fail closed: graphcheck cannot see which mask a softmax inside torch.cond reads
    import torch
    from reference import CausalLM, Decoder, DecoderLayer

    import graphcheck

    class CondLayer(DecoderLayer):
        def forward(self, x, cos, sin, *varlen):
            def attend(x):
                return torch.softmax(x @ x.transpose(1, 2), -1) @ x

            return torch.cond(x.sum() > 0, attend, lambda x: x * 2, (x,))

    class CondDecoder(Decoder):
        layer_class = CondLayer

    class CondLM(CausalLM):
        decoder_class = CondDecoder

    assert "GC401" in graphcheck.cut_map(CondLM).codes
