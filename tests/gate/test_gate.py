"""The byte gate: the static verdict agrees with executed bytes on CPU.

The gate runs the uncut model and each stage in its own fresh process (the
default); fixtures that are not pipeline-aware (their stages cannot be built by
pruning) run in the secondary in-process mode, the exported graph partitioned
by the proof. The state fixtures of ``fixtures/gate_state.py`` show what only
the process-per-stage run can: a flag set by an earlier layer, a class counter
that does not restart, a storage shared across stages after one optimizer step.

The agreement test runs a representative subset of fixtures and cuts (each
fixture costs one export, about a second): every passing twin that reaches a
different code path (varlen attention, fp32 glue in the model loop, SDPA with a
document mask, a declared pipeline config, pruned layers) and one violating
fixture per way the bytes can differ (an fp32 residual rounded on the wire;
a second activation, an fp32 twin or a skip connection the wire does not
carry; documents merged by the attention mask; an export that holds for some
lengths only; layers out of order). ``GRAPHCHECK_GATE_ALL=1`` runs every
fixture at every cut, as ``benchmarks/gate_agreement.py`` does for the README.
"""

from __future__ import annotations

import importlib
import json
import os
from functools import cache

import pytest
import torch
from harness import spec
from hfcache import explorer as hf_explorer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.nn.attention.varlen import varlen_attn

import graphcheck
from graphcheck.errors import GateError, LayoutError, UsageError
from graphcheck.gate import Gate
from graphcheck.gate.batch import PackedBatch, parse_docs
from graphcheck.gate.runner import global_names
from graphcheck.kernels.cpu_reference import cpu_kernels
from graphcheck.model.layout import detect_layout
from graphcheck.model.load import default_dtype

SMALL = (23, 9, 31, 4)  # T = 67 tokens in 4 documents: enough for windows of 16


@cache
def gate_for(name: str) -> Gate:
    return Gate(spec(name))


@cache
def gated(name: str, cuts: tuple[int, ...], mode: str = "processes", **options):
    """One gate report per (fixture, cuts, mode, options), shared by the tests."""
    return gate_for(name).run(list(cuts), docs=SMALL, mode=mode, **options)


# fixtures whose stages cannot be built by pruning: run the partitioned exported graph
GRAPH = {
    "violations:sdpa_doc_mask", "violations:pp_config", "violations:hidden_residual_pair",
    "violations:fp32_twin", "violations:skip_connection", "violations:collected_outputs",
    "violations:reversed_layers", "violations:eager_causal_only",
    "violations:specialized_length",
}  # fmt: skip


def mode_of(name: str) -> str:
    return "graph" if name in GRAPH else "processes"


# --- agreement: static PASS => bytes equal; failures backed by observed differences -----

PASSING = {
    "reference:reference": range(9),
    "violations:cast_in_loop": (1, 4, 7),
    "violations:sdpa_doc_mask": (4,),
    "violations:pp_config": (4,),
    "violations:none_layers": (3, 6),
}
# fixture -> (cuts, how the gate must fail there)
DIFFERING = {
    "violations:fp32_residual": ((3, 6), "differ"),
    "violations:hidden_residual_pair": ((4,), "blocked"),
    "violations:fp32_twin": ((2,), "blocked"),
    "violations:skip_connection": ((1, 7), "blocked"),
    "violations:collected_outputs": ((2, 5), "blocked"),
    "violations:reversed_layers": ((4,), "blocked"),
    "violations:ignores_cu_seqlens": ((4,), "isolation"),
    "violations:eager_causal_only": ((4,), "isolation"),
}
CASES = [(name, cut, None) for name, cuts in PASSING.items() for cut in cuts]
CASES += [(name, cut, how) for name, (cuts, how) in DIFFERING.items() for cut in cuts]
CASES += [("violations:collected_outputs", 1, None)]
if os.environ.get("GRAPHCHECK_GATE_ALL"):
    import reference
    import violations

    _NAMES = [f"reference:{n}" for n in ("reference", "window_only", "reference_moduledict")]
    _NAMES += [f"violations:{n}" for n in violations.__all__]
    _NAMES = [n for n in _NAMES if not n.endswith(("export_fails", "factory_raises"))]
    CASES = [(name, cut, "any") for name in _NAMES for cut in range(9)]
    GRAPH |= set(_NAMES) - {"reference:reference", "reference:window_only"}
    assert reference  # imported for the fixture directory on sys.path


