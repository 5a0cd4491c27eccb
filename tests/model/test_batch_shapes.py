"""The example batch: ``--docs``, ``--tokens`` and ``--token-multiple``.

A model that views the tokens in groups of 4 cannot be exported on the default
example (29 tokens); with ``--token-multiple 4`` T is exported as ``4 * Tk`` and the
proof holds for every multiple of 4. A guard beyond the declared multiple is still
GC403, and grouping that moves or mixes tokens is still GC401.
"""

from __future__ import annotations

import json

import pytest
import torch
from harness import spec
from torch import nn

from graphcheck.api import Explorer, verify
from graphcheck.report import render


def test_token_multiple_proves_a_grouped_model_for_multiples_of_4():
    report = Explorer(spec("batch_shapes:compress4"), token_multiple=4).verify([2])
    assert (report.verdict, report.diagnostics) == ("pass", [])
    assert report.as_dict()["tokens"] == {
        "symbol": "T", "multiple_of": 4, "min": 8, "example": [11, 12, 13],
    }  # fmt: skip
    header = render(report, "text").splitlines()[1]
    assert header.startswith("  for every T ≥ 8 that is a multiple of 4 (traced on 36 tokens")


def test_without_token_multiple_the_grouped_model_does_not_export(cli):
    code, out, err = cli("verify", spec("batch_shapes:compress4"), "--cuts", "2")
    assert (code, out) == (2, "")
    assert "torch.export failed" in err and "is invalid for input of size" in err


def test_tokens_and_a_count_of_documents(cli):
    argv = ("verify", spec("reference:reference"), "--tokens", "64", "--docs", "4", "--cuts", "4")
    code, out, _ = cli(*argv, "--format", "json")
    data = json.loads(out)
    assert (code, data["verdict"]) == (0, "pass")
    assert data["tokens"] == {
        "symbol": "T", "multiple_of": 1, "min": 2, "example": [14, 15, 17, 18],
    }  # fmt: skip


@pytest.mark.parametrize(
    "flags",
    [
        ("--docs", "30,34", "--tokens", "60"),
        ("--docs", "0"),
        ("--docs", "4,x"),
        ("--tokens", "5", "--docs", "3"),
        ("--tokens", "30", "--token-multiple", "4"),
        ("--docs", "30,35", "--token-multiple", "4"),
        ("--tokens", "4", "--token-multiple", "4"),
        ("--token-multiple", "0"),
        ("--tokens", "many"),
    ],
)
def test_a_batch_that_does_not_add_up_is_one_line_before_building(cli, flags):
    # a model that does not exist: the batch is checked before the model is looked up
    code, out, err = cli("map", "fixtures/missing.py:nothing", *flags)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("graphcheck: error:"), err
    assert "missing.py" not in err


class _Grouped(nn.Module):
    """Two layers whose work runs on tokens grouped by 4 (``[1, T // 4, 4, 8]``): token-wise
    (``grouped``), or a guard on ``T % 8`` (``guard8``), groups of 8 (``group8``), a
    transpose of the groups before merging them back (``transposed``), a mean over each
    group (``mean``), a linear map over each group's merged features (``merged``: four
    tokens, maybe of two documents, mixed), a shift of the groups (``rolled``)."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.embed_tokens = nn.Embedding(16, 8)
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])
        self.merge = nn.Linear(32, 32)
        self.norm = nn.LayerNorm(8)
        self.lm_head = nn.Linear(8, 16)

    def forward(self, input_ids, position_ids):
        h = self.embed_tokens(input_ids)
        t = h.shape[1]
        size = 8 if self.how == "group8" else 4
        for layer in self.layers:
            g = layer(h.view(1, t // size, size, 8))
            if self.how == "transposed":
                g = g.transpose(1, 2)
            elif self.how == "mean":
                g = g.mean(2, keepdim=True).expand(1, t // size, size, 8)
            elif self.how == "merged":
                g = self.merge(g.reshape(1, t // size, size * 8))
            elif self.how == "rolled":
                g = g.roll(1, 1)
            h = h + g.reshape(1, t, 8)
        if self.how == "guard8" and t % 8 == 0:
            h = h * 2
        return self.lm_head(self.norm(h))


@pytest.mark.parametrize(
    ("how", "codes"),
    [
        ("grouped", set()),
        ("guard8", {"GC403"}),
        ("group8", {"GC401", "GC403"}),  # GC401: T // 8 is not a split of 4 * Tk it can read
        ("transposed", {"GC401"}),
        ("mean", {"GC401"}),
        ("merged", {"GC401", "GC205"}),  # GC205: one merge weight serves both layers
        ("rolled", {"GC401"}),
    ],
)
def test_only_the_declared_multiple_is_assumed(how, codes):
    report = verify(lambda: _Grouped(how), cuts=[1], tokens=32, token_multiple=4)
    assert report.codes == codes
    guards = [d.message for d in report.errors if d.code == "GC403"]
    if how.endswith("8"):
        (message,) = guards
        assert "(beyond T a multiple of 4)" in message
    if how == "guard8":
        assert "(T % 8) == 0" in message


def test_the_example_batch_is_exported():
    explorer = Explorer(lambda: _Grouped("grouped"), docs=(6, 10), token_multiple=4)
    exported = explorer.program.exported
    assert exported.batch.docs == (6, 10)
    node = explorer.program.user_inputs["input_ids"]
    assert explorer.program.shape(node) == ["1", "T"]
    assert isinstance(node.meta["val"].shape[1], torch.SymInt)
