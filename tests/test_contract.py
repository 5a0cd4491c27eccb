"""The rule table is the public contract: one module per code, documented."""

from __future__ import annotations

import pytest
from harness import cut_map

from graphcheck.rules import RULES
from graphcheck.rules import __doc__ as TABLE


def test_codes_are_unique_and_ordered():
    codes = [r.CODE for r in RULES]
    assert codes == sorted(set(codes))


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.CODE)
def test_rule_docstring_is_its_user_doc(rule):
    doc = rule.__doc__
    assert doc.startswith(f"{rule.CODE} {rule.NAME}")
    for heading in ("What it checks", "Why it matters", "Example", "Fix"):
        assert f"\n{heading}\n" in doc
    assert rule.CODE in TABLE and rule.NAME in TABLE


def test_layout_flags_override_detection():
    report = cut_map(
        "violations:pp_config",
        layers="blocks",
        inputs=("tok_emb",),
        outputs=("final_norm", "head"),
    )
    assert report.codes == set()
