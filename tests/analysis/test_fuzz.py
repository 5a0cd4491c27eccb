"""Differential fuzzing: a static PASS is never contradicted by executed bytes.

A hypothesis strategy composes small decoders from parts (``fixtures/adversarial.py``,
:func:`adversarial.composed`): token-wise ops, mixers with and without document
metadata, in-place writes to a shared buffer, cross-layer skips, reshapes of T, dtype
casts, bitcasts, fabricated positions, a kernel chosen by build-order state (a class-level
counter of the layers that ran) and a path that pins T to the traced length, each
violating part with its legal twin. Each example is proven at one random cut, its stage
programs too (the composed decoders are pipeline-aware: ``stage_builder="keep-index"``);
when the static verdict is PASS, ``graphcheck gate`` runs it on real bf16 weights and
must show equal bytes (staged against uncut) and exact document isolation (no changed
bit under the gate's perturb and shift tests, :mod:`graphcheck.gate.exact`).

``GRAPHCHECK_FUZZ_EXAMPLES`` sets the number of examples of ``make test`` (default 6,
about 20 s), ``GRAPHCHECK_FUZZ_SLOW_EXAMPLES`` those of ``make test-slow`` (default 40);
``GRAPHCHECK_FUZZ_SHRINK=1`` lets hypothesis shrink a failure to a minimal recipe
(slow: every step is an export). ``benchmarks/fuzz.py`` runs many examples and lists
every disagreement instead of stopping at the first.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

import pytest
from adversarial import ISOLATING, PARTS, REGRESSIONS, Recipe
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from graphcheck.api import Explorer
from graphcheck.errors import GraphcheckError
from graphcheck.gate import Gate

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
EXAMPLES = int(os.environ.get("GRAPHCHECK_FUZZ_EXAMPLES", "6"))
SLOW_EXAMPLES = int(os.environ.get("GRAPHCHECK_FUZZ_SLOW_EXAMPLES", "40"))  # make test-slow
SHRINK = bool(os.environ.get("GRAPHCHECK_FUZZ_SHRINK"))
# the gate's mode: "processes" (the uncut model and every stage each built in a fresh
# process, the ground truth) or "graph" (the exported graph split in this process)
MODE = os.environ.get("GRAPHCHECK_FUZZ_GATE", "processes")
PHASES = tuple(Phase) if SHRINK else tuple(p for p in Phase if p != Phase.shrink)


@st.composite
def layer_parts(draw, written: bool) -> tuple[str, ...]:
    """1-2 parts; a buffer is read only after a write (an earlier layer or part), so
    no example depends on state left by the call before it."""
    # three draws in four from the parts that keep documents apart: a static PASS (the
    # only verdict the gate can contradict) needs every part of the model to be one
    safe = st.sampled_from(sorted(ISOLATING))
    kinds = st.one_of(safe, safe, safe, st.sampled_from(PARTS))
    parts = []
    for kind in draw(st.lists(kinds, min_size=1, max_size=2)):
        if kind == "buffer_read" and not written:
            kind = "linear"
        written = written or kind == "buffer_write"
        parts.append(kind)
    return tuple(parts)


@st.composite
def examples(draw):
    """``(recipe, cut, docs)``."""
    num_layers = draw(st.integers(2, 4))
    layers, written = [], False
    for _ in range(num_layers):
        parts = draw(layer_parts(written))
        written = written or "buffer_write" in parts
        layers.append(parts)
    pairs = st.tuples(st.integers(0, num_layers - 1), st.integers(0, num_layers - 1))
    skip = st.lists(pairs.filter(lambda p: p[0] < p[1]), min_size=1, max_size=1)
    skips = draw(st.one_of(st.just([]), st.just([]), st.just([]), skip))
    recipe = Recipe(
        layers=tuple(layers),
        positions=draw(st.sampled_from(("ids", "ids", "ids", "arange"))),
        skips=tuple(skips),
        residual=draw(st.sampled_from(("bf16", "bf16", "bf16", "bitcast"))),
    )
    cut = draw(st.integers(1, num_layers - 1))
    docs = tuple(draw(st.lists(st.integers(1, 24), min_size=2, max_size=4)))
    return recipe, cut, docs


def _event(label: str) -> None:
    """Count outcomes in ``--hypothesis-show-statistics`` (a no-op outside a test)."""
    with contextlib.suppress(Exception):
        event(label)


def model_file(directory: Path, recipe: Recipe) -> str:
    """A model file holding ``recipe``, as a ``file.py:model`` spec: the gate builds the
    uncut model and every stage in fresh processes, from the spec."""
    directory.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha1(repr(recipe).encode()).hexdigest()[:12]
    path = directory / f"composed_{digest}.py"
    path.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(FIXTURES)!r})\n"
        "from adversarial import Recipe, composed\n\n"
        f"RECIPE = {recipe!r}\n\n\n"
        "def model():\n"
        "    return composed(RECIPE)\n"
    )
    return f"{path}:model"


def static(recipe: Recipe, cut: int, directory: Path | None = None):
    """``(spec, explorer, report)``: the static proof of ``recipe`` at ``cut``, stage
    programs included (every composed decoder is pipeline-aware, so the builtin
    ``keep-index`` builder makes its stages: the ones the gate runs); ``report`` is
    ``None`` when graphcheck could not verify (exit 2)."""
    spec = model_file(directory or Path(tempfile.gettempdir()) / "graphcheck-fuzz", recipe)
    explorer = Explorer(spec)
    try:
        report = explorer.verify([cut], stage_builder="keep-index")
    except GraphcheckError:  # could not verify (exit 2): nothing is claimed
        _event("static: could not verify")
        return spec, explorer, None
    _event(f"static: {report.verdict} {' '.join(sorted(report.codes))}".strip())
    return spec, explorer, report


def disagreement(
    recipe: Recipe, cut: int, docs: tuple[int, ...], directory: Path | None = None
) -> str | None:
    """What contradicts a static PASS of ``recipe`` at ``cut``, or None (no PASS claimed,
    or the gate agrees)."""
    spec, explorer, report = static(recipe, cut, directory)
    if report is None or report.verdict != "pass":
        return None
    gated = Gate(spec, explorer=explorer).run([cut], docs=docs, mode=MODE)
    problems = []
    if gated.bytes.status != "equal":
        problems.append(f"bytes {gated.bytes.status}: {gated.bytes.message}")
    if not gated.isolation.holds:
        crossing = gated.isolation.crossing
        problems.append(f"isolation {gated.isolation.status}: {crossing and crossing.describe()}")
    return "; ".join(problems) or None


def _fuzz(examples_: int):
    """Hypothesis settings: ``examples_`` derandomized examples (the first ones of a longer
    run are the shorter run's)."""
    return settings(
        max_examples=examples_,
        deadline=None,
        derandomize=True,
        database=None,
        phases=PHASES,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
    )


def _agrees(tmp_path_factory, example) -> None:
    recipe, cut, docs = example
    directory = tmp_path_factory.getbasetemp() / "fuzz"
    assert disagreement(recipe, cut, docs, directory) is None


@_fuzz(EXAMPLES)
@given(examples())
def test_static_pass_implies_equal_bytes_and_isolation(tmp_path_factory, example):
    _agrees(tmp_path_factory, example)


@_fuzz(SLOW_EXAMPLES)
@given(examples())
def test_static_pass_implies_equal_bytes_and_isolation_at_length(tmp_path_factory, example):
    _agrees(tmp_path_factory, example)


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_fuzzer_regressions(name, tmp_path):
    """The fuzzer's findings, kept: each names a recipe, a cut and documents."""
    recipe, cut, docs = REGRESSIONS[name]
    assert disagreement(recipe, cut, docs, tmp_path) is None


# --- the parts' violating forms are never a static PASS; their twins agree ----------------

COUNTER = Recipe(layers=((), ("counter_kernel",)))  # layer 1 counts itself 0 on stage 1
PINNED = Recipe(layers=(("pin_t",), ()))


def test_a_kernel_chosen_by_a_layer_counter_fails_in_the_stage_programs(tmp_path):
    _, _, report = static(COUNTER, 1, tmp_path)
    assert report.verdict == "fail" and report.codes == {"GC301"}
    (found,) = report.diagnostics
    assert found.message.startswith("global layer 1: uncut program runs `parts.0 (Part)`")


def test_a_pinned_t_fails_and_says_documents_cannot_be_tracked(tmp_path):
    _, _, report = static(PINNED, 1, tmp_path)
    assert report.verdict == "fail" and {"GC401", "GC403"} <= report.codes
    untracked = [d for d in report.diagnostics if d.code == "GC401"]
    assert untracked[0].message.startswith(
        "documents cannot be tracked: the export fixed T to 29 at this op"
    )


TWINS = [
    pytest.param(Recipe(layers=((), ("index_kernel",))), 1, id="index_kernel"),
    pytest.param(Recipe(layers=((), (), ("counter_kernel",))), 2, id="counter_even_cut"),
    pytest.param(Recipe(layers=(("check_t",), ())), 1, id="check_t"),
]


@pytest.mark.parametrize(("recipe", "cut"), TWINS)
def test_the_legal_twins_are_a_static_pass(recipe, cut, tmp_path):
    """The twins (and a counter whose stage starts at an even cut: it counts the same
    parity) raise nothing, stage programs included."""
    _, _, report = static(recipe, cut, tmp_path)
    assert report.verdict == "pass" and report.diagnostics == []


@pytest.mark.parametrize(("recipe", "cut"), TWINS)
def test_the_gate_agrees_with_the_legal_twins(recipe, cut, tmp_path):
    assert disagreement(recipe, cut, (5, 3, 7), tmp_path) is None


def test_the_layer_counter_is_a_real_violation(tmp_path):
    """Ground truth for the counter part: without stage programs the static check cannot
    see it (PASS), and the stages the gate builds in fresh processes differ in bytes."""
    spec = model_file(tmp_path, COUNTER)
    explorer = Explorer(spec)
    assert explorer.verify([1], stage_builder="none").verdict == "pass"
    gated = Gate(spec, explorer=explorer).run([1], docs=(5, 3, 7), mode="processes")
    assert gated.bytes.status == "differ"
