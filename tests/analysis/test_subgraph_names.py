"""Stage programs compared by the content of their subgraphs, and findings located at the
model's code rather than at generated frames.

Export numbers the subgraphs of higher-order ops in program order (FlexAttention's
``sdpa_mask3``, an autocast or grad-mode region's ``submod_7``), the nodes inside them
and the unbacked sizes they bind: a stage that starts at layer ``k`` names layer ``k``'s
subgraphs differently from the uncut program although their bodies are equal. A stage
program is compared by the bodies (:func:`subgraph_text`), so equal bodies under other
names compare equal and a body that differs by one constant does not.

A finding in a FlexAttention layer was located at the ``<eval_with_key>.N`` line of the
``forward`` FX generates for the higher-order op (500 characters, another ``N`` each
layer, so the same finding at every layer was not grouped); it is located at the
model's line that calls ``flex_attention`` (:func:`model_frame`).

Fixtures: ``fixtures/subgraph_names.py``.
"""

from __future__ import annotations

import os
import sysconfig
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
import torch.fx
from harness import FIXTURES, verify
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import CallMethodKey, ShapeEnv
from torch.utils._pytree import SequenceKey

from graphcheck.analysis.fx import op_name
from graphcheck.analysis.program import Program
from graphcheck.api import Explorer
from graphcheck.diagnostics import group, model_frame
from graphcheck.report import render
from graphcheck.stages.fingerprint import Provenance, attribute, canonical, subgraph_text

FILE = FIXTURES / "subgraph_names.py"


# --- subgraph bodies by content ------------------------------------------------------------


def body(window: int, names: str, constant: torch.Tensor | None = None) -> torch.fx.Graph:
    """A mask-like body: ``q >= kv & q - kv < window`` over a nested subgraph, every name
    (nodes, placeholders, the nested subgraph's attribute) suffixed with ``names``, as
    export numbers them per program; ``constant``: a tensor attribute it also reads."""
    inner = torch.fx.Graph()
    a, b = inner.placeholder(f"a{names}"), inner.placeholder(f"b{names}")
    inner.output(inner.call_function(torch.ops.aten.ge.Tensor, (a, b)))
    root = torch.nn.Module()
    setattr(root, f"sub{names}", torch.fx.GraphModule(torch.nn.Module(), inner))
    if constant is not None:
        root.register_buffer(f"c{names}", constant)
    outer = torch.fx.Graph()
    q, kv = outer.placeholder(f"q_idx{names}"), outer.placeholder(f"kv_idx{names}")
    sub = outer.get_attr(f"sub{names}")
    causal = outer.call_function(torch.ops.higher_order.wrap_with_set_grad_enabled, (True, sub, q))
    near = outer.call_function(torch.ops.aten.lt.Scalar, (outer.call_function(
        torch.ops.aten.sub.Tensor, (q, kv)), window))  # fmt: skip
    keep = outer.call_function(torch.ops.aten.bitwise_and.Tensor, (causal, near))
    if constant is not None:
        keep = outer.call_function(torch.ops.aten.mul.Tensor, (keep, outer.get_attr(f"c{names}")))
    outer.output(keep)
    for node in outer.nodes:
        node.name = f"{node.name}{names}"
    return torch.fx.GraphModule(root, outer).graph


def test_equal_bodies_under_other_names_compare_equal():
    assert subgraph_text(body(16, "_0")) == subgraph_text(body(16, "_7"))
    one, two = torch.ones(4), torch.ones(4)
    assert subgraph_text(body(16, "_0", one)) == subgraph_text(body(16, "_3", two))


def test_bodies_that_differ_in_a_constant_an_op_or_a_nested_body_differ():
    assert subgraph_text(body(16, "_0")) != subgraph_text(body(8, "_0"))  # a literal
    assert subgraph_text(body(16, "_0", torch.ones(4))) != subgraph_text(
        body(16, "_0", torch.full((4,), 2.0))
    )  # a tensor attribute, by its value
    other = body(16, "_0")
    nested = other.owning_module.get_submodule("sub_0").graph
    next(n for n in nested.nodes if n.op == "call_function").target = torch.ops.aten.gt.Tensor
    assert subgraph_text(body(16, "_0")) != subgraph_text(other)  # an op of the nested body


def test_a_tensor_attribute_whose_value_is_not_computed_equals_nothing():
    unknown = torch.empty(4, device="meta")  # no value: it cannot be compared
    assert subgraph_text(body(16, "_0", unknown)) != subgraph_text(body(16, "_0", unknown))


