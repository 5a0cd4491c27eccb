"""Layout auto-detection beyond the path tables: transformers families whose layers,
embedding, final norm or head sit under other names are found structurally (the longest
top-level ``ModuleList``, ``get_input_embeddings``/``get_output_embeddings`` by identity,
the one norm beside the layers); ambiguity asks for the flag instead of guessing, and
the tables and explicit flags still win. Build-only, on fake weights: no export."""

from __future__ import annotations

import pytest
from torch import nn

from graphcheck.errors import LayoutError
from graphcheck.model.layout import detect_layout
from graphcheck.model.session import Session

FAMILIES = {
    # family: (layer prefix, input modules, output modules)
    "opt": ("model.decoder.layers", ("model.decoder.embed_tokens",),
            ("model.decoder.final_layer_norm", "lm_head")),
    "bert": ("bert.encoder.layer", ("bert.embeddings",), ("cls",)),
    "gpt_neox": ("gpt_neox.layers", ("gpt_neox.embed_in",),
                 ("gpt_neox.final_layer_norm", "lm_head")),
    "mamba": ("backbone.layers", ("backbone.embeddings",), ("backbone.norm_f", "lm_head")),
    "phi": ("model.layers", ("model.embed_tokens",), ("model.final_layernorm", "lm_head")),
    "bloom": ("transformer.h", ("transformer.word_embeddings",), ("transformer.ln_f", "lm_head")),
    "xlnet": ("transformer.layer", ("transformer.word_embedding",), ("lm_loss",)),
    "trocr": ("model.decoder.layers", ("model.decoder.embed_tokens",), ("output_projection",)),
}  # fmt: skip


@pytest.mark.parametrize("family", FAMILIES)
def test_detects_the_layout_of_a_transformers_family(family):
    layout = Session(f"hf:{family}", settings={"num_hidden_layers": 2}).layout
    prefix, inputs, outputs = FAMILIES[family]
    assert (layout.layer_prefix, layout.input_fqns, layout.output_fqns) == (
        prefix, inputs, outputs,
    )  # fmt: skip
    assert layout.num_layers == 2
    assert layout.edge_of(f"{inputs[0]}.weight") == "input"


def test_two_equally_long_layer_lists_ask_for_the_flag(cli):
    code, out, err = cli("map", "hf:xlm")
    assert code == 2 and out == ""
    assert "decoder-layer container is ambiguous" in err and "transformer.attentions" in err
    assert "8 modules, no single one found; pass --layers PREFIX" in err


def test_the_layers_flag_settles_the_ambiguity():
    layout = Session("hf:xlm", layers="transformer.ffns").layout
    assert layout.layer_prefix == "transformer.ffns"
    assert layout.input_fqns == ("transformer.embeddings",)
    assert layout.output_fqns == ("pred_layer",)  # layer_norm_emb is no final norm


class _Lm(nn.Module):
    """A decoder under names no table holds; the norms beside its layers are set per test."""

    def __init__(self, norms: tuple[str, ...] = ("ln_out",)) -> None:
        super().__init__()
        self.body = nn.Module()
        self.body.tok = nn.Embedding(8, 4)
        self.body.stack = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        self.body.extra = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
        for name in norms:
            setattr(self.body, name, nn.LayerNorm(4))
        self.proj = nn.Linear(4, 8)

    def get_input_embeddings(self) -> nn.Module:
        return self.body.tok

    def get_output_embeddings(self) -> nn.Module:
        return self.proj


def test_structural_rules_on_a_custom_module():
    layout = detect_layout(_Lm(("emb_ln", "ln_out")))
    assert (layout.layer_prefix, layout.num_layers) == ("body.stack", 3)
    assert layout.input_fqns == ("body.tok",)
    assert layout.output_fqns == ("body.ln_out", "proj")  # emb_ln stays glue


