"""What proving the backward program (``--backward``) costs next to the export.

For each model (94 layers by default), export it as graphcheck does, then build the
joint forward-backward program (AOT autograd on the export) and interpret it
(:func:`graphcheck.analysis.backward.prove_backward`); print the export's time, the
backward proof's and their ratio, and how many ops the joint program holds. The proof
is a flag because it costs several times the export.

    .venv/bin/python benchmarks/bench_backward.py [--layers 94] [spec ...]

A spec is an ``hf:`` model with ``key=value`` settings after commas, as in
``benchmarks/bench_locality.py``.
"""

from __future__ import annotations

import argparse

from bench_locality import _spec  # the same spec syntax

from graphcheck.api import Explorer

DEFAULT = ["hf:llama,attn_implementation=sdpa"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("specs", nargs="*", default=DEFAULT)
    parser.add_argument("--layers", type=int, default=94)
    args = parser.parse_args()
    print(f"{'model':40} {'export s':>9} {'backward s':>11} {'ratio':>6} {'ops':>7} proven")
    for text in args.specs:
        model, settings = _spec(text, args.layers)
        program = Explorer(model, settings=settings, backward=True).program
        export, proof = program.exported.seconds, program.gradients
        print(f"{text:40} {export:9.2f} {proof.seconds:11.2f} {proof.seconds / export:5.1f}x "
              f"{proof.nodes:7d} {proof.proven}")  # fmt: skip


if __name__ == "__main__":
    main()
