"""transformers models are proven on the attention they run, never on a substituted one.

``graphcheck_varlen`` (:mod:`graphcheck.kernels.attention`) refuses a call passing what
it would drop: a mask or bias tensor, keys beyond the queries, a keyword it does not
read, attention dropout, a mask transformers built with more than causal documents, and
the mask marker read by the model's own code. The fixtures (``fixtures/hf_attention.py``)
are one tiny family per pattern, each refused with exit 2 and a message naming what
would be dropped; the twin ``interface`` is proven on the varlen kernel and its report
records the attention it was proven on.
"""

from __future__ import annotations

import json

import pytest
import torch
from harness import script, spec

from graphcheck import cli
from graphcheck.api import Explorer
from graphcheck.kernels.attention import (
    ATTENTION,
    AttentionDropped,
    DocumentMask,
    attention_record,
    document_mask,
    register,
    varlen_attention_forward,
)
from graphcheck.reporters.markdown import render as render_markdown
from graphcheck.reporters.text import render

REFUSED = {
    "score_bias_on_mask": "the model's own code adds a tensor to the attention mask",
    "score_bias_as_mask": "ScoreBiasAsMask (layer 0) passes an attention_mask tensor [1x4xTxT]",
    "memory_keys": "MemoryKeys (layer 0) passes keys over T + 4 tokens for T queries",
    "own_attention": "the model's own code computes add with the attention mask",
    "position_bias_kwarg": "passes the keyword position_bias=<tensor 1x4xTxT>",
    "window_mismatch": "passes sliding_window=8 with a mask of no window",
}

coverage = script("coverage")  # scripts/coverage.py: the README's coverage table


@pytest.fixture(scope="module")
def twin() -> Explorer:
    return Explorer(spec("hf_attention:interface"))


# --- the fixtures ------------------------------------------------------------------------------


def _packed(docs=(2, 4)) -> dict:
    """A packed batch of ``docs`` as the export passes it."""
    from graphcheck.varlen import example_values

    values = example_values(docs, tuple(n for n in INPUTS if n != "input_ids"))
    return {"input_ids": torch.arange(sum(docs))[None] % 256, **values}


