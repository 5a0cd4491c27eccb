"""The slow tests are marked one way: tests/slow.txt (read by tests/conftest.py).

A line that no longer names a test (a test renamed, moved or deleted) would let its
test run in the fast suite unnoticed: every line must name a file that exists and,
when it names a test, a test function defined in it (the case in brackets aside)."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import FAST, SLOW

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def _functions(path: Path) -> set[str]:
    """The functions and classes ``path`` defines (a doctest is named by them)."""
    tree = ast.parse(path.read_text("utf-8"))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {n.name for n in ast.walk(tree) if isinstance(n, kinds)}


def _unmatched(lines) -> list[str]:
    missing = []
    for line in lines:
        file, _, name = line.partition("::")
        path = ROOT / file
        if not path.is_file():
            missing.append(f"{line}: no file {file}")
            continue
        prefix = name.split("[")[0]
        if not file.startswith("tests/"):  # a doctest: module.function or module.Class
            module = ".".join(Path(file).with_suffix("").parts)
            prefix = prefix.removeprefix(module).lstrip(".").split(".")[-1]
        if prefix and not any(f.startswith(prefix) for f in _functions(path)):
            missing.append(f"{line}: no test in {file} starts with {prefix!r}")
    return missing


def test_every_slow_line_names_a_test():
    assert SLOW, "tests/slow.txt lists no test"
    assert not _unmatched(SLOW), "\n".join(_unmatched(SLOW))


def test_every_fast_representative_names_a_test():
    assert not _unmatched(FAST), "\n".join(_unmatched(FAST))


def test_no_test_is_marked_slow_in_code():
    mark = "pytest.mark." + "slow"  # spelled apart: this file is not marked
    marked = [p.name for p in TESTS.glob("test_*.py") if mark in p.read_text("utf-8")]
    assert not marked, f"mark these slow in tests/slow.txt instead: {marked}"