def test_two_final_norm_candidates_ask_for_the_flag():
    with pytest.raises(LayoutError, match=r"final norm is ambiguous: body.a_norm, body.ln_out"):
        detect_layout(_Lm(("a_norm", "ln_out")))
    layout = detect_layout(_Lm(("a_norm", "ln_out")), outputs=("body.ln_out", "proj"))
    assert layout.output_fqns == ("body.ln_out", "proj")


def test_no_embedding_is_not_guessed():
    model = _Lm()
    model.get_input_embeddings = lambda: None
    with pytest.raises(LayoutError, match=r"no input \(embedding\) module found; pass --inputs"):
        detect_layout(model)


def test_the_path_tables_still_come_first():
    model = nn.Module()
    model.model = nn.Module()
    model.model.embed_tokens = nn.Embedding(8, 4)
    model.model.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
    model.model.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(5)])  # longer, not taken
    model.model.norm, model.model.other_norm = nn.LayerNorm(4), nn.LayerNorm(4)
    model.lm_head = nn.Linear(4, 8)
    layout = detect_layout(model)
    assert (layout.layer_prefix, layout.output_fqns) == ("model.layers", ("model.norm", "lm_head"))


def test_an_embedding_narrower_than_the_layers_asks_for_the_projection(cli):
    code, out, err = cli("map", "hf:electra")
    assert code == 2 and out == ""
    assert "get_input_embeddings() of ElectraForCausalLM is 128 wide and its hidden size 64" in err
    assert "pass --inputs FQN[,FQN] naming it too" in err


TOP_LEVEL = {
    # fixture: (layer prefix, input modules, output modules)
    "flat": ("layers", ("embed",), ("norm", "lm_head")),
    "torchtitan": ("layers", ("tok_embeddings",), ("norm", "output")),
    "gpt2_names": ("h", ("wte",), ("ln_f", "lm_head")),  # wpe: glue beside wte
}


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_top_level_names_of_reference_code_are_found_and_cut(name):
    """torchtitan's, Llama's and GPT-2's top-level names need no flag, and a cut proves."""
    import layouts

    import graphcheck

    report = graphcheck.verify(lambda: getattr(layouts, name)(2), cuts=[1])
    (first, last) = report.stages
    prefix, inputs, outputs = TOP_LEVEL[name]
    assert (first.modules, last.modules) == (inputs, outputs)
    assert (report.verdict, report.cut(1).state["name"]) == ("pass", "residual")
    layout = detect_layout(getattr(layouts, name)(2))
    assert (layout.layer_prefix, layout.num_layers) == (prefix, 2)


def test_a_decoder_without_a_head_ends_at_its_top_level_norm():
    import layouts

    layout = detect_layout(layouts.hidden_states(2))
    assert (layout.input_fqns, layout.output_fqns) == (("embed",), ("norm",))


def test_a_torchtitan_module_dict_of_layers_keeps_its_indices():
    import layouts

    layout = detect_layout(layouts.torchtitan(3))
    assert layout.layer_keys == {"0": 0, "1": 1, "2": 2}
    assert layout.layer_of("layers.2.mlp") == 2 and layout.edge_of("output.weight") == "output"


def test_two_top_level_embeddings_ask_for_the_flag(cli):
    import layouts

    with pytest.raises(LayoutError, match=r"^embed, wte all sit at the top of TopLevelLM: "):
        detect_layout(layouts.two_embeddings(2))
    assert detect_layout(layouts.two_embeddings(2), inputs=("embed",)).input_fqns == ("embed",)
    code, out, err = cli("map", "fixtures/layouts.py:two_embeddings")
    assert (code, out) == (2, "")
    assert err.endswith("(ambiguous); pass --inputs FQN[,FQN]\n") and err.count("\n") == 1


def test_two_top_level_final_norms_ask_for_the_flag():
    import layouts

    model = layouts.flat(2)
    model.ln_f = nn.LayerNorm(64)
    with pytest.raises(LayoutError, match=r"norm, ln_f all sit at the top .* pass --outputs"):
        detect_layout(model)
