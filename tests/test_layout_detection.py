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
