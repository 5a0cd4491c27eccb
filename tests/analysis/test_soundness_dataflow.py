"""Mutation as dataflow, the boundary's shape, data-dependent sizes and same-dtype copies:
every fixture of ``fixtures/soundness_dataflow.py`` against its legal twin."""

from __future__ import annotations

import pytest
from harness import cut_codes, cut_map, spec

from graphcheck.analysis.export import export_model
from graphcheck.analysis.passes.link_mutations_pass import LinkMutationsPass
from graphcheck.analysis.program import analyse
from graphcheck.model.layout import detect_layout
from graphcheck.model.load import build_fake, fake_mode, resolve_factory

ALL = range(9)


def _map(factory: str):
    return cut_map(f"soundness_dataflow:{factory}")


def _activations(report, k: int) -> list[str]:
    return [c.node for c in report.cut(k).crossing if c.role == "activation"]


def _crossing_activations(report, k: int) -> list:
    return [c for c in report.cut(k).crossing if c.role == "activation"]


def _failing(report) -> list[int]:
    return [k for k in ALL if report.cut(k).codes]


# --- mutation is dataflow ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "write", "cuts"),
    [
        ("buffer_write_read", "copy_", [3, 4, 5]),  # layer 2 writes, layer 5 reads
        ("buffer_read_before_write", "copy_", [3, 4, 5]),  # layer 5 writes, layer 2 reads
        ("positions_inplace", "mul_", [3, 4, 5, 6, 7]),  # layer 2 edits position_ids
        ("positions_view_inplace", "mul_", [3, 4, 5, 6, 7]),  # ... through a view
        ("rotary_inplace_scale", "mul_", [3, 4, 5, 6, 7]),  # layer 2 scales cos
    ],
)
def test_flags_state_written_in_place_and_read_across_a_cut(fixture, write, cuts):
    report = _map(fixture)
    assert _failing(report) == cuts
    for k in cuts:
        assert cut_codes(report, k) == {"GC201"}
        assert write in _activations(report, k)  # the write itself is in the crossing set
        assert len(_activations(report, k)) == 2
    messages = [d.message for d in report.diagnostics if d.code == "GC201"]
    assert all("in place" in m for m in messages)


def test_names_the_buffer_and_the_next_step():
    report = _map("buffer_read_before_write")
    (first, *_) = [d for d in report.diagnostics if d.code == "GC201"]
    assert "model.memo" in first.message and "next step" in first.message
    assert report.cut(3).crossing[1].consumers == ["model.layers.2"]


@pytest.mark.parametrize(
    "fixture",
    [
        "buffer_write_read_local",  # each layer writes and reads its own buffer
        "positions_out_of_place",  # position_ids * 2, local to the layer
        "rotary_out_of_place_scale",  # cos * 0.5, local to the layer
    ],
)
def test_allows_writes_local_to_the_layer(fixture):
    report = _map(fixture)
    assert report.codes == set()
    assert all(len(_activations(report, k)) == 1 for k in ALL)


def test_mutated_input_is_not_replicated():
    # layers 5-7 read position_ids after layer 2 doubled it: what crosses cut 5 is the
    # write (an activation), not the replicated input, which only the twin hands on
    roles = {c.node: c.role for c in _map("positions_inplace").cut(5).crossing}
    assert roles["mul_"] == "activation" and "position_ids" not in roles
    twin = {c.node: c.role for c in _map("positions_out_of_place").cut(5).crossing}
    assert twin["position_ids"] == "replicated"


def _program(factory: str):
    mode = fake_mode()
    model = build_fake(resolve_factory(spec(f"soundness_dataflow:{factory}")), mode)
    return analyse(export_model(model, mode), detect_layout(model))