INPUTS = ("input_ids", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k")
INPUTS += ("max_length_q", "max_length_k")


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_each_pattern_raises_naming_what_would_be_dropped(name):
    import hf_attention

    model = getattr(hf_attention, name)()  # real weights: the call the export traces
    with pytest.raises(AttentionDropped, match="attention refused: ") as err:
        model(**_packed())
    expected = REFUSED[name].replace("TxT", "6x6").replace("T + 4", "10")  # T is 6 here
    assert expected in str(err.value)


def test_the_twin_runs_on_real_weights():
    import hf_attention

    from graphcheck.kernels.cpu_reference import cpu_kernels

    with cpu_kernels():
        logits = hf_attention.interface()(**_packed()).logits
    assert logits.shape == (1, 6, 256) and torch.isfinite(logits).all()


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_each_pattern_is_refused_at_export(name, capsys):
    """Slow (every pattern exported): exit 2, one line naming it, the model line."""
    code = cli.main(["map", spec(f"hf_attention:{name}"), "--no-cache"])
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert code == 2 and first.startswith("graphcheck: error: attention refused: ")
    assert REFUSED[name] in first and f"which {ATTENTION}" in first
    assert "Traceback" not in err and "fixtures/hf_attention.py:" in err  # the model line


def test_a_refused_family_is_exit_2_and_one_line(capsys):
    test_each_pattern_is_refused_at_export("memory_keys", capsys)  # the fast representative


def test_the_twin_is_proven_on_the_varlen_kernel_and_says_so(twin):
    report = twin.map()
    assert report.verdict == "pass" and report.legal_cuts() == [0, 1, 2]
    record = {"kind": "varlen", "implementation": ATTENTION, "calls": 2}
    assert report.attention == record and report.as_dict()["attention"] == record
    text = render(report)
    assert " · varlen attention · " in render_markdown(report)
    assert "\n  attention: varlen (graphcheck_varlen, 2 calls)\n" in text


# --- the implementation on real tensors ---------------------------------------------------------


class Layer(torch.nn.Module):
    is_causal = True
    layer_idx = 3


def _qkv(tokens: int = 6, keys: int = 6):
    torch.manual_seed(0)
    return torch.randn(1, 4, tokens, 8), torch.randn(1, 2, keys, 8), torch.randn(1, 2, keys, 8)


def _call(*qkv, mask=None, **kwargs):
    cu = torch.tensor([0, 2, 6], dtype=torch.int32)
    boundaries = {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": 4, "max_length_k": 4}
    return varlen_attention_forward(Layer(), *qkv, mask, **boundaries, **kwargs)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ({"mask": torch.zeros(1, 1, 6, 6)}, "Layer (layer 3) passes an attention_mask tensor"),
        ({"keys": 8}, "keys over 8 tokens for T queries (appended keys"),
        ({"dropout": 0.1}, "attention dropout 0.1 (drawn inside the softmax)"),
        ({"sinks": torch.zeros(4)}, "the keyword sinks=<tensor 4>"),
        ({"indices": torch.zeros(6, 2)}, "the keyword indices="),
        ({"mask": DocumentMask(window=4)}, "sliding_window=None with a mask of a window of 4"),
        ({"mask": DocumentMask(causal=False)}, "a bidirectional mask but is_causal=True"),
        ({"mask": DocumentMask(extra=("x",))}, "a mask from transformers with x"),
        ({"mask": "a mask"}, "an attention_mask of type str"),
    ],
)
def test_a_call_passing_what_the_kernel_drops_is_refused(case, message):
    case = dict(case)
    qkv = _qkv(keys=case.pop("keys", 6))
    with pytest.raises(AttentionDropped, match="attention refused: ") as err:
        _call(*qkv, **case)
    assert message in str(err.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"mask": DocumentMask()},
        {"mask": DocumentMask(window=4), "sliding_window": 4},
        {"s_aux": torch.zeros(4), "softcap": 30.0},
        {"output_attentions": False, "position_ids": torch.arange(6)[None]},
    ],
)
def test_what_the_kernel_honours_runs(kwargs):
    from graphcheck.kernels.cpu_reference import cpu_kernels

    with cpu_kernels():
        out, _ = _call(*_qkv(), **kwargs)
    assert out.shape == (1, 6, 4, 8) and torch.isfinite(out).all()


# --- the mask marker ------------------------------------------------------------------------------


def test_the_marker_says_the_mask_transformers_would_build():
    from transformers import masking_utils as mu

    documents = mu.packed_sequence_mask_function(torch.zeros(1, 6, dtype=torch.long))
    packed = mu.and_masks(mu.sliding_window_causal_mask_function(8), documents)
    assert repr(document_mask(packed)) == "DocumentMask(causal=True, window=8, extra=())"
    chunked = mu.and_masks(mu.causal_mask_function, mu.chunked_overlay(16, torch.zeros(1)))
    assert document_mask(chunked).extra == ("chunked attention (chunks of 16 tokens)",)
    assert (
        "OR-ed onto the causal mask"
        in document_mask(
            mu.or_masks(mu.causal_mask_function, mu.bidirectional_mask_function)
        ).extra[0]
    )
    padded = document_mask(mu.causal_mask_function, torch.ones(1, 6))
    assert padded.extra == ("a padding attention_mask",)
    assert document_mask(mu.bidirectional_mask_function).causal is False


