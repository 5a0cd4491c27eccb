"""torchtitan's own models, unadapted: verified through the ``torchtitan`` input
convention, staged by torchtitan's own pipeline split, and gated.

The models are torchtitan's ``debugmodel`` flavours cut to 2 layers
(fixtures/torchtitan_models.py). One cheap representative is fast (Llama 3, varlen,
cut 1, stage programs); every other model, the legal-cut map, the gate and the
flex and MoE variants are in the slow tuple (tests/conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from harness import spec

pytest.importorskip("torchtitan")

from graphcheck import api
from graphcheck.gate.run import gate
from graphcheck.rules import MISMATCH_CODES

LLAMA3 = spec("torchtitan_models:llama3")
MOE = {"deepseek_v3", "qwen3_moe", "gpt_oss"}  # the debug flavours with MoE layers


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
    crossing = {v.node: str(v.role) for v in llama3.cut(1).crossing}
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


@pytest.mark.parametrize(
    "name", ["qwen3", "deepseek_v3", "deepseek_v3_dense", "qwen3_moe", "gpt_oss"]
)
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


@pytest.mark.parametrize("name", ["llama3", "qwen3", "deepseek_v3", "deepseek_v3_dense", "gpt_oss"])
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
    for name in ("deepseek_v3", "qwen3_moe", "gpt_oss"):
        evaluated = api.verify(spec(f"torchtitan_models:{name}"), cuts=[1], program_mode="eval")
        assert (evaluated.verdict, evaluated.codes) == ("pass", set())


FLEX = ["llama3_flex", "qwen3_flex", "qwen3_moe_flex", "deepseek_v3_flex"]
ONE_BLOCK = [{"min": 2, "max": 128}, {"min": 129, "max": None}]  # T in one 128-token block


def _ranges(programs: list[dict]) -> list[dict]:
    return [{"min": p["min"], "max": p["max"]} for p in programs]


@pytest.mark.parametrize("name", FLEX)
def test_flex_attention_full_blocks_proven(name):
    """Flex attention: the mask built inside the program from positions. Its mask_mod,
    ``kv >= offsets[doc[q]]`` and causal (offsets scattered from the document starts), is
    proven document-local, and so are the BlockMask's full blocks (where the mask_mod is
    not applied): their tables are counted from the tile sums of that same mask. The
    export splits T at one block of 128 (torch's contiguity checks on the block-count dim
    ``ceil(T/128)`` take one branch for 1, another for more): two programs, T 2..128 and
    T >= 129, each proven with its stage programs, no GC403 left."""
    report = _verified_alone(name, "verify", "--cuts", "1")
    moe = {"GC404"} if name.removesuffix("_flex") in MOE else set()  # the MoE step state
    assert {d["code"] for d in report["diagnostics"]} == moe
    assert (report["verdict"], _ranges(report["tokens"]["programs"])) == ("pass", ONE_BLOCK)
    proof = report["stage_programs"]
    assert (proof["proven"], proof["builder"], proof["default"]) == (True, "torchtitan", True)
    assert len(proof["stages"]) == 2
    assert _verified_alone(name, "map")["legal_cuts"] == [0, 1, 2]


def _verified_alone(name: str, command: str, *flags: str) -> dict:
    """``graphcheck COMMAND --format json`` in a process of its own: run after other tests in
    one pytest worker, the flex models' stage programs have been seen to differ from the
    uncut program (GC301; llama3_flex once exported without its T <= 128 guard), which no
    fresh process reproduces; the claim here is about the export of a fresh process, as a
    user's run is. The cause (state an earlier compile leaves in the process) is open."""
    model = spec(f"torchtitan_models:{name}")
    done = subprocess.run([sys.executable, "-m", "graphcheck", command, model, *flags,
                           "--format", "json"], capture_output=True, text=True, timeout=1200,
                          check=False)  # fmt: skip
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    ("name", "docs"),
    [*((name, None) for name in [*FLEX, "gpt_oss_flex"]), ("llama3_flex", (50, 41, 29))],
)
def test_flex_gate_isolates_documents(name, docs):
    """The gate runs flex attention as the block-sparse kernels do (full blocks whole):
    equal bytes, documents isolated bit for bit, on the default 256 tokens (the program
    for T >= 129) and, for llama3, on 120 (the program for T <= 128, one block). In a
    process of its own, as ``_verified_alone`` says why."""
    flags = ["--cuts", "1", *(["--docs", ",".join(map(str, docs))] if docs else [])]
    data = _verified_alone(name, "gate", *flags)
    assert (data["bytes"]["status"], data["isolation"]["status"]) == ("equal", "bitwise")
    assert (data["static"]["verdict"], data["agrees"]) == ("pass", True)


