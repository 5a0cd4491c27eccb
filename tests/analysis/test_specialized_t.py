"""A T the export fixed to the example's length fails closed in the locality proof (GC401
"documents cannot be tracked", at the first op over that length), and a pad by a
symbolic width is a named GC401 finding, not a crash (``fixtures/specialized_t.py``)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from graphcheck.api import Explorer

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "specialized_t.py"
UNTRACKED = (
    "documents cannot be tracked: the export fixed T to 29 at this op "
    "(`aten.embedding.default`: a specialised token count, so no dimension is known to run "
    "over the tokens); make the length dynamic (see GC403)"
)


@functools.cache
def explorer(name: str) -> Explorer:
    return Explorer(f"{FIXTURE}:{name}")


@functools.cache
def report(name: str):
    # the locality proof alone: WidthDecoder scales its output at the root, which every
    # keep-index stage would run again (a true GC303 of the stage programs, not this file's)
    return explorer(name).verify([2], stage_builder="none")


def gc401(name: str) -> list:
    return [d for d in report(name).diagnostics if d.code == "GC401"]


def first_node(name: str, target: str):
    return next(n for n in explorer(name).program.graph.nodes if target in str(n.target))


@pytest.mark.parametrize("name", ["pinned_roll", "pinned_local", "pinned_weight_width"])
def test_a_pinned_t_says_documents_cannot_be_tracked_at_the_first_op_over_it(name):
    assert report(name).verdict == "fail"
    assert {"GC401", "GC403"} <= report(name).codes
    (untracked,) = gc401(name)  # the one finding: the roll is invisible once T is 29
    assert untracked.message == UNTRACKED
    assert (untracked.node, untracked.module) == ("embedding", "model.embed_tokens")
    assert (
        "reference.py:" in untracked.source and "self.embed_tokens(input_ids)" in untracked.source
    )


def test_the_finding_precedes_every_token_mixing_op():
    nodes = list(explorer("pinned_roll").program.graph.nodes)
    assert nodes.index(first_node("pinned_roll", "embedding")) < nodes.index(
        first_node("pinned_roll", "roll")
    )


def test_a_weight_as_wide_as_the_example_t_is_not_taken_for_t():
    """The gain's softmax over 29 entries runs before the embedding but reads no tokens."""
    nodes = list(explorer("pinned_weight_width").program.graph.nodes)
    softmax = first_node("pinned_weight_width", "softmax")
    assert list(softmax.meta["val"].shape) == [29]
    assert nodes.index(softmax) < nodes.index(first_node("pinned_weight_width", "embedding"))
    assert report("dynamic_weight_width").verdict == "pass"
    assert report("dynamic_weight_width").diagnostics == []


def test_gc403_still_reports_the_specialisation():
    messages = [d.message for d in report("pinned_local").diagnostics if d.code == "GC403"]
    assert any("input_ids became 29" in m for m in messages)


def test_the_same_model_with_a_dynamic_t_passes():
    assert report("dynamic_local").verdict == "pass"
    assert report("dynamic_local").diagnostics == []


def test_with_a_dynamic_t_the_roll_itself_is_the_finding():
    findings = gc401("dynamic_roll")
    assert findings and all("cannot be tracked" not in d.message for d in findings)
    assert findings[0].node == "roll" and "torch.roll" in findings[0].source
    assert "GC403" not in report("dynamic_roll").codes


def test_a_symbolic_pad_width_of_the_token_dim_is_a_named_finding_not_a_crash():
    messages = [d.message for d in gc401("symbolic_pad_tokens_front")]
    assert any(
        m.startswith("`aten.pad.default` pads the token dimension by a width") for m in messages
    )
    assert not any("could not follow" in m or "TypeError" in m for m in messages)
    assert report("symbolic_pad_tokens_front").diagnostics[0].node == "pad"


def test_a_symbolic_pad_of_the_token_dim_behind_cropped_back_passes():
    # padding up to a multiple moves no token; the crop back to T is the identity
    assert report("symbolic_pad_tokens").verdict == "pass"
    assert report("symbolic_pad_tokens").diagnostics == []


def test_a_symbolic_pad_width_of_the_features_passes():
    assert report("symbolic_pad_features").verdict == "pass"
    assert report("symbolic_pad_features").diagnostics == []


def test_a_guard_that_holds_for_every_length_is_discharged():
    """Export refuses the dynamic T with ``T*min(64, 64*T) == 64*T``; the solver proves it
    for every T, so the program is generic and nothing is reported."""
    assert report("guard_always_true").verdict == "pass"
    assert report("guard_always_true").diagnostics == []
    assert explorer("guard_always_true").program.exported.guards == []


def test_a_guard_that_fails_for_longer_batches_stays_gc403():
    """Export's guard ``2 <= T <= 4096`` is the program's own range: one finding per input
    names it, and says that no program holds past it (traced there, the export fails)."""
    messages = [d.message for d in report("guard_bounded").diagnostics if d.code == "GC403"]
    assert len(messages) == 2, messages  # input_ids and position_ids, the guard not again
    assert all("is limited to 2..4096; no program holds for T ≥ 4097" in m for m in messages)
    assert all("traced on T = 4099, torch.export failed" in m for m in messages)
    assert report("guard_bounded").verdict == "fail"
