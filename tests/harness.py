"""The test harness: run graphcheck on a fixture once, assert codes.

Exports are cached per (fixture, plan), so a fixture is exported once per
plan however many tests read it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import graphcheck
from graphcheck.report import Report

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def spec(name: str) -> str:
    """``"violations:skip_connection"`` -> ``".../fixtures/violations.py:skip_connection"``."""
    module, factory = name.split(":")
    return f"{FIXTURES / module}.py:{factory}"


@cache
def cut_map(name: str, **options) -> Report:
    return graphcheck.cut_map(spec(name), **options)


@cache
def verify(name: str, cuts: tuple[int, ...], **options) -> Report:
    return graphcheck.verify(spec(name), list(cuts), **options)


def codes(report: Report) -> set[str]:
    return report.codes


def cut_codes(report: Report, position: int) -> set[str]:
    return set(report.cut(position).codes)