@pytest.mark.parametrize(("name", "cut", "how"), CASES)
def test_static_pass_implies_equal_bytes(name, cut, how):
    report = gated(name, (cut,), mode_of(name))
    assert report.agrees, (report.bytes, report.static_codes)
    if how is None:
        assert report.static_verdict == "pass", report.static_codes
        assert report.verdict == "pass", (report.bytes, report.isolation)
    elif how != "any":
        assert report.static_verdict == "fail"
        failed = "isolation" if report.bytes.holds else report.bytes.status
        assert failed == how, (report.bytes, report.isolation)
        assert report.exit_code == 1


def test_fp32_residual_is_rounded_on_the_wire():
    report = gated("violations:fp32_residual", (4,), "graph")
    (handover,) = report.handovers
    assert (handover.dtype, handover.rounded) == ("float32", True)
    assert report.bytes.status == "differ" and 0 < report.bytes.max_abs_diff < 1
    assert set(report.bytes.first_diff) == {"token", "document", "position", "column"}


def test_skip_connection_names_the_value_the_wire_does_not_carry():
    report = gated("violations:skip_connection", (4,), "graph")
    blocked = report.bytes.blocked
    assert (blocked.stage, blocked.node, blocked.producer) == (1, "embedding", "model.embed_tokens")
    assert "cannot run" in report.bytes.message and "cut 4" in report.bytes.message


def test_merged_documents_fail_the_exact_isolation_tests():
    report = gated("violations:ignores_cu_seqlens", (4,))
    assert report.bytes.status == "equal"  # PP1 and PP2 agree with each other
    isolation = report.isolation
    assert isolation.status == "fail" and not isolation.perturb.holds
    assert isolation.perturb.crossing.layer_fqn == "model.layers.0"  # attention merges
    assert isolation.alone.max_rel_diff > 0.09  # information: alone differs a lot too


def test_sdpa_mask_isolation_is_bitwise_where_alone_is_not():
    # a dense mask over the packed row adds exact zeros: the same lengths give the same
    # bytes, while a document run alone reduces over another length
    report = gated("violations:sdpa_doc_mask", (4,), "graph")
    assert report.isolation.status == "bitwise" and report.isolation.holds
    assert report.isolation.perturb.holds and report.isolation.shift.holds
    assert report.isolation.alone.status in ("bitwise", "differ")


def test_length_specialised_export_differs_at_another_length():
    # exported for T > 16 (rope scaling chosen by a Python branch); run at T = 12
    report = gate_for("violations:specialized_length").run([4], docs=(5, 7), mode="graph")
    assert report.static_codes == ["GC403"]
    assert report.bytes.status == "differ" and not report.export_faithful


def test_three_stages_hand_over_one_residual_each():
    gate = gate_for("reference:reference")
    graph = gate.run(stages=3, docs=SMALL, mode="graph")
    static = gate.explorer.verify(stages=3)
    residuals = [  # each cut's one activation, whatever export named it
        [c.as_dict()["node"] for c in cut.crossing if c.role == "activation"] for cut in static.cuts
    ]
    assert [[h.node] for h in graph.handovers] == residuals
    assert [cut.position for cut in static.cuts] == [3, 5]
    processes = gate_for("reference:reference").run(stages=3, docs=SMALL)
    assert [h.shape for h in processes.handovers] == [["1", "67", "64"]] * 2
    assert graph.verdict == processes.verdict == "pass"


# --- stage builders ---------------------------------------------------------------------


def test_rebuilt_stages_that_flip_the_window_differ():
    flipped = gated("reference:window_only", (2,), stage_builder="rebuild")
    assert flipped.static_codes == ["GC301"] and flipped.bytes.status == "differ"
    aligned = gated("reference:window_only", (4,), stage_builder="rebuild")
    assert aligned.static_verdict == "pass" and aligned.bytes.status == "equal"


def test_index_keeping_builder_runs_the_stage_modules():
    report = gated("reference:reference", (3, 5), stage_builder="keep-index")
    assert report.stage_builder == "keep-index" and report.verdict == "pass"
    assert [h.shape for h in report.handovers] == [["1", "67", "64"]] * 2


