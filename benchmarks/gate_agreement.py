"""The agreement table: the static verdict against executed bytes, fixture by cut.

For every fixture of ``fixtures/`` (reference, violations, adversarial,
soundness_dataflow, gate_state, locality, exact_isolation) that exports (and, with
``--hf``, every tiny transformers family) and every cut 0..L as the only cut, run
``graphcheck gate`` and print one Markdown row per run of consecutive cuts with the
same outcome: static verdict and codes, staged bytes against the uncut model,
document isolation (``bitwise``, or ``fail`` with the exact tests that saw a changed
bit, perturb and/or shift, and the largest absolute difference). A few extra rows
run a stage builder or a short batch. Each run is the default gate (the uncut model
and every stage in a fresh process); a fixture whose stages the default builder
cannot run (not pipeline-aware) falls back to the in-process partitioned graph,
marked ``(graph)``. The script fails (exit 1) on any cell where the proof says PASS
and the bytes differ or the documents leak.

    .venv/bin/python benchmarks/gate_agreement.py [--hf] [fixture ...]

A fixture is ``module:factory`` (``reference:window_only``), ``hf:family`` or a
module name alone (``reference``: every fixture of that module).

Left out: ``llama8b_shape`` (8B real weights do not fit a CI machine),
``export_fails`` and ``factory_raises`` (they cannot be built or exported).
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import sys
import time
from pathlib import Path

from graphcheck.errors import GateError
from graphcheck.gate import Gate
from graphcheck.results.gate import ByteStatus, GateReport, IsolationStatus, RunMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fixtures"))

import adversarial  # noqa: E402
import buffer_values  # noqa: E402
import exact_isolation  # noqa: E402
import gate_state  # noqa: E402
import gate_weights  # noqa: E402
import locality  # noqa: E402
import reference  # noqa: E402
import soundness_dataflow  # noqa: E402
import specialized_t  # noqa: E402
import violations  # noqa: E402

MODULES = (
    reference, violations, adversarial, soundness_dataflow, gate_state, locality,
    exact_isolation, buffer_values, gate_weights, specialized_t,
)  # fmt: skip

SKIP = {"llama8b_shape", "export_fails", "factory_raises"}
FAMILIES = [
    "llama", "qwen3", "qwen3_moe", "mixtral", "gemma3_text", "gpt_oss", "deepseek_v3",
    "qwen3_next", "qwen3_5", "qwen3_5_moe",
]  # fmt: skip
EXTRA = [  # (fixture, cuts, options)
    ("reference:reference", [[k] for k in range(1, 8)], {"stage_builder": "keep-index"}),
    ("reference:reference", [[k] for k in range(1, 8)], {"stage_builder": "rebuild"}),
    ("reference:window_only", [[k] for k in range(1, 8)], {"stage_builder": "rebuild"}),
    ("violations:specialized_length", [[4]], {"docs": (5, 7)}),
    ("buffer_values:rope_base_by_layer", [[k] for k in range(1, 8)], {"stage_builder": "rebuild"}),
    ("buffer_values:rope_base_uniform", [[k] for k in range(1, 8)], {"stage_builder": "rebuild"}),
    ("exact_isolation:backward_leak", [[k] for k in range(0, 9)], {"train": True}),
    ("exact_isolation:backward_masked", [[k] for k in range(0, 9)], {"train": True}),
]


def fixtures(modules=MODULES) -> list[str]:
    names = []
    for module in modules:
        for name in module.__all__:
            factory = getattr(module, name)
            if name in SKIP or not callable(factory) or not name[0].islower():
                continue
            if getattr(factory, "__module__", "") == module.__name__ and _is_factory(factory):
                names.append(f"{module.__name__}:{name}")
    return names


def expand(name: str) -> list[str]:
    """``module:factory`` or ``hf:family`` as given; a bare module name (``reference``)
    is every fixture of that module."""
    if ":" in name:
        return [name]
    by_name = {module.__name__: module for module in MODULES}
    if name not in by_name:
        raise SystemExit(f"unknown fixture module {name!r}: use {', '.join(by_name)}")
    return fixtures((by_name[name],))


def _is_factory(fn) -> bool:
    params = inspect.signature(fn).parameters.values()
    return all(p.default is not inspect.Parameter.empty for p in params)


def spec(name: str) -> str:
    if name.startswith("hf:"):
        return name
    module, factory = name.split(":")
    return f"{ROOT / 'fixtures' / module}.py:{factory}"


def static_cell(report: GateReport) -> str:
    codes = ", ".join(sorted(report.static_codes))
    if codes and report.static_verdict == "pass":  # re-judged with the stage builder
        return f"PASS; FAIL {codes}"
    return report.static_verdict.upper() + (f" {codes}" if codes else "")


def bytes_cell(reports: list[tuple[int, GateReport]]) -> str:
    """The forward bytes and, with ``--train``, the parameters after one step."""
    step = reports[0][1].train
    if step is None:
        return _forward_bytes(reports)
    return _forward_bytes(reports) + ("; step equal" if step.holds else "; step differs")


def _forward_bytes(reports: list[tuple[int, GateReport]]) -> str:
    cut, first = reports[0]
    check = first.bytes
    if check.status is ByteStatus.EQUAL:
        return "equal"
    if check.status is ByteStatus.DIFFER:
        lo, hi = (f(r.bytes.max_abs_diff for _, r in reports) for f in (min, max))
        return f"differ (max abs {lo:.3g})" if lo == hi else f"differ (max abs {lo:.3g}-{hi:.3g})"
    blocked = check.blocked
    if blocked is None or not blocked.node:
        return "cannot run"
    more = ", ..." if len(reports) > 1 else ""
    return f"cannot run (cut {cut}: needs `{blocked.node}` from {blocked.producer}{more})"


def isolation_cell(reports: list[tuple[int, GateReport]]) -> str:
    """``bitwise``, or ``fail (perturb and shift, max abs 0.0088)``: the exact tests that
    saw a changed bit and the largest absolute difference they saw; with ``--train``
    also whether each document's gradients are isolated."""
    return _forward_cell(reports) + _gradient_cell(reports)


