"""The program mode: graphcheck proves the training program by default (``--mode train``,
``model.train()``), the one pipeline parallelism runs, and the eval program with
``--mode eval``; stage programs and the gate use the same mode; a random op in the
proven program is GC304 and the gate refuses to compare random streams."""

from __future__ import annotations

import json

import pytest
import torch
import training
from harness import explorer, spec, verify

import graphcheck
from graphcheck.errors import GateError, GraphcheckError, UsageError
from graphcheck.gate.run import Gate
from graphcheck.model.session import Session
from graphcheck.report import render
from graphcheck.rules.gc304_random_op_in_program import random_reason

HYBRID = spec("training:kernel_by_training")


# --- the done-when: a kernel picked by self.training -------------------------------------


def test_training_program_is_proven_by_default(cli):
    code, out, err = cli("verify", HYBRID, "--cuts", "2")
    assert (code, err) == (0, "")
    assert " · train mode · " in out.splitlines()[0]
    assert "verdict: PASS" in out


def test_eval_mode_proves_the_eval_program(cli):
    code, out, _ = cli("verify", HYBRID, "--cuts", "2", "--mode", "eval", "--format", "json")
    data = json.loads(out)
    assert code == 1
    assert (data["mode"], data["program_mode"], data["verdict"]) == ("verify", "eval", "fail")
    leaks = [d for d in data["diagnostics"] if d["code"] == "GC401"]
    assert {d["module"] for d in leaks} == {f"model.layers.{i}.self_attn" for i in range(4)}
    assert all("scaled_dot_product_attention" in d["source"]["text"] for d in leaks)


def test_reverse_twin_leaks_in_the_training_program_only():
    assert "GC401" in verify("training:kernel_by_eval", (2,)).codes
    assert verify("training:kernel_by_eval", (2,), program_mode="eval").verdict == "pass"


def test_module_given_as_an_object_is_put_in_the_mode():
    module = training.dropout_layer().to(torch.bfloat16)  # real weights, in train mode
    report = graphcheck.verify(module, cuts=[2], program_mode="eval", stage_builder="none")
    assert not module.training
    assert (report.program_mode, report.verdict) == ("eval", "pass")  # dropout(x, p, False)


@pytest.mark.parametrize("mode", ["test", "Train", ""])
def test_unknown_mode_is_a_usage_error_before_the_build(mode):
    with pytest.raises(UsageError, match=r"unknown program mode .*: use train or eval"):
        Session("fixtures/no_such_file.py:factory", program_mode=mode)


def test_cli_rejects_an_unknown_mode_in_one_line(cli):
    code, out, err = cli("verify", HYBRID, "--cuts", "2", "--mode", "inference")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "invalid choice: 'inference'" in err


# --- GC304 random-op-in-program ------------------------------------------------------------


def test_dropout_message_names_the_op_the_module_the_line_and_the_fix():
    found = [d for d in verify("training:dropout_layer", (2,)).diagnostics if d.code == "GC304"]
    assert [d.module for d in found] == [f"model.layers.{i}.dropout" for i in range(4)]
    first = found[0]
    assert first.message.startswith("`aten.dropout.default` draws random numbers")
    assert "p = 0.1" in first.message and "in the train program" in first.message
    assert "set the dropout probability to 0" in first.message
    assert "--set attention_dropout=0" in first.message and "--mode eval" in first.message
    assert first.source.startswith("fixtures/training.py:") and "self.dropout(" in first.source


def test_map_of_a_program_with_random_ops_has_no_legal_cut():
    report = explorer("training:dropout_layer").map()  # the export the verify above read
    text = render(report)
    assert " · train mode · " in text.splitlines()[0]
    assert report.legal_cuts() == []
    assert "whole-program findings (4); no cut is legal until they are fixed" in text


def _call(target, *args, **kwargs) -> torch.fx.Node:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    return graph.call_function(target, (x, *args), kwargs)


def _symbolic(value: torch.SymFloat | float) -> torch.fx.Node:
    """A node the graph computes, holding ``value``."""
    node = torch.fx.Graph().placeholder("p")
    node.meta["val"] = value
    return node


