"""The gate moves the model's own tensors and runs the model's own init.

Weights cross processes by ``named_parameters``/``named_buffers``, never through
``state_dict()``, whose hooks may split a fused ``qkv.weight``
(``fixtures/gate_weights.py:fused_qkv_split_hook``: a stage loading through the saved
dict found no entry for it, exit 2). Every process calls the model's own init method
after the factory (``init_weights``, ``init_states``, ``reset_parameters``, or
``--init METHOD``), and a parameter left NaN, inf or an all-zero matrix stops the gate
(exit 2, naming the parameters and ``--init``).

The helpers, the weights a process builds and what the uncut and stage processes run
are checked in this process, as are the refusals (exit 2 before any export); the gate
runs that start processes or export are slow (tests/slow.txt).
"""

from __future__ import annotations

import json
from functools import cache

import gate_weights
import pytest
import torch
from harness import spec
from torch import nn

from graphcheck.errors import GateError, UsageError
from graphcheck.gate import Gate
from graphcheck.gate.batch import PackedBatch
from graphcheck.gate.runner import (
    Recipe,
    build_model,
    build_stage,
    load_weights,
    pack,
    run_stage,
    run_uncut,
    unpack,
)
from graphcheck.gate.tensors import (
    INIT_METHODS,
    check_initialised,
    init_method,
    initialise,
    restore,
    tensors_of,
)
from graphcheck.gate.weights import build_real, seeded
from graphcheck.model.layout import detect_layout
from graphcheck.model.load import default_dtype

DOCS = "20,9,7"
STAGES = [[0, 1], [2, 3]]  # --stages 2 of the 4-layer fixtures
QKV = "model.layers.0.self_attn.qkv.weight"
UP = "model.layers.0.mlp.experts_up"
_INITIALISED = ("empty_experts_init_weights", "init_weights")


def _gate(cli, name: str, *options: str) -> tuple[int, str, str]:
    return cli("gate", spec(f"gate_weights:{name}"), "--stages", "2", "--docs", DOCS, *options)


@cache
def _real(name: str, init: str | None = None) -> nn.Module:
    return build_real(getattr(gate_weights, name), 0, init=init)


# --- save and restore by name, no hooks -------------------------------------------------


def test_state_dict_hooks_split_what_the_module_holds():
    model = _real("fused_qkv_split_hook")
    saved = model.state_dict()
    assert QKV not in saved and QKV.replace("qkv", "q_proj") in saved  # the hook split it
    state = tensors_of(model)
    assert QKV in state and state[QKV].shape == (128, 64)
    assert set(state) == {n for n, _ in model.named_parameters()} | {"model.inv_freq"}


def test_checkpoint_leaves_out_non_persistent_buffers():
    model = _real("fused_qkv_split_hook")
    assert "model.inv_freq" in tensors_of(model)
    assert "model.inv_freq" not in tensors_of(model, persistent=True)


def test_restore_copies_every_tensor_back_in_place():
    model = gate_weights.fused_qkv_split_hook()
    state = tensors_of(model)
    weight = model.get_parameter(QKV)
    with torch.no_grad():
        weight.mul_(2)
        model.model.inv_freq.zero_()
    restore(model, state)
    assert model.get_parameter(QKV) is weight and torch.equal(weight, state[QKV])
    assert torch.equal(model.model.inv_freq, state["model.inv_freq"])
    with pytest.raises(GateError, match=f"cannot restore {QKV}: the model's forward regis"):
        restore(model, {k: v for k, v in state.items() if k != QKV})
    with pytest.raises(GateError, match=r"replaced it \[2\] -> \[8\]; write it in place"):
        restore(model, state | {"model.inv_freq": torch.ones(2)})


@pytest.mark.parametrize(
    ("name", "init"),
    [("fused_qkv_split_hook", None), ("empty_experts_init_weights", "init_weights")],
)
def test_every_stage_parameter_loads_from_the_checkpoint(name, init):
    # what run_uncut saves and run_stage loads, in this process: every parameter found
    recipe = _recipe(name, init)
    uncut = build_model(recipe)
    checkpoint = tensors_of(uncut, persistent=True)
    for index, layers in enumerate(STAGES):
        module, names = build_stage(recipe, index, layers, len(STAGES))
        loaded = load_weights(module, names, checkpoint, index)
        params = dict(module.named_parameters(remove_duplicate=False))
        assert set(params) <= set(loaded)
        assert all(torch.equal(p, checkpoint[names[n]]) for n, p in params.items())
    assert any(n.endswith("qkv.weight") or n.endswith("experts_up") for n in loaded)


