"""Differential fuzzing at scale: list every static PASS that execution contradicts.

Runs the strategy of ``tests/analysis/test_fuzz.py`` for many examples (``--examples`` or
``GRAPHCHECK_FUZZ_EXAMPLES``, default 1000) without stopping at the first
disagreement, shrinks each disagreement greedily to a minimal recipe (fewer layers,
fewer parts, no skip, positions from ``position_ids``, a bf16 residual, fewer and
shorter documents) and prints the distinct minimal ones, ready to paste into
``REGRESSIONS`` in ``fixtures/adversarial.py``::

    .venv/bin/python benchmarks/fuzz.py --examples 200
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "fixtures")]

from adversarial import ISOLATING, Recipe  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from test_fuzz import disagreement, examples  # noqa: E402


def valid(recipe: Recipe) -> bool:
    """A buffer is read only after it is written (no state from the previous call)."""
    written = False
    for parts in recipe.layers:
        for kind in parts:
            if kind == "buffer_read" and not written:
                return False
            written = written or kind == "buffer_write"
    return True


def isolating(example):
    """The example with every mixer that leaks across documents replaced by varlen
    attention and positions from ``position_ids``: what remains can only disagree in
    the staged bytes."""
    recipe, cut, docs = example
    layers = tuple(tuple(k if k in ISOLATING else "varlen" for k in ps) for ps in recipe.layers)
    return recipe._replace(layers=layers, positions="ids"), cut, docs


def candidates(recipe: Recipe, cut: int, docs: tuple[int, ...]):
    """Smaller examples, simplest first."""
    layers = recipe.layers
    if recipe.skips:
        yield recipe._replace(skips=()), cut, docs
    if recipe.positions != "ids":
        yield recipe._replace(positions="ids"), cut, docs
    if recipe.residual != "bf16":
        yield recipe._replace(residual="bf16"), cut, docs
    for i in range(len(layers)):
        if len(layers) > 2:
            kept = layers[:i] + layers[i + 1 :]
            skips = tuple((a - (a > i), b - (b > i)) for a, b in recipe.skips if i not in (a, b))
            skips = tuple((a, b) for a, b in skips if a < b)
            yield recipe._replace(layers=kept, skips=skips), min(cut, len(kept) - 1), docs
    for i, parts in enumerate(layers):
        for j in range(len(parts)):
            for smaller in (parts[:j] + parts[j + 1 :], (*parts[:j], "linear", *parts[j + 1 :])):
                if smaller != parts:
                    yield (
                        recipe._replace(layers=(*layers[:i], smaller, *layers[i + 1 :])),
                        cut,
                        docs,
                    )
    for c in range(1, len(layers)):
        if c != cut:
            yield recipe, c, docs
    if len(docs) > 2:
        for i in range(len(docs)):
            yield recipe, cut, docs[:i] + docs[i + 1 :]
    for i, n in enumerate(docs):
        if n > 2:
            yield recipe, cut, (*docs[:i], n // 2, *docs[i + 1 :])


def shrink(example, problem):
    changed = True
    while changed:
        changed = False
        for smaller in candidates(*example):
            if not valid(smaller[0]):
                continue
            found = disagreement(*smaller)
            if found is not None:
                example, problem, changed = smaller, found, True
                break
    return example, problem


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--examples", type=int, default=int(os.environ.get("GRAPHCHECK_FUZZ_EXAMPLES", 1000))
    )
    parser.add_argument("--seed-random", action="store_true", help="do not derandomize")
    parser.add_argument("--no-shrink", action="store_true")
    parser.add_argument(
        "--bytes-only",
        action="store_true",
        help="replace mixers that leak across documents: look for staged bytes that differ",
    )
    args = parser.parse_args(argv)
    found = []
    start = time.perf_counter()

    @settings(
        max_examples=args.examples,
        deadline=None,
        database=None,
        derandomize=not args.seed_random,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(examples())
    def run(example):
        if args.bytes_only:
            example = isolating(example)
        problem = disagreement(*example)
        if problem is not None:
            found.append((example, problem))
            print(f"found: {example} -> {problem}", flush=True)

    run()
    print(
        f"{args.examples} examples, {len(found)} disagreements, "
        f"{time.perf_counter() - start:.0f} s",
        flush=True,
    )
    minimal = {}
    for example, problem in found:
        if not args.no_shrink:
            example, problem = shrink(example, problem)
        minimal.setdefault(example, problem)
    for (recipe, cut, docs), problem in minimal.items():
        print(f"\n{problem}\n    ({recipe!r}, {cut}, {docs}),")
    return 1 if minimal else 0


if __name__ == "__main__":
    sys.exit(main())
