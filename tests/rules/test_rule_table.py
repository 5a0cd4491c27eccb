"""One row per rule code, its ``EXAMPLE`` (the rule module's metadata, shown in the
documentation): the code fires at a cut on its violating fixture, and not on the passing
twin at the same cut.

A GC3xx row runs a stage builder on both sides; GC302 judges the builder itself (every
rebuilt stage renumbers its layers), so its twin is the same model under a builder that
keeps the global indices. Reports come from the harness's cached explorers: a fixture is
exported once for every test module that reads it.
"""

from __future__ import annotations

import pytest
from harness import verify

from graphcheck.rules import INFO, RULES


def _name(spec: str) -> str:
    """``fixtures/violations.py:skip_connection`` -> ``violations:skip_connection``."""
    path, factory = spec.split(":")
    return f"{path.removeprefix('fixtures/').removesuffix('.py')}:{factory}"


TABLE = [rule for rule in INFO if rule.example is not None]


def _codes(fixture: str, cut: int, builder: str | None) -> set[str]:
    """Every code found with the plan ``[cut]``, errors and warnings."""
    return {d.code for d in verify(fixture, (cut,), stage_builder=builder).diagnostics}


@pytest.mark.parametrize("rule", TABLE, ids=[rule.code for rule in TABLE])
def test_fires_on_the_violation_and_not_on_its_twin(rule):
    example = rule.example
    builder = example.get("stage_builder")
    assert rule.code in _codes(_name(example["violating"]), example["cut"], builder)
    twin_builder = example.get("passing_stage_builder", builder)
    assert rule.code not in _codes(_name(example["passing"]), example["cut"], twin_builder)


def test_every_rule_has_an_example():
    assert [rule.code for rule in TABLE] == [rule.CODE for rule in RULES]
