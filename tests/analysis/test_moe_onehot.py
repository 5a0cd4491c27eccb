"""MoE blocks by row provenance (fixtures/moe_onehot.py): one-hot routing maps, copy axes
of repeated rows, inverse permutations by ``argsort``.

``one_hot`` keeps its index's token dims and appends the class (expert) dim: Switch-style
combines over the experts pass, Switch's capacity (a ``cumsum`` of the one-hot over the
tokens) is GC401 at the ``cumsum``. llama4's ``x.repeat(E, 1)`` is a copy axis that the
expert-major scores line up with and ``view(E, T, H)`` recovers; a token-major view or
token-major scores are GC401 where they meet the copies. ``perm.argsort()`` is the
inverse permutation; the permutation applied twice is GC401 at the second gather. Two
layers, hidden 64: one export each. The gate runs the twins and one violator.
"""

from __future__ import annotations

import pytest
import torch
from harness import explorer, spec

from graphcheck.analysis.locality import Dep, Interp, Kind, Tok, Val
from graphcheck.analysis.locality.rows import copies, copy_axis
from graphcheck.analysis.locality.transfer import lookup
from graphcheck.gate import Gate

DOCS = (23, 9, 31, 4)
PASSING = [
    "switch_onehot_combine",
    "switch_onehot_einsum",
    "switch_onehot_bmm",
    "llama4_repeat_experts",
    "argsort_inverse",
]
# (factory, the op the finding is at, its source text, what the message says)
LEAKING = [
    ("switch_capacity_drop", "cumsum", "torch.cumsum(onehot, dim=-2)", "an expert capacity over"),
    (
        "repeat_experts_summed_wrong",
        "view",
        ".view(-1, EXPERTS, hidden).sum(dim=1)",
        "only (4, tokens) recovers them",
    ),
    (
        "repeat_experts_untransposed",
        "mul",
        "routed * scores.reshape(-1, 1)",
        "token dimensions do not line up",
    ),
    ("perm_twice", "index", "rows[back]", "indexes the token dimension with data-dependent"),
]


def _verified(name: str):
    return explorer(f"moe_onehot:{name}").verify([1])


@pytest.mark.parametrize("name", PASSING)
def test_routing_maps_copies_and_inverses_are_token_wise(name):
    report = _verified(name)
    assert (report.verdict, report.codes) == ("pass", set()), report.errors


@pytest.mark.parametrize(("name", "op", "source", "says"), LEAKING)
def test_a_leak_is_reported_at_its_op(name, op, source, says):
    report = _verified(name)
    assert report.verdict == "fail" and report.codes == {"GC401"}
    [finding] = report.errors
    assert finding.node.rstrip("_0123456789") == op, finding.node
    assert finding.module == "model.layers.1.mixer"
    assert source in finding.source and says in finding.message, finding.message


def test_a_wrong_view_of_copies_says_how_to_fix():
    [finding] = _verified("repeat_experts_summed_wrong").errors
    assert "views 4 copies of the tokens" in finding.message
    assert "view as (copies, tokens) first" in finding.message


# --- the transfer functions, on hand-made graphs -------------------------------------------


ATEN = torch.ops.aten


class _Graph:
    """A hand-made ATen graph: each node's recorded value given (size 7 stands for T)."""

    def __init__(self) -> None:
        self.graph = torch.fx.Graph()

    def input(self, name: str, *shape, dtype=torch.float32) -> torch.fx.Node:
        node = self.graph.placeholder(name)
        node.meta["val"] = torch.zeros(*shape, dtype=dtype)
        return node

    def op(self, target, args, *shape, dtype=torch.int64, **kwargs) -> torch.fx.Node:
        node = self.graph.call_function(target, args, kwargs)
        node.meta["val"] = torch.zeros(*shape, dtype=dtype)
        return node


def _run(made: _Graph, inputs: dict[str, Val]) -> Interp:
    """The op table over the graph, its placeholders given ``inputs``."""
    interp = Interp(torch.nn.Module(), {"T"})
    for node in made.graph.nodes:
        if node.op == "placeholder":
            interp.vals[node] = inputs[node.name]
        else:
            interp.vals[node] = lookup(node.target)(interp, node)
    return interp


def test_a_copy_axis_names_its_count_and_the_copied_dim():
    tok = copy_axis(4, Tok("T"))
    assert copies(tok) == (4, Tok("T")) and tok != Tok("T")
    assert copies(Tok("4xT@0/2")) is None and copies(Tok("T")) is None


def test_one_hot_appends_the_class_dim():
    """The index's token dim stays where it is; the class dim is a feature dim."""
    made = _Graph()
    hot = made.op(ATEN.one_hot.default, (made.input("i", 7, dtype=torch.int64), 4), 7, 4)
    interp = _run(made, {"i": Val((Tok("T"),), Dep.POINT)})
    assert interp.vals[hot].toks == (Tok("T"), None)
    assert interp.vals[hot].kind is None  # not a top-k or argmax choice: no routing map