def test_hybrid_family_runs_on_the_stand_in_kernels():
    # linear attention through graphcheck::chunk_gated_delta_rule and causal_conv1d,
    # full attention through varlen_attn; the export is the one test_families reads
    runner = Gate("hf:qwen3_next", explorer=hf_explorer("hf:qwen3_next"))
    report = runner.run([3, 6], docs=(11, 4, 9), mode="graph")
    assert report.static_verdict == "pass" and report.verdict == "pass"


def test_hf_model_stages_are_built_by_the_packaged_hf_slice_builder():
    # a transformers model is not pipeline-aware: its stage processes slice model.layers
    runner = Gate("hf:llama", explorer=hf_explorer("hf:llama"))
    report = runner.run([4], docs=(5, 4))
    assert (report.mode, report.stage_builder) == ("processes", "hf-slice")
    assert report.bytes.status == "equal" and report.verdict == "pass"


STATE_BUILDERS = spec("build_state:wrapped").rpartition(":")[0]


@pytest.mark.parametrize("builder", ["wrapped", "unwrapped"])
def test_cli_stage_module_that_moves_the_layers_loads_its_weights(cli, builder):
    # layers at inner.model.layers (wrapped) or layers (unwrapped), model.layers in the
    # model: weights map through the stage's own layout, by global name
    code, out, err = cli("gate", spec("build_state:buffered"), "--cuts", "4",
                         "--stage-builder", f"{STATE_BUILDERS}:{builder}", "--docs", "20,9",
                         "--format", "json")  # fmt: skip
    data = json.loads(out)
    assert code == 0 and err == "" and data["run"] == "processes"
    assert data["bytes"]["status"] == "equal"
    assert data["isolation"]["status"] == "bitwise"


def test_wrapped_stage_module_steps_every_parameter_by_its_global_name():
    report = gated("build_state:buffered", (3, 6), stage_builder=f"{STATE_BUILDERS}:wrapped",
                   train=True)  # fmt: skip
    assert report.bytes.status == "equal" and report.isolation.holds
    assert report.train.status == "equal" and report.train.differing == []
    assert report.train.parameters > 70 and report.verdict == "pass"


def test_stage_module_without_a_layer_container_is_one_line_exit_2(cli):
    code, out, err = cli("gate", spec("build_state:buffered"), "--cuts", "4",
                         "--stage-builder", f"{STATE_BUILDERS}:layerless",
                         "--docs", "9,7")  # fmt: skip
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "layer container" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("builder", "layer", "head"),
    [
        ("wrapped", "inner.model.layers.5.mlp.up_proj.weight", "inner.lm_head.weight"),
        ("unwrapped", "layers.5.mlp.up_proj.weight", "lm_head.weight"),
        ("slice_layers", "model.layers.1.mlp.up_proj.weight", "lm_head.weight"),
        ("own_layers", "model.layers.5.mlp.up_proj.weight", "lm_head.weight"),
    ],
)
def test_stage_names_map_to_global_names_through_the_stage_layout(builder, layer, head):
    import build_state

    model = build_state.buffered()
    layout = detect_layout(model)
    stage = getattr(build_state, builder)(model, 1, [4, 5, 6, 7], 2)
    names = global_names(stage, layout, [4, 5, 6, 7], model)
    assert names[layer] == "model.layers.5.mlp.up_proj.weight"
    assert names[head] == "lm_head.weight"
    assert set(names.values()) <= set(_tensor_names(model))
    assert set(names) == set(_tensor_names(stage))
    with pytest.raises(LayoutError, match="layer container"):
        global_names(build_state.layerless(model, 1, [4], 2), layout, [4], model)


def _tensor_names(module) -> list[str]:
    names = [n for n, _ in module.named_parameters(remove_duplicate=False)]
    return names + [n for n, _ in module.named_buffers(remove_duplicate=False)]


def test_model_with_none_layer_slots_runs_per_process():
    # layers 5-7 are None in the model: a stage maps the layers the model holds
    for cut in (3, 6):
        report = gated("violations:none_layers", (cut,))
        assert report.mode == "processes" and report.verdict == "pass"
        assert report.bytes.status == "equal" and report.isolation.holds
    renumbered = gated("violations:none_layers", (3,),
                       stage_builder=f"{STATE_BUILDERS}:slice_layers")  # fmt: skip
    assert renumbered.bytes.status == "equal" and renumbered.verdict == "pass"


