"""The gate on framework models: a forward that returns hidden states (the loss applies
the head), a structured output, a plain tensor attribute, a model built in fp32.

``--head lm_head`` compares the logits the head makes of the returned hidden states
(in the uncut process and on the last stage's own module), ``--output-fqn`` the output
of a named module; without either the returned tensor (here the hidden states) is
compared, and an output the gate cannot read is exit 2 naming both options. A plain
tensor attribute (``_inv_freq_fp32``) gets the real model's value, as a buffer does.

Two gate runs are fast (one passing, its negative twin whose wire rounds an fp32
residual); the other gate runs are slow (tests/slow.txt).
"""

from __future__ import annotations

import dataclasses
import json
from functools import cache

import framework_gate
import pytest
import torch
from torch import nn

from graphcheck.errors import GateError
from graphcheck.gate import Gate
from graphcheck.gate.batch import PackedBatch
from graphcheck.gate.output import Compared, hidden_tensor, returned_tensor, wire_tensor
from graphcheck.gate.weights import build_real, call_model, feeds
from graphcheck.kernels.cpu_reference import cpu_kernels

GATE = "fixtures/framework_gate.py"
SMALL = (23, 9, 31, 4)  # T = 67 in 4 documents
DOCS = ",".join(map(str, SMALL))
VOCAB, HIDDEN = 256, 64


def _gate_json(cli, name: str, *options: str) -> tuple[int, dict]:
    code, out, err = cli("gate", f"{GATE}:{name}", "--stages", "2", "--docs", DOCS,
                         "--format", "json", *options)  # fmt: skip
    assert code in (0, 1), err
    return code, json.loads(out)


# --- the two fast gate runs ---------------------------------------------------------


@cache
def head_gate() -> Gate:
    """``graphcheck gate fixtures/framework_gate.py:hidden_states_model --head lm_head``,
    whose export the plain-attribute test reuses."""
    return Gate(f"{GATE}:hidden_states_model", head="lm_head")


def test_head_on_returned_hidden_states_gives_equal_logits():
    report = head_gate().run(stages=2, docs=SMALL).as_dict()
    assert report["verdict"] == "pass"
    assert report["bytes"]["status"] == "equal" and report["isolation"]["status"] == "bitwise"
    compared = report["compared"]
    assert (compared["kind"], compared["fqn"]) == ("head", "lm_head")
    assert compared["shape"] == [1, sum(SMALL), VOCAB]  # logits, not hidden states
    assert report["export_faithful"] is True


def test_stage_that_rounds_an_fp32_residual_differs():
    report = Gate(f"{GATE}:fp32_residual_hidden", head="lm_head").run(stages=2, docs=SMALL)
    # the rounding is on the wire (GC202) and in the stage's own hand-off (GC303)
    assert report.static_codes == ["GC202", "GC303"]
    assert report.bytes.status == "differ" and report.bytes.max_abs_diff > 0
    assert report.exit_code == 1 and report.agrees


# --- in-process: what is read, and real values ----------------------------------------


@cache
def real_model() -> nn.Module:
    return build_real(framework_gate.hidden_states_model, seed=0)


def _batch() -> PackedBatch:
    return PackedBatch.random(SMALL, VOCAB, seed=0)


def test_compared_reads_the_returned_tensor_the_head_or_the_module():
    model, batch = real_model(), _batch()
    with cpu_kernels(), torch.no_grad():
        returned, hidden = call_model(model, batch)
        _, logits = call_model(model, batch, Compared(head="lm_head"))
        _, normed = call_model(model, batch, Compared(module="model.norm"))
        assert torch.equal(logits, model.lm_head(hidden))
    assert hidden.shape == (1, sum(SMALL), HIDDEN) and logits.shape[-1] == VOCAB
    assert len(returned) == 1 and torch.equal(returned[0], hidden)
    assert torch.equal(normed, hidden)  # the final norm's output is what forward returns


@dataclasses.dataclass
class _Output:
    last_hidden_state: torch.Tensor
    aux: torch.Tensor | None = None


def test_structured_outputs_are_read_by_name():
    from transformers.modeling_outputs import BaseModelOutput, CausalLMOutput

    h, logits = torch.zeros(1, 3, 4), torch.ones(1, 3, 8)
    assert returned_tensor((h, logits)) is h
    assert returned_tensor({"loss": None, "logits": logits}) is logits
    assert returned_tensor(CausalLMOutput(logits=logits)) is logits
    assert hidden_tensor(BaseModelOutput(last_hidden_state=h)) is h
    assert hidden_tensor(_Output(h, logits)) is h
    assert wire_tensor({"hidden": h}) is h  # a stage's only tensor is its wire


