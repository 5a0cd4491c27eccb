"""Row provenance through torchtitan-style MoE routing (fixtures/moe_rows.py).

The one-hot routing map of the top-k experts summed over the tokens is the group sizes
of the ``argsort`` that ordered the routed rows: the grouped matmul applies every row
its own token's expert, and ``torchtitan::deterministic_scatter_add`` adds each row back
to its token. The twin passes; a combine at another permutation's tokens and offsets
counting another router's choices are GC401. Two layers, hidden 64: one export each,
shared by the module.
"""

from __future__ import annotations

import pytest
from harness import explorer, spec

pytest.importorskip("torchtitan")

from graphcheck.gate import Gate

TWIN = "moe_rows:titan_moe"


def _verified(name: str):
    return explorer(name).verify([1])


@pytest.fixture(scope="module")
def twin():
    return _verified(TWIN)


def _messages(report) -> str:
    return " ".join(d.message for d in report.errors)


def test_torchtitan_routing_is_token_wise(twin):
    assert (twin.verdict, twin.codes) == ("pass", set())


def test_combine_adding_other_tokens_rows_is_a_leak():
    report = _verified("moe_rows:titan_moe_combine_other_rows")
    assert report.verdict == "fail" and report.codes == {"GC401"}
    assert all(d.code == "GC401" for d in report.errors)


@pytest.mark.parametrize("fault", ["groups_other_routing", "descending"])
def test_offsets_that_are_not_the_rows_groups_are_a_leak(fault):
    report = _verified(f"moe_rows:titan_moe_{fault}")
    assert report.verdict == "fail" and report.codes == {"GC401"}
    assert "grouped matmul whose groups are not those of its rows' sort" in _messages(report)


def test_gate_agrees_with_the_twins_pass(twin):
    gated = Gate(spec(TWIN), explorer=explorer(TWIN)).run([1], docs=(23, 9, 31, 4), mode="graph")
    assert gated.static_verdict == twin.verdict == "pass"
    assert gated.bytes.status == "equal", gated.bytes
    assert gated.isolation.holds, gated.isolation


def test_counts_only_accumulated_for_the_optimizer_pass_with_a_warning():
    """torchtitan's ``tokens_per_expert.add_(counts)`` in ``model.train()``: a buffer no
    forward reads holds the counts of all documents. The verdict stands (no output of the
    forward depends on other documents); GC404 names the buffer, a warning."""
    report = _verified("moe_rows:titan_moe_load_counts")
    assert (report.verdict, report.errors) == ("pass", [])
    [warning] = [d for d in report.diagnostics if d.code == "GC404"]
    assert warning.severity == "warning"
    assert "buffer model.layers.1.mixer.tokens_per_expert accumulates" in warning.message


def test_counts_the_router_reads_back_are_a_leak():
    """The same buffer subtracted from the router's scores: the next forward routes its
    tokens by this one's documents. GC401 at the counting, no GC404."""
    report = _verified("moe_rows:titan_moe_load_bias")
    assert report.verdict == "fail" and report.codes == {"GC401"}
    assert "counts of tokens per expert over all documents" in _messages(report)


# --- transformers' JetMoE: rows split by the counts --------------------------------------


SPLIT_TWINS = ["moe_rows:split_moe", "moe_rows:split_moa"]


@pytest.mark.parametrize("name", SPLIT_TWINS)
def test_split_by_the_counts_and_concatenated_in_order_is_token_wise(name):
    """The counts read as ints size the pieces of the rows their sort ordered; the cat of
    every piece in order is those rows again, added back to the tokens (or, MoA, put at
    their top-k slots and reduced later). No GC401, and no GC403: the analysis proved the
    assert that the counts sum to ``k*T``."""
    report = _verified(name)
    assert (report.verdict, report.codes) == ("pass", set())


def test_the_partition_of_the_rows_is_a_recorded_fact():
    """The GC403 discharge is the analysis's own fact, one per split by the counts of
    sorted rows, not a reading of the assert's message."""
    facts = explorer("moe_rows:split_moe").program.facts
    assert facts and all(str(f.rhs) == str(facts[0].rhs) for f in facts)
    assert {str(s)[0] for s in facts[0].lhs.free_symbols} == {"u"}


def test_pieces_concatenated_out_of_order_are_a_leak():
    report = _verified("moe_rows:split_moe_out_of_order")
    assert report.verdict == "fail" and report.codes == {"GC401"}
    assert "pieces of rows grouped by expert out of order" in _messages(report)
    assert "concatenate every expert's piece, in expert order" in _messages(report)


def test_capacity_by_position_in_the_group_is_a_leak():
    report = _verified("moe_rows:split_moe_capacity")
    assert report.verdict == "fail" and report.codes == {"GC401"}
    assert "positions inside a group of rows (an arange over a group size)" in _messages(report)
    assert "keep every routed row" in _messages(report)


def test_counts_used_as_data_are_a_leak():
    report = _verified("moe_rows:split_moe_counts_as_data")
    assert report.verdict == "fail" and report.codes == {"GC401"}
    assert "counts of tokens per expert over all documents used as data" in _messages(report)


def test_split_by_another_routings_counts_is_a_leak_and_its_assert_stands():
    """The counts of another router size the pieces: a row's piece is not its own
    expert's (GC401), and the fact that discharges export's assert of ``sum == k*T`` is
    recorded for a proven split only (GC403, the very message the twin does not get)."""
    report = _verified("moe_rows:split_moe_other_counts")
    assert report.verdict == "fail" and report.codes == {"GC401", "GC403"}
    assert "split by the counts per expert of the keys that sorted the rows" in _messages(report)
    [guard] = [d.message for d in report.errors if d.code == "GC403"]
    assert "export asserts Eq(u0 + u1 + u2 + u3, 2*T)" in guard
    assert explorer("moe_rows:split_moe_other_counts").program.facts == []


SPLIT_TWIN = "moe_rows:split_moe"


def test_gate_agrees_with_the_split_twins_pass():
    report = _verified(SPLIT_TWIN)
    gate = Gate(spec(SPLIT_TWIN), explorer=explorer(SPLIT_TWIN))
    gated = gate.run([1], docs=(23, 9, 31, 4), mode="graph")
    assert gated.static_verdict == report.verdict == "pass"
    assert gated.bytes.status == "equal", gated.bytes
    assert gated.isolation.holds, gated.isolation


def test_gate_shows_the_leak_of_pieces_out_of_order():
    name = "moe_rows:split_moe_out_of_order"
    gated = Gate(spec(name), explorer=explorer(name)).run([1], docs=(23, 9, 31, 4), mode="graph")
    assert gated.static_verdict == "fail"
    assert not gated.isolation.holds, gated.isolation