# --- state only ranks show: process per stage, --train ---------------------------------

BUILDER = f"{spec('gate_state:fresh_prune').rpartition(':')[0]}:fresh_prune"


def test_storage_shared_across_stages_differs_after_one_step():
    report = gated("gate_state:shared_storage", (4,), train=True)
    assert report.static_codes == ["GC205"]
    assert report.bytes.status == "equal" and report.isolation.holds  # forward cannot see it
    assert report.train.status == "differ" and report.train.logits_after == "differ"
    assert set(report.train.differing) == {"model.embed_tokens.weight", "lm_head.weight"}
    assert report.verdict == "fail" and report.exit_code == 1 and report.agrees


def test_independent_head_is_equal_after_one_step():
    report = gated("gate_state:own_head", (4,), train=True)
    assert report.static_verdict == "pass" and report.verdict == "pass"
    assert report.train.status == "equal" and report.train.parameters > 70


def test_a_buffer_on_the_embedding_storage_differs_after_one_step():
    """A non-persistent buffer on the embedding weight's storage, read by the head:
    GC205 statically, and after one step the last stage's head no longer follows."""
    report = gated("violations:buffer_tied_embeddings", (4,), train=True)
    assert "GC205" in report.static_codes and report.agrees
    assert report.train.status == "differ" and report.train.logits_after == "differ"
    assert report.verdict == "fail" and report.exit_code == 1


def test_a_buffer_of_its_own_is_equal_after_one_step():
    report = gated("violations:buffer_own_head", (4,), train=True)
    assert report.static_verdict == "pass" and report.verdict == "pass"
    assert report.train.status == "equal" and report.train.logits_after == "equal"


def test_flag_set_by_an_earlier_layer_differs_on_its_own_rank():
    # in one process layer 0 raises the flag for layers 4-7; on rank 1 it never runs
    flagged = gated("gate_state:trace_flag", (4,))
    assert flagged.bytes.status == "differ" and flagged.exit_code == 1
    assert flagged.bytes.first_diff["token"] >= 0
    assert gated("gate_state:trace_flag", (4,), "graph").bytes.status == "equal"
    assert gated("gate_state:model_flag", (4,)).verdict == "pass"


def test_class_counter_that_does_not_restart_differs_under_a_rebuilding_builder():
    counted = gated("gate_state:class_counter", (4,), stage_builder=BUILDER)
    assert counted.bytes.status == "differ" and counted.exit_code == 1
    twin = gated("gate_state:passed_index", (4,), stage_builder=BUILDER)
    assert twin.bytes.status == "equal" and twin.verdict == "pass"


def test_data_dependent_size_crossing_a_cut_is_a_finding():
    with pytest.raises(GateError, match=r"^stage 1 raised TypeError"):
        gated("gate_state:nonzero_count", (4,))  # no stage builder given: exit 2
    graph = gated("gate_state:nonzero_count", (4,), "graph")
    assert graph.bytes.status == "blocked" and "data-dependent size" in graph.bytes.message
    assert gated("gate_state:nonzero_local", (4,)).bytes.status == "equal"


def test_cli_data_dependent_size_is_one_line_no_traceback(cli):
    code, out, err = cli("gate", spec("gate_state:nonzero_count"), "--cuts", "4",
                         "--docs", "9,7")  # fmt: skip
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "stage 1 raised" in err and "--stage-builder" in err and "Traceback" not in err


@pytest.mark.parametrize(("name", "code"), [("shared_storage", 1), ("own_head", 0)])
def test_cli_train_exit_status_and_json(cli, name, code):
    status, out, _ = cli("gate", spec(f"gate_state:{name}"), "--cuts", "4", "--train",
                         "--docs", "20,9", "--format", "json")  # fmt: skip
    data = json.loads(out)
    assert status == code and data["run"] == "processes"
    assert {"bytes", "isolation", "static", "handovers", "agrees", "train"} <= set(data)
    assert data["train"]["status"] == ("differ" if code else "equal")
    assert data["bytes"]["status"] == "equal"


