"""The op table: documented, covering every op the families and fixtures export, and
failing closed on the rest."""

from __future__ import annotations

import pytest
import torch
from harness import ROOT, spec
from hfcache import FAMILIES
from hfcache import explorer as hf_explorer

import graphcheck
from graphcheck.analysis.fx import op_name
from graphcheck.analysis.locality.registry import find_name
from graphcheck.analysis.locality.transfer import lookup, table_markdown
from graphcheck.api import Explorer


def test_soundness_doc_lists_the_table():
    doc = (ROOT / "docs" / "soundness.md").read_text()
    begin, end = "<!-- optable:begin -->\n", "<!-- optable:end -->"
    listed = doc[doc.index(begin) + len(begin) : doc.index(end)]
    assert listed == table_markdown(), "regenerate the op table in docs/soundness.md"


def _unknown_ops(program) -> set[str]:
    """Ops of ``program`` that no transfer function covers (an in-place op is covered by
    its out-of-place twin; higher-order and custom ops by their own families)."""
    found = set()
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        target, name = node.target, op_name(node.target)
        if isinstance(target, torch._ops.HigherOrderOperator):
            continue
        if isinstance(target, torch._ops.OpOverload) and target.namespace != "aten":
            continue
        if lookup(target) is None and find_name(name.replace("_.", ".", 1)) is None:
            found.add(name)
    return found


@pytest.mark.parametrize("family", FAMILIES)
def test_table_covers_every_op_of_the_family(family):
    program = hf_explorer(f"hf:{family}").program
    assert _unknown_ops(program) == set()
    assert program.leaks == {}, [(n.name, r) for n, r in program.leaks.items()]


def test_table_covers_the_reference_decoder():
    program = Explorer(spec("reference:reference")).program
    assert _unknown_ops(program) == set()


def test_an_unknown_op_on_tokens_fails_closed():
    report = graphcheck.cut_map(spec("locality:unknown_op_on_tokens"))
    (finding,) = {d.message for d in report.diagnostics if d.code == "GC401"}
    assert "not in graphcheck's op table" in finding


def test_an_unknown_op_off_tokens_is_not_a_finding():
    assert graphcheck.cut_map(spec("locality:unknown_op_on_weights")).codes == set()


def test_a_reduction_over_features_is_token_wise_and_over_tokens_leaks():
    assert graphcheck.cut_map(spec("locality:feature_mean")).codes == set()
    assert "GC401" in graphcheck.cut_map(spec("locality:token_mean")).codes


def test_a_diff_over_features_is_token_wise_and_over_tokens_leaks():
    assert graphcheck.cut_map(spec("locality:feature_diff")).codes == set()
    assert "GC401" in graphcheck.cut_map(spec("locality:token_diff")).codes


def test_complex_views_and_polar_are_token_wise():
    # complex rotary embeddings: view_as_complex / polar / view_as_real keep each token's pairs
    assert graphcheck.cut_map(spec("locality:complex_rotation")).codes == set()


def test_elementwise_min_and_random_fills_are_token_wise():
    # min.other, multiply and in-place random fills read their own element; the randomness
    # is GC304's finding, not a document leak
    assert graphcheck.cut_map(spec("locality:elementwise_min_and_random")).codes == {"GC304"}