def _forward_cell(reports: list[tuple[int, GateReport]]) -> str:
    status = reports[0][1].isolation.status
    if status is IsolationStatus.BITWISE:
        return str(status)
    tests, worst = [], 0.0
    for _, report in reports:
        for check in (report.isolation.perturb, report.isolation.shift):
            if check is not None and check.crossing is not None:
                tests += [str(check.test)] if str(check.test) not in tests else []
                worst = max(worst, check.crossing.max_abs_diff)
    return f"{status} ({' and '.join(tests)}, max abs {worst:.2g})"


def _gradient_cell(reports: list[tuple[int, GateReport]]) -> str:
    checks = [r.isolation.gradients for _, r in reports if r.isolation.gradients is not None]
    if not checks:
        return ""
    return "; gradients isolated" if all(c.holds for c in checks) else "; gradients FAIL"


def ranges(cuts: list[int]) -> str:
    parts = []
    for _, group in itertools.groupby(enumerate(cuts), lambda p: p[1] - p[0]):
        block = [c for _, c in group]
        parts.append(f"{block[0]}" if len(block) == 1 else f"{block[0]}-{block[-1]}")
    return ", ".join(parts)


def run_one(gate: Gate, cuts: list[int], options: dict) -> GateReport:
    """The default gate; the in-process graph when the default builder cannot run."""
    try:
        return gate.run(cuts, **options)
    except GateError as err:
        if "stage_builder" in options:  # the named builder's stages cannot run: no row
            print(f"<!-- {cuts}: the gate could not run: {err} -->", flush=True)
            return None
        try:
            return gate.run(cuts, mode=RunMode.GRAPH, **options)
        except GateError as err:  # the model cannot run on real weights: no row to judge
            print(f"<!-- {cuts}: the gate could not run: {err} -->", flush=True)
            return None


