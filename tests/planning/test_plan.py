"""Balanced legal plans: the exact search, the cost model, ``graphcheck plan`` and the
plans users already write (Megatron-style layout strings, torchtitan-style FQN lists).

The search tests need no export: :func:`balance` is checked against a brute force
over every cut set. The cost model is checked against values computed by hand for
the reference decoder's shape (hidden 64, intermediate 128, 4 heads, 2 kv heads,
head_dim 16, vocab 256).
"""

from __future__ import annotations

import functools
import itertools
import random

import pytest

from graphcheck.planning.balance import balance, imbalance, stage_costs


def _brute(layers, stages, legal, first=0, last=0):
    """The least bottleneck over every strictly increasing cut set of legal boundaries."""
    options = [
        max(stage_costs(layers, cuts, first, last))
        for cuts in itertools.combinations(sorted(legal), stages - 1)
    ]
    return min(options) if options else None


@pytest.mark.parametrize("seed", range(40))
def test_search_finds_the_brute_force_optimum(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 9)
    layers = [rng.randint(0, 20) for _ in range(n)]
    legal = {k for k in range(n + 1) if rng.random() < 0.7}
    stages = rng.randint(1, n + 2)
    first, last = rng.randint(0, 10), rng.randint(0, 10)
    plan = balance(layers, stages, legal, first, last)
    expected = _brute(layers, stages, legal, first, last) if stages > 1 else None
    if stages == 1:
        assert plan.cuts == () and plan.stage_costs == [first + sum(layers) + last]
        return
    if expected is None:
        assert plan is None
        return
    assert plan.bottleneck == expected
    assert set(plan.cuts) <= legal and list(plan.cuts) == sorted(set(plan.cuts))
    assert len(plan.cuts) == stages - 1
    assert plan.stage_costs == stage_costs(layers, plan.cuts, first, last)


def test_search_avoids_illegal_boundaries():
    layers = [1] * 8
    assert balance(layers, 2).cuts == (4,)
    plan = balance(layers, 2, legal={0, 1, 2, 3, 5, 6, 7, 8})
    assert plan.cuts in {(3,), (5,)} and plan.bottleneck == 5
    assert imbalance(plan.stage_costs) == 5 / 4


def test_no_legal_plan_is_none():
    assert balance([1, 1, 1], 3, legal={1}) is None
    assert balance([1, 1, 1], 2, legal=set()) is None


def test_first_and_last_costs_go_to_the_end_stages():
    plan = balance([1, 1, 1, 1], 2, first=2)
    assert plan.cuts == (1,) and plan.stage_costs == [3, 3]


def test_interleaved_chunks_sum_per_rank():
    plan = balance([1] * 8, 4)
    assert plan.per_rank(2) == [4.0, 4.0]


# --- the cost model, on the reference decoder's shape -----------------------------------

# hand-computed for hidden 64, intermediate 128, 4 heads / 2 kv heads of 16, vocab 256
LINEAR = 64 * 64 + 64 * 32 + 64 * 32 + 64 * 64 + 3 * 64 * 128  # weights of one layer
NORMS = {0: 64 + 64 + 64, 1: 64 + 64}  # layer 0: LayerNorm (weight, bias) + RMSNorm


def _attention(keys: float) -> float:
    return 2 * 4 * (16 + 16) * keys  # QK^T and PV: 4 heads, d_qk = d_v = 16


@pytest.fixture(scope="module")
def explorer():
    from reference import CausalLM, Config

    from graphcheck.api import Explorer

    return Explorer(functools.partial(CausalLM, Config(num_hidden_layers=4)))  # built in bf16


def test_costs_are_the_hand_computed_values(explorer):
    costs = explorer.costs(doc_length=64)
    full = _attention((64 + 1) / 2)  # causal: (D + 1) / 2 keys per query
    window = _attention((64 + 16 * 17 / 2 + 16 * (64 - 1 - 16)) / 64)  # left window 16
    assert [c.param_bytes for c in costs.layers] == [2 * (LINEAR + NORMS[0])] + [
        2 * (LINEAR + NORMS[1])
    ] * 3
    assert [c.flops_per_token for c in costs.layers] == [2 * LINEAR + full] * 3 + [
        2 * LINEAR + window
    ]
    assert costs.layers[3].attention_flops_per_token == window == 3808
    assert (costs.first.param_bytes, costs.first.flops_per_token) == (2 * 256 * 64, 0)
    assert (costs.last.param_bytes, costs.last.flops_per_token) == (
        2 * (64 + 256 * 64),
        2 * 64 * 256,
    )
    assert costs.boundary_bytes_per_token == [64 * 2] * 5
    assert all(not c.uncounted for c in costs.layers)
    assert explorer.costs().layers[0].attention_flops_per_token == _attention(4097 / 2)


def test_map_json_carries_the_costs(explorer):
    data = explorer.map().as_dict()
    assert data["costs"]["doc_length"] == 4096
    assert [c["param_bytes"] for c in data["costs"]["layers"]][1] == 2 * (LINEAR + NORMS[1])


