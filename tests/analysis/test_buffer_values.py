"""Buffers and constants compared by value in stage programs (fixtures/buffer_values.py)."""

from __future__ import annotations

import re

import pytest
import torch
from harness import explorer, spec
from torch import nn

import graphcheck
from graphcheck.model.load import build_fake, fake_mode
from graphcheck.model.values import LIMIT, tensor_value, value_of

ROPE = "buffer self_attn.rotary.inv_freq differs by value"


def errors(name: str, builder: str, cut: int) -> list:
    report = explorer(f"buffer_values:{name}").verify([cut], stage_builder=builder)
    return [d for d in report.diagnostics if d.severity == "error"]


def flipped_layers(found) -> set[int]:
    return {int(re.match(r"global layer (\d+):", d.message)[1]) for d in found}


def test_renumbered_rope_base_is_flagged_naming_the_buffer():
    # rebuilt stage 1 holds global 2-7 as local 0-5: the long base moves from 3, 7 to 5
    found = errors("rope_base_by_layer", "rebuild", 2)
    assert {d.code for d in found} == {"GC301"}
    assert flipped_layers(found) == {3, 5, 7}
    assert all(ROPE in d.message for d in found)
    message = next(d.message for d in found if d.message.startswith("global layer 3:"))
    assert "max abs diff" in message and "uncut sha" in message
    assert message.endswith("build the stage so layers keep their global index")


def test_rope_base_passes_where_the_offset_is_a_multiple_of_the_period():
    assert errors("rope_base_by_layer", "rebuild", 4) == []


@pytest.mark.parametrize(
    "builder",
    ["keep-index", "moduledict"],  # moduledict: slow (tests/slow.txt)
)
def test_rope_base_passes_with_index_keeping_builders(builder):
    assert errors("rope_base_by_layer", builder, 2) == []


def test_uniform_rope_base_passes_rebuilt():
    assert errors("rope_base_uniform", "rebuild", 2) == []


def test_uniform_rope_base_passes_rebuilt_at_every_cut():
    for cut in range(9):
        assert errors("rope_base_uniform", "rebuild", cut) == [], cut


@pytest.mark.parametrize(
    ("name", "twin", "what"),
    [
        ("scale_by_layer", "scale_uniform", "constant lifted_tensor differs by value"),
        ("table_by_layer", "table_uniform", "buffer gains differs by value"),
    ],
)
def test_constants_and_tables_keyed_by_layer(name, twin, what):
    found = errors(name, "rebuild", 2)
    assert {d.code for d in found} == {"GC301"}
    assert all(what in d.message for d in found)
    assert errors(twin, "rebuild", 2) == []


def test_a_value_graphcheck_cannot_compute_fails_closed():
    found = errors("large_buffer", "keep-index", 4)
    assert {d.code for d in found} == {"GC303"}
    assert "buffer big cannot be compared by value" in found[0].message
    assert f"above the {LIMIT}-element limit" in found[0].message


def test_cli_exit_status_and_message(cli):
    model = spec("buffer_values:rope_base_by_layer")
    code, out, _ = cli("verify", model, "--cuts", "2", "--stage-builder", "rebuild")
    assert code == 1 and "GC301" in out and ROPE in out
    code, out, _ = cli("verify", model, "--cuts", "4", "--stage-builder", "rebuild")
    assert code == 0 and "verdict: PASS" in out


def test_stages_built_in_this_process_compare_values_too():
    # a factory given as a callable: its stages are built here (not isolated)
    from buffer_values import rope_base_by_layer

    report = graphcheck.verify(rope_base_by_layer, [2], stage_builder="rebuild")
    assert {d.code for d in report.errors} == {"GC301"}
    assert all(ROPE in d.message for d in report.errors)


def _fake(factory):
    return build_fake(factory, fake_mode())


class _Holder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(LIMIT + 1))
        base = torch.arange(4, dtype=torch.float32)
        self.register_buffer("small", 1.0 / (10000.0 ** (base / 4)), persistent=False)
        self.register_buffer("large", torch.zeros(LIMIT + 1), persistent=False)
        self.register_buffer("derived", self.weight.detach()[:4] * 2, persistent=False)
        view = torch.zeros(4)
        view[1:3] = 5.0  # written through a view
        self.register_buffer("written", view, persistent=False)


def test_fake_build_computes_small_buffers_for_real():
    model = _fake(_Holder)
    small = value_of(model.small)
    assert small is not None and torch.allclose(small, 1.0 / (10000.0 ** (torch.arange(4.0) / 4)))
    assert value_of(model.written).tolist() == [0.0, 5.0, 5.0, 0.0]
    assert tensor_value(model.small).known and tensor_value(model.written).known


def test_values_graphcheck_does_not_compute_are_unknown():
    model = _fake(_Holder)
    large, derived = tensor_value(model.large), tensor_value(model.derived)
    assert not large.known and "limit" in large.why
    assert not derived.known and "a weight" in derived.why


def test_real_module_values_are_its_own():
    buffer = torch.tensor([1.0, 2.0])
    assert value_of(buffer) is buffer
    assert tensor_value(buffer).values == (1.0, 2.0)


def test_persistent_buffers_are_compared_by_name_only():
    # a rank loads a persistent buffer from the checkpoint: its built value is not the one
    # it runs with, so only a non-persistent buffer (or a constant) is compared by value
    from torch.export.graph_signature import InputKind, InputSpec, TensorArgument

    from graphcheck.stages.fingerprint import by_value

    graph = torch.fx.Graph()
    node = graph.placeholder("b_gain")
    persistent = InputSpec(InputKind.BUFFER, TensorArgument("b_gain"), "gain", persistent=True)
    assert by_value(None, persistent, node) is None
    parameter = InputSpec(InputKind.PARAMETER, TensorArgument("b_gain"), "gain")
    assert by_value(None, parameter, node) is None


def test_lock_fingerprints_tell_layers_apart_by_buffer_value():
    # graphcheck.lock hashes each layer's part: a rope base change is a lock change
    from graphcheck.analysis.regions import Region, RegionKind
    from graphcheck.stages.fingerprint import Provenance, part_of

    def hashes(name: str) -> list[str]:
        program = explorer(f"buffer_values:{name}").program
        provenance = Provenance(program)
        return [part_of(program, Region(RegionKind.LAYER, i), provenance).hash for i in range(8)]

    keyed = hashes("rope_base_by_layer")
    assert keyed[3] == keyed[7] and keyed[3] != keyed[2]
    assert len(set(keyed)) == 2
    assert len(set(hashes("rope_base_uniform"))) == 1


def test_side_input_computed_from_another_model_level_buffer():
    # the stage recomputes the model-level inv_freq the prelude's rotary tables come from
    builder = spec("buffer_values:other_rope_base")
    report = explorer("reference:reference").verify([4], stage_builder=builder)
    assert {d.code for d in report.errors} == {"GC303"}
    assert len(report.errors) == 8  # every layer reads the tables
    message = report.errors[0].message
    assert "side input computed from buffer model.inv_freq, which differs by value" in message
