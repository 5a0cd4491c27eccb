"""FlexAttention masks proven document-local by meaning (graphcheck/analysis/obligations.py).

The fixtures (fixtures/flex_masks.py) are masks written the ways real code writes them;
each is exported once. A proven mask leaves no finding; a refuted one is GC401 with the
solver's counterexample: the two documents, their lengths, the query and the key. The
solver module itself is checked on small hand-built mask graphs.
"""

from __future__ import annotations

import re
from functools import cache

import pytest
import torch
import torch.fx
from harness import explorer, spec

from graphcheck.analysis.locality import Kind
from graphcheck.analysis.obligations import Buffer, Verdict, judge_mask

LEGAL = ["doc_causal", "offsets_causal", "doc_window", "pos_causal"]
MIXING = ["pos_order", "causal", "offsets_previous"]
WORDS = re.compile(
    r"the query at token (\d+), in document (\d+) of (\d+) tokens? \(tokens (\d+)\.\.(\d+)\) "
    r"reads the key at token (\d+), in document (\d+) of (\d+) tokens? \(tokens (\d+)\.\.(\d+)\)"
)


@cache
def _report(name: str):
    return explorer(f"flex_masks:{name}").verify([1])


@pytest.mark.parametrize("name", LEGAL)
def test_a_document_local_mask_is_proven(name):
    report = _report(name)
    assert (report.verdict, report.codes) == ("pass", set())


@pytest.mark.parametrize("name", MIXING)
def test_a_mask_that_mixes_documents_is_refuted_with_a_counterexample(name):
    report = _report(name)
    assert report.codes == {"GC401"}
    found = [d.message for d in report.diagnostics if d.code == "GC401"]
    assert found and all("mask_mod lets documents read each other" in m for m in found)
    match = WORDS.search(found[0])
    assert match, found[0]
    q, dq, lq, q0, q1, kv, dk, lk, k0, k1 = map(int, match.groups())
    assert dq != dk and q0 <= q <= q1 and k0 <= kv <= k1  # two tokens of two documents
    assert (lq, lk) == (q1 - q0 + 1, k1 - k0 + 1)
    assert q1 < k0 or k1 < q0  # the documents do not overlap


def test_one_export_one_layer_proven_and_one_refuted():
    """The fast representative: layer 0 reads torchtitan's offsets (proven), layer 1
    compares positions only (refuted); the finding is layer 1's alone."""
    report = _report("offsets_then_pos_order")
    found = [d for d in report.diagnostics if d.code == "GC401"]
    assert report.codes == {"GC401"} and {d.layer for d in found} == {1}
    assert all(WORDS.search(d.message) for d in found)


def test_the_causal_counterexample_is_a_query_reading_an_earlier_document():
    match = WORDS.search(next(d.message for d in _report("causal").diagnostics))
    q, kv = int(match.group(1)), int(match.group(6))
    assert kv < q


# --- the solver on hand-built masks ------------------------------------------------------

ATEN = torch.ops.aten
DOC = Buffer(Kind.DOCID, 0, (8,))
POS = Buffer(Kind.POS, None, (8,))


def _mask(body, buffers: int = 1) -> torch.fx.GraphModule:
    """``mask_mod(b, h, q, kv, *buffers)`` whose output ``body(graph, q, kv, bufs)`` builds."""
    graph = torch.fx.Graph()
    _b, _h, q, kv = (graph.placeholder(n) for n in ("b", "h", "q", "kv"))
    bufs = [graph.placeholder(f"buf{i}") for i in range(buffers)]
    graph.output(body(graph, q, kv, bufs))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def _call(graph, op, *args):
    return graph.call_function(op, args)


def _same_doc(graph, q, kv, bufs):
    ids = [_call(graph, ATEN.index.Tensor, bufs[0], [t]) for t in (q, kv)]
    return _call(graph, ATEN.eq.Tensor, *ids)


def test_solver_proves_document_equality_or_ed_with_itself():
    def body(graph, q, kv, bufs):
        same = _same_doc(graph, q, kv, bufs)
        return _call(graph, ATEN.logical_or.default, same, same)

    assert judge_mask(_mask(body), [DOC]).verdict == Verdict.PROVEN


def test_solver_refutes_document_equality_or_ed_with_causal():
    def body(graph, q, kv, bufs):
        causal = _call(graph, ATEN.ge.Tensor, q, kv)
        return _call(graph, ATEN.logical_or.default, _same_doc(graph, q, kv, bufs), causal)

    judged = judge_mask(_mask(body), [DOC])
    assert judged.verdict == Verdict.REFUTED and WORDS.search(judged.detail)


def test_solver_proves_equal_positions_a_fixed_distance_apart_only_with_the_distance():
    def body(graph, q, kv, bufs):
        pos = [_call(graph, ATEN.index.Tensor, bufs[0], [t]) for t in (q, kv)]
        apart = _call(graph, ATEN.sub.Tensor, *pos)
        return _call(graph, ATEN.eq.Tensor, _call(graph, ATEN.sub.Tensor, q, kv), apart)

    assert judge_mask(_mask(body), [POS]).verdict == Verdict.PROVEN
    # the same mask over a buffer of unknown meaning proves nothing
    unknown = Buffer(None, None, (8,))
    assert judge_mask(_mask(body), [unknown]).verdict == Verdict.REFUTED


def test_solver_fails_closed_on_an_op_it_does_not_translate():
    def body(graph, q, kv, bufs):
        return _call(graph, ATEN.eq.Tensor, _call(graph, ATEN.mul.Tensor, q, kv), kv)

    judged = judge_mask(_mask(body), [DOC])
    assert judged.verdict == Verdict.UNKNOWN and "aten.mul.Tensor" in judged.detail


def test_solver_document_ids_of_unknown_shift_still_compare():
    def body(graph, q, kv, bufs):
        return _same_doc(graph, q, kv, bufs)

    shifted = Buffer(Kind.DOCID, None, (8,))
    assert judge_mask(_mask(body), [shifted]).verdict == Verdict.PROVEN


# --- ground truth: the gate runs the packed batch against each document alone -------------


@pytest.mark.parametrize(("name", "verdict"), [("offsets_causal", "pass"), ("pos_order", "fail")])
def test_the_gate_agrees(name, verdict):
    from graphcheck.gate import Gate

    gated = Gate(spec(f"flex_masks:{name}"), explorer=explorer(f"flex_masks:{name}"))
    result = gated.run([1], docs=(23, 9, 31, 4), mode="graph")
    assert (result.static_verdict, result.bytes.status) == (verdict, "equal")
    assert result.isolation.holds == (verdict == "pass"), result.isolation


def test_identical_masks_are_solved_once():
    from graphcheck.analysis import obligations

    def body(graph, q, kv, bufs):
        near = _call(graph, ATEN.lt.Scalar, _call(graph, ATEN.sub.Tensor, q, kv), 3)
        return _call(graph, ATEN.logical_and.default, near, _same_doc(graph, q, kv, bufs))

    before = len(obligations._CACHE)
    verdicts = {judge_mask(_mask(body), [DOC]).verdict for _ in range(3)}
    assert (verdicts, len(obligations._CACHE)) == ({Verdict.PROVEN}, before + 1)