def _recipe(name: str, init: str | None) -> Recipe:
    """What the gate hands its processes for ``--stages 2``."""
    layout = detect_layout(_real(name, init))
    return Recipe(spec(f"gate_weights:{name}"), layout, builder="keep-index", init=init)


def test_what_each_process_runs_saves_and_loads_the_fused_qkv(tmp_path):
    # run_uncut and run_stage as the gate's processes run them (here in this process):
    # the checkpoint holds qkv.weight, every stage loads it, the last stage's bytes equal
    recipe = _recipe("fused_qkv_split_hook", None)
    batch = PackedBatch.random((20, 9, 7), 256, 0)
    threads = torch.get_num_threads()
    try:
        uncut = unpack(run_uncut(pack((recipe, batch, str(tmp_path), False))))
        assert QKV in torch.load(uncut["checkpoint"], weights_only=True)
        wire = None
        for index, layers in enumerate(STAGES):
            job = {"index": index, "layers": layers, "num_stages": 2, "wire": wire,
                   "checkpoint": uncut["checkpoint"], "grad": None}  # fmt: skip
            out = unpack(run_stage(pack((recipe, batch, job))))
            assert "out" in out, out
            wire = out["out"].to(torch.bfloat16)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(out["out"], uncut["logits"])


# --- the model's own init ---------------------------------------------------------------


class _Roots:
    """Root modules with init methods (and one submodule named like one)."""

    class All(nn.Linear):
        def init_weights(self):
            nn.init.constant_(self.weight, 1.0)

        def init_states(self):
            nn.init.constant_(self.weight, 2.0)

    class States(nn.Linear):
        def init_states(self):
            nn.init.constant_(self.weight, 2.0)

    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(2, 2))
            self.reset_parameters = nn.Linear(2, 2)  # a submodule, not a method

    class Torchtitan(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(2, 2))

        def init_weights(self, buffer_device: torch.device | None):
            assert buffer_device is None
            nn.init.constant_(self.weight, 3.0)

    class Needs(nn.Module):
        def init_weights(self, std: float):
            raise AssertionError("never called")

        def reset_stats(self):
            pass


def test_init_methods_are_looked_for_in_order():
    assert INIT_METHODS == ("init_weights", "init_states", "reset_parameters")
    assert init_method(_Roots.All(2, 2), None) == "init_weights"
    assert init_method(_Roots.States(2, 2), None) == "init_states"
    assert init_method(nn.Linear(2, 2), None) == "reset_parameters"
    assert init_method(_Roots.Plain(), None) is None
    assert init_method(_Roots.All(2, 2), "none") is None
    assert init_method(_Roots.All(2, 2), "init_states") == "init_states"


def test_init_runs_without_grad_and_torchtitan_gets_buffer_device_none():
    model = _Roots.Torchtitan()
    method = init_method(model, None)
    initialise(model, method)
    assert method == "init_weights" and torch.equal(model.weight, torch.full((2, 2), 3.0))
    assert model.weight.requires_grad


def test_init_that_needs_arguments_names_it_and_the_flag():
    with pytest.raises(UsageError) as err:
        init_method(_Roots.Needs(), None)
    assert "Needs.init_weights() needs arguments (std)" in str(err.value)
    assert "--init METHOD" in str(err.value) and "--init none" in str(err.value)


def test_missing_init_method_names_the_class_and_its_init_methods():
    with pytest.raises(UsageError) as err:
        init_method(_Roots.Needs(), "my_init")
    message = str(err.value)
    assert message.startswith("--init my_init: Needs has no method 'my_init'")
    assert "its init methods: init_weights, reset_stats" in message
    with pytest.raises(UsageError, match="it has no init or reset method"):
        init_method(_Roots.Plain(), "reset_parameters")  # a submodule is no method


def test_init_runs_in_the_factory_generator_state():
    model = _real(*_INITIALISED)
    with seeded(0), default_dtype(torch.bfloat16):
        twin = gate_weights.empty_experts_init_weights()
        twin.init_weights()
    for (name, p), (_, q) in zip(model.named_parameters(), twin.named_parameters(), strict=True):
        assert torch.equal(p, q), name
    up = model.get_parameter(UP).float()
    assert torch.isfinite(up).all() and 0.015 < up.std().item() < 0.025


