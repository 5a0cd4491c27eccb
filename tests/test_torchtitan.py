"""torchtitan's own models, unadapted: verified through the ``torchtitan`` input
convention, staged by torchtitan's own pipeline split, and gated.

The models are torchtitan's ``debugmodel`` flavours cut to 2 layers
(fixtures/torchtitan_models.py). One cheap representative is fast (Llama 3, varlen,
cut 1, stage programs); every other model, the legal-cut map, the gate and the
flex and MoE variants are in the slow tuple (tests/conftest.py).
"""

from __future__ import annotations

import pytest
from harness import spec

pytest.importorskip("torchtitan")

from graphcheck import api
from graphcheck.gate.run import gate
from graphcheck.rules import MISMATCH_CODES

LLAMA3 = spec("torchtitan_models:llama3")
MOE = {"deepseek_v3", "qwen3_moe"}  # the debug flavours with MoE layers


def _verified(name: str):
    return api.verify(spec(f"torchtitan_models:{name}"), cuts=[1])


def _staged_by_torchtitan(report) -> None:
    proof = report.stage_proof
    assert (proof.proven, proof.builder, proof.default) == (True, "torchtitan", True)
    assert len(report.stage_programs) == 2
    assert not {d.code for d in report.errors} & set(MISMATCH_CODES)


@pytest.fixture(scope="module")
def llama3():
    return api.verify(LLAMA3, cuts=[1])


def test_llama3_verifies_unadapted_with_torchtitans_stages(llama3):
    assert (llama3.verdict, llama3.codes) == ("pass", set())
    _staged_by_torchtitan(llama3)
    crossing = {v.node.name: str(v.role) for v in llama3.cut(1).crossing}
    # the masks torchtitan builds from positions reach the second stage as its inputs
    assert crossing["position_ids"] == crossing["cu_seq_lens_q"] == "replicated"
    assert [v.shape for v in llama3.cut(1).crossing if str(v.role) == "activation"] == [
        ["1", "T", "256"]
    ]


def test_llama3_layout_is_found_without_flags():
    from graphcheck.model.session import Session

    layout = Session(LLAMA3).layout
    assert (layout.layer_prefix, layout.input_fqns, layout.output_fqns) == (
        "layers", ("tok_embeddings",), ("norm", "lm_head"),
    )  # fmt: skip
    assert layout.layer_keys == {"0": 0, "1": 1}


def test_llama3_map_judges_every_boundary():
    report = api.cut_map(LLAMA3)
    assert [c.position for c in report.cuts] == [0, 1, 2]
    assert all(c.verdict == "pass" for c in report.cuts)


@pytest.mark.parametrize("name", ["qwen3", "deepseek_v3", "deepseek_v3_dense", "qwen3_moe"])
def test_verifies_unadapted(name):
    """Verified at cut 1 with torchtitan's own stages, and every boundary of the map is
    legal. The MoE models in ``model.train()`` add the tokens per expert of all
    documents into ``tokens_per_expert_E``, a buffer no forward reads (the optimizer
    hook's load-balancing statistic): the GC404 warning, and no error."""
    report = _verified(name)
    assert (report.verdict, report.errors) == ("pass", [])
    _staged_by_torchtitan(report)
    assert report.codes == ({"GC404"} if name in MOE else set())
    warned = [d.message for d in report.diagnostics if d.code == "GC404"]
    assert all(".moe.tokens_per_expert_E accumulates" in m for m in warned), warned
    mapped = api.cut_map(spec(f"torchtitan_models:{name}"))
    assert [(c.position, c.verdict) for c in mapped.cuts] == [(0, "pass"), (1, "pass"), (2, "pass")]


@pytest.mark.parametrize("name", ["llama3", "qwen3", "deepseek_v3", "deepseek_v3_dense"])
def test_gate_equal_bytes_and_bitwise_isolation(name):
    result = gate(spec(f"torchtitan_models:{name}"), [1])
    assert result.exit_code == 0
    data = result.as_dict()
    assert data["bytes"]["status"] == "equal"
    assert data["isolation"]["status"] == "bitwise"


def test_moe_routing_is_proven_token_wise():
    """torchtitan's MoE routing (argsort dispatch, tokens per expert from the one-hot
    routing map, the grouped matmul, ``torchtitan::deterministic_scatter_add``) is proven
    row by row, in ``model.eval()`` with no finding at all."""
    for name in ("deepseek_v3", "qwen3_moe"):
        evaluated = api.verify(spec(f"torchtitan_models:{name}"), cuts=[1], program_mode="eval")
        assert (evaluated.verdict, evaluated.codes) == ("pass", set())


FLEX = ["llama3_flex", "qwen3_flex", "qwen3_moe_flex", "deepseek_v3_flex"]
ONE_BLOCK = "is limited to 2..128"  # T within one block of 128 tokens: GC403


@pytest.mark.parametrize("name", FLEX)
def test_flex_attention_full_blocks_proven(name):
    """Flex attention: the mask built inside the program from positions. Its mask_mod,
    ``kv >= offsets[doc[q]]`` and causal (offsets scattered from the document starts), is
    proven document-local, and so are the BlockMask's full blocks (where the mask_mod is
    not applied): their tables are counted from the tile sums of that same mask. What
    remains is GC403: the export splits T at one block of 128 (torch's contiguity checks
    on the block-count dim ``ceil(T/128)`` take one branch for 1, another for more), so
    the example T proves T <= 128 only. The stage programs show no difference."""
    report = _verified(name)
    moe = {"GC404"} if name.removesuffix("_flex") in MOE else set()  # the MoE step state
    assert report.codes == {"GC403"} | moe
    assert any(ONE_BLOCK in d.message for d in report.diagnostics)
    _staged_by_torchtitan(report)


@pytest.mark.parametrize("name", FLEX)
def test_flex_gate_isolates_documents(name):
    """The gate runs flex attention as the block-sparse kernels do (full blocks whole):
    equal bytes, documents isolated bit for bit."""
    result = gate(spec(f"torchtitan_models:{name}"), [1])
    data = result.as_dict()
    assert (data["bytes"]["status"], data["isolation"]["status"]) == ("equal", "bitwise")