def bound_body(earlier: int) -> torch.fx.Graph:
    """``nonzero(x).sum()`` whose ``nonzero`` binds an unbacked size, after ``earlier``
    other unbacked sizes were made (export numbers them across the program)."""
    env = ShapeEnv()
    for _ in range(earlier):
        env.create_unbacked_symint()
    with FakeTensorMode(shape_env=env):
        size = env.create_unbacked_symint()
        found = torch.empty(size, 1, dtype=torch.int64)
    graph = torch.fx.Graph()
    nonzero = graph.call_function(torch.ops.aten.nonzero.default, (graph.placeholder("x"),))
    nonzero.meta["val"] = found
    nonzero.meta["unbacked_bindings"] = {size.node.expr: (CallMethodKey("size"), SequenceKey(0))}
    graph.output(graph.call_function(torch.ops.aten.sum.default, (nonzero,)))
    return graph


def test_unbacked_sizes_a_body_binds_are_named_by_where_they_are_bound():
    assert subgraph_text(bound_body(0)) == subgraph_text(bound_body(3))
    assert "int64[%1.size()[0], 1]" in subgraph_text(bound_body(3))


def test_canonical_arguments_hold_no_generated_name_or_address():
    graph = torch.fx.Graph()
    node = graph.placeholder("sdpa_mask7")
    assert canonical({"mask": node, "n": (1, node)}) == "{mask: %, n: [1, %]}"
    assert "0x" not in canonical(lambda q: q) and canonical(torch.ones(2, 3)) == "float32[2, 3]"


# --- side inputs whose ancestry binds unbacked sizes ---------------------------------------


class Unbacked(torch.nn.Module):
    """``first``: another unbacked size bound before the one the result reads."""

    def __init__(self, first: bool) -> None:
        super().__init__()
        self.first = first

    def forward(self, x):
        other = torch.nonzero(x > 1).sum() if self.first else x.sum()
        idx = torch.nonzero(x)
        return other, (idx.float() * 2).sum()


def provenance_of_result(first: bool) -> str:
    program = torch.export.export(Unbacked(first), (torch.arange(6.0),))
    graph = program.graph
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    fake = SimpleNamespace(  # a Program's parts that a Provenance reads of inputs and ops
        exported=SimpleNamespace(program=program, symbols={}),
        graph=graph,
        region={n: SimpleNamespace(kind="input") for n in inputs},
        owner={},
        user_inputs={"x": inputs[0]},
    )
    fake.readable = lambda value: Program.readable(fake, value)
    fake.dtype = lambda node: Program.dtype(fake, node)
    fake.shape = lambda node: Program.shape(fake, node)
    output = next(n for n in graph.nodes if n.op == "output")
    return Provenance(fake)(output.args[0][1])


def test_side_inputs_name_unbacked_sizes_by_their_binding_not_their_number():
    assert provenance_of_result(False) == provenance_of_result(True)


# --- stage programs of models with a subgraph on every layer ------------------------------


@pytest.fixture(scope="module")
def hop_regions() -> Explorer:
    return Explorer(f"{FILE}:hop_regions")


def differences(report) -> list:
    return [d for d in report.errors if d.code in ("GC301", "GC303")]


def assert_no_difference(report) -> None:
    assert report.stage_proof.proven and report.stage_proof.default
    assert report.verdict == "pass" and not differences(report)
    assert f"{len(report.stage_programs)} stage programs, 0 differences" in render(report, "text")


def test_regions_on_every_layer_prove_their_stage_programs(hop_regions):
    assert_no_difference(hop_regions.verify([2]))  # stage 1 numbers layer 2's bodies from 0


def test_regions_on_every_layer_prove_their_stage_programs_at_every_cut(hop_regions):
    assert_no_difference(hop_regions.verify([1, 2, 3]))  # every stage but the first


def test_a_region_whose_body_differs_in_one_stage_still_differs(hop_regions):
    """The stages that start at layers 1 and 3 number their bodies from 0 and compare
    equal; the stage holding layer 2, whose body differs by one constant, does not."""
    report = hop_regions.verify([1, 2, 3], stage_builder=f"{FILE}:rescaled_region")
    found = differences(report)
    assert [(d.code, d.stage) for d in found] == [("GC301", 2)]
    assert found[0].message.startswith("global layer 2: the body of `wrap_with_set_grad_enabled`")
    assert "(%0, 0.5)" in found[0].message and "(%0, 0.25)" in found[0].message
    assert "submod" not in found[0].message  # no generated name


@pytest.fixture(scope="module")
def flex_documents() -> Explorer:
    return Explorer(f"{FILE}:flex_documents")


