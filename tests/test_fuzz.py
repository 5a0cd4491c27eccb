"""Differential fuzzing: a static PASS is never contradicted by executed bytes.

A hypothesis strategy composes small decoders from parts (``fixtures/adversarial.py``,
:func:`adversarial.composed`): token-wise ops, mixers with and without document
metadata, in-place writes to a shared buffer, cross-layer skips, reshapes of T, dtype
casts, bitcasts, and fabricated positions. Each example is proven at one random cut;
when the static verdict is PASS, ``graphcheck gate`` runs it on real bf16 weights and
must show equal bytes (staged against uncut) and exact document isolation (no changed
bit under the gate's perturb and shift tests, :mod:`graphcheck.gate.exact`).

``GRAPHCHECK_FUZZ_EXAMPLES`` sets the number of examples of ``make test`` (default 10,
about 30 s), ``GRAPHCHECK_FUZZ_SLOW_EXAMPLES`` those of ``make test-slow`` (default 40);
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

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
EXAMPLES = int(os.environ.get("GRAPHCHECK_FUZZ_EXAMPLES", "10"))
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


def disagreement(
    recipe: Recipe, cut: int, docs: tuple[int, ...], directory: Path | None = None
) -> str | None:
    """What contradicts a static PASS of ``recipe`` at ``cut``, or None (no PASS claimed,
    or the gate agrees)."""
    spec = model_file(directory or Path(tempfile.gettempdir()) / "graphcheck-fuzz", recipe)
    explorer = Explorer(spec)
    builder = "keep-index" if MODE == "processes" else None  # the stages the gate runs
    try:
        report = explorer.verify([cut], stage_builder=builder)
    except GraphcheckError:  # could not verify (exit 2): nothing is claimed
        _event("static: could not verify")
        return None
    _event(f"static: {report.verdict} {' '.join(sorted(report.codes))}".strip())
    if report.verdict != "pass":
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


@pytest.mark.slow
@_fuzz(SLOW_EXAMPLES)
@given(examples())
def test_static_pass_implies_equal_bytes_and_isolation_at_length(tmp_path_factory, example):
    _agrees(tmp_path_factory, example)


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_fuzzer_regressions(name, tmp_path):
    """The fuzzer's findings, kept: each names a recipe, a cut and documents."""
    recipe, cut, docs = REGRESSIONS[name]
    assert disagreement(recipe, cut, docs, tmp_path) is None