@pytest.mark.parametrize(
    ("use", "says"),
    [
        (lambda m: m + torch.zeros(1), "adds a tensor to"),
        (lambda m: torch.zeros(1) + m, "computes add with"),
        (lambda m: m[:, :, :4], "indexes"),
        (lambda m: m.shape, "reads .shape of"),
        (lambda m: torch.where(m, 0.0, -1.0), "computes where with"),
        (lambda m: bool(m), "tests"),
    ],
)
def test_any_use_of_the_marker_outside_the_attention_is_refused(use, says):
    with pytest.raises(AttentionDropped, match="the model's own code " + says):
        use(DocumentMask())


def test_transformers_hands_out_the_marker_for_graphcheck_varlen():
    from transformers import LlamaConfig
    from transformers.masking_utils import create_causal_mask

    config = LlamaConfig(hidden_size=16, num_attention_heads=2, num_hidden_layers=1)
    config._attn_implementation = register()
    positions = torch.tensor([[0, 1, 2, 0, 1, 2]])
    mask = create_causal_mask(config, torch.zeros(1, 6, 16), None, None, positions)
    assert isinstance(mask, DocumentMask) and (mask.causal, mask.window, mask.extra) == (
        True,
        None,
        (),
    )


# --- the record and the coverage table -----------------------------------------------------------


def test_attention_record_counts_the_attention_nodes(twin):
    graph = twin.program.graph
    assert attention_record(ATTENTION, graph)["calls"] == 2
    assert attention_record("sdpa", graph) == {"kind": "sdpa", "implementation": "sdpa", "calls": 0}
    assert attention_record("eager", graph)["calls"] is None
    assert attention_record("flex_attention", None)["kind"] == "other"
    assert attention_record(None, graph) is None


def test_coverage_rows_say_which_attention_was_proven():
    record = {"kind": "varlen", "implementation": ATTENTION, "calls": 8}
    stdout = json.dumps({"cuts": [{"verdict": "pass"}], "diagnostics": [], "attention": record})
    proven = coverage.classify("llama", 0, stdout, "")
    assert proven.attention == "varlen ×8" and "| varlen ×8 | 1/1 | all cuts proven |" in (
        coverage._row(proven)
    )
    stderr = "graphcheck: error: attention refused: BloomAttention passes x\n  at m.py:1 in f\n"
    refused = coverage.classify("bloom", 2, "", stderr)
    assert (refused.outcome, refused.attention) == ("unsupported", "refused")
    assert coverage._details(refused).startswith("attention refused: BloomAttention passes x")
    other = coverage.classify("x", 2, "", "graphcheck: error: torch.export failed: E\n")
    assert other.attention == "-"
    assert "attention: 1 varlen, 1 refused, 1 -" in coverage.summary([proven, refused, other])


def test_coverage_names_the_refused_families_by_what_would_be_dropped():
    def refused(family: str, what: str):
        stderr = f"graphcheck: error: attention refused: {what}\n"
        return coverage.classify(family, 2, "", stderr)

    results = [
        refused("bloom", "BloomAttention (layer 0) passes an attention_mask tensor [1, 1, T, T]"),
        refused("mem", "MemAttention (layer 0) passes key over T + 4 tokens (appended keys: x)"),
        refused("axk2", "the model's own code indexes the attention mask transformers builds"),
        refused("bert", "BertSelfAttention (layer 0) passes attention dropout 0.1 (drawn ...)"),
        refused("alibi", "AlibiAttention (layer 0) passes an attention_mask tensor [1, 8, T, T]"),
        coverage.classify("llama", 0, json.dumps({"cuts": [], "diagnostics": []}), ""),
    ]
    lines = coverage.refusals(results)
    assert lines[1:-1] == [
        "* a bias or mask added to the scores (an `attention_mask` tensor): `bloom`, `alibi`",
        "* keys beyond the T queries (memory, compressed or extra tokens): `mem`",
        "* its own code reads the mask `create_causal_mask` builds: `axk2`",
        "* attention dropout (drawn inside the softmax, in `model.train()`): `bert`",
    ]
    assert "* a bias or mask" in coverage.markdown(results, "5.x")
    assert coverage.refusals(results[-1:]) == []


