"""Adversarial decoders: every violating model is caught, every legal twin passes, and
no static PASS is contradicted by executed bytes.

One table drives three tests (``fixtures/adversarial.py``):

* **static**: the violating model's codes include the expected code (GC401 for token
  mixing and lost document structure, GC402 for fabricated positions) and its twin has
  no finding at all;
* **ground truth** (no graphcheck analysis involved): on real random bf16 weights the
  violating model leaks across packed documents and the twin does not, so each row of
  the table really is a violation and a legal twin;
* **agreement**: for every model of the table whose static verdict is PASS,
  ``graphcheck gate`` shows equal bytes and exact document isolation (the exported
  graph split in process by default; every stage in a fresh process, and every row,
  with ``GRAPHCHECK_SLOW=1``).

Each model is exported once (about a second) and shared by the tests that read it.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import torch
from harness import RuleExplorer as Explorer  # no stage programs: the rules of GC4

from graphcheck.errors import GraphcheckError
from graphcheck.gate import Gate
from graphcheck.gate.batch import PackedBatch
from graphcheck.kernels.cpu_reference import cpu_kernels
from graphcheck.varlen import model_inputs

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "adversarial.py"
DOCS = (23, 9, 31, 4)  # T = 67 tokens in 4 documents
INPUTS = model_inputs()
# relative leak, alone against packed: a violation leaks more than twice this, a twin less
# than half (the gate itself is exact: graphcheck.gate.exact)
LEAK_SCALE = 0.02

# Rows marked SLOW (a second fixture of a class the default rows already cover) run
# with GRAPHCHECK_SLOW=1: every row costs two exports.
SLOW = pytest.mark.skipif(
    not os.environ.get("GRAPHCHECK_SLOW"), reason="slow: set GRAPHCHECK_SLOW=1"
)

# The agreement test runs the gate on the exported graph split in this process by
# default, and as ranks run it (every stage built in a fresh process) with GRAPHCHECK_SLOW.
GATE_MODE = "processes" if os.environ.get("GRAPHCHECK_SLOW") else "graph"

# (violating fixture, cuts, codes that must appear, legal twin)
ROWS = [
    ("roll_shift", (4,), {"GC401"}, "roll_masked_shift"),
    ("roll2_start_masked_shift", (4,), {"GC401"}, "roll2_window_masked_shift"),
    ("pad_shift", (4,), {"GC401"}, "pad_masked_shift", SLOW),
    ("tril_linear_attention", (4,), {"GC401"}, "tril_doc_linear_attention"),
    ("cumsum_linear_attention", (4,), {"GC401"}, "tril_doc_linear_attention", SLOW),
    ("soft_moe", (4,), {"GC401"}, "token_choice_moe"),
    ("expert_choice_moe", (4,), {"GC401"}, "one_hot_experts_moe", SLOW),
    ("collapsed_cu_seq_lens", (4,), {"GC401"}, "uncollapsed_cu_seq_lens"),
    ("position_compare_mask", (4,), {"GC401"}, "doc_position_mask", SLOW),
    ("positions_ones_cumsum", (4,), {"GC402"}, "positions_from_ids"),
    ("positions_arange_offset", (2, 6), {"GC402"}, "positions_from_ids", SLOW),
    ("positions_from_cu_previous", (4,), {"GC402"}, "positions_from_cu"),
    ("flex_causal_mask", (4,), {"GC401"}, "flex_document_mask"),
    ("ssm_scan_unmasked", (4,), {"GC401"}, "ssm_scan_masked"),
]
TABLE = [pytest.param(*row[:4], marks=row[4:], id=row[0]) for row in ROWS]


def spec(name: str) -> str:
    return f"{FIXTURE}:{name}"


@functools.cache
def explorer(name: str) -> Explorer:
    return Explorer(spec(name))


@functools.cache
def static(name: str, cuts: tuple[int, ...]):
    return explorer(name).verify(list(cuts))


# --- static: the violation is named, the twin is clean ------------------------------------


@pytest.mark.parametrize(("fixture", "cuts", "expected", "twin"), TABLE)
def test_flags_violating_model(fixture, cuts, expected, twin):
    report = static(fixture, cuts)
    assert expected <= report.codes, (report.verdict, sorted(report.codes))
    assert report.verdict == "fail"


TWINS = [
    pytest.param(row[3], row[1], marks=row[4:], id=f"{row[3]}-{','.join(map(str, row[1]))}")
    for row in ROWS
]


@pytest.mark.parametrize(("twin", "cuts"), TWINS)
def test_allows_legal_twin(twin, cuts):
    report = static(twin, cuts)
    assert report.codes == set(), sorted(report.codes)
    assert report.verdict == "pass"


# --- ground truth: the table's rows are what they claim ------------------------------------


def _build(name: str) -> torch.nn.Module:
    import adversarial  # fixtures/ is on sys.path (conftest)

    previous = torch.get_default_dtype()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        torch.set_default_dtype(torch.bfloat16)
        try:
            return getattr(adversarial, name)().eval()
        finally:
            torch.set_default_dtype(previous)


def leak(name: str, docs=DOCS) -> float:
    """Worst relative difference, over documents, between a document's logits packed
    with the others and run alone (eager, real random bf16 weights)."""
    model = _build(name)
    batch = PackedBatch.random(docs, model.config.vocab_size, seed=0)
    worst, threads = 0.0, torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is faster on a shared machine
    try:
        with torch.no_grad(), cpu_kernels():
            packed = model(**batch.inputs(INPUTS))
            for index, (start, end) in enumerate(batch.spans):
                alone = model(**batch.document(index).inputs(INPUTS)).float()
                diff = (packed[:, start:end].float() - alone).abs().max().item()
                worst = max(worst, diff / alone.abs().max().item())
    finally:
        torch.set_num_threads(threads)
    return worst


@pytest.mark.parametrize(("fixture", "cuts", "expected", "twin"), TABLE)
def test_violation_leaks_and_twin_isolates(fixture, cuts, expected, twin):
    assert leak(fixture) > 2 * LEAK_SCALE
    assert leak(twin) <= LEAK_SCALE / 2


# --- agreement: a static PASS is never contradicted by the gate -----------------------------

AGREEMENT = [
    pytest.param(name, row[1], marks=row[4:], id=f"{name}-{','.join(map(str, row[1]))}")
    for row in ROWS
    for name in (row[0], row[3])
]


@pytest.mark.parametrize(("fixture", "cuts"), AGREEMENT)
def test_static_pass_implies_gate_agrees(fixture, cuts):
    try:
        report = static(fixture, cuts)
    except GraphcheckError as err:
        pytest.skip(f"no static verdict to check: {err}")
    if report.verdict != "pass":
        pytest.skip(f"static FAIL {sorted(report.codes)}: nothing claimed")
    gate = Gate(spec(fixture), explorer=explorer(fixture))
    gated = gate.run(list(cuts), docs=DOCS, mode=GATE_MODE)
    assert gated.static_verdict == "pass"
    assert gated.bytes.status == "equal", gated.bytes
    assert gated.isolation.holds, gated.isolation


def test_per_document_running_sums_fail_closed():
    """One running sum per document through a one-hot over document ids isolates
    documents (the ground truth shows it), but the op table cannot prove it: graphcheck
    fails closed rather than pass (docs/soundness.md, known false alarms)."""
    assert "GC401" in static("cumsum_doc_linear_attention", (4,)).codes