def _sym_float() -> torch.SymFloat:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    return ShapeEnv().create_unbacked_symfloat()


aten = torch.ops.aten


@pytest.mark.parametrize(
    ("target", "args", "kwargs", "random"),
    [
        (aten.dropout.default, (0.1, True), {}, True),
        (aten.dropout.default, (0.0, True), {}, False),
        (aten.dropout.default, (0.1, False), {}, False),  # model.eval()
        (aten.native_dropout.default, (0.2, None), {}, True),  # train=None draws
        (aten.feature_dropout.default, (0.5, True), {}, True),
        (aten.alpha_dropout.default, (0.0, True), {}, False),
        (aten.scaled_dot_product_attention.default, ("k", "v"), {"dropout_p": 0.1}, True),
        (aten.scaled_dot_product_attention.default, ("k", "v"), {}, False),  # default 0
        (aten.rrelu_with_noise.default, ("noise",), {"training": True}, True),
        (aten.rrelu_with_noise.default, ("noise",), {}, False),  # training defaults False
        (aten.bernoulli.default, (), {}, True),
        (aten.rand_like.default, (), {}, True),
        (aten.randperm.default, (), {}, True),
        (aten.uniform_.default, (), {}, True),
        (aten.add.Tensor, (1.0,), {}, False),
    ],
)
def test_random_ops_are_judged_from_their_arguments(target, args, kwargs, random):
    assert (random_reason(_call(target, *args, **kwargs)) is not None) is random


def test_a_probability_graphcheck_cannot_read_is_random():
    unknown = random_reason(_call(aten.dropout.default, _symbolic(_sym_float()), True))
    assert unknown == "may draw random numbers (p is computed in the graph, not a literal)"
    recorded = _call(aten.dropout.default, _symbolic(0.0), True)
    assert random_reason(recorded) is None


# --- the gate runs the proof's mode ---------------------------------------------------------


def test_gate_refuses_a_program_with_random_ops():
    name = "training:dropout_layer"
    gate = Gate(spec(name), explorer=explorer(name))  # the proof's export, shared
    with pytest.raises(GateError) as raised:
        gate.run([2], docs=(9, 5))
    message = str(raised.value)
    assert "the train program has random ops (GC304: dropout in model.layers.0.dropout" in message
    assert "set the dropout probability to 0, or gate --mode eval" in message
    assert "\n" not in message


@pytest.mark.parametrize(("mode", "isolation"), [("train", "bitwise"), ("eval", "fail")])
def test_gate_runs_the_proven_program(mode, isolation):
    report = graphcheck.gate(HYBRID, cuts=[2], docs=(9, 5), program_mode=mode)
    assert (report.program_mode, report.as_dict()["program_mode"]) == (mode, mode)
    assert (report.bytes.status, report.isolation.status) == ("equal", isolation)


# --- stage programs are built in the proven mode -------------------------------------------


@pytest.mark.parametrize("model", [HYBRID, training.kernel_by_training], ids=["fresh", "local"])
def test_rebuilt_stages_run_the_eval_program(model):
    # rebuild constructs new modules (in train mode, as every new module is): exported in
    # train mode they would take the per-document kernel where the uncut eval program
    # does not (GC301)
    report = graphcheck.verify(model, cuts=[2], stage_builder="rebuild", program_mode="eval")
    assert "GC401" in report.codes
    assert not {"GC301", "GC303"} & report.codes


# --- attention dropout of transformers models ----------------------------------------------


def test_attention_dropout_is_refused_by_the_varlen_kernel_in_train_mode():
    # the varlen kernel draws no dropout on the attention probabilities as the family's
    # own attention does: proving it without would prove another program (exit 2, named)
    settings = {"num_hidden_layers": 2, "attention_dropout": 0.1}
    with pytest.raises(GraphcheckError, match="dropout"):
        graphcheck.verify(
            "hf:llama", cuts=[1], settings=settings, program_mode="train", stage_builder="none"
        )
    report = graphcheck.verify(
        "hf:llama", cuts=[1], settings=settings, program_mode="eval", stage_builder="none"
    )
    assert report.codes == set()  # in eval no dropout runs: the kernel drops nothing
