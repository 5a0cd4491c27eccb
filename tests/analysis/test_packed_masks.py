"""Attention masks built from the positions, as transformers builds them for a packed
row (fixtures/packed_masks.py): the solver proves which prefix sums count documents,
and the gate's exact tests agree with every verdict."""

from __future__ import annotations

import pytest
from harness import NO_STAGES, explorer, spec

from graphcheck.analysis.layout_terms import TOKEN, document_id_shift, layout_diff, substitute
from graphcheck.gate import Gate

POS = ("pos", TOKEN)
DIFF = layout_diff(POS, ("sub", substitute(POS, ("int", 0)), ("int", 1)))


def _report(name: str):
    # the locality proof alone (the stage programs are not this file's subject)
    return explorer(f"packed_masks:{name}").verify([2], stage_builder=NO_STAGES)


@pytest.mark.parametrize(
    "name", ["packed_ids", "start_ids", "every_token_apart", "chunks_of_positions"]
)
def test_masks_from_document_counts_pass(name):
    report = _report(name)
    assert (report.verdict, report.codes) == ("pass", set())


@pytest.mark.parametrize(
    ("name", "first"),
    [("missed_starts", "cumsum"), ("previous_ids", "index"), ("positions_only", None)],
)
def test_masks_that_let_documents_meet_are_gc401(name, first):
    report = _report(name)
    assert report.verdict == "fail" and report.codes == {"GC401"}
    at_attention = [d for d in report.errors if d.node.startswith("scaled_dot_product")]
    assert len(at_attention) == 4  # every layer's attention
    assert all("attention without a document mask" in d.message for d in at_attention)
    earlier = [d for d in report.errors if d not in at_attention]
    assert [d.node for d in earlier] == ([first] if first else [])


def test_chunks_of_the_packed_row_are_gc402_at_the_index():
    """``q_idx // C == kv_idx // C`` (transformers' chunked_overlay) keeps documents
    apart, but is not a difference of two indices: the arange stays absolute."""
    report = _report("chunks_of_the_row")
    assert (report.verdict, report.codes) == ("fail", {"GC402"})
    assert {d.node for d in report.errors} == {"arange_1", "arange_2"}
    assert all("a document alone does not repeat" in d.message for d in report.errors)


def test_a_prefix_sum_that_misses_starts_names_the_counterexample():
    (found,) = [d for d in _report("missed_starts").errors if d.node == "cumsum"]
    assert "not the document id (with 2 documents in 2 tokens, token 1 is in document 1" in (
        found.message
    )
    assert "needs at least 1" in found.message


@pytest.mark.parametrize(
    ("term", "shift", "separates"),
    [
        (("ne", DIFF, ("int", 1)), 0, False),  # transformers: a later document starts
        (("eq", POS, ("int", 0)), 1, False),  # any document starts
        (("lt", DIFF, ("int", 1)), 0, False),  # the same indicator, written otherwise
        (("ne", DIFF, ("int", 2)), None, True),  # 1 at every token: apart, not ids
        (("gt", DIFF, ("int", 1)), None, False),  # never 1
        (("ne", POS, ("int", 1)), None, True),  # 1 at every start: apart, not ids
        (("eq", POS, ("int", 1)), None, False),  # 0 at every start
        (("sub", ("int", 0), ("eq", POS, ("int", 0))), None, False),  # negative at starts
    ],
)
def test_what_a_prefix_sum_counts_is_decided_by_the_solver(term, shift, separates):
    counted = document_id_shift(term)
    assert (counted.shift, counted.separates) == (shift, separates)
    assert bool(counted.why) is (shift is None and not separates)


@pytest.mark.parametrize(
    ("name", "isolated"),
    [
        ("packed_ids", True),
        ("every_token_apart", True),
        ("missed_starts", False),
        ("chunks_of_the_row", False),  # the shift test moves chunk boundaries
        ("chunks_of_positions", True),
    ],
)
def test_gate_agrees_with_the_static_verdict(name, isolated):
    fixture = f"packed_masks:{name}"
    gate = Gate(spec(fixture), explorer=explorer(fixture))
    gated = gate.run([2], docs=(23, 9, 31, 4), mode="graph")
    assert gated.static_verdict == ("pass" if isolated else "fail")
    assert gated.isolation.holds is isolated, gated.isolation