def _contradicts(gate: Gate, cuts: list[int], report: GateReport) -> bool:
    """A static PASS whose bytes differ (or whose step differs) or whose documents leak.
    The stages of a per-process run come from the stage builder: a PASS of the plain proof
    is re-judged with that builder (stage programs compared) before it counts."""
    if report.static_verdict != "pass" or (report.agrees and report.isolation.holds):
        return False
    if report.mode is RunMode.PROCESSES and report.stage_builder:
        with_builder = gate.explorer.verify(cuts, stage_builder=report.stage_builder)
        if with_builder.verdict != "pass":
            report.static_verdict = "pass"
            report.static_codes = [f"{c} with {report.stage_builder}" for c in with_builder.codes]
            return False
    return True


def rows_for(gate: Gate, plans, options: dict, label: str) -> tuple[list[str], int]:
    """One row per outcome (static verdict, bytes status, isolation status)."""
    groups: dict[tuple, list[tuple[int, GateReport]]] = {}
    disagreements = 0
    for cuts in plans:
        report = run_one(gate, cuts, options)
        if report is None:
            continue
        disagreements += _contradicts(gate, cuts, report)
        key = (static_cell(report), report.bytes.status, report.isolation.status, report.mode)
        key += (report.isolation.holds, report.train is None or report.train.holds)
        groups.setdefault(key, []).append((cuts[0], report))
    rows = []
    for (static, _, _, mode, *_), reports in groups.items():
        cuts = ranges(sorted(c for c, _ in reports)) + (" (graph)" if mode is RunMode.GRAPH else "")
        cells = (label, cuts, static, bytes_cell(reports), isolation_cell(reports))
        rows.append("| " + " | ".join(cells) + " |")
    return rows, disagreements


def _gate(name: str, options: dict) -> Gate:
    """The gate of fixture ``name`` as ``graphcheck gate`` builds it for ``options``: with
    ``train`` the static proof covers the backward program too (:func:`graphcheck.gate`)."""
    return Gate(spec(name), **({"backward": True} if options.get("train") else {}))


def cut_plans(num_layers: int, sample: bool) -> list[list[int]]:
    """Every boundary 0..L as the only cut; with ``sample`` the interior cuts 1, L/2, L-1.

    >>> cut_plans(8, True), cut_plans(1, True), len(cut_plans(8, False))
    ([[1], [4], [7]], [[1]], 9)
    """
    if not sample:
        return [[k] for k in range(num_layers + 1)]
    cuts = sorted({min(k, num_layers) for k in (1, num_layers // 2, num_layers - 1) if k > 0})
    return [[k] for k in cuts or [num_layers]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hf", action="store_true", help="also the tiny transformers families")
    parser.add_argument(
        "--sample",
        action="store_true",
        help="only the interior cuts 1, L/2 and L-1 of each fixture (not every boundary)",
    )
    parser.add_argument("--shard", default="0/1", help="K/N: every N-th fixture from the K-th")
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    names = [n for name in args.names for n in expand(name)]
    names = names or fixtures() + ([f"hf:{f}" for f in FAMILIES] if args.hf else [])
    shard, shards = (int(k) for k in args.shard.split("/"))
    names = names[shard::shards]
    start = time.perf_counter()
    print("| fixture | cuts | static | staged vs uncut | isolation |")
    print("|---|---|---|---|---|")
    bad = 0
    for name in names:
        gate = Gate(spec(name))
        plans = cut_plans(gate.explorer.num_layers, args.sample)
        rows, disagreements = rows_for(gate, plans, {}, name.split(":")[-1])
        print("\n".join(rows), flush=True)
        bad += disagreements
    if not args.names:
        for name, plans, options in EXTRA[shard::shards]:
            label = name.split(":")[-1] + ", " + ", ".join(f"{k} {v}" for k, v in options.items())
            rows, disagreements = rows_for(_gate(name, options), plans, options, label)
            print("\n".join(rows), flush=True)
            bad += disagreements
    elapsed = time.perf_counter() - start
    print(f"\n{elapsed:.0f} s; static PASS with differing bytes or leaking documents: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