def test_graph_mode_refuses_train_and_builders():
    with pytest.raises(UsageError):
        gate_for("reference:reference").run([4], docs=SMALL, mode="graph", train=True)


# --- property-based: random document splits and random cuts ----------------------------

DOCS = st.lists(st.integers(1, 40), min_size=1, max_size=5)
FAST = settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)  # fmt: skip


@FAST
@given(
    name=st.sampled_from(["reference:reference", "violations:collected_outputs"]),
    data=st.data(),
    docs=DOCS,
)
def test_random_legal_cuts_give_equal_bytes(name, data, docs):
    runner = gate_for(name)
    legal = runner.explorer.map().legal_cuts()
    cuts = sorted(data.draw(st.sets(st.sampled_from(legal), min_size=1, max_size=3)))
    report = runner.run(cuts, docs=docs, mode=mode_of(name))
    assert report.static_verdict == "pass"
    assert report.bytes.status == "equal", report.bytes
    assert report.isolation.holds, report.isolation


@FAST
@given(
    case=st.sampled_from(
        [("violations:fp32_residual", "differ"), ("violations:skip_connection", "blocked")]
    ),
    cut=st.integers(1, 7),
    docs=DOCS,
)
def test_random_illegal_cuts_show_a_difference(case, cut, docs):
    name, how = case
    report = gate_for(name).run([cut], docs=docs, mode=mode_of(name))
    assert report.static_verdict == "fail" and report.bytes.status == how


@FAST
@given(
    docs=DOCS,
    heads=st.sampled_from([(4, 2), (4, 4), (2, 1)]),
    left=st.integers(-1, 6),
    causal=st.booleans(),
)
def test_varlen_reference_is_per_document_and_exact(docs, heads, left, causal):
    batch = PackedBatch.random(docs, 2)
    total, cu, longest = batch.tokens, batch.cu_seq_lens, max(docs)
    generator = torch.Generator().manual_seed(len(docs))
    q = torch.randn(total, heads[0], 8, generator=generator).bfloat16()
    k, v = (torch.randn(total, heads[1], 8, generator=generator).bfloat16() for _ in "kv")
    window = (left, 0 if causal else -1)
    with cpu_kernels():
        packed = varlen_attn(q, k, v, cu, cu, longest, longest, window_size=window,
                             enable_gqa=True)  # fmt: skip
        for start, end in batch.spans:
            n, one = end - start, torch.tensor([0, end - start], dtype=torch.int32)
            piece = (x[start:end] for x in (q, k, v))
            alone = varlen_attn(*piece, one, one, n, n, window_size=window, enable_gqa=True)
            assert torch.equal(packed[start:end], alone)
    dense = _dense_attention(q, k, v, batch, left, causal)
    torch.testing.assert_close(packed.float(), dense, atol=2e-2, rtol=2e-2)


def _dense_attention(q, k, v, batch: PackedBatch, left: int, causal: bool) -> torch.Tensor:
    """Masked softmax over the whole packed row: documents kept apart by the mask."""
    doc = torch.repeat_interleave(torch.arange(len(batch.docs)), torch.tensor(batch.docs))
    pos = batch.position_ids[0]
    mask = doc[:, None] == doc[None, :]
    if causal:
        mask &= pos[None, :] <= pos[:, None]
    if left >= 0:
        mask &= pos[None, :] >= pos[:, None] - left
    groups = q.shape[1] // k.shape[1]
    k, v = (x.float().repeat_interleave(groups, 1).transpose(0, 1) for x in (k, v))
    scores = q.float().transpose(0, 1) @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return (probs @ v).transpose(0, 1)


def test_cpu_reference_is_removed_after_the_block():
    q = torch.randn(3, 2, 8, dtype=torch.bfloat16)
    cu = torch.tensor([0, 3], dtype=torch.int32)
    with cpu_kernels(), cpu_kernels():
        varlen_attn(q, q, q, cu, cu, 3, 3)
    with pytest.raises(NotImplementedError):
        varlen_attn(q, q, q, cu, cu, 3, 3)


# --- API and command line -----------------------------------------------------------------


def test_gate_takes_a_module_with_its_own_weights():
    torch.manual_seed(1)
    with default_dtype(torch.bfloat16):
        from reference import reference

        model = reference(num_layers=2)
    report = graphcheck.gate(model, [1], docs=(6, 5))
    assert report.verdict == "pass" and report.bytes.status == "equal"
    assert not any(type(p).__name__ == "FakeTensor" for p in model.parameters())


