"""Stage programs compared by what they compute, not by the names export numbers.

Export names some things per program: the unbacked sizes a data-dependent op makes
(``u4`` in the uncut program is ``u0`` in a stage's), the subgraphs of higher-order ops
(flex attention's ``sdpa_score0``, ``sdpa_mask1``), the node a runtime assertion
checks, and which name of a tied weight it reads. Each legal model here passes with
its default stage programs (0 differences) and has a violating twin that still fails
GC301: the same kind of model whose layers differ under ``--stage-builder rebuild``
(fixtures/stage_twins.py).

Fixtures: ``adversarial:token_choice_moe`` and ``stage_twins:moe_parity`` (unbacked
sizes), ``adversarial:flex_document_mask`` and ``stage_twins:flex_window`` (mask
subgraphs), ``violations:tied_embeddings`` (GC205 ignored), ``hf:gemma3_text`` (a scalar
buffer made from a Python number, and per-layer ``layer_types``).
"""

from __future__ import annotations

from functools import cache

import networkx as nx
import pytest
import torch
import torch.fx
from harness import spec

import graphcheck
from graphcheck.analysis.regions import GLUE
from graphcheck.report import Report, render
from graphcheck.stages.compare import same_part, tied_names, untied
from graphcheck.stages.fingerprint import Part, canonical_symbols, subgraph_text


@cache
def run(name: str, cut: int, **options) -> Report:
    return graphcheck.verify(name if name.startswith("hf:") else spec(name), [cut], **options)


def assert_proven_equal(report: Report) -> None:
    proof = report.stage_proof
    assert proof.proven and proof.default, proof
    assert not [d for d in report.errors if d.code.startswith("GC3")], report.errors
    assert report.verdict == "pass"
    assert f"{len(report.stage_programs)} stage programs, 0 differences" in render(report, "text")


def flips(report: Report) -> set[str]:
    return {d.message.split(":")[0].split(" reads ")[0] for d in report.errors if d.code == "GC301"}


# --- unbacked sizes ---------------------------------------------------------------------------


def part(*labels: str) -> Part:
    graph = nx.DiGraph()
    for i, label in enumerate(labels):
        graph.add_node(f"n{i}", label=label)
    for i in range(1, len(labels)):
        graph.add_edge(f"n{i - 1}", f"n{i}", pos="0,")
    return canonical_symbols(Part(GLUE, graph))


def test_unbacked_symbols_compare_by_a_consistent_renaming():
    stage = part("where() -> int64[u0]", "index(%) -> bfloat16[u0, 64]")
    uncut = part("where() -> int64[u4]", "index(%) -> bfloat16[u4, 64]")
    assert same_part(stage, uncut)


@pytest.mark.parametrize(
    "other",
    [
        ("where() -> int64[u4]", "index(%) -> bfloat16[2*u4, 64]"),  # u against 2*u
        ("where() -> int64[u4]", "index(%) -> bfloat16[u5, 64]"),  # one symbol, or two
        ("where() -> int64[u4]", "index(%) -> bfloat16[T, 64]"),  # a named input symbol
    ],
)
def test_unbacked_symbols_that_differ_in_structure_still_differ(other):
    assert not same_part(part("where() -> int64[u0]", "index(%) -> bfloat16[u0, 64]"), part(*other))


def test_assertions_compare_without_the_node_they_name():
    a = part("_assert_scalar(msg=expression u4 >= 0 on node 'ge_4') -> None")
    b = part("_assert_scalar(msg=expression u0 >= 0 on node 'ge') -> None")
    c = part("_assert_scalar(msg=expression u0 >= 1 on node 'ge') -> None")
    assert same_part(a, b) and not same_part(a, c)


def _counted(first: int, total: str) -> Part:
    """Four counts read as ints (``u<first>``, ...) and export's assert on their sum,
    the sum printed the way sympy orders its terms (by the symbols' names)."""
    names = [f"u{first + i}" for i in range(4)]
    items = [f"item() -> {n}" for n in names]
    return part(*items, f"eq(%, %) -> Eq({' + '.join(sorted(names))}, {total})")


def test_sums_compare_with_their_terms_in_a_canonical_order():
    """JetMoE's ``Eq(u8 + u9 + u10 + u11, 2*T)`` prints as ``u10 + u11 + u8 + u9`` in the
    uncut program (``sym2 + sym3 + sym0 + sym1`` renamed) and ``u0 + u1 + u2 + u3`` in a
    stage's: the same expression, so the same part."""
    uncut, stage = _counted(8, "2*T"), _counted(0, "2*T")
    assert same_part(stage, uncut)


