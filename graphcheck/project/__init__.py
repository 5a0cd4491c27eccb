"""A project's checks: the configuration, ``graphcheck check``, the lockfile and its diff.

* :mod:`graphcheck.project.config` finds and validates ``[tool.graphcheck]`` in
  ``pyproject.toml`` (or a ``graphcheck.toml``), before any export;
* :mod:`graphcheck.project.check` runs its checks (one report per model and plan), each
  looked up in the export cache first (:mod:`graphcheck.cache.records`);
* :mod:`graphcheck.project.record` holds what a check gives in plain data (each plan's
  report rendered in every format, the lock entry), the same fresh or from the cache;
* :mod:`graphcheck.project.lock` records per model what a change can alter (layer
  programs, boundary verdicts, plan verdicts, versions, source hashes) in
  ``graphcheck.lock``; :mod:`graphcheck.project.lockfile` reads and writes that file;
* :mod:`graphcheck.project.diff` compares a run with the lock, in words.

A check's result renders through the one reporter seam (:func:`graphcheck.report.render`).

Only :mod:`graphcheck.project.lock` and a check that runs afresh import torch: a
``check --locked`` whose checks all come from the cache does not.
"""

from __future__ import annotations

__all__: list[str] = []
