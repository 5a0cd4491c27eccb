"""Per-document summaries (fixtures/segment_reductions.py): rows added up at their
document id into a fresh tensor are one row per document; read back at the same id
they are token-local, read at another id or summed over the documents they are not.
The gate agrees with each verdict."""

from __future__ import annotations

import pytest
from harness import NO_STAGES, explorer, spec

from graphcheck.gate import Gate


def _report(name: str):
    # the locality proof alone (the stage programs are not this file's subject)
    return explorer(f"segment_reductions:{name}").verify([2], stage_builder=NO_STAGES)


def test_a_document_mean_read_back_by_the_same_id_passes():
    report = _report("segment_mean")
    assert (report.verdict, report.codes) == ("pass", set())


@pytest.mark.parametrize(
    ("name", "node"), [("segment_mean_next", "index"), ("segment_total", "sum_1")]
)
def test_a_summary_read_across_documents_is_gc401_at_the_read(name, node):
    report = _report(name)
    assert report.verdict == "fail" and report.codes == {"GC401"}
    first = [d for d in report.errors if d.module == "model.layers.0"]
    assert [d.node for d in first] == [node]


@pytest.mark.parametrize(
    ("name", "isolated"),
    [("segment_mean", True), ("segment_mean_next", False), ("segment_total", False)],
)
def test_gate_agrees_with_the_static_verdict(name, isolated):
    fixture = f"segment_reductions:{name}"
    gate = Gate(spec(fixture), explorer=explorer(fixture))
    gated = gate.run([2], docs=(23, 9, 31, 4), mode="graph")
    assert gated.static_verdict == ("pass" if isolated else "fail")
    assert gated.isolation.holds is isolated, gated.isolation