def test_one_hot_of_an_argmax_over_features_is_a_routing_map():
    made = _Graph()
    choice = made.op(ATEN.argmax.default, (made.input("s", 7, 4), -1), 7)
    hot = made.op(ATEN.one_hot.default, (choice, 4), 7, 4)
    interp = _run(made, {"s": Val((Tok("T"), None), Dep.POINT)})
    assert interp.vals[hot].kind == Kind.ONEHOT and interp.vals[hot].ref is choice


def test_one_hot_of_an_argmax_over_tokens_is_no_routing_map():
    made = _Graph()
    choice = made.op(ATEN.argmax.default, (made.input("s", 4, 7), -1), 4)
    hot = made.op(ATEN.one_hot.default, (choice, 4), 4, 4)
    interp = _run(made, {"s": Val((None, Tok("T")), Dep.POINT)})
    assert interp.vals[hot].kind is None and interp.vals[hot].dep == Dep.LEAK


def _copies(view_shape):
    """``x [T, 3]`` repeated 4 times along T, then viewed as ``view_shape``; beside it the
    expert-major ``scores [T, 4]`` transposed and merged into one dim."""
    made = _Graph()
    x, scores = made.input("x", 7, 3), made.input("s", 7, 4)
    rows = made.op(ATEN.repeat.default, (x, [4, 1]), 28, 3, dtype=torch.float32)
    viewed = made.op(ATEN.view.default, (rows, view_shape), *view_shape, dtype=torch.float32)
    flip = made.op(ATEN.t.default, (scores,), 4, 7, dtype=torch.float32)
    merged = made.op(ATEN.view.default, (flip, [28]), 28, dtype=torch.float32)
    inputs = {"x": Val((Tok("T"), None), Dep.POINT), "s": Val((Tok("T"), None), Dep.POINT)}
    interp = _run(made, inputs)
    return interp.vals[rows], interp.vals[viewed], interp.vals[merged]


def test_a_repeat_is_a_copy_axis_an_expert_major_merge_lines_up_with():
    rows, _, merged = _copies([28, 3])
    assert rows.toks == (copy_axis(4, Tok("T")), None) and merged.toks == (rows.toks[0],)


def test_a_copies_first_view_recovers_the_tokens():
    _, viewed, _ = _copies([4, 7, 3])
    assert viewed.toks == (None, Tok("T"), None) and viewed.dep == Dep.POINT


def test_a_view_keeping_the_copy_axis_whole_is_ordinary():
    _, viewed, _ = _copies([28, 3, 1])
    assert viewed.toks == (copy_axis(4, Tok("T")), None, None) and viewed.dep == Dep.POINT


def test_a_tokens_first_view_of_copies_leaks():
    _, viewed, _ = _copies([7, 4, 3])
    assert viewed.dep == Dep.LEAK


def _argsorts(descending: bool) -> tuple[_Graph, torch.fx.Node, torch.fx.Node]:
    made = _Graph()
    first = made.op(ATEN.argsort.default, (made.input("s", 7),), 7)
    return made, first, made.op(ATEN.argsort.default, (first, -1, descending), 7)


def test_argsort_of_anything_but_a_permutation_sorts():
    made, first, _ = _argsorts(False)
    interp = _run(made, {"s": Val((Tok("T"),), Dep.POINT)})
    assert interp.vals[first].kind == Kind.PERM


def test_argsort_of_a_permutation_is_its_inverse():
    made, first, second = _argsorts(False)
    interp = _run(made, {"s": Val((Tok("T"),), Dep.POINT)})
    inverse = interp.vals[second]
    assert (inverse.kind, inverse.ref, inverse.toks) == (Kind.INVERSE, first, (Tok("T"),))


def test_descending_argsort_of_a_permutation_is_not_its_inverse():
    made, _, second = _argsorts(True)
    interp = _run(made, {"s": Val((Tok("T"),), Dep.POINT)})
    assert interp.vals[second].kind == Kind.PERM  # a new sort, to be inverted on its own


# --- the gate ------------------------------------------------------------------------------


def _gated(name: str):
    return Gate(spec(f"moe_onehot:{name}"), explorer=explorer(f"moe_onehot:{name}")).run(
        [1], docs=DOCS, mode="graph"
    )


@pytest.mark.parametrize("name", PASSING)
def test_gate_isolates_the_twins(name):
    gated = _gated(name)
    assert gated.static_verdict == "pass"
    assert gated.bytes.status == "equal", gated.bytes
    assert gated.isolation.holds, gated.isolation


@pytest.mark.parametrize("name", [row[0] for row in LEAKING])
def test_gate_shows_the_leak(name):
    gated = _gated(name)
    assert gated.static_verdict == "fail"
    assert not gated.isolation.holds, gated.isolation