def test_every_process_builds_the_same_initialised_weights():
    built, real = tensors_of(build_model(_recipe(*_INITIALISED))), tensors_of(_real(*_INITIALISED))
    assert set(built) == set(real)
    assert all(torch.equal(built[n], real[n]) for n in real)


# --- parameters nobody initialised --------------------------------------------------------


def test_nan_and_zero_matrices_are_refused_naming_them_and_the_flag():
    with pytest.raises(GateError) as err:
        _real("empty_experts_no_init")
    message = str(err.value)
    assert "never initialises" in message and "--init METHOD" in message
    assert f"{UP} (all zero)" in message and "experts_down (NaN or inf)" in message
    assert "8 parameters uninitialised" in message and "and 5 more" in message


@pytest.mark.parametrize(
    ("tensor", "name", "refused"),
    [
        (torch.zeros(4, 8), "experts.weight", True),
        (torch.full((4,), float("inf")), "norm.weight", True),
        (torch.zeros(4, 8), "experts.gate_up_proj_bias", False),  # gpt_oss: zero biases
        (torch.zeros(8), "norm.weight", False),  # a 1-D weight may be zero
        (torch.zeros(4, 8, dtype=torch.int64), "table", False),
        (torch.randn(4, 8), "experts.weight", False),
    ],
)
def test_check_refuses_nan_inf_and_zero_matrices_only(tensor, name, refused):
    module = nn.Module()
    owner, _, leaf = name.rpartition(".")
    holder = module
    if owner:
        holder = nn.Module()
        module.add_module(owner, holder)
    holder.register_parameter(leaf, nn.Parameter(tensor, requires_grad=tensor.is_floating_point()))
    if refused:
        with pytest.raises(GateError, match=name.replace(".", r"\.")):
            check_initialised(module, None)
    else:
        check_initialised(module, None)


# --- the gate, per process ----------------------------------------------------------------


def test_fused_qkv_with_splitting_state_dict_hook_gates_equal(cli):
    code, out, err = _gate(cli, "fused_qkv_split_hook", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["run"] == "processes" and data["bytes"]["status"] == "equal"
    assert data["isolation"]["status"] == "bitwise"


def test_uninitialised_experts_are_exit_2_naming_them_and_init(cli, exports):
    code, out, err = _gate(cli, "empty_experts_no_init")
    assert code == 2 and out == "" and err.count("\n") == 1 and exports == []
    assert UP in err and "--init METHOD" in err and "Traceback" not in err


def test_unknown_init_is_exit_2_before_any_export(cli, exports):
    code, out, err = _gate(cli, "empty_experts_my_init", "--init", "nope")
    assert code == 2 and out == "" and err.count("\n") == 1 and exports == []
    assert "MyInitLM has no method 'nope'" in err and "its init methods: my_init" in err


def test_init_of_another_name_is_not_guessed(cli):
    code, _, err = _gate(cli, "empty_experts_my_init")
    assert code == 2 and "no init method called; its init methods: my_init" in err


def test_init_of_another_name_is_named_with_the_flag(cli):
    code, out, err = _gate(cli, "empty_experts_my_init", "--init", "my_init", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["bytes"]["status"] == "equal"


def test_experts_filled_by_init_weights_gate_on_their_initialised_values():
    gate = Gate(spec("gate_weights:empty_experts_init_weights"))
    report = gate.run(stages=2, docs=(20, 9, 7))
    assert gate.init == "init_weights" and report.exit_code == 0
    assert report.bytes.status == "equal" and report.isolation.status == "bitwise"
    assert report.export_faithful  # the uncut process ran the weights this process built
    real = _real(*_INITIALISED)
    assert all(torch.equal(p, real.get_parameter(n)) for n, p in gate.model.named_parameters())


def test_in_process_graph_mode_restores_by_name():
    gate = Gate(spec("gate_weights:fused_qkv_split_hook"))
    report = gate.run(stages=2, docs=(20, 9, 7), mode="graph")
    assert report.verdict == "pass" and report.bytes.status == "equal"
    assert report.isolation.status == "bitwise"


def test_module_given_as_object_is_initialised_only_by_a_named_method():
    def given():
        with seeded(0), default_dtype(torch.bfloat16):
            return gate_weights.empty_experts_my_init()

    with pytest.raises(GateError, match="no init method called; its init methods: my_init"):
        Gate(given()).model  # noqa: B018 - built on first use
    model = given()
    gate = Gate(model, init="my_init")
    assert gate.model is model and torch.isfinite(model.get_parameter(UP)).all()
