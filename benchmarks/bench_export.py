"""Export cost: graphcheck against bare ``torch.export.export``.

For each fixture, time a bare non-strict export (same fake weights, same
symbolic inputs, stand-ins and ``torch.no_grad()`` as graphcheck's own export) and a
full ``graphcheck map`` (export + analysis of every
boundary) and ``graphcheck verify`` at a mid cut; print the ratios. Each
figure is the best of ``--repeat`` runs.

    .venv/bin/python benchmarks/bench_export.py [--repeat 3] [fixture ...]

A fixture is ``module:factory`` under ``fixtures/`` or an ``hf:`` spec
(``hf:llama``, ``hf:fixtures/configs/llama-3.1-8b.json``); an ``hf:`` model is
exported bare with the same attention implementation and kernel stand-ins
graphcheck uses.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import torch

import graphcheck
from graphcheck.analysis.export import (
    _dynamic_shapes,
    _explicit_forward,
    accepted_inputs,
    example_inputs,
)
from graphcheck.kernels import BUILTIN, patched
from graphcheck.model.hf import hf_factory, is_hf_spec
from graphcheck.model.load import build_fake, default_dtype, fake_mode, resolve_factory

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ["reference:reference", "reference:reference_64", "reference:llama8b_shape"]


def spec(name: str) -> str:
    if is_hf_spec(name):
        return name
    module, factory = name.split(":")
    return f"{ROOT / 'fixtures' / module}.py:{factory}"


def bare_export(name: str) -> float:
    mode = fake_mode()
    factory = hf_factory(name) if is_hf_spec(name) else resolve_factory(spec(name))
    model = build_fake(factory, mode)
    names, wrap = accepted_inputs(model)
    if wrap:  # torch rejects dynamic_shapes on **kwargs
        model.forward = _explicit_forward(model, names)
    # the export graphcheck runs: same inputs and stand-ins, without grad (see export.py)
    with mode, default_dtype(torch.float32), patched(model, BUILTIN), torch.no_grad():
        args = tuple(example_inputs(names).values())
        shapes = tuple(_dynamic_shapes(names, auto=False).values())
        start = time.perf_counter()
        torch.export.export(model, args, dynamic_shapes=shapes, strict=False)
    return time.perf_counter() - start


def best(repeat: int, fn, *args, **kwargs) -> float:
    """Best wall time of ``repeat`` calls of ``fn(*args, **kwargs)``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args, **kwargs)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("fixtures", nargs="*", default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'fixture':28} {'export s':>9} {'map s':>7} {'ratio':>6} {'verify s':>9} {'ratio':>6}")
    for name in args.fixtures:
        bare = min(bare_export(name) for _ in range(args.repeat))
        full = best(args.repeat, graphcheck.cut_map, spec(name))
        cut = [graphcheck.cut_map(spec(name)).num_layers // 2]
        one = best(args.repeat, graphcheck.verify, spec(name), cut)
        print(f"{name:28} {bare:9.2f} {full:7.2f} {full / bare:6.2f} {one:9.2f} {one / bare:6.2f}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
