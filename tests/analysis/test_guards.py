"""Export's guards discharged by the solver only when they hold for every length
(``graphcheck.analysis.guards``)."""

from __future__ import annotations

import pytest

from graphcheck.analysis.guards import SizeRange, discharged

T = "L['input_ids'].size()[1]"
P = "L['position_ids'].size()[1]"
N1 = "L['cu_seq_lens_q'].size()[0]"
SIZES = {
    ("input_ids", 1): SizeRange("T", 2),
    ("position_ids", 1): SizeRange("T", 2),
    ("cu_seq_lens_q", 0): SizeRange("N1", 2),
}


def message(*guards: str) -> str:
    head = f"  - Not all values of T = {T} in the specified range satisfy the generated guard"
    lines = [f"{head} {g}." for g in guards]
    return "Constraints violated (T)! For more information, run with ...\n" + "\n".join(lines)


@pytest.mark.parametrize(
    "guard",
    [
        f"({T}*min(64, 64*{T})) == (64*{T})",
        f"min(4096, {T}) <= {T}",
        f"{T} == {P}",  # one dim: the same value
        f"(({T} * 3) % 3) == 0 and {T} >= 2",
        f"max({N1}, {T}) >= 2",
        f"not ({T} < 1)",
    ],
)
def test_guards_true_for_every_length_are_discharged(guard):
    assert discharged(message(guard), SIZES) == [guard]


@pytest.mark.parametrize(
    "guard",
    [
        f"2 <= {T} and {T} <= 4096",  # longer batches fail
        f"({T} % 64) == 0",
        f"{T} == {N1}",  # two dims: not equal in general
        f"{T} >= L['other'].size()[0]",  # an unknown size is any size >= 0
        f"{T} // 0 == 1",  # outside the translation
        f"Mod({T}, 64) == 0",
        f"{T} ** 2 >= 4",
    ],
)
def test_guards_that_can_fail_or_are_not_understood_stay(guard):
    assert discharged(message(guard), SIZES) is None


def test_one_guard_that_stays_keeps_them_all():
    assert discharged(message(f"min(4096, {T}) <= {T}", f"{T} <= 4096"), SIZES) is None


def test_a_specialisation_is_never_discharged():
    text = "Constraints violated (T)!\n  - You marked T as dynamic but your code specialized "
    text += "it to be a constant (29)."
    assert discharged(text, SIZES) is None
    assert discharged("Constraints violated (T)!", SIZES) is None  # nothing listed: not read


def test_a_multiple_ranges_over_its_multiples():
    step = {("input_ids", 1): SizeRange("T", 64, 64)}
    assert discharged(message(f"({T} % 64) == 0"), step) is not None
    assert discharged(message(f"({T} % 128) == 0"), step) is None
