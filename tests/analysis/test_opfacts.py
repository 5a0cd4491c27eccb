"""The op fact sheet: an op's work is registered with its locality rule, in its family
module, and the cost model and the layer kinds read it from there alone."""

from __future__ import annotations

import pytest
import torch
import torch.fx

from graphcheck.analysis import cost, kinds, opfacts
from graphcheck.analysis.locality import registry
from graphcheck.analysis.locality.registry import Work, register

NEW_OP = "graphcheck_test::wide_mm.default"  # an op no module of graphcheck knows


@pytest.fixture
def fresh_registry(monkeypatch):
    """The registry as it is, restored after the test (registering is global)."""
    for table in ("_ENTRIES", "_BY_KEY", "_BY_QUALIFIED", "_BY_NAME"):
        monkeypatch.setattr(
            registry, table, type(getattr(registry, table))(getattr(registry, table))
        )
    opfacts.ops.cache_clear()
    yield
    opfacts.ops.cache_clear()


def _mm_node(name: str) -> torch.fx.Node:
    """A node calling ``name`` on a [T, 8] x [8, 16] product, its values on T = 5."""
    graph = torch.fx.Graph()
    a, b = graph.placeholder("a"), graph.placeholder("b")
    a.meta["val"], b.meta["val"] = torch.empty(5, 8), torch.empty(8, 16)
    node = graph.call_function(torch.matmul, (a, b))
    node.meta["val"] = torch.empty(5, 16)
    return node


def test_an_op_registered_as_a_matmul_is_counted_and_labelled_with_no_other_change(
    fresh_registry,
):
    node = _mm_node("graphcheck_test.wide_mm.default")
    name = "graphcheck_test.wide_mm.default"
    assert cost._matmul_flops(node, name) is None and kinds._label([(node, name)]) == "no ops"

    register(NEW_OP, work=Work.MATMUL)(lambda interp, node: None)  # its family module's line

    assert opfacts.work_of(name) == {Work.MATMUL} and name in opfacts.ops(Work.MATMUL)
    assert cost._matmul_flops(node, name) == 2 * 5 * 16 * 8
    assert kinds._label([(node, name)]) == "dense"


def test_every_op_the_cost_model_and_the_kinds_count_has_a_locality_rule():
    counted = set().union(*(opfacts.ops(w) for w in Work))
    assert all(registry.find_name(name) is not None for name in counted)
    assert opfacts.ops(Work.MATMUL) >= {"aten.mm.default", "aten._grouped_mm.default"}
    assert opfacts.ops(Work.ROUTED) == {"aten.topk.default", "aten._grouped_mm.default"}
    assert "aten.baddbmm.default" not in opfacts.ops(Work.MATMUL)  # a rule, no counted work


@pytest.mark.parametrize(
    ("name", "bound", "window", "label"),
    [
        ("torch_attn._varlen_attn.default", {"window_size": [16, 0]}, (16, 0), "window 17"),
        ("torch_attn._varlen_attn.default", {"is_causal": True}, (-1, 0), "full attention"),
        ("graphcheck.varlen_attention.default", {"window_left": 3, "causal": True}, (3, 0),
         "window 4"),
        ("aten.scaled_dot_product_attention.default", {}, (-1, 0), "SDPA attention"),
    ],
)  # fmt: skip
def test_the_window_cost_and_kinds_read_is_one_definition(name, bound, window, label):
    assert opfacts.attention_window(name, bound) == window
    assert kinds.attention_label(name, bound) == label
