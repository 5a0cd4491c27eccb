"""What holding custom ops to their trust by execution costs next to the export.

The decoder of fixtures/fused_kernels.py (fused RMSNorm, rotary, SwiGLU and a varlen
attention, all custom ops graphcheck cannot read), made ``--layers`` deep (94 by
default), is exported and analysed twice: cold (every op executed alone, once per op
and shape class) and warm (every verdict from the op cache). Printed: the export's
time, the time spent executing ops and its share of the export, and how many ops ran.

    .venv/bin/python benchmarks/bench_validation.py [--layers 94]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "fixtures")]

import fused_kernels  # noqa: E402

from graphcheck.api import Explorer  # noqa: E402
from graphcheck.kernels import validation  # noqa: E402

KERNELS = str(ROOT / "fixtures/kernels/fused.py")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=94)
    args = parser.parse_args()
    fused_kernels.CONFIG = dataclasses.replace(fused_kernels.CONFIG,
                                               num_hidden_layers=args.layers)  # fmt: skip
    spent, runs = [0.0], [0]
    real = validation._run_tests

    def timed(subject):
        start = time.perf_counter()
        try:
            return real(subject)
        finally:
            spent[0] += time.perf_counter() - start
            runs[0] += 1

    validation._run_tests = timed
    print(f"{'run':6} {'export s':>9} {'executing ops s':>16} {'share':>7} {'ops run':>8}")
    with tempfile.TemporaryDirectory() as folder:
        validation.use_cache(Path(folder))
        for run in ("cold", "warm"):
            spent[0], runs[0] = 0.0, 0
            program = Explorer(fused_kernels.fused, kernels=KERNELS).program
            export = program.exported.seconds
            print(f"{run:6} {export:9.2f} {spent[0]:16.3f} {spent[0] / export:7.2%} "
                  f"{runs[0]:8d}")  # fmt: skip


if __name__ == "__main__":
    main()
