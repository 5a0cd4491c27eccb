"""FlexAttention masks proven document-local by meaning (analysis/locality/obligations.py).

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
from graphcheck.analysis.locality.obligations import Buffer, Verdict, judge_mask

LEGAL = ["doc_causal", "offsets_causal", "doc_window", "pos_causal", "doc_pos_chunks"]
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


MOVED = re.compile(
    r"document (\d+) of (\d+) tokens starts at token (\d+): packed, the mask (takes|does not "
    r"take) the query at token (\d+) and the key at token (\d+); the document alone (does not|"
    r"does) \(query (\d+), key (\d+)\)"
)


def test_chunks_of_the_packed_row_are_gc402_with_the_moved_pair():
    """Documents stay apart, but the chunk boundaries sit at multiples of CHUNK of the
    row: the counterexample is a pair of one document the mask takes packed and not
    alone (or back), and it really is one (the same mask evaluated by hand)."""
    CHUNK = 6  # fixtures/flex_masks.py

    report = _report("doc_row_chunks")
    assert report.codes == {"GC402"}
    found = [d for d in report.diagnostics if d.code == "GC402"]
    assert {d.layer for d in found} == {0, 1} and all(
        d.node.startswith("flex_attention") for d in found
    )
    match = MOVED.search(found[0].message)
    assert match, found[0].message
    _doc, size, start, packed, q, kv, _alone, q1, kv1 = match.groups()
    size, start, q, kv, q1, kv1 = map(int, (size, start, q, kv, q1, kv1))
    assert start <= kv <= q < start + size and (q1, kv1) == (q - start, kv - start)
    assert (q // CHUNK == kv // CHUNK) is (packed == "takes")
    assert (q1 // CHUNK == kv1 // CHUNK) is (packed != "takes")


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


def _chunks(read):
    """Document equality and ``read(q) // 6 == read(kv) // 6``: chunks of the packed
    row (``read`` the index itself) or of the positions (``read`` a lookup)."""

    def body(graph, q, kv, bufs):
        ends = [read(graph, t, bufs) for t in (q, kv)]
        chunk = [_call(graph, ATEN.floor_divide.default, e, 6) for e in ends]
        same_chunk = _call(graph, ATEN.eq.Tensor, *chunk)
        return _call(graph, ATEN.logical_and.default, _same_doc(graph, q, kv, bufs), same_chunk)

    return body


def test_solver_tells_chunks_of_the_row_from_chunks_of_positions():
    by_index = judge_mask(_mask(_chunks(lambda g, t, bufs: t)), [DOC])
    assert by_index.verdict == Verdict.MOVES and MOVED.search(by_index.detail)
    positions = _chunks(lambda g, t, bufs: _call(g, ATEN.index.Tensor, bufs[1], [t]))
    assert judge_mask(_mask(positions, buffers=2), [DOC, POS]).verdict == Verdict.PROVEN


def test_solver_document_ids_of_unknown_shift_still_compare():
    def body(graph, q, kv, bufs):
        return _same_doc(graph, q, kv, bufs)

    shifted = Buffer(Kind.DOCID, None, (8,))
    assert judge_mask(_mask(body), [shifted]).verdict == Verdict.PROVEN


# --- ground truth: the gate runs the packed batch against each document alone -------------


@pytest.mark.parametrize(
    ("name", "verdict"),
    [
        ("offsets_causal", "pass"),
        ("pos_order", "fail"),
        ("doc_row_chunks", "fail"),
        ("doc_pos_chunks", "pass"),
    ],
)
def test_the_gate_agrees(name, verdict):
    from graphcheck.gate import Gate

    gated = Gate(spec(f"flex_masks:{name}"), explorer=explorer(f"flex_masks:{name}"))
    result = gated.run([1], docs=(23, 9, 31, 4), mode="graph")
    assert (result.static_verdict, result.bytes.status) == (verdict, "equal")
    assert result.isolation.holds == (verdict == "pass"), result.isolation


def test_identical_masks_are_solved_once():
    from graphcheck.analysis.locality import obligations

    def body(graph, q, kv, bufs):
        near = _call(graph, ATEN.lt.Scalar, _call(graph, ATEN.sub.Tensor, q, kv), 3)
        return _call(graph, ATEN.logical_and.default, near, _same_doc(graph, q, kv, bufs))

    before = len(obligations._CACHE)
    verdicts = {judge_mask(_mask(body), [DOC]).verdict for _ in range(3)}
    assert (verdicts, len(obligations._CACHE)) == ({Verdict.PROVEN}, before + 1)


# --- full blocks: attended whole, without the mask_mod ------------------------------------


def test_full_blocks_counted_from_the_mask_mod_are_proven():
    """torch's create_block_mask over the document mask: the full-block tables are the
    tile sums of that mask's vmap, which the solver proves implies the mask_mod. The
    export splits T at one block (T >= 9 for blocks of 8): two programs that agree but
    for the block tables, both proven."""
    report = _report("blocks_doc_causal")
    assert (report.verdict, report.codes) == ("pass", set())
    spans = [(p["min"], p["max"]) for p in report.tokens["programs"]]
    assert spans == [(9, None), (2, 8)] and report.tokens["complete"]


def test_full_blocks_from_another_mask_are_refuted_with_a_counterexample():
    report = _report("blocks_from_causal")
    found = [d for d in report.diagnostics if d.code == "GC401"]
    assert report.codes == {"GC401", "GC403"} and {d.layer for d in found} == {0, 1}
    for d in found:
        assert "counted from a different mask than the mask_mod" in d.message
        assert "build the BlockMask with create_block_mask over the mask_mod" in d.message
        q, kv = (int(g) for g in WORDS.search(d.message).group(1, 6))
        assert kv < q  # the causal mask's full block reads an earlier document


def test_hand_made_full_blocks_are_a_finding_naming_the_table():
    report = _report("blocks_hand_made")
    found = [d.message for d in report.diagnostics if d.code == "GC401"]
    assert report.codes == {"GC401", "GC403"} and found
    assert all("whose tables are not counted from a mask" in m for m in found)
    assert all("full-block counts from `aten.full_like.default`" in m for m in found)


def test_full_block_tables_written_in_place_are_a_finding():
    report = _report("blocks_written")
    found = [d.message for d in report.diagnostics if d.code == "GC401"]
    assert found and all("full-block counts from `aten.add_.Tensor`" in m for m in found)


def test_solver_proves_a_mask_within_another_or_names_the_pair():
    from graphcheck.analysis.locality.obligations import judge_within

    def causal(graph, q, kv, bufs):
        return _call(graph, ATEN.ge.Tensor, q, kv)

    def same_causal(graph, q, kv, bufs):
        return _call(graph, ATEN.logical_and.default, _same_doc(graph, q, kv, bufs),
                     causal(graph, q, kv, bufs))  # fmt: skip

    assert judge_within(_mask(same_causal), _mask(causal), [DOC]).verdict == Verdict.PROVEN
    refuted = judge_within(_mask(causal), _mask(same_causal), [DOC])
    assert refuted.verdict == Verdict.REFUTED and WORDS.search(refuted.detail)


@pytest.mark.parametrize(("name", "isolated"), [("blocks_doc_causal", True),
                                                ("blocks_from_causal", False)])  # fmt: skip
def test_the_gate_runs_full_blocks_as_the_kernels_do(name, isolated):
    """The gate's flex_attention attends full blocks whole: the full blocks of a causal
    mask leak documents into each other (as on a GPU), the document mask's do not."""
    from graphcheck.gate import Gate

    gated = Gate(spec(f"flex_masks:{name}"), explorer=explorer(f"flex_masks:{name}"))
    result = gated.run([1], docs=(23, 9, 31, 4), mode="graph")
    assert result.bytes.status == "equal"
    assert result.isolation.holds == isolated, result.isolation


