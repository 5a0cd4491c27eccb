"""What graphcheck hands to other tools: artifacts beside the report.

* :mod:`~graphcheck.interop.model_explorer` - the proven program as a ``.pt2`` and
  Model Explorer node data on it (stages or layers, crossing values, findings).

Unlike a report format (:mod:`graphcheck.reporters`, plain data in, text out), an
artifact here is written from the program itself, so it lives above the analysis.
"""

__all__: list[str] = []
