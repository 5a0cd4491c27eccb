"""Length cases: a model whose code branches on T is proven in one program per branch.

``fixtures/length_cases.py``: every layer picks its update by a Python ``if`` on T.
The example batch (29 tokens) traces the short side; graphcheck exports the long side
too and proves both. The gate runs 256 tokens (the long side) or, given short
documents, the short side, and agrees with the static verdict either way.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from harness import spec

from graphcheck import api
from graphcheck.analysis.guards import SizeRange, discharged
from graphcheck.analysis.lengths import Coverage, Span, example_tokens, first_gap
from graphcheck.gate.run import gate

TWO = [
    {"min": 2, "max": 64, "example": [7, 12, 10]},
    {"min": 65, "max": None, "example": [21, 22, 24]},
]


def _verified(name: str, **options):
    return api.verify(spec(f"length_cases:{name}"), cuts=[2], **options)


def test_first_gap_walks_the_ranges_in_order():
    assert first_gap([Span(2, 64)]) == Span(65, None)
    assert first_gap([Span(65, None), Span(2, 64)]) is None
    assert first_gap([Span(2, 10), Span(20, None)]) == Span(11, 19)
    assert first_gap([Span(5, None)], lowest=2) == Span(2, 4)
    assert (example_tokens(Span(11, 19)), example_tokens(Span(11, 12))) == (13, 11)
    assert (example_tokens(Span(2, 8), 3), example_tokens(Span(2, 5), 3)) == (6, 2)
    assert Coverage((Span(2, 64), Span(65, None))).complete
    assert not Coverage((Span(2, 64), Span(66, None))).complete
    assert not Coverage((Span(2, 64), Span(65, None)), differs="silu / tanh").complete


def _guard(expr: str, lowest: int = 2, highest: int | None = None) -> bool:
    line = f"  - Not all values of T = x in the specified range satisfy the generated guard {expr}"
    sizes = {("input_ids", 1): SizeRange("T", lowest, 1, highest)}
    return discharged(line, sizes) is not None


T = "L['input_ids'].size()[1]"


def test_guards_within_a_range_of_t():
    """torch's flex guards for T past one 128-token block: true from 129 on, not from 2."""
    blocks = f"((127 + {T}) // 128)"
    assert _guard(f"(128 % (128*{blocks})) != 0", lowest=129)
    assert not _guard(f"(128 % (128*{blocks})) != 0")
    assert _guard(f"16384*{blocks} < 16384*{blocks}*{blocks}", lowest=129)
    assert _guard(f"{T} <= 128", highest=128)
    assert not _guard(f"{T} <= 128", highest=129)


def test_a_divisor_that_may_not_be_positive_is_not_discharged():
    """``//`` and ``%`` mean Python's only for a positive divisor: one that is not a
    constant must be proven positive too."""
    assert not _guard(f"{T} // ({T} - 5) >= 0")
    assert _guard(f"{T} // ({T} - 5) >= 0", lowest=6)


def test_unbounded_ends_compare_above_every_length():
    assert _guard(f"129 <= {T} and {T} <= IntInfinity()", lowest=129)
    assert not _guard(f"{T} >= IntInfinity()")
    assert not _guard("IntInfinity() == IntInfinity()")  # not translated: not discharged


def test_both_sides_the_same_pass_in_two_programs():
    report = _verified("branch_same")
    assert (report.verdict, report.codes) == ("pass", set())
    assert (report.tokens["programs"], report.tokens["complete"]) == (TWO, True)
    assert report.stage_proof.proven and len(report.stage_programs) == 2


def test_sides_that_compute_differently_are_gc403_naming_the_op():
    """Each side token-local and proven, but a document alone (short side) and packed
    (long side) runs a SiLU in one and a tanh in the other: its bytes depend on the
    lengths of the other documents."""
    report = _verified("branch_local", stage_builder="none")
    assert (report.verdict, report.codes, report.tokens["complete"]) == ("fail", {"GC403"}, False)
    differs = "the programs for T 2..64 and T ≥ 65 differ at model.layers.0 (op "
    for d in report.errors:
        assert differs in d.message and "`aten.silu.default(%" in d.message
        assert "`aten.tanh.default(%" in d.message and "depend on the packed length" in d.message


def test_a_leak_on_the_side_the_example_does_not_take_is_found():
    """Before the length cases, the program of the example's side was the only one
    proven: the long side's mixing was out of sight (only GC403 said T was limited)."""
    report = _verified("branch_leaks_long", stage_builder="none")
    assert (report.verdict, report.codes) == ("fail", {"GC401", "GC403"})
    leaks = [d for d in report.errors if d.code == "GC401"]
    assert leaks and all(d.message.endswith("(in the program for T ≥ 65)") for d in leaks)
    assert api.cut_map(spec("length_cases:branch_leaks_long")).legal_cuts() == []


def test_a_leak_on_the_example_side_is_the_first_programs():
    report = _verified("branch_leaks_short", stage_builder="none")
    assert (report.verdict, report.codes) == ("fail", {"GC401", "GC403"})
    leaks = [d for d in report.errors if d.code == "GC401"]
    assert leaks and not any("(in the program for" in d.message for d in leaks)


def test_more_branches_than_programs_leave_the_rest_unproven():
    report = _verified("branch_five_ways", stage_builder="none")
    messages = [d.message for d in report.errors]
    assert report.codes == {"GC403"} and len(messages) == 2  # input_ids and position_ids
    assert all("limited to T 2..32, 33..64, 65..128, 129..256 (4 programs" in m for m in messages)
    assert all("no program holds for T ≥ 257 (the code branches on T more" in m for m in messages)
    assert report.tokens["complete"] is False


def test_the_text_report_names_the_programs():
    command = [sys.executable, "-m", "graphcheck", "verify", spec("length_cases:branch_same")]
    done = subprocess.run(
        [*command, "--cuts", "2", "--stage-builder", "none"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    programs = "T 2..64 (traced on 29), T ≥ 65 (traced on 67)"
    assert f"in 2 programs, one per branch the code takes on T: {programs}" in done.stdout


@pytest.mark.parametrize(
    ("name", "docs", "isolation"),
    [
        ("branch_same", None, "bitwise"),
        ("branch_local", None, "bitwise"),
        ("branch_leaks_long", None, "fail"),  # 256 tokens: the long side, which leaks
        ("branch_leaks_short", None, "bitwise"),  # 256 tokens: the long side, local
        ("branch_leaks_short", (20, 17, 12), "fail"),  # 49 tokens: the short side leaks
    ],
)
def test_the_gate_agrees_on_either_side(name, docs, isolation):
    options = {} if docs is None else {"docs": docs}
    result = gate(spec(f"length_cases:{name}"), [2], **options).as_dict()
    assert (result["bytes"]["status"], result["isolation"]["status"]) == ("equal", isolation)
    assert result["agrees"] is True
