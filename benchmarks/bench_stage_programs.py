"""What stage programs by default cost: ``verify`` with and without them, against bare
``torch.export.export``.

For each fixture and plan, time a bare export of the uncut model (as
``bench_export.py`` does), ``graphcheck verify`` with ``--stage-builder none`` (the
partition of the uncut program only) and the default ``verify`` (each stage also built
and exported in its own fresh process, side by side on the cores there are); print
both ratios to the bare export. Each figure is the best of ``--repeat`` runs, each in a
new :class:`~graphcheck.api.Explorer` (the model built and exported again) and with the
in-process memory of built stages cleared, as a new ``graphcheck`` process finds it.

    .venv/bin/python benchmarks/bench_stage_programs.py [--repeat 3] [fixture:cuts ...]

A fixture is ``module:factory:K[,K]`` under ``fixtures/`` (default:
``reference:reference_64:32`` and ``reference:llama8b_shape:16``, the Llama-3.1-8B shape).
"""

from __future__ import annotations

import argparse
import os
import time

from bench_export import bare_export, spec

import graphcheck
from graphcheck.stages import fresh, programs

DEFAULT = ["reference:reference_64:32", "reference:llama8b_shape:16"]


def timed(name: str, cuts: list[int], stage_builder: str | None) -> tuple[float, str]:
    """Wall time of one verify (a new process's view: no stage built before), and its
    verdict line's words."""
    programs._BUILT.clear()
    start = time.perf_counter()
    report = graphcheck.verify(spec(name), cuts, stage_builder=stage_builder)
    return time.perf_counter() - start, report.summary()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("fixtures", nargs="*", default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    fresh.start()  # the fork server, once per process, as one verify starts it
    print(f"{os.cpu_count()} cores")
    header = f"{'fixture':28} {'cuts':>5} {'export s':>9} {'none s':>7} {'ratio':>6}"
    print(header + f" {'default s':>10} {'ratio':>6}  verdict")
    for item in args.fixtures:
        module, factory, cut_text = item.split(":")
        name, cuts = f"{module}:{factory}", [int(c) for c in cut_text.split(",")]
        bare = min(bare_export(name) for _ in range(args.repeat))
        none = min(timed(name, cuts, "none")[0] for _ in range(args.repeat))
        runs = [timed(name, cuts, None) for _ in range(args.repeat)]
        staged, summary = min(runs)
        print(
            f"{name:28} {cut_text:>5} {bare:9.2f} {none:7.2f} {none / bare:6.2f} "
            f"{staged:10.2f} {staged / bare:6.2f}  {summary}"
        )


if __name__ == "__main__":
    main()
