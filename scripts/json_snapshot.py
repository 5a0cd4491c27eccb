"""Snapshot graphcheck's JSON on every fixture, and compare two snapshots.

A move-and-split of the code must not change what users read: this script runs
``graphcheck map`` and ``graphcheck verify --stages 2`` (plus a ``keep-index`` stage-
builder verify) with ``--format json``, and the verify once more as text, on every
fixture factory, removes the timings, and writes one file per run. Two things vary from
run to run whatever the code: the counter in FX's ``<eval_with_key>.N`` file names (how
many graphs the process traced before) and the order of Python sets of strings some
model code iterates (the hash seed): the counter is masked and the snapshot runs with
``PYTHONHASHSEED=0``. ``compare`` prints every file that differs and exits 1 when any
does.

    .venv/bin/python scripts/json_snapshot.py snapshot [--hf] OUT_DIR [fixture ...]
    .venv/bin/python scripts/json_snapshot.py compare OLD_DIR NEW_DIR
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import inspect
import io
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = (
    "reference", "violations", "adversarial", "soundness_dataflow", "gate_state",
    "locality", "build_state", "batch_shapes", "framework",
)  # fmt: skip
SKIP = {"llama8b_shape"}
FAMILIES = (
    "llama", "qwen3", "qwen3_moe", "mixtral", "gemma3_text", "gpt_oss", "deepseek_v3",
    "qwen3_next", "qwen3_5", "qwen3_5_moe",
)  # fmt: skip
TIMINGS = {"seconds", "export_seconds"}


def _factories(module_name: str) -> list[str]:
    sys.path.insert(0, str(ROOT / "fixtures"))
    module = __import__(module_name)
    names = []
    for name in getattr(module, "__all__", ()):
        fn = getattr(module, name)
        if name in SKIP or not callable(fn) or not name[0].islower():
            continue
        if getattr(fn, "__module__", "") != module.__name__:
            continue
        params = inspect.signature(fn).parameters.values()
        if all(p.default is not inspect.Parameter.empty for p in params):
            names.append(name)
    return names


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _masked(text: str) -> str:
    text = re.sub(r"<eval_with_key>\.\d+", "<eval_with_key>.N", text)
    return re.sub(r"\b\d+(\.\d+)? s\b", "N s", text)  # the text format's timings


def _run(argv: list[str]) -> str:
    from graphcheck.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    text = out.getvalue()
    try:
        body = json.dumps(_strip(json.loads(text)), indent=2, sort_keys=True)
    except ValueError:
        body = text + err.getvalue()
    return _masked(f"exit {code}\n{body}\n")


def _runs(specs: list[tuple[str, str]]):
    for label, spec in specs:
        yield f"{label}.map", ["map", spec, "--format", "json"]
        yield f"{label}.verify2", ["verify", spec, "--stages", "2", "--format", "json"]
        yield f"{label}.text2", ["verify", spec, "--stages", "2", "--format", "text"]
        if not spec.startswith("hf:"):
            builder = ["--stage-builder", "keep-index"]
            yield f"{label}.keep", ["verify", spec, "--stages", "2", *builder, "--format", "json"]


def snapshot(out: Path, hf: bool, only: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    specs = []
    for module in MODULES:
        for name in _factories(module):
            label = f"{module}.{name}"
            if not only or any(o in label for o in only):
                specs.append((label, f"fixtures/{module}.py:{name}"))
    if hf:
        specs += [(f"hf.{f}", f"hf:{f}") for f in FAMILIES if not only or f in only]
    for label, argv in _runs(specs):
        (out / f"{label}.txt").write_text(_run(argv), encoding="utf-8")
        print(label, flush=True)


def compare(old: Path, new: Path) -> int:
    names = sorted({p.name for p in old.glob("*.txt")} | {p.name for p in new.glob("*.txt")})
    differing = 0
    for name in names:
        a, b = old / name, new / name
        if not (a.exists() and b.exists()):
            print(f"only in {'old' if a.exists() else 'new'}: {name}")
            differing += 1
            continue
        left, right = a.read_text().splitlines(), b.read_text().splitlines()
        if left != right:
            differing += 1
            print("".join(difflib.unified_diff(left, right, str(a), str(b), lineterm="\n")))
    print(f"{len(names)} runs compared, {differing} differ")
    return 1 if differing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snapshot")
    snap.add_argument("out", type=Path)
    snap.add_argument("--hf", action="store_true", help="also the tiny transformers families")
    snap.add_argument("only", nargs="*", help="substrings of fixture labels to keep")
    comp = sub.add_parser("compare")
    comp.add_argument("old", type=Path)
    comp.add_argument("new", type=Path)
    args = parser.parse_args()
    if args.command == "snapshot" and os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(
            sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"}
        )
    if args.command == "compare":
        return compare(args.old, args.new)
    snapshot(args.out, args.hf, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