def test_coverage_results_saved_before_the_attention_column_say_not_re_run(tmp_path):
    old = {"family": "gpt2", "outcome": "all cuts proven", "exported": "yes", "exit": 0}
    saved = tmp_path / "old.json"
    saved.write_text(json.dumps({"transformers": "5.24.0", "results": [old]}), encoding="utf-8")
    assert coverage.load(saved)["gpt2"].attention == coverage.NOT_RERUN
    new = tmp_path / "new.json"
    coverage.save(
        new, [coverage.classify("gpt2", 2, "", "graphcheck: error: attention refused: x")], "5.24.0"
    )
    assert coverage.load(new)["gpt2"].attention == "refused"


# --- the gate agrees (slow: real weights, stage runs) ---------------------------------------------


def test_gate_agrees_with_the_twin_and_refuses_what_static_refuses():
    from graphcheck.gate.run import gate

    report = gate(spec("hf_attention:interface"), [1], mode="graph")
    assert (report.verdict, report.static_verdict) == ("pass", "pass")
    with pytest.raises(AttentionDropped, match="keys over T \\+ 4 tokens"):
        gate(spec("hf_attention:memory_keys"), [1], mode="graph")


@pytest.mark.parametrize("implementation", ["flex_attention", "sdpa", "eager"])
def test_the_familys_own_attention_with_transformers_packed_mask_is_proven(implementation):
    """``attn_implementation=flex_attention`` / ``sdpa`` / ``eager``: transformers builds
    its packed mask from the positions (document ids as ``(diff(positions, prepend=...)
    != 1).cumsum(-1)``, looked up at the query and the key); the solver proves the
    prefix sum counts document starts, so the mask separates documents: PASS (flex:
    the export goes through torch's ``create_block_mask(..., _compile=True)`` with the
    one-block stand-in)."""
    report = Explorer(
        "hf:llama", settings={"attn_implementation": implementation, "num_hidden_layers": 2}
    ).verify([1])
    assert report.attention["implementation"] == implementation
    assert report.verdict == "pass" and report.errors == []


LLAMA4 = {"attn_implementation": "sdpa"}


def test_llama4_text_keeps_only_its_true_finding_the_packed_index_as_a_temperature():
    """With its own (chunked, packed) SDPA mask and its MoE proven, Llama 4 keeps one
    finding: the NoPE layers' attention temperature reads ``arange(T)``, the packed
    index, where a document alone would read its own positions (GC402, layers 3 and 7);
    with the tuning off every cut is proven."""
    report = Explorer("hf:llama4_text", settings=LLAMA4).verify([1])
    assert report.codes == {"GC402", "GC302"} and report.verdict == "fail"
    found = [d for d in report.errors if d.code == "GC402"]
    assert {d.module for d in found} == {"model.layers.3.self_attn", "model.layers.7.self_attn"}
    assert all("arange over the packed length" in d.message for d in found)
    plain = Explorer("hf:llama4_text", settings={**LLAMA4, "attn_temperature_tuning": False})
    assert plain.verify([1]).verdict == "pass"


def test_llama4_texts_temperature_moves_tokens_when_their_document_moves():
    """The gate agrees: with a temperature step of 4 tokens (``floor_scale=4``, so short
    documents show it) a document's bytes change with its offset in the row, first at
    layer 3."""
    from graphcheck.gate import Gate

    settings = {**LLAMA4, "floor_scale": 4}
    found = Explorer("hf:llama4_text", settings=settings)
    gated = Gate("hf:llama4_text", explorer=found, settings=settings).run([1], mode="graph")
    assert gated.static_verdict == "fail"
    shift = gated.isolation.shift
    assert gated.isolation.holds is False and not shift.holds
    assert shift.crossing.layer == 3  # the first NoPE layer, where the temperature is read