def test_the_block_sparse_reference_reads_the_full_blocks():
    """On the same query, key and value, full blocks of a causal mask over a document
    mask_mod attend pairs torch's dense CPU kernel masks out; consistent tables give
    torch's bytes."""
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

    from graphcheck.kernels.cpu_reference import cpu_kernels

    doc = torch.tensor([0] * 20 + [1] * 17)
    same = lambda b, h, q, kv: (doc[q] == doc[kv]) & (q >= kv)  # noqa: E731
    made = create_block_mask(same, None, None, 37, 37, device="cpu", BLOCK_SIZE=8)
    causal = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, 37, 37,
                               device="cpu", BLOCK_SIZE=8)  # fmt: skip
    mixed = BlockMask.from_kv_blocks(
        causal.kv_num_blocks, causal.kv_indices, causal.full_kv_num_blocks,
        causal.full_kv_indices, BLOCK_SIZE=8, mask_mod=same, seq_lengths=(37, 37),
    )  # fmt: skip
    q, k, v = (torch.randn(1, 2, 37, 16, generator=torch.Generator().manual_seed(i))
               for i in range(3))  # fmt: skip
    dense = flex_attention(q, k, v, block_mask=made)
    with cpu_kernels():
        assert torch.equal(flex_attention(q, k, v, block_mask=made), dense)
        leaked = flex_attention(q, k, v, block_mask=mixed)
    assert torch.equal(leaked[..., :20, :], dense[..., :20, :])  # document 0 reads itself
    for row in range(20, 24):  # document 1's rows in block row 2: block (2, 0) is full
        assert not torch.equal(leaked[..., row, :], dense[..., row, :])