def test_cli_exit_0_and_text_report(cli):
    code, out, _ = cli("gate", spec("reference:reference"), "--cuts", "4",
                       "--docs", "20,9", "--seed", "3")  # fmt: skip
    assert code == 0
    assert "staged vs uncut: EQUAL" in out and "document isolation: FAIL" not in out
    assert "2 documents, 29 tokens" in out and "seed 3" in out


def test_cli_exit_1_json_says_which_comparison_failed(cli):
    code, out, _ = cli("gate", spec("violations:ignores_cu_seqlens"), "--cuts", "4",
                       "--docs", "20,9", "--format", "json")  # fmt: skip
    assert code == 1
    data = json.loads(out)
    assert (data["mode"], data["verdict"], data["agrees"]) == ("gate", "fail", True)
    assert data["bytes"]["status"] == "equal" and data["isolation"]["status"] == "fail"
    assert data["static"] == {"verdict": "fail", "codes": ["GC401"]}
    assert data["docs"] == [20, 9] and data["tokens"] == 29


GPU_ONLY = """
import torch
from reference import MLP, reference


@torch.library.custom_op("gatetest::gpu_only", mutates_args=(), device_types="cuda")
def gpu_only(x: torch.Tensor) -> torch.Tensor:
    return x


@gpu_only.register_fake
def _(x):
    return torch.empty_like(x)


class GpuMLP(MLP):
    def forward(self, x):
        return self.down_proj(torch.ops.gatetest.gpu_only(self.gate_proj(x)) * self.up_proj(x))


def model():
    m = reference()
    m.model.layers[2].mlp = GpuMLP(m.config)
    return m
"""


def test_cli_exit_2_names_an_op_without_cpu_implementation(cli, tmp_path):
    path = tmp_path / "gpu_only.py"
    path.write_text(GPU_ONLY)
    code, out, err = cli("gate", f"{path}:model", "--cuts", "4", "--docs", "5,4")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "gatetest.gpu_only" in err and "CPU" in err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--cuts", "4", "--docs", "3,x"], "--docs"),
        (["--cuts", "4", "--docs", "3,0"], "--docs"),
        (["--cuts", "4", "--seed", "abc"], "--seed"),
        (["--cuts", "99"], "GC101"),
        ([], "--cuts or --stages"),
    ],
)
def test_cli_bad_arguments_are_one_line_exit_2(cli, argv, words):
    code, out, err = cli("gate", spec("reference:reference"), *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and words in err


def test_parse_docs_rejects_empty_documents():
    assert parse_docs("7, 3") == (7, 3)
    with pytest.raises(UsageError):
        PackedBatch.random((4, 0), 10)


def test_the_uncut_run_is_shared_by_every_plan_of_one_gate(monkeypatch):
    """The uncut model's process (checkpoint, outputs, isolation) does not depend on the
    plan: a second plan of the same gate and batch starts no second uncut process, and
    another batch does."""
    run = importlib.import_module("graphcheck.gate.run")
    calls = []
    real = run.in_fresh_process

    def counting(fn, *args):
        calls.append(fn.__name__)
        return real(fn, *args)

    monkeypatch.setattr(run, "in_fresh_process", counting)
    g = Gate(spec("reference:reference"))
    first, second = (g.run([k], docs=(6, 4)) for k in (2, 6))
    assert calls.count("run_uncut") == 1
    assert first.isolation.holds and second.isolation.holds
    assert first.bytes.holds and second.bytes.holds
    g.run([2], docs=(5, 5))
    assert calls.count("run_uncut") == 2


def test_fp32_residual_after_the_last_layer_is_a_conservative_gc303():
    """Cut after the last layer: the last stage runs the model's loop prologue again on the
    bf16 wire (a cast to fp32 and back, exact for bf16 values). Its program differs from the
    uncut slice (GC303) while the bytes do not: the finding is conservative, never a PASS."""
    report = gated("violations:fp32_residual", (8,), mode_of("violations:fp32_residual"))
    assert report.static_codes == ["GC303"]
    assert report.agrees and report.bytes.holds and report.isolation.holds