def test_links_a_read_through_an_older_alias():
    # buf[0] is taken before buf.add_(1): reading the view must depend on the write
    import torch

    graph = torch.fx.Graph()
    buf = graph.placeholder("buf")
    view = graph.call_function(torch.ops.aten.select.int, (buf, 0, 0))
    write = graph.call_function(torch.ops.aten.add_.Tensor, (buf, 1))
    read = graph.call_function(torch.ops.aten.mul.Tensor, (view, 2))
    graph.output((read, write))
    from graphcheck.analysis.regions import BUFFER, Region

    region = {n: Region("layer", 0) for n in graph.nodes}
    region[buf] = BUFFER
    link = LinkMutationsPass(region, {n: "replicated" for n in graph.nodes})
    link.run(graph)
    assert link.mutation_inputs == {read: [write]}
    assert link.writes == {write: buf}


def test_reference_has_no_writes():
    program = _program("multi_stream_collapsed")
    assert program.writes == {} and program.mutation_inputs == {} and program.persisted == []


# --- the boundary's shape ------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["multi_stream_residual", "bitcast_residual"])
def test_flags_boundary_that_is_not_the_residual_shape(fixture):
    report = _map(fixture)
    for k in range(1, 8):
        assert cut_codes(report, k) == {"GC206"}
    shapes = {tuple(c.shape) for k in range(1, 8) for c in _crossing_activations(report, k)}
    wide = ("1", "T", "2", "64") if fixture.startswith("multi") else ("1", "T", "128")
    assert shapes == {wide}
    first = next(d for d in report.diagnostics if d.code == "GC206")
    assert "pipeline_boundary_state" in first.message
    if fixture == "bitcast_residual":
        assert "aten.view.dtype" in first.message


@pytest.mark.parametrize("fixture", ["multi_stream_collapsed", "fp32_inside_layer"])
def test_allows_residual_shaped_boundary(fixture):
    report = _map(fixture)
    assert report.codes == set()
    shapes = {tuple(c.shape) for k in ALL for c in _crossing_activations(report, k)}
    assert shapes == {("1", "T", "64")}


def test_hidden_size_is_the_residual_width():
    from graphcheck.rules.gc206_boundary_not_residual_shape import hidden_size

    assert hidden_size(_program("multi_stream_residual")) == 64


# --- data-dependent sizes (GC403) ----------------------------------------------------------


@pytest.mark.parametrize("fixture", ["moe_where_dispatch", "cu_seqlens_from_positions"])
def test_allows_data_dependent_sizes(fixture):
    report = _map(fixture)
    assert "GC403" not in report.codes
    assert not [d for d in report.diagnostics if d.cut is not None]  # every cut is proven


def test_flags_a_data_dependent_size_tied_to_t():
    report = _map("moe_assumes_balance")
    tied = [d for d in report.diagnostics if d.code == "GC403" and "data-dependent" in d.message]
    assert len(tied) == 4 * 8  # one per expert per layer
    assert "T <= 4*u" in tied[0].message
    assert tied[0].source is not None and "soundness_dataflow.py" in tied[0].source


@pytest.mark.parametrize("fixture", ["length_guard", "specialized_length"])
def test_still_flags_guards_on_t(fixture):
    assert "GC403" in cut_map(f"violations:{fixture}").codes


# --- same-dtype copies are not twins or views (GC203) ----------------------------------------


@pytest.mark.parametrize(
    "fixture", ["contiguous_at_layer_end", "clone_at_layer_end", "cast_at_layer_end"]
)
def test_allows_a_copy_at_the_end_of_a_layer(fixture):
    assert _map(fixture).codes == set()


def test_still_flags_the_slice_itself():
    report = cut_map("violations:view_boundary")
    assert all(cut_codes(report, k) == {"GC203"} for k in range(1, 8))


# --- export under no_grad ------------------------------------------------------------------


def test_flex_attention_with_a_document_mask_exports():
    report = _map("flex_doc_mask")  # raised "does not support backward on CPU" with grad
    assert report.nodes > 0 and len(report.cuts) == 3
