"""A project's checks: the configuration, ``graphcheck check``, the lockfile and its diff.

* :mod:`graphcheck.project.config` finds and validates ``[tool.graphcheck]`` in
  ``pyproject.toml`` (or a ``graphcheck.toml``), before any export;
* :mod:`graphcheck.project.check` runs its checks (one report per model and plan);
* :mod:`graphcheck.project.lock` records per model what a change can alter (layer
  programs, boundary verdicts, plan verdicts, versions, source hashes) in
  ``graphcheck.lock``;
* :mod:`graphcheck.project.diff` compares a run with the lock, in words;
* :mod:`graphcheck.project.output` renders a check result in every format.
"""

from __future__ import annotations

__all__: list[str] = []
