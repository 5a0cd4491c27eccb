"""The test harness: run graphcheck on a fixture once, assert codes.

Exports are cached per (fixture, model options): one :class:`Explorer` per fixture
serves every map and every plan read from it, in every test module; reports are
cached per (fixture, plan, options).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from graphcheck.api import Explorer
from graphcheck.report import Report

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def spec(name: str) -> str:
    """``"violations:skip_connection"`` -> ``".../fixtures/violations.py:skip_connection"``."""
    module, factory = name.split(":")
    return f"{FIXTURES / module}.py:{factory}"


@cache
def explorer(name: str, **options) -> Explorer:
    """The fixture, exported once (on first use) with these model options."""
    return Explorer(spec(name), **options)


@cache
def cut_map(name: str, **options) -> Report:
    return explorer(name, **options).map()


@cache
def verify(name: str, cuts: tuple[int, ...], stage_builder: str | None = None, **options) -> Report:
    return explorer(name, **options).verify(list(cuts), stage_builder=stage_builder)


def codes(report: Report) -> set[str]:
    return report.codes


def cut_codes(report: Report, position: int) -> set[str]:
    return set(report.cut(position).codes)
