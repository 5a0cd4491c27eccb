"""The documentation site (mkdocs.yml, docs/): every page the navigation names exists, as a
file of docs/ or as a page the build generates, and every generated page is reachable.
``make docs`` builds the site with ``--strict`` (CI runs it): a broken link fails there."""

from __future__ import annotations

import yaml
from harness import ROOT

from graphcheck.console.reference import pages

BUILT = {"reference/op-table.md", "guides/cut-explorer-notebook.ipynb"}  # docs/gen_pages.py


def _nav(entries) -> list[str]:
    found = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        found += _nav(value) if isinstance(value, list) else [value]
    return found


def test_every_page_of_the_navigation_exists_or_is_generated():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    generated = set(pages()) | BUILT
    missing = [
        p for p in _nav(config["nav"]) if p not in generated and not (ROOT / "docs" / p).is_file()
    ]
    assert missing == []


def test_every_generated_page_is_in_the_navigation_or_linked_from_the_rules_page():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = set(_nav(config["nav"]))
    index = pages()["reference/rules/index.md"]
    for path in pages():
        rule = path.removeprefix("reference/rules/")
        assert path in listed or f"]({rule})" in index, path


def test_no_generated_page_is_committed():
    assert [p for p in pages() if (ROOT / "docs" / p).exists()] == []
