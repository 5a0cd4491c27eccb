"""The rule table is the public contract: one module per code, documented, and every
listing of the rules generated from the modules' metadata."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from harness import cut_map

from graphcheck import rules
from graphcheck.errors import UsageError
from graphcheck.rules import RULES
from graphcheck.rules import __doc__ as TABLE
from graphcheck.stages.compare import Mismatch, MismatchKind

SECTIONS = ("What it checks", "Why it matters", "Example", "Fix")


def test_codes_are_unique_and_ordered():
    codes = [r.CODE for r in RULES]
    assert codes == sorted(set(codes))
    assert len({r.NAME for r in RULES}) == len(RULES)


def test_every_rule_module_is_listed():
    files = sorted(Path(rules.__file__).parent.glob("gc[0-9][0-9][0-9]_*.py"))
    assert [f.stem for f in files] == [r.__name__.rpartition(".")[2] for r in RULES]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.CODE)
def test_rule_carries_its_metadata(rule):
    stem = rule.__name__.rpartition(".")[2]
    assert re.fullmatch(r"GC\d{3}", rule.CODE) and stem.startswith(rule.CODE.lower() + "_")
    assert stem == f"{rule.CODE.lower()}_{rule.NAME.replace('-', '_')}"
    assert rule.SEVERITY in {"error", "warning"}
    assert rule.SUMMARY and "\n" not in rule.SUMMARY and callable(rule.check)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.CODE)
def test_rule_docstring_is_its_user_doc(rule):
    doc = rule.__doc__
    assert doc.startswith(f"{rule.CODE} {rule.NAME}\n")
    positions = [doc.find(f"\n\n{heading}\n    ") for heading in SECTIONS]
    assert -1 not in positions and positions == sorted(positions)


def test_package_table_is_generated_from_the_metadata():
    for rule in RULES:
        line = f"{rule.CODE}  {rule.SEVERITY:<7}  {rule.NAME}"
        assert any(row.strip().startswith(line) for row in TABLE.splitlines()), rule.CODE
        assert f"  {rule.SUMMARY}\n" in TABLE


def test_the_rules_page_links_a_page_per_rule_with_its_doc():
    from graphcheck.console.reference import pages

    generated = pages()
    index = generated["reference/rules/index.md"]
    for rule in RULES:
        assert f"| [{rule.CODE}]({rule.CODE}.md) | {rule.SEVERITY} | {rule.NAME} |" in index
        page = generated[f"reference/rules/{rule.CODE}.md"]
        assert page.startswith(f"# {rule.CODE} {rule.NAME}\n")
        assert "## What it checks" in page and "## Fix" in page, rule.CODE
        violating, passing = rule.EXAMPLE["violating"], rule.EXAMPLE["passing"]
        assert f"graphcheck verify {violating} --cuts {rule.EXAMPLE['cut']}" in page
        assert f"graphcheck verify {passing} --cuts" in page and f"# no {rule.CODE}" in page


def test_doc_is_case_insensitive_and_has_a_header():
    text = rules.doc("gc302")
    assert text.startswith("GC302 layer-identity-lost (warning)\n\nWhat it checks\n")
    assert all(f"\n{heading}\n" in text for heading in SECTIONS)
    assert rules.doc(" GC302 ") == text


def test_unknown_code_is_a_one_line_usage_error():
    with pytest.raises(UsageError) as err:
        rules.doc("GC999")
    assert "\n" not in str(err.value) and "GC101..GC501" in str(err.value)


def test_every_mismatch_kind_has_exactly_one_owning_rule():
    owners = {
        kind: [r.CODE for r in RULES if kind in getattr(r, "OWNS", ())] for kind in MismatchKind
    }
    assert all(len(codes) == 1 for codes in owners.values()), owners
    assert set().union(*(getattr(r, "OWNS", set()) for r in RULES)) == set(MismatchKind)


@pytest.mark.parametrize("kind", [*MismatchKind, "a-kind-no-rule-owns"])
def test_every_mismatch_is_reported_once(kind):
    # a kind no rule owns (one added to MismatchKind and to no OWNS) still fails: GC303
    ctx = SimpleNamespace(mismatches=[Mismatch(kind, 1, None, "stage 1 differs")])
    found = [d.code for r in RULES if hasattr(r, "OWNS") for d in r.check(ctx)]
    owner = [r.CODE for r in RULES if kind in getattr(r, "OWNS", ())] or ["GC303"]
    assert found == owner


def test_layout_flags_override_detection():
    report = cut_map(
        "violations:pp_config",
        layers="blocks",
        inputs=("tok_emb",),
        outputs=("final_norm", "head"),
    )
    assert report.codes == set()
