"""Crossing sets, the minimum-cut placement of glue, and the one-sweep map."""

from __future__ import annotations

import torch
from harness import cut_map, spec, verify

import graphcheck
from graphcheck.analysis.dataflow import live_edges
from graphcheck.analysis.export import export_model
from graphcheck.analysis.program import analyse
from graphcheck.model.layout import detect_layout
from graphcheck.model.load import build_fake, fake_mode, resolve_factory


def _program(name: str):
    mode = fake_mode()
    model = build_fake(resolve_factory(spec(name)), mode)
    return analyse(export_model(model, mode), detect_layout(model))


def test_crossing_set_lists_every_role():
    cut = verify("reference:reference", (4,)).cut(4)
    by_role: dict[str, list] = {}
    for c in cut.crossing:
        by_role.setdefault(c.role, []).append(c)
    (act,) = by_role["activation"]
    assert (act.dtype, act.shape, act.producer) == ("bfloat16", ["1", "T", "64"], "model.layers.3")
    assert "model.layers.4" in act.consumers
    replicated = {c.node for c in by_role["replicated"]}
    assert {"cu_seq_lens_q", "cu_seq_lens_k"} <= replicated
    assert len(replicated) == 4  # plus the rotary cos and sin tables
    assert {tuple(c.shape) for c in by_role["symbolic"]} == {("max_q",), ("max_k",), ("T",)}
    assert "parameter" not in by_role


def _as_soon_crossing(program, k: int) -> list[torch.fx.Node]:
    """Flow values crossing boundary k when every free node runs as early as it can."""
    left = {n for n, (lo, _) in program.interval.items() if lo < k}
    return [n for n in left if any(u in program.interval and u not in left for u in n.users)]


def test_minimum_cut_beats_as_soon_placement():
    program = _program("violations:cast_in_loop")
    as_soon = _as_soon_crossing(program, 4)
    assert sorted(program.dtype(n) for n in as_soon) == ["bfloat16", "float32"]
    cut = verify("violations:cast_in_loop", (4,)).cut(4)
    acts = [c for c in cut.crossing if c.role == "activation"]
    assert [(c.dtype, c.producer) for c in acts] == [("bfloat16", "model (glue after layer 3)")]


def test_live_edges_is_one_sweep_over_all_boundaries():
    program = _program("violations:collected_outputs")
    buckets = live_edges(program)
    assert len(buckets) == program.num_layers + 1
    # layer j's output stays live until the head: boundary k sees the outputs of layers < k
    producers = [
        {program.region[u].layer for u, _ in b if u.op == "call_function"} for b in buckets
    ]
    assert {0, 1, 2} <= producers[3]


def test_map_of_64_layers_uses_one_export(monkeypatch):
    calls = []
    real = torch.export.export
    monkeypatch.setattr(torch.export, "export", lambda *a, **k: calls.append(1) or real(*a, **k))
    report = graphcheck.cut_map(spec("reference:reference_64"))
    assert len(calls) == 1
    assert [c.position for c in report.cuts] == list(range(65))
    assert report.legal_cuts() == list(range(65))


def test_verify_reports_stage_plan():
    report = verify("reference:reference", (0, 4, 8))
    stages = [(s.layers, s.modules) for s in report.stages]
    assert stages == [
        (None, ("model.embed_tokens",)),
        ((0, 3), ()),
        ((4, 7), ()),
        (None, ("model.norm", "lm_head")),
    ]
    assert report.verdict == "pass"


def test_even_split_with_stages():
    report = graphcheck.verify(spec("reference:reference"), stages=4)
    assert [c.position for c in report.cuts] == [2, 4, 6]


def test_moduledict_layers_keyed_by_global_index():
    assert cut_map("reference:reference_moduledict").legal_cuts() == list(range(9))


def test_get_pp_module_config_layout():
    report = cut_map("violations:pp_config")
    assert report.codes == set()
    assert report.num_layers == 8


def test_strict_export():
    assert verify("reference:reference", (3,), strict=True).verdict == "pass"


def test_diagnostic_carries_node_module_and_source():
    report = verify("violations:skip_connection", (4,))
    (diag,) = report.diagnostics
    assert (diag.code, diag.cut, diag.stage) == ("GC201", 4, 1)
    assert diag.node == "embedding" and diag.module == "model.embed_tokens"
    assert diag.source.startswith("fixtures/") or "fixtures" in diag.source


def test_plan_placement_is_one_feasible_schedule():
    # every flow edge runs forward in stage order under the placement the proof reports
    from graphcheck.analysis.dataflow import analyse_cuts
    from graphcheck.checker import Context
    from graphcheck.planning.syntax import plan_from_cuts

    for name, cuts in [
        ("violations:cast_in_loop", [2, 3, 6]),
        ("violations:skip_connection", [1, 5]),
    ]:
        program = _program(name)
        plan = plan_from_cuts(cuts, program.num_layers)
        ctx = Context(program, analyse_cuts(program, cuts, plan=True), plan)
        for w in program.interval:
            for u in w.all_input_nodes:
                if u in program.interval:
                    assert ctx.stage_of(u) <= ctx.stage_of(w), (name, u.name, w.name)