def test_flex_masks_on_every_layer_prove_their_stage_programs_at_every_cut(flex_documents):
    assert_no_difference(flex_documents.verify([1, 2, 3]))


def test_a_flex_mask_whose_constant_differs_in_one_stage_still_differs(flex_documents):
    report = flex_documents.verify([1, 2, 3], stage_builder=f"{FILE}:narrow_window")
    found = differences(report)
    assert [(d.code, d.stage) for d in found] == [("GC301", 2)]
    assert "the body of `flex_attention` differs" in found[0].message
    assert "1024)" in found[0].message and "8)" in found[0].message


# --- findings at the model's line ----------------------------------------------------------


def test_a_finding_inside_a_flex_mask_is_located_at_the_models_line_and_grouped():
    report = verify("subgraph_names:flex_mixing", (2,))
    leaks = [d for d in report.errors if d.code == "GC401"]
    assert sorted(d.layer for d in leaks) == [0, 1, 2, 3]
    lines = FILE.read_text().splitlines()
    call = next(i for i, line in enumerate(lines, 1) if "out = flex_attention(" in line)
    for d in leaks:
        where = d.source_location()
        assert os.path.samefile(where["file"], FILE) and where["line"] == call
        assert len(d.source) < 200, d.source  # the model's line, not a generated one
    groups = [g for g in group(report.diagnostics) if g.first.code == "GC401"]
    assert [len(g.members) for g in groups] == [4]


def test_the_innermost_frame_outside_generated_code_and_libraries_is_chosen():
    torch_file = os.path.join(os.path.dirname(torch.__file__), "nn/attention/flex_attention.py")
    wrapper = os.path.join(sysconfig.get_paths()["stdlib"], "functools.py")
    trace = "\n".join(
        f'  File "{path}", line {line}, in f\n    {code}'
        for path, line, code in [
            ("/src/model.py", 10, "h = self.attn(x)"),
            ("/src/attn.py", 42, "out = flex_attention(q, k, v, block_mask=mask)"),
            (wrapper, 989, "return func(*args, **kwargs)"),
            (torch_file, 1500, "return flex_attention_hop(query, key, value)"),
            ("<eval_with_key>.5", 13, "flex_attention = torch.ops.higher_order." + "x" * 500),
            ("<string>", 1, "return fn()"),
        ]
    )
    assert model_frame(trace) == (
        "/src/attn.py",
        "42",
        "out = flex_attention(q, k, v, block_mask=mask)",
    )
    only_torch = trace.split('  File "/src/model.py"')[0] + "\n".join(trace.splitlines()[4:])
    assert model_frame(only_torch)[0] == wrapper or model_frame(only_torch)[0] == torch_file
    generated = '  File "<eval_with_key>.5", line 13, in forward\n    x = y'
    assert model_frame(generated) is None


# --- torchtitan's FlexAttention (its own stage conventions are not needed here) -----------


def torchtitan_bodies(drop_first: bool) -> list[str]:
    """The ``mask_mod`` bodies of a two-layer torchtitan llama3 with FlexAttention and a
    document mask from ``positions``, uncut or as the stage holding layer 1 only."""
    from torchtitan.models.llama3 import model_registry

    config = model_registry("debugmodel", attn_backend="flex").model
    model = replace(config, layers=config.layers[:2]).build()
    tokens = torch.randint(0, config.vocab_size, (1, 128))
    if drop_first:
        del model.layers["0"]
        model.tok_embeddings = None
        tokens = torch.randn(1, 128, config.dim)

    class Masked(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, tokens, positions):
            return self.inner(tokens, positions, self.inner.get_attention_masks(positions))

    positions = torch.cat([torch.arange(50), torch.arange(78)])[None]  # two documents
    with torch.no_grad():
        program = torch.export.export(Masked(), (tokens, positions), strict=False)
    flex = [n for n in program.graph.nodes if op_name(n.target) == "flex_attention"]
    module = program.graph_module
    return [subgraph_text(attribute(module, n.args[4][-1].target).graph) for n in flex]


def test_torchtitan_flex_masks_compare_by_content():
    pytest.importorskip("torchtitan")
    uncut, stage = torchtitan_bodies(False), torchtitan_bodies(True)
    assert len(uncut) == 2 and len(stage) == 1
    assert stage[0] == uncut[1] == uncut[0]  # sdpa_mask0 of the stage is sdpa_mask1 uncut
    assert "ModIndex" not in stage[0].replace("op.ModIndex,", "")  # no attribute's name
    assert " at 0x" not in stage[0]
