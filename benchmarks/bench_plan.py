"""Planning cost: the cost model on top of ``map``, and re-judging plans on a deep model.

For a reference decoder of ``--layers`` layers (94 by default) built on fake weights:

* ``map`` - the legal-cut map from an export (judging every boundary);
* ``cost model`` - :meth:`Explorer.costs` on that export, and its share of ``map``;
* ``search`` - the exact balanced legal plan for each of ``--stages`` (cached analysis);
* ``re-judge`` - a plan edited by one cut judged against the cached map, as the cut
  explorer does after a click (legal iff every cut is, per-stage cost and imbalance);
* ``verify`` - a full proof of a new plan from the cached export (crossing sets anew).

Each figure is the best of ``--repeat`` runs.

    .venv/bin/python benchmarks/bench_plan.py [--layers 94] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fixtures"))

import reference  # noqa: E402

from graphcheck.api import Explorer  # noqa: E402
from graphcheck.planning.balance import balance, imbalance, stage_costs  # noqa: E402


def best(repeat: int, fn, *args) -> tuple[float, object]:
    """Best wall time of ``repeat`` calls of ``fn(*args)``, and the last result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn(*args)
        times.append(time.perf_counter() - start)
    return min(times), result


def rejudge(legal: set[int], layers, first: float, last: float, cuts: list[int]):
    """What the page recomputes after a click: legality, stage costs, imbalance."""
    ok = all(c in legal for c in cuts)
    per_stage = stage_costs(layers, cuts, first, last)
    return ok, per_stage, imbalance(per_stage)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=94)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--stages", type=int, nargs="*", default=[4, 8, 16])
    args = parser.parse_args()
    start = time.perf_counter()
    explorer = Explorer(lambda: reference.reference(args.layers))
    _ = explorer.program
    export = time.perf_counter() - start
    mapped, cut_map = best(1, explorer.map)  # judging every boundary, costs included
    model, costs = best(args.repeat, explorer.costs)
    print(f"reference decoder, {args.layers} layers: export {export:.2f} s")
    print(f"  map (every boundary, with costs)  {mapped * 1e3:9.1f} ms")
    share = f"{model / mapped:.1%} of map on the export, {model / (export + mapped):.1%} of both"
    print(f"  cost model                        {model * 1e3:9.1f} ms  ({share})")
    first, layers, last = costs.values("flops")
    legal = set(cut_map.legal_cuts())
    for stages in args.stages:
        took, found = best(args.repeat, balance, layers, stages, legal, first, last)
        cuts = list(found.cuts)
        edited = sorted({*cuts[:-1], min(cuts[-1] + 1, args.layers)})
        judged, _ = best(args.repeat, rejudge, legal, layers, first, last, edited)
        proof, _ = best(1, explorer.verify, edited)
        print(
            f"  {stages:2} stages: search {took * 1e3:7.2f} ms · re-judge {judged * 1e3:6.3f} ms"
            f" · verify {proof * 1e3:7.1f} ms"
        )


if __name__ == "__main__":
    main()