@pytest.mark.parametrize(
    ("read", "out", "words"),
    [
        (returned_tensor, {"hidden": torch.zeros(1)}, ["--output-fqn", "--head"]),
        (hidden_tensor, {"logits": torch.zeros(1)}, ["--head applies", "--output-fqn"]),
        (wire_tensor, {"a": torch.zeros(1), "b": torch.zeros(1)}, ["--output-fqn"]),
    ],
)
def test_an_output_the_gate_cannot_read_names_the_options(read, out, words):
    with pytest.raises(GateError) as err:
        read(out)
    assert all(w in str(err.value) for w in words), err.value


def test_output_module_that_runs_twice_is_refused():
    norm = nn.RMSNorm(4)

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = norm

        def forward(self, x):
            return self.norm(self.norm(x))

    model = Twice()
    with Compared(module="norm").reading(model) as read, pytest.raises(GateError, match="2 times"):
        read(model(torch.ones(1, 4)))


def test_plain_tensor_attribute_gets_the_real_models_value():
    program = head_gate().explorer.program
    model, batch = real_model(), _batch()
    values = feeds(program, model, batch)
    attribute = model.model._inv_freq_fp32
    assert any(value is attribute for value in values.values())
    other = build_real(framework_gate.hidden_states_model, seed=0)
    other.model._inv_freq_fp32 = attribute[:-1]  # not the traced shape: no real value
    with pytest.raises(GateError, match=r"no real value for model\._inv_freq_fp32"):
        feeds(program, other, batch)
    del other.model._inv_freq_fp32  # no attribute: the traced (fake) value is refused
    with pytest.raises(GateError, match=r"no real value for model\._inv_freq_fp32"):
        feeds(program, other, batch)


# --- bad options: one line, exit 2, before anything is exported -----------------------


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (("--head", "head"), "--head head: the model has no module"),
        (("--head", "lm_head", "--output-fqn", "model.norm"), "not allowed with"),
        (("--output-fqn", "model.norm", "--in-process"), "drop --output-fqn"),
    ],
)
def test_bad_output_options_are_one_line_exit_2(cli, options, words):
    code, out, err = cli("gate", f"{GATE}:hidden_states_model", "--stages", "2", *options)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and words in err


# --- slow: the other ways to name the compared value, training, fp32 builds ----------

SLOW_RUNS = [
    ("hidden_states_model", (), "returned", [1, sum(SMALL), HIDDEN]),
    ("hidden_states_model", ("--output-fqn", "model.norm"), "module", [1, sum(SMALL), HIDDEN]),
    ("hidden_states_output", ("--head", "lm_head"), "head", [1, sum(SMALL), VOCAB]),
    ("opaque_output", ("--output-fqn", "model.norm"), "module", [1, sum(SMALL), HIDDEN]),
    ("hidden_states_model", ("--head", "lm_head", "--in-process"), "head", None),
]


@pytest.mark.parametrize(("name", "options", "kind", "shape"), SLOW_RUNS)
def test_every_way_to_name_the_compared_value_passes(cli, name, options, kind, shape):
    code, report = _gate_json(cli, name, *options)
    assert code == 0 and report["bytes"]["status"] == "equal"
    assert report["compared"]["kind"] == kind
    assert shape is None or report["compared"]["shape"] == shape


def test_unreadable_output_is_exit_2_before_any_stage_runs(cli):
    code, out, err = cli("gate", f"{GATE}:opaque_output", "--stages", "2", "--docs", DOCS)
    assert code == 2 and out == ""
    assert "--output-fqn" in err and "--head" in err and err.count("\n") == 1


def test_head_is_trained_by_the_loss_on_both_sides():
    report = Gate(f"{GATE}:hidden_states_model", head="lm_head").run(
        stages=2, docs=SMALL, train=True
    )
    assert report.train.status == "equal" and report.exit_code == 0


def test_model_built_in_float32_keeps_its_carve_out_through_the_gate():
    spec = "fixtures/framework_build.py:declared_router"
    gate = Gate(spec, dtype="float32")
    report = gate.run([1], docs=SMALL, train=True)
    assert report.verdict == "pass" and report.static_verdict == "pass"
    bias = gate.model.model.layers[1].mlp.e_score_correction_bias
    assert bias.dtype == torch.float32 and gate.model.model.norm.weight.dtype == torch.bfloat16