@cache
def _exported_block_mask() -> torch.fx.GraphModule:
    """torch's create_block_mask of a document mask, 16 tokens in blocks of 8, exported."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    class Attend(torch.nn.Module):
        def forward(self, q, doc):
            same = lambda b, h, i, j: (doc[i] == doc[j]) & (i >= j)  # noqa: E731
            made = create_block_mask(same, None, None, 16, 16, device="cpu", BLOCK_SIZE=8)
            return flex_attention(q, q, q, block_mask=made)

    with torch.no_grad():
        args = (torch.randn(1, 1, 16, 8), torch.zeros(16, dtype=torch.int64))
        return torch.export.export(Attend(), args).graph_module


def _tables(edit=None):
    """The full-block mask of the exported BlockMask, after ``edit(graph, full matrix)``."""
    import copy

    from graphcheck.analysis.block_tables import full_block_mask

    module = copy.deepcopy(_exported_block_mask())
    flex = next(n for n in module.graph.nodes if "flex_attention" in str(n.target))
    tables = tuple(flex.args[4])
    counts = tables[4]
    while "sum" not in str(counts.target):
        counts = counts.args[0]
    if edit is not None:
        edit(module.graph, counts.args[0])
    return full_block_mask(tables)


def test_full_block_tables_followed_to_the_vmapped_mask():
    mask, indices = _tables()
    assert "_remove_batch_dim" in str(mask.target)
    assert [i is None for i in indices] == [True, True, False, False]  # reads q and kv only


def test_a_block_matrix_written_in_place_is_not_a_count_of_the_mask():
    from graphcheck.analysis.block_tables import FullBlocks

    def fill(graph, matrix):
        with graph.inserting_after(matrix):
            graph.call_function(ATEN.fill_.Scalar, (matrix, 1))

    with pytest.raises(FullBlocks, match=r"written in place by `aten.fill_.Scalar`"):
        _tables(fill)


def test_a_mask_padded_before_its_first_token_shifts_the_tiles():
    from graphcheck.analysis.block_tables import FullBlocks

    def shift(graph, matrix):
        pad = next(n for n in graph.nodes if str(n.target) == "aten.pad.default")
        pad.args = (pad.args[0], [1, *list(pad.args[1])[1:]], *pad.args[2:])

    with pytest.raises(FullBlocks, match="padded before its first query or key"):
        _tables(shift)