def test_gpt_oss_sinks_windows_and_biased_experts():
    """GPT-OSS: each layer's varlen attention returns its log-sum-exp too, which scales
    the output by ``sigmoid(lse - sinks)`` token by token; layer 0 attends in a 128-token
    window, layer 1 in full; its stage programs build each layer's own choice (no
    difference). The experts' bias reaches the second stage as a replicated input."""
    from graphcheck.analysis.locality import bind

    explorer = api.Explorer(spec("torchtitan_models:gpt_oss"))
    report = explorer.verify([1])
    assert (report.verdict, report.errors, report.codes) == ("pass", [], {"GC404"})
    _staged_by_torchtitan(report)
    attention = [n for n in explorer.program.graph.nodes if "_varlen_attn" in str(n.target)]
    assert [list(bind(n)["window_size"]) for n in attention] == [[127, 0], [-1, 0]]
    assert all(any(u.args[1] == 1 and u.users for u in n.users) for n in attention)  # lse read
    crossing = {v.node: str(v.role) for v in report.cut(1).crossing}
    assert crossing["cu_seq_lens_q"] == crossing["b_layers_1_moe_expert_bias_e"] == "replicated"


def test_gpt_oss_flex_proven_in_two_programs():
    """GPT-OSS with flex attention: ``get_attention_masks`` returns a mapping (the full
    mask and the sliding-window one, each layer picking its own by name), rebuilt inside
    the program. Both mask_mods are proven, and both BlockMasks' full blocks, in both
    programs of llama3_flex's split of T at one block: PASS, every boundary legal."""
    report = _verified_alone("gpt_oss_flex", "verify", "--cuts", "1")
    assert (report["verdict"], {d["code"] for d in report["diagnostics"]}) == ("pass", {"GC404"})
    assert _ranges(report["tokens"]["programs"]) == ONE_BLOCK
    proof = report["stage_programs"]
    assert (proof["proven"], proof["builder"], len(proof["stages"])) == (True, "torchtitan", 2)
    assert _verified_alone("gpt_oss_flex", "map")["legal_cuts"] == [0, 1, 2]


@pytest.mark.parametrize(
    ("builder", "verdict"), [("by_global_index", "pass"), ("by_stage_position", "fail")]
)
def test_gpt_oss_window_flip_is_found_and_the_gate_agrees(builder, verdict):
    """A stage builder that builds a stage's ``j``-th layer from ``config.layers[j]``
    gives GPT-OSS's second stage layer 0's 128-token window: GC301 names the kernel's
    window. The gate, with a 200-token document (past the window; the default documents
    are all shorter), shows the logits differ from token 128 on. The twin building each
    layer from its own config: PASS, equal bytes."""
    stages = spec(f"torchtitan_stages:{builder}")
    report = api.verify(spec("torchtitan_models:gpt_oss"), cuts=[1], stage_builder=stages)
    assert report.verdict == verdict
    assert report.codes == ({"GC404"} if verdict == "pass" else {"GC301", "GC404"})
    flips = [d.message for d in report.diagnostics if d.code == "GC301"]
    assert all("window_size=[-1, 0]" in m and "window_size=[127, 0]" in m for m in flips)
    result = gate(spec("torchtitan_models:gpt_oss"), [1], stage_builder=stages, docs=(200, 56))
    assert result.bytes.status == ("equal" if verdict == "pass" else "differ")
    assert result.isolation.holds and result.static_verdict == verdict
