"""What proving document locality costs next to the export, on deep models.

For each model (94 layers by default), export it as graphcheck does and time, within
the analysis:

* the whole locality interpretation (``PropagateLocalityPass``: row labels, terms,
  guards, every op's transfer function);
* the part of it spent in the SMT solver (mask obligations, prefix sums counted as
  document ids, shift masks, BlockMask full blocks), with the number of solver calls
  and how many were answered from the cache of identical obligations;

and print both as a share of the export's own time.

    .venv/bin/python benchmarks/bench_locality.py [--layers 94] [spec ...]

A spec is an ``hf:`` model with ``key=value`` settings after commas
(``hf:llama,attn_implementation=sdpa``), the layer count set by ``--layers``.
"""

from __future__ import annotations

import argparse
import functools
import time

from graphcheck.analysis import layout_terms
from graphcheck.analysis.locality import hop, obligations, pointwise, scans
from graphcheck.analysis.passes import propagate_locality_pass
from graphcheck.api import Explorer

DEFAULT = [
    "hf:qwen3_moe",  # token-choice MoE: row labels through sort, gather, scatter-back
    "hf:llama,attn_implementation=sdpa",  # transformers' packed mask: terms and a prefix sum
    "hf:llama,attn_implementation=flex_attention",  # a mask_mod obligation per layer
]


class Clock:
    """Wall time and calls of the functions it wraps."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def wrap(self, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1

        return timed


def _instrument() -> tuple[Clock, Clock, Clock]:
    """Clocks on the locality pass, on the solver's entry points, and on every request
    for a verdict (cached or not)."""
    locality, solver, asked = Clock(), Clock(), Clock()
    cls = propagate_locality_pass.PropagateLocalityPass
    cls.run = locality.wrap(cls.run)
    obligations._Layout.judge = solver.wrap(obligations._Layout.judge)
    for name in ("_counted", "_covers"):
        setattr(layout_terms, name, solver.wrap(getattr(layout_terms, name)))
    asking = [(scans, "document_id_shift"), (pointwise, "covers_shift")]
    asking += [(hop, "judge_mask")]
    for module, name in asking:
        setattr(module, name, asked.wrap(getattr(module, name)))
    return locality, solver, asked


def _spec(text: str, layers: int) -> tuple[str, dict]:
    model, *pairs = text.split(",")
    settings: dict[str, object] = {"num_hidden_layers": layers}
    for pair in pairs:
        key, value = pair.split("=", 1)
        settings[key] = value
    return model, settings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("specs", nargs="*", default=DEFAULT)
    parser.add_argument("--layers", type=int, default=94)
    args = parser.parse_args()
    locality, solver, asked = _instrument()
    head = f"{'model':46} {'export s':>9} {'locality s':>11} {'share':>6} {'solver s':>9} "
    print(head + f"{'share':>6} {'solves':>7} {'asked':>6}")
    for text in args.specs:
        for clock in (locality, solver, asked):
            clock.seconds, clock.calls = 0.0, 0
        model, settings = _spec(text, args.layers)
        explorer = Explorer(model, settings=settings)
        program = explorer.program
        export = program.exported.seconds
        print(f"{text:46} {export:9.2f} {locality.seconds:11.2f} {locality.seconds / export:6.1%} "
              f"{solver.seconds:9.3f} {solver.seconds / export:6.2%} {solver.calls:7d} "
              f"{asked.calls:6d}")  # fmt: skip


if __name__ == "__main__":
    main()