# --- plans users write: layout strings and FQN lists ------------------------------------


def _same(a, b) -> None:
    assert (a.verdict, [c.position for c in a.cuts]) == (b.verdict, [c.position for c in b.cuts])
    assert [c.codes for c in a.cuts] == [c.codes for c in b.cuts]
    assert [s.as_dict() for s in a.stages] == [s.as_dict() for s in b.stages]


@pytest.mark.parametrize(
    ("layout", "cuts"), [("E|tt|ttL", [0, 2]), ("Et*3|tL", [3]), ("Etttt|L", [4])]
)
def test_layout_string_verifies_as_its_cuts(explorer, layout, cuts):
    written = explorer.written_cuts(pipeline_layout=layout)
    assert written == cuts
    _same(explorer.verify(written), explorer.verify(cuts))


def test_fqns_per_stage_verify_as_their_cuts(explorer):
    stages = [
        ["model.embed_tokens", "model.layers.0"],
        ["model.layers.1", "model.layers.2"],
        ["model.layers.3", "model.norm", "lm_head"],
    ]
    written = explorer.written_cuts(fqns_per_stage=stages)
    assert written == [1, 3]
    _same(explorer.verify(written), explorer.verify([1, 3]))


REFERENCE = "fixtures/reference.py:reference"
LAYERS = '[["model.embed_tokens", "model.layers.0"], ["model.layers.1", "model.norm", "lm_head"]]'


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--layout", "Ex|t*7L"], "holds 'x'"),
        (["--layout", "tE|t*7L"], "the embedding E must open the first stage"),
        (["--layout", "E|t*8|L|"], "the loss/head L must close the last stage"),
        (["--layout", "E|t*4|t*3L"], "holds 7 decoder layers (t); the model has 8"),
        (["--layout", "E||t*8L"], "stage 1 is empty"),
        (["--fqns-per-stage", "[[1]]"], "is not a JSON list of lists of module names"),
        (["--fqns-per-stage", LAYERS], "must list every layer 0..7 once"),
        (["--fqns-per-stage", '[["lm_head"], ["model.norm"]]'], "the output modules belong"),
        (["--fqns-per-stage", '[["model.layers.0"], ["model.embed_tokens"]]'], "the input modules"),
        (["--fqns-per-stage", '[["model.embed_tokens", "model.layers.0.mlp"]]'], "not a layer"),
    ],
)
def test_malformed_written_plans_are_one_line_exit_2(cli, argv, says):
    code, out, err = cli("verify", REFERENCE, *argv)
    assert code == 2 and out == ""
    assert err.startswith("graphcheck: error: GC101 stage-plan-invalid") and says in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["--stages", "11"],
        ["--stages", "2", "--virtual", "6"],
        ["--stages", "0"],
        ["--stages", "2", "--doc-length", "0"],
    ],
)
def test_impossible_plan_requests_are_exit_2(cli, argv):
    code, out, err = cli("plan", REFERENCE, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1


# --- graphcheck plan on a model where most boundaries are illegal ----------------------

COLLECTED = "fixtures/violations.py:collected_outputs"  # legal cuts: 0, 1, 8


def test_plan_avoids_illegal_boundaries_and_proves_the_plan(cli):
    import json

    code, out, _ = cli("plan", COLLECTED, "--stages", "2", "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["verdict"] == "pass"
    assert data["legal_cuts"] == [0, 1, 8]
    assert [b["position"] for b in data["blocking"]] == [2, 3, 4, 5, 6, 7]
    assert {c for b in data["blocking"] for c in b["codes"]} == {"GC201"}
    assert data["plan"]["cuts"] == [1] and data["blind"]["cuts"] == [4]
    assert data["plan"]["imbalance"] > data["blind"]["imbalance"]
    assert data["proof"]["mode"] == "verify" and data["proof"]["verdict"] == "pass"
    assert [c["position"] for c in data["proof"]["cuts"]] == [1]


def test_no_legal_plan_exits_1_naming_the_blocking_boundaries(cli):
    code, out, _ = cli("plan", COLLECTED, "--stages", "5")
    assert code == 1
    assert "no legal plan: 4 cuts needed, 3 legal boundaries" in out
    assert "illegal boundaries: 2 (GC201), 3 (GC201)" in out
    assert "the best plan ignoring legality (--cuts " in out
    assert out.rstrip().endswith("verdict: FAIL (no legal plan)")


def test_einsum_flops_read_the_operand_nodes():
    import torch.fx

    from graphcheck.analysis.cost import _einsum

    graph = torch.fx.Graph()
    a, b = graph.placeholder("a"), graph.placeholder("b")
    a.meta["val"], b.meta["val"] = torch.empty(2, 3), torch.empty(3, 4)
    assert _einsum("ij,jk->ik", [a, b]) == 2 * 2 * 3 * 4
    assert _einsum("ij,jk->ik", [a, 5]) is None  # not a tensor: left uncounted
