"""The test harness: run graphcheck on a fixture once, assert codes.

Exports are cached per (fixture, model options): one :class:`Explorer` per fixture
serves every map and every plan read from it, in every test module; reports are
cached per (fixture, plan, options).

The tests that use the harness are about the other rules: their explorers prove no
stage program unless a test names a stage builder (:data:`NO_STAGES`, the
``--stage-builder none`` a user writes). The default, stage programs proven with the
builder graphcheck finds, has its own tests (``tests/stages/test_stage_default.py``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

from graphcheck.api import Explorer
from graphcheck.report import Report

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def script(name: str) -> ModuleType:
    """``scripts/NAME.py`` imported as a module (once per process)."""
    module_name = f"graphcheck_scripts_{name}"
    if module_name not in sys.modules:
        found = importlib.util.spec_from_file_location(module_name, ROOT / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(found)
        sys.modules[module_name] = module  # dataclasses look their module up while made
        found.loader.exec_module(module)
    return sys.modules[module_name]


def spec(name: str) -> str:
    """``"violations:skip_connection"`` -> ``".../fixtures/violations.py:skip_connection"``."""
    module, factory = name.split(":")
    return f"{FIXTURES / module}.py:{factory}"


NO_STAGES = "none"  # stage_builder: prove no stage program


class RuleExplorer(Explorer):
    """An :class:`Explorer` whose :meth:`verify` proves no stage program unless it is
    given a stage builder."""

    def verify(self, cuts=None, stages=None, *, stage_builder=None, **options) -> Report:
        # None too: the gate passes its own (None, its default) to the explorer it is given
        builder = NO_STAGES if stage_builder is None else stage_builder
        return super().verify(cuts, stages, stage_builder=builder, **options)


@cache
def explorer(name: str, **options) -> Explorer:
    """The fixture, exported once (on first use) with these model options."""
    return RuleExplorer(spec(name), **options)


@cache
def cut_map(name: str, **options) -> Report:
    return explorer(name, **options).map()


@cache
def verify(name: str, cuts: tuple[int, ...], stage_builder: str = NO_STAGES, **options) -> Report:
    return explorer(name, **options).verify(list(cuts), stage_builder=stage_builder)


def codes(report: Report) -> set[str]:
    return report.codes


def cut_codes(report: Report, position: int) -> set[str]:
    return set(report.cut(position).codes)


_PROBE = (
    "import sys\nfrom graphcheck.cli import main\ncode = main(sys.argv[1:])\n"
    "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')]\n"
    "print('heavy:', sorted({m.split('.')[0] for m in heavy}), 'graphcheck.api' in "
    "sys.modules, file=sys.stderr)\nsys.exit(code)\n"
)


def fresh_process(argv: list[str], cwd: Path | str | None = None) -> subprocess.CompletedProcess:
    """``graphcheck ARGV`` in a fresh interpreter with the cache on; its last stderr line
    says what heavy packages it imported: ``heavy: [] False`` is neither torch, transformers
    nor graphcheck.api."""
    env = {k: v for k, v in os.environ.items() if k != "GRAPHCHECK_NO_CACHE"}
    command = [sys.executable, "-c", _PROBE, *argv]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd)
