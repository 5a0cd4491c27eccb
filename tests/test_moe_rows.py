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