@pytest.mark.parametrize(
    "other",
    [
        "Eq(u0 + u1 + u2, 2*T)",  # a term fewer
        "Eq(u0 + u1 + u2 + u3, T)",  # another right-hand side
        "Eq(2*u0 + u1 + u2 + u3, 2*T)",  # a term scaled
        "Eq(u0 + u1 - u2 + u3, 2*T)",  # a term subtracted
        "Eq(u0 - u2 + u1 + u3, 2*T)",  # another term subtracted (only that term moves)
    ],
)
def test_sums_that_really_differ_still_differ(other):
    items = [f"item() -> u{i}" for i in range(4)]
    reference = part(*items, "eq(%, %) -> Eq(u0 - u1 + u2 + u3, 2*T)")
    assert not same_part(reference, part(*items, f"eq(%, %) -> {other}"))
    assert same_part(reference, part(*items, "eq(%, %) -> Eq(u0 - u1 + u3 + u2, 2*T)"))


def test_jetmoe_untied_proves_its_stage_programs():
    """Each layer's routing asserts ``Eq(u_a + u_b + u_c + u_d, 2*T)``; in the uncut
    program and in stage 1 the symbols are numbered differently, and so are the sums'
    terms. With the sums compared in a canonical order: 0 differences, and a pass."""
    assert_proven_equal(run("hf:jetmoe", 1, settings=(("tie_word_embeddings", False),)))


def test_token_choice_moe_proves_its_stage_programs():
    assert_proven_equal(run("adversarial:token_choice_moe", 4))


def test_moe_whose_layers_differ_under_rebuild_still_flips():
    assert_proven_equal(run("stage_twins:moe_parity", 3))
    report = run("stage_twins:moe_parity", 3, stage_builder="rebuild")
    assert flips(report) == {f"global layer {g}" for g in range(3, 8)}
    assert "aten.topk.default(k=2)" in report.errors[0].message


# --- subgraphs of higher-order ops ------------------------------------------------------------


def mask_graph(window: int | None, name: str) -> torch.fx.Graph:
    def mask(q_idx, kv_idx):
        keep = q_idx >= kv_idx
        return keep & (q_idx - kv_idx < window) if window is not None else keep

    module = torch.fx.symbolic_trace(mask)
    for node in module.graph.nodes:  # the names export would number per program
        node.name = f"{node.name}_{name}"
    return module.graph


def test_subgraphs_compare_by_content_not_by_name():
    assert subgraph_text(mask_graph(None, "0")) == subgraph_text(mask_graph(None, "7"))
    assert subgraph_text(mask_graph(None, "0")) != subgraph_text(mask_graph(16, "0"))
    assert subgraph_text(mask_graph(16, "0")) != subgraph_text(mask_graph(8, "0"))


def test_flex_document_mask_proves_its_stage_programs():
    assert_proven_equal(run("adversarial:flex_document_mask", 4))


def test_flex_mask_that_differs_per_layer_still_flips():
    assert_proven_equal(run("stage_twins:flex_window", 2))
    report = run("stage_twins:flex_window", 2, stage_builder="rebuild")
    # rebuilt from 0, stage 1's window moves from global layers 3, 7 to 5
    assert flips(report) == {f"global layer {g}" for g in (3, 5, 7)}
    assert "the body of `flex_attention` differs" in report.errors[0].message
    assert "sdpa_mask" not in report.errors[0].message  # the body, not its generated name


# --- tied weights -----------------------------------------------------------------------------


def test_tied_names_relate_a_tied_weight_by_its_group():
    tied = tied_names({"lm_head.weight": ("embed.weight",), "embed.weight": ("lm_head.weight",)})
    graph = nx.DiGraph()
    graph.add_node("ext:w", label="param:lm_head.weight:bfloat16['256', '64']")
    from graphcheck.stages.fingerprint import NodeRecord

    rec = NodeRecord("w", "placeholder", graph.nodes["ext:w"]["label"], "", (), None, "")
    found = untied(Part(GLUE, graph, externals={"ext:w": rec}), tied)
    assert found.graph.nodes["ext:w"]["label"] == "param:embed.weight:bfloat16['256', '64']"
    assert found.externals["ext:w"].label == found.graph.nodes["ext:w"]["label"]
    assert tied_names({"a.weight": (), "b.weight": ()}) == {}  # untied: names kept


def test_tied_embeddings_prove_their_stage_programs_with_gc205_ignored():
    report = run("violations:tied_embeddings", 4, ignore=("GC205",))
    assert_proven_equal(report)
    assert [i.diagnostic.code for i in report.ignored] == ["GC205"]
    assert "GC205" in run("violations:tied_embeddings", 4).codes  # the hazard is still reported


# --- a scalar buffer from a Python number, per-layer layer_types (Gemma 3) --------------------


def test_gemma3_text_proves_its_stage_programs_with_hf_slice():
    report = run("hf:gemma3_text", 1, ignore=("GC205",))  # tied embeddings
    assert report.stage_proof.builder == "hf-slice"
    assert_proven_equal(report)
    assert {d.code for d in report.diagnostics} == {"GC302"}  # the renumbered container


@pytest.mark.parametrize("cut", [4, 6])
def test_a_pruned_model_with_none_slots_proves_its_stage_programs(cut):
    """``none_layers`` holds ``None`` in slots 5-7: the stage owning them has only the
    layers the uncut model has, and those are matched to their global index."""
    assert_proven_equal(run("violations:none_layers", cut))
