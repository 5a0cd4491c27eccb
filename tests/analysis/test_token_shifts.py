"""Short causal convolutions and chunked scans over the tokens (fixtures/token_shifts.py):
a conv along T is a sum of token shifts, each held to the shift obligation (the value
read ``k`` back is masked wherever that token lies in another document); a refuted
mask names the solver's counterexample; the gate's exact tests agree with every
verdict."""

from __future__ import annotations

import pytest
from harness import NO_STAGES, explorer, spec

from graphcheck.analysis.layout_terms import TOKEN, covers_shift, is_window, shift_counterexample
from graphcheck.gate import Gate

POS = ("pos", TOKEN)
DOC = ("doc", TOKEN)


def _report(name: str):
    # the locality proof alone (the stage programs are not this file's subject)
    return explorer(f"token_shifts:{name}").verify([2], stage_builder=NO_STAGES)


def _first_layer(report) -> list:
    return [d for d in report.errors if d.module == "model.layers.0.mixer"]


@pytest.mark.parametrize("name", ["conv4_doc_taps", "conv2_start_masked", "conv4_window_masked"])
def test_masked_taps_pass(name):
    report = _report(name)
    assert (report.verdict, report.codes) == ("pass", set())


@pytest.mark.parametrize(
    ("name", "node", "reads"),
    [
        ("conv4", "conv1d", "tokens t - 3 .. t"),
        ("conv4_pad", "conv1d", "tokens t - 3 .. t"),
        ("conv2_input_zeroed", "conv1d", "tokens t - 1 .. t"),
        ("conv4_start_masked", "conv1d", "tokens t - 3 .. t"),
    ],
)
def test_an_unmasked_conv_is_gc401_at_the_conv(name, node, reads):
    report = _report(name)
    assert report.verdict == "fail" and report.codes == {"GC401"}
    (found,) = _first_layer(report)
    assert found.node == node
    assert f"sums {4 if '4' in name else 2} taps along the token dimension" in found.message
    assert f"element t reads {reads}" in found.message


def test_a_mask_at_starts_only_names_the_counterexample_for_kernel_4():
    (found,) = _first_layer(_report("conv4_start_masked"))
    assert (
        "with 2 documents in 4 tokens, token 3 (position 1 of document 1) reads token 0, "
        "before its document's first token 2, where the mask does not hold"
    ) in found.message


def test_a_tap_masked_by_the_wrong_comparison_names_the_counterexample():
    report = _report("conv4_doc_taps_off_by_one")
    assert report.verdict == "fail" and "GC401" in report.codes
    (found,) = [d for d in _first_layer(report) if d.code == "GC401"]
    assert found.node == "pad_5"  # tap 3: F.pad(h, (0, 0, 3, 0))[:, :T]
    assert "pads the token dimension by 3 in front: element t reads token t - 3" in found.message
    assert "token 3 (position 2 of document 1) reads token 0" in found.message


def test_a_conv_that_looks_ahead_fails_closed():
    (found,) = _first_layer(_report("conv4_same"))
    assert found.node == "conv1d"
    assert "looks 2 token(s) ahead along the token dimension" in found.message


def _nodes(report) -> set[str]:
    return {d.node for d in _first_layer(report) if d.code == "GC401"}


def test_a_chunked_scan_reset_at_document_starts_is_proven_in_every_length_case():
    # padded behind by a symbolic width, viewed [T/C, C, D]; the within-chunk decay masked
    # by the padded ids of both sides; each chunk's end state on its last token's document;
    # the carry masked to chunks whose last and first tokens share a document; the state
    # entering a chunk masked to the places in its first token's document. T <= 8 (one
    # chunk) is a program of its own, traced on 6 tokens for the 3 documents
    report = _report("chunked_scan")
    assert (report.verdict, report.codes) == ("pass", set())
    programs = [(p["min"], p["max"], sum(p["example"])) for p in report.tokens["programs"]]
    assert programs == [(9, None, 29), (2, 8, 6)] and report.tokens["complete"], report.tokens


@pytest.mark.parametrize(
    ("name", "node", "says"),
    [
        ("chunked_scan_carry", "matmul_1", "sums over the token dimension without a document"),
        ("chunked_scan_into", "mul_13", "on every place of the chunk without a mask"),
    ],
)
def test_a_chunked_scan_carry_not_reset_is_gc401_at_the_carry(name, node, says):
    report = _report(name)
    assert report.verdict == "fail" and report.codes == {"GC401"}
    (found,) = _first_layer(report)
    assert found.node == node and says in found.message


def test_a_chunked_scan_not_reset_within_chunks_is_gc401_at_the_matmul():
    report = _report("chunked_scan_within")
    (found,) = [d for d in _first_layer(report) if d.node == "matmul"]
    assert "sums over the token dimension without a document mask" in found.message


def test_a_pad_in_front_by_a_symbolic_width_fails_closed_with_its_reason():
    report = _report("chunked_scan_front")
    found = [d for d in _first_layer(report) if d.node == "pad"]
    assert len(found) == 1, _nodes(report)
    assert "pads the token dimension by a width computed from sizes" in found[0].message
    assert "could not follow" not in " ".join(d.message for d in report.errors)


@pytest.mark.parametrize(
    ("mask", "amount", "covers"),
    [
        (("eq", POS, ("int", 0)), 1, True),
        (("eq", POS, ("int", 0)), 3, False),
        (("lt", POS, ("int", 3)), 3, True),
        # doc(t) == doc(t - 3), -1 before the row, is 0 exactly where pos(t) < 3
        (("eq", ("eq", DOC, ("ite", ("lt", ("sub", TOKEN, ("int", 3)), ("int", 0)), ("int", -1),
                             ("doc", ("sub", TOKEN, ("int", 3))))), ("int", 0)), 3, True),
    ],
)  # fmt: skip
def test_the_shift_obligation(mask, amount, covers):
    assert covers_shift(mask, amount) is covers
    assert (shift_counterexample(mask, amount) == "") is covers


def test_a_document_comparison_is_a_window_of_positions():
    same = ("eq", DOC, ("ite", ("lt", ("sub", TOKEN, ("int", 2)), ("int", 0)), ("int", -1),
                        ("doc", ("sub", TOKEN, ("int", 2)))))  # fmt: skip
    assert is_window(("eq", same, ("int", 0)), 2)
    assert not is_window(("eq", same, ("int", 0)), 3)


GATED = [
    ("conv4", False),
    ("conv4_doc_taps", True),
    ("conv4_doc_taps_off_by_one", False),
    ("conv2_start_masked", True),
    ("conv4_start_masked", False),
    ("conv4_window_masked", True),
    ("conv2_input_zeroed", False),
    ("conv4_pad", False),
    ("conv4_same", False),
    ("chunked_scan", True),
    ("chunked_scan_carry", False),
    ("chunked_scan_within", False),
    ("chunked_scan_front", True),
    ("chunked_scan_into", False),
]


@pytest.mark.parametrize(("name", "isolated"), GATED)
def test_gate_agrees_with_the_static_verdict(name, isolated):
    fixture = f"token_shifts:{name}"
    gate = Gate(spec(fixture), explorer=explorer(fixture))
    gated = gate.run([2], docs=(23, 9, 31, 4), mode="graph")
    assert gated.isolation.holds is isolated, gated.isolation
    proven = name != "chunked_scan_front"  # a pad in front by a symbolic width: fail closed
    assert gated.static_verdict == ("pass" if isolated and proven else "fail")
