"""Output formats, one module each: ``render(result) -> str`` for a verify or map
:class:`~graphcheck.report.Report` and a :class:`~graphcheck.results.gate.GateReport`.

:func:`graphcheck.report.render` finds a format by its module name, and the
command line's ``--format`` offers every module here: adding a format is adding
a module.
"""

__all__: list[str] = []
