"""The pytest plugin: prove a model's cuts inside a test suite.

Installed with graphcheck and registered through the ``pytest11`` entry point, so a
test needs no import: the ``graphcheck_assert_cuts`` fixture is :func:`assert_cuts`.

.. code-block:: python

    def test_llama_splits_in_four(graphcheck_assert_cuts):
        graphcheck_assert_cuts("models/llama.py:small", stages=4)

:func:`assert_cuts` runs :func:`graphcheck.api.verify` with the same arguments and
raises :class:`AssertionError` with the text report as its message when the verdict
is not pass (warnings do not fail it); it returns the report otherwise. When
graphcheck cannot verify at all (bad arguments, the export failed) its
:class:`~graphcheck.errors.GraphcheckError` propagates: the test errors, it never
passes. Loading the plugin imports nothing heavy: torch is imported on the first call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pytest

from graphcheck.diagnostics import Verdict

if TYPE_CHECKING:
    from graphcheck.api import ModelArg
    from graphcheck.report import Report

__all__ = ["assert_cuts", "graphcheck_assert_cuts"]


def assert_cuts(
    model: ModelArg, cuts: Sequence[int] | None = None, stages: int | None = None, **options
) -> Report:
    """Prove the cuts of ``model`` (``cuts``, an even split into ``stages``, or the
    plan ``options`` give: ``pipeline_layout``, ``stage_builder``, ... as
    :func:`graphcheck.api.verify` takes them); fail with the text report."""
    __tracebackhide__ = True
    from graphcheck.api import verify
    from graphcheck.report import render

    report = verify(model, cuts, stages, **options)
    if report.verdict != Verdict.PASS:
        codes = ", ".join(sorted({d.code for d in report.errors}))
        raise AssertionError(f"graphcheck: the cuts are not proven ({codes})\n{render(report)}")
    return report


@pytest.fixture
def graphcheck_assert_cuts() -> Callable[..., Report]:
    """:func:`assert_cuts`, as a fixture."""
    return assert_cuts
