"""``torch.cond`` interpreted through its branches (fixtures/control_flow.py).

The result of a ``cond`` is the join of both branches and of its predicate: per-token
branches picked by a setting pass; a branch that mixes tokens, or a predicate computed
from every token, is GC401 where the mixing happens; a predicate on the packed length
is GC403 at the ``cond``. The gate agrees.
"""

from __future__ import annotations

import pytest
from harness import NO_STAGES, explorer, spec

from graphcheck.gate import Gate


def _report(name: str):
    return explorer(f"control_flow:{name}").verify([4], stage_builder=NO_STAGES)


def test_per_token_branches_chosen_by_a_setting_pass():
    report = _report("cond_per_token")
    assert (report.verdict, report.codes) == ("pass", set())


@pytest.mark.parametrize(("name", "at"), [("cond_mixing_branch", "cumsum"),
                                          ("cond_on_data", "mean")])  # fmt: skip
def test_mixing_inside_a_branch_or_in_the_predicate_is_gc401_where_it_mixes(name, at):
    report = _report(name)
    assert report.codes == {"GC401"}
    assert [d.node for d in report.errors] == [at]


def test_a_branch_chosen_by_the_packed_length_is_gc403_at_the_cond():
    report = _report("cond_on_length")
    assert report.codes == {"GC403"}
    found = [d for d in report.errors if d.code == "GC403"]
    assert {d.layer for d in found} == {2, 5} and all(d.node.startswith("cond") for d in found)
    assert "reads the packed length: a document alone" in found[0].message


@pytest.mark.parametrize(
    ("name", "isolated"),
    [("cond_per_token", True), ("cond_mixing_branch", False), ("cond_on_data", False)],
)
def test_the_gate_agrees(name, isolated):
    fixture = f"control_flow:{name}"
    gated = Gate(spec(fixture), explorer=explorer(fixture)).run(
        [4], docs=(23, 9, 31, 4), mode="graph"
    )
    assert gated.static_verdict == ("pass" if isolated else "fail")
    assert gated.isolation.holds is isolated, gated.isolation


def test_the_gate_sees_a_document_alone_take_the_other_branch():
    fixture = "control_flow:cond_on_length"
    gated = Gate(spec(fixture), explorer=explorer(fixture)).run(
        [4], docs=(23, 9, 31, 4), mode="graph"
    )
    assert gated.static_verdict == "fail"
    assert gated.isolation.alone.status == "differ"  # T = 67 packed, each alone <= 31


# scan: a recurrence over the tokens, proven when its carry is reset at every start


@pytest.mark.parametrize(
    "name", ["scan_reset_at_starts", "scan_reset_by_factor", "scan_reset_every_eight"]
)
def test_a_scan_whose_carry_is_reset_at_every_document_start_passes(name):
    report = _report(name)
    assert (report.verdict, report.codes) == ("pass", set())


@pytest.mark.parametrize(
    ("name", "reads"), [("scan_never_reset", "add"), ("scan_reset_off_by_one", "where")]
)
def test_a_scan_whose_carry_crosses_a_start_is_gc401_at_the_scan(name, reads):
    report = _report(name)
    assert report.codes == {"GC401"}
    first = report.errors[0]
    assert first.node.startswith("scan") and first.layer == 2
    assert first.message.startswith(
        "`scan` over the tokens whose carry is not proven reset at document starts: at a "
        f"document start, `{reads}` still reads the carry"
    )


@pytest.mark.parametrize(
    ("name", "isolated"),
    [("scan_reset_at_starts", True), ("scan_reset_every_eight", True),
     ("scan_never_reset", False), ("scan_reset_off_by_one", False),
     ("loop_reset_at_starts", True), ("loop_never_reset", False),
     ("loop_reads_next_token", False), ("loop_adds_counter", False)],
)  # fmt: skip
def test_the_gate_agrees_on_scans_and_token_loops(name, isolated):
    fixture = f"control_flow:{name}"
    gated = Gate(spec(fixture), explorer=explorer(fixture)).run(
        [4], docs=(23, 9, 31, 4), mode="graph"
    )
    assert gated.static_verdict == ("pass" if isolated else "fail")
    assert gated.isolation.holds is isolated, gated.isolation


# while_loop: a walk over the tokens (a counter from 0 while < T, rows read and written
# at the counter), proven as a recurrence


def test_a_token_loop_whose_carry_is_reset_at_every_document_start_passes():
    report = _report("loop_reset_at_starts")
    assert (report.verdict, report.codes) == ("pass", set())


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("loop_never_reset", "at a document start, `add` still reads the carry"),
        ("loop_reads_next_token", "reads an operand over the tokens other than at the counter's"),
    ],
)
def test_a_token_loop_that_crosses_a_start_is_gc401_at_the_loop(name, why):
    report = _report(name)
    assert report.codes == {"GC401"}
    first = report.errors[0]
    assert first.node.startswith("while_loop") and first.layer == 2
    assert first.message.startswith("`while_loop` over the tokens not proven document-local: ")
    assert why in first.message


def test_a_token_loop_that_uses_its_counter_as_a_value_is_gc402():
    report = _report("loop_adds_counter")
    assert report.codes == {"GC402"}
    assert "the loop's counter (the absolute token index) used as a value" in (
        report.errors[0].message
    )
