"""Activation checkpointing on every layer changes no verdict (fixtures/checkpointed.py).

``checkpoint(layer.forward, ..., use_reentrant=False)`` recomputes the layer in the
backward; the forward program is the same, and so is every finding: each fixture is
verified with and without it, and the codes, the verdict and the layers the findings
name must agree.
"""

from __future__ import annotations

import pytest
from harness import NO_STAGES, explorer

PAIRS = [
    ("checkpointed:reference_decoder", "reference:reference"),
    ("checkpointed:ignores_cu_seqlens", "violations:ignores_cu_seqlens"),
    ("checkpointed:tied_embeddings", "violations:tied_embeddings"),
    ("checkpointed:doc_causal", "flex_masks:doc_causal"),
    ("checkpointed:pos_order", "flex_masks:pos_order"),
    ("checkpointed:chunked_scan", "token_shifts:chunked_scan"),
]


def _seen(name: str):
    report = explorer(name).verify([1], stage_builder=NO_STAGES)
    return report.verdict, report.codes, sorted({(d.code, d.layer) for d in report.errors})


@pytest.mark.parametrize(("with_checkpoints", "without"), PAIRS)
def test_checkpointing_every_layer_changes_no_verdict(with_checkpoints, without):
    assert _seen(with_checkpoints) == _seen(without)
